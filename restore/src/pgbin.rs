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
pub fn find(configured: Option<&Path>) -> Result<PgBin, String> {
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
pub fn installed() -> Vec<PgBin> {
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
