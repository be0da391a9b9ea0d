//! What drcheck processes killed outright left behind in `scratch_dir` — sandboxes (their
//! servers and tools) and canaries' directories — removed by the daemon when it starts
//! and after each run.

/// Removes what drcheck processes that are gone left in `scratch_dir` (killed outright:
/// SIGKILL, the OOM killer): their sandboxes — servers and tools stopped, directories
/// removed — and their canaries' directories. The daemon calls it when it starts and
/// after each run, so an orphaned server never outlives its run by more than that;
/// every restore calls it too.
pub(crate) async fn reap_orphans(scratch_dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let dir = scratch_dir.to_path_buf();
    let reaped = tokio::task::spawn_blocking(move || {
        let mut all = drcheck_restore::reap_leftovers(&dir);
        all.extend(crate::canary::reap_dead_canaries(&dir));
        all
    })
    .await
    .unwrap_or_default();
    for d in &reaped {
        tracing::warn!(dir = %d.display(), "removed a sandbox left by a drcheck process that is gone (its server and tools stopped)");
    }
    reaped
}
