//! Finding PostgreSQL's server binaries.

use std::path::{Path, PathBuf};

/// A directory holding `initdb`, `postgres` and `pg_restore` of one major version.
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

/// Where Debian and Ubuntu install each major's server binaries.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";

/// The configured bindir, or else the newest major found under `/usr/lib/postgresql`.
pub(crate) fn find(configured: Option<&Path>) -> Result<PgBin, String> {
    if let Some(dir) = configured {
        if !dir.join("initdb").is_file() || !dir.join("postgres").is_file() {
            return Err(format!("sandbox.pg_bindir {} has no initdb and postgres binaries", dir.display()));
        }
        return Ok(PgBin { dir: dir.to_path_buf(), major: None });
    }
    installed()
        .into_iter()
        .max_by_key(|b| b.major)
        .ok_or_else(|| {
            format!("no PostgreSQL server binaries found under {DEBIAN_ROOT}/*/bin; install postgresql-15 (or newer) or set sandbox.pg_bindir")
        })
}

/// Every major version installed under `/usr/lib/postgresql`.
pub(crate) fn installed() -> Vec<PgBin> {
    let Ok(entries) = std::fs::read_dir(DEBIAN_ROOT) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let major: u32 = e.file_name().to_str()?.parse().ok()?;
            let dir = e.path().join("bin");
            (dir.join("initdb").is_file() && dir.join("postgres").is_file())
                .then_some(PgBin { dir, major: Some(major) })
        })
        .collect()
}

/// The server binaries for a backup written by PostgreSQL `major`: the configured
/// bindir, or the installed major itself (`exact`, for physical backups), or else the
/// oldest installed major that is not older (logical dumps restore into newer servers).
pub(crate) fn for_major(configured: Option<&Path>, major: Option<u32>, exact: bool) -> Result<PgBin, String> {
    if configured.is_some() || major.is_none() {
        return find(configured);
    }
    let major = major.unwrap_or_default();
    let all = installed();
    let found: Vec<u32> = {
        let mut v: Vec<u32> = all.iter().filter_map(|b| b.major).collect();
        v.sort();
        v
    };
    let pick = if exact {
        all.into_iter().find(|b| b.major == Some(major))
    } else {
        all.into_iter().filter(|b| b.major.is_some_and(|m| m >= major)).min_by_key(|b| b.major)
    };
    pick.ok_or_else(|| {
        let need = if exact { format!("PostgreSQL {major}") } else { format!("PostgreSQL {major} or newer") };
        format!(
            "the backup was written by PostgreSQL {major}; restoring it needs {need} server binaries, found {found:?} under {DEBIAN_ROOT}/*/bin (install postgresql-{major} or set sandbox.pg_bindir)"
        )
    })
}

/// `"15.18 (Debian …)"` → 15; `"9.6.24"` → 9.
pub(crate) fn major_of(version: &str) -> Option<u32> {
    version.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}
