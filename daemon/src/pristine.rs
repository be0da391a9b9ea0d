//! The reference the `catalog` check compares a restored copy with: the built-in
//! catalog fingerprint of a pristine cluster of the same PostgreSQL major, made once
//! per installed server binary (a fresh `initdb` in a sandbox, fingerprinted, torn
//! down: about a second) and cached in drcheck's cache directory beside its private
//! directory (`scratch_dir/drcheck-<uid>-cache`, 0700) under a name that
//! holds the binary's version and path, so an upgrade of the package makes a new one.
//! `DRCHECK_CACHE_DIR` names another cache directory (held to the same rule: drcheck's
//! own, 0700), for several configurations sharing one — the test suite does.

use crate::ids::sandbox_options;
use anyhow::Context as _;
use drcheck_config::SandboxConfig;
use drcheck_restore::PgBin;
use drcheck_validators::guard::{builtin_fingerprint, restored_session};
use sha2::{Digest, Sha256};
use sqlx::postgres::PgPoolOptions;
use std::collections::BTreeMap;
use std::time::Duration;

/// One computation at a time: concurrent runs of one daemon wait for the first.
static MAKING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What drcheck keeps between runs: `scratch_dir/drcheck-<uid>-cache`, or
/// `$DRCHECK_CACHE_DIR`.
pub(crate) fn cache_dir(sandbox: &SandboxConfig) -> Result<std::path::PathBuf, drcheck_restore::DirError> {
    match std::env::var_os("DRCHECK_CACHE_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => drcheck_restore::ensure_cache_dir_at(std::path::Path::new(&dir)),
        None => drcheck_restore::ensure_cache_dir(&sandbox.scratch_dir),
    }
}

/// The pristine fingerprint for `bin`: from the cache, or made now.
pub(crate) async fn reference(sandbox: &SandboxConfig, bin: &PgBin) -> anyhow::Result<BTreeMap<String, String>> {
    let version = server_version(bin).await?;
    // What is fingerprinted is part of the name: a drcheck that covers more makes a new one.
    let digest = hex::encode(Sha256::digest(format!(
        "{}\n{version}\n{}",
        bin.dir.display(),
        drcheck_validators::guard::FINGERPRINT_REVISION
    )));
    let cache = cache_dir(sandbox)?;
    let path = cache.join(format!("catalog-{}.json", &digest[..16]));
    if let Some(cached) = read_cached(&path) {
        return Ok(cached);
    }
    let _one = MAKING.lock().await;
    if let Some(cached) = read_cached(&path) {
        return Ok(cached);
    }
    let fingerprint = make(sandbox, bin).await?;
    let text = serde_json::to_vec(&fingerprint)?;
    write_private_atomically(&path, &text).with_context(|| format!("caching {}", path.display()))?;
    tracing::info!(version = %version, file = %path.display(), "built-in catalog fingerprint made");
    Ok(fingerprint)
}

fn read_cached(path: &std::path::Path) -> Option<BTreeMap<String, String>> {
    let bytes = std::fs::read(path).ok()?;
    let map: BTreeMap<String, String> = serde_json::from_slice(&bytes).ok()?;
    // A fingerprint of a real catalog has thousands of entries; anything else is not one.
    (map.len() > 1000).then_some(map)
}

/// `postgres --version` of `bin`.
async fn server_version(bin: &PgBin) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(bin.tool("postgres"))
        .arg("--version")
        .env_clear()
        .output()
        .await
        .with_context(|| format!("cannot run {} --version", bin.tool("postgres").display()))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A fresh cluster of `bin`, fingerprinted and torn down.
async fn make(settings: &SandboxConfig, bin: &PgBin) -> anyhow::Result<BTreeMap<String, String>> {
    let run_id = format!("pristine-{}", uuid::Uuid::new_v4());
    let mut sandbox = drcheck_restore::Sandbox::create(&sandbox_options(settings, run_id))?;
    sandbox.init_and_start(bin.clone()).await.context("a pristine cluster did not start")?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(restored_session(sandbox.connect_options("postgres")))
        .await
        .context("connecting to a pristine cluster")?;
    let fingerprint = builtin_fingerprint(&pool).await.context("fingerprinting a pristine cluster");
    pool.close().await;
    sandbox.teardown();
    fingerprint
}

pub(crate) fn write_private_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o600))?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
