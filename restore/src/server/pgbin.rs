//! Finding PostgreSQL's binaries: each backup is restored, and every client tool run on
//! it, by the binaries of its own major (or, for a logical dump, the oldest newer one
//! PostgreSQL allows).
//!
//! Where they come from, first match wins: the configured `[sandbox.pg_bindirs]` (one
//! directory per major), the configured `[sandbox] pg_bindir` (its major read from its
//! `postgres --version`), then the common layouts — Debian's `/usr/lib/postgresql/N/bin`
//! and RPM's `/usr/pgsql-N/bin`. A configured directory whose binaries are not the major
//! it is declared for is an error naming it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A directory holding `initdb`, `postgres` and the client tools of one major version.
#[derive(Debug, Clone)]
pub struct PgBin {
    pub dir: PathBuf,
    pub major: Option<u32>,
}

impl PgBin {
    pub fn tool(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Where Debian and Ubuntu install each major's binaries (`N/bin`).
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// Where PGDG's RPMs install them (`/usr/pgsql-N/bin`).
const RPM_PREFIX: &str = "/usr/pgsql-";

/// The binaries a restore may use: what the config names, and what is installed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Binaries {
    /// `[sandbox.pg_bindirs]`: major → its directory.
    pub per_major: BTreeMap<u32, PathBuf>,
    /// `[sandbox] pg_bindir`: one directory of whatever major its binaries are.
    pub any: Option<PathBuf>,
}

/// Each directory's major, read once per process (`postgres --version`).
static MAJORS: Mutex<BTreeMap<PathBuf, Option<u32>>> = Mutex::new(BTreeMap::new());

/// The major of the binaries in `dir`, from its `postgres --version`.
pub(crate) fn major_in(dir: &Path) -> Option<u32> {
    if let Some(m) = MAJORS.lock().ok().and_then(|m| m.get(dir).copied()) {
        return m;
    }
    let major = std::process::Command::new(dir.join("postgres"))
        .arg("--version")
        .env_clear()
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            // `postgres (PostgreSQL) 18.6`
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.rsplit(' ').next().and_then(major_of)
        });
    if let Ok(mut m) = MAJORS.lock() {
        m.insert(dir.to_path_buf(), major);
    }
    major
}

fn has_server(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

/// Why no binaries fit a backup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BinariesError {
    /// A configured directory without a server (`setting` names it).
    #[error("{setting} = {} has no initdb and postgres binaries", dir.display())]
    NoServer { setting: String, dir: PathBuf },
    /// A directory configured for one major holding another (or none readable).
    #[error("sandbox.pg_bindirs.{major} = {} holds {} (its postgres --version)", dir.display(), found.map_or("no readable version".to_string(), |m| format!("PostgreSQL {m}")))]
    WrongMajor { major: u32, dir: PathBuf, found: Option<u32> },
    #[error(
        "no PostgreSQL server binaries found under {DEBIAN_ROOT}/*/bin or {RPM_PREFIX}*/bin; install postgresql-15 (or newer) or set sandbox.pg_bindirs"
    )]
    NoneInstalled,
    /// None of `major` (or, not `exact`, newer) among the majors `found`.
    #[error(
        "the backup was written by PostgreSQL {major}; restoring it needs {} binaries, found {found:?} \
         (configured in [sandbox.pg_bindirs] or installed under {DEBIAN_ROOT}/N/bin, {RPM_PREFIX}N/bin): \
         install postgresql-{major} or set [sandbox.pg_bindirs] {major} = \"…/bin\"",
        if *exact { format!("PostgreSQL {major}") } else { format!("PostgreSQL {major} or newer") }
    )]
    Missing { major: u32, exact: bool, found: Vec<u32> },
}

impl Binaries {
    /// Only what is installed in the common layouts.
    pub fn discovered() -> Binaries {
        Binaries::default()
    }

    /// The configured directories, checked: each holds a server of the major it is
    /// configured for.
    fn configured(&self) -> Result<Vec<PgBin>, BinariesError> {
        let mut out = Vec::new();
        for (major, dir) in &self.per_major {
            if !has_server(dir) {
                return Err(BinariesError::NoServer {
                    setting: format!("sandbox.pg_bindirs.{major}"),
                    dir: dir.clone(),
                });
            }
            match major_in(dir) {
                Some(m) if m == *major => out.push(PgBin { dir: dir.clone(), major: Some(m) }),
                found => return Err(BinariesError::WrongMajor { major: *major, dir: dir.clone(), found }),
            }
        }
        if let Some(dir) = &self.any {
            if !has_server(dir) {
                return Err(BinariesError::NoServer { setting: "sandbox.pg_bindir".into(), dir: dir.clone() });
            }
            out.push(PgBin { dir: dir.clone(), major: major_in(dir) });
        }
        Ok(out)
    }

    /// Every usable directory, the configured ones first.
    fn all(&self) -> Result<Vec<PgBin>, BinariesError> {
        let mut all = self.configured()?;
        for b in installed() {
            if !all.iter().any(|a| a.major == b.major) {
                all.push(b);
            }
        }
        Ok(all)
    }

    /// The newest binaries there are (for a backup whose major nothing says).
    pub fn newest(&self) -> Result<PgBin, BinariesError> {
        let all = self.all()?;
        // A configured directory of unknown major is what the operator asked for.
        if let Some(b) = all.iter().find(|b| b.major.is_none()) {
            return Ok(b.clone());
        }
        all.into_iter().max_by_key(|b| b.major).ok_or(BinariesError::NoneInstalled)
    }

    /// The binaries for a backup written by PostgreSQL `major`: that major itself
    /// (`exact`: physical backups, and every tool run on one), or else the oldest major
    /// that is not older (a logical dump restores into a newer server).
    pub fn for_major(&self, major: Option<u32>, exact: bool) -> Result<PgBin, BinariesError> {
        let Some(major) = major else { return self.newest() };
        let all = self.all()?;
        let mut found: Vec<u32> = all.iter().filter_map(|b| b.major).collect();
        found.sort();
        found.dedup();
        let pick = if exact {
            all.into_iter().find(|b| b.major == Some(major))
        } else {
            // Configured first: the oldest fitting configured one, else the oldest fitting.
            let fitting = |b: &PgBin| b.major.is_some_and(|m| m >= major);
            let configured = self.configured().unwrap_or_default();
            configured
                .into_iter()
                .filter(fitting)
                .min_by_key(|b| b.major)
                .or_else(|| all.into_iter().filter(fitting).min_by_key(|b| b.major))
        };
        pick.ok_or(BinariesError::Missing { major, exact, found })
    }
}

/// Every major version installed in the common layouts (Debian first).
pub(crate) fn installed() -> Vec<PgBin> {
    let mut out: Vec<PgBin> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(DEBIAN_ROOT) {
        for e in entries.filter_map(Result::ok) {
            let Some(major) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let dir = e.path().join("bin");
            if has_server(&dir) {
                out.push(PgBin { dir, major: Some(major) });
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir("/usr") {
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name();
            let Some(major) = name.to_str().and_then(|n| n.strip_prefix("pgsql-")).and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let dir = e.path().join("bin");
            if has_server(&dir) && !out.iter().any(|b| b.major == Some(major)) {
                out.push(PgBin { dir, major: Some(major) });
            }
        }
    }
    out.sort_by_key(|b| b.major);
    out
}

/// `"15.18 (Debian …)"` → 15; `"9.6.24"` → 9.
pub(crate) fn major_of(version: &str) -> Option<u32> {
    version.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majors_are_read_from_versions() {
        assert_eq!(major_of("15.18 (Debian 15.18-0+deb12u1)"), Some(15));
        assert_eq!(major_of("18.6"), Some(18));
        assert_eq!(major_of("9.6.24"), Some(9));
        assert_eq!(major_of("beta"), None);
    }

    /// Issue 47: a directory configured for a major must hold that major; one that does
    /// not is named, never used for the wrong backups.
    #[test]
    fn a_directory_configured_for_the_wrong_major_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        for tool in ["initdb", "postgres"] {
            let p = bin.join(tool);
            std::fs::write(&p, "#!/bin/sh\necho 'postgres (PostgreSQL) 16.2'\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        assert_eq!(major_in(&bin), Some(16));
        let wrong = Binaries { per_major: BTreeMap::from([(18, bin.clone())]), any: None };
        let e = wrong.for_major(Some(18), true).unwrap_err();
        assert_eq!(e, BinariesError::WrongMajor { major: 18, dir: bin.clone(), found: Some(16) });
        let e = e.to_string();
        assert!(e.contains("sandbox.pg_bindirs.18") && e.contains("holds PostgreSQL 16"), "{e}");
        let right = Binaries { per_major: BTreeMap::from([(16, bin.clone())]), any: None };
        assert_eq!(right.for_major(Some(16), true).unwrap().dir, bin);
        // A dump of 14 restores into the oldest configured major that is not older.
        assert_eq!(right.for_major(Some(14), false).unwrap().dir, bin);
        let e = right.for_major(Some(99), true).unwrap_err().to_string();
        assert!(e.contains("PostgreSQL 99") && e.contains("[sandbox.pg_bindirs] 99"), "{e}");
        // The legacy single directory: its own major, read from it.
        let any = Binaries { per_major: BTreeMap::new(), any: Some(bin.clone()) };
        assert_eq!(any.for_major(Some(16), true).unwrap().major, Some(16));
    }
}
