//! What a run may spend: its time budget and lease, and the disk a restore needs.

use super::stop::Stop;
use drcheck_config::{Config, SandboxConfig, TargetConfig};
use drcheck_restore::Backup;
use std::time::Duration;

/// How long one run of `t` may take at most: the restore's deadline (`rto ×
/// abort_factor`), the validate phase's (`validators.phase_timeout`, every validator of
/// every database), and ten minutes to select, record and tear down. The lease's TTL and
/// a CronJob's `activeDeadlineSeconds` are both this, so Kubernetes never kills a run its
/// lease still allows.
pub(crate) fn run_budget(t: &TargetConfig) -> Duration {
    t.rto.mul_f64(t.abort_factor) + t.validators.phase_timeout + Duration::from_secs(600)
}

/// What in a loaded config is valid but probably not meant (issue 34): an RTO over a
/// week (a unit mistaken) — logged by the daemon on load — and, with `budgets` (`config
/// check`, `deploy kubernetes`: where the deadline is shown or generated), a run budget —
/// the lease's TTL and a CronJob's deadline — over four times the RTO, naming what makes
/// it so.
pub(crate) fn config_warnings(config: &Config, budgets: bool) -> Vec<String> {
    let week = Duration::from_secs(7 * 86_400);
    let mut out = Vec::new();
    for t in &config.targets {
        let rto = drcheck_config::format_duration(t.rto);
        if t.rto > week {
            out.push(format!("target {:?}: rto = {rto:?} is over a week — is the unit the one you meant?", t.name));
            continue;
        }
        let budget = run_budget(t);
        // The default phase keeps to the rule; a phase the file sets is what to lower.
        if budgets && budget > t.rto * 4 && t.validators.phase_timeout_set {
            out.push(format!(
                "target {:?}: a run may take {} (rto {rto} × abort_factor {} + validators.phase_timeout {} + 10m), \
                 over 4× the RTO: a stuck run holds its lease and its CronJob that long — lower validators.phase_timeout",
                t.name,
                drcheck_config::format_duration(budget),
                t.abort_factor,
                drcheck_config::format_duration(t.validators.phase_timeout),
            ));
        }
    }
    out
}

/// How long a run may hold its target's lease: its whole [`run_budget`].
pub(crate) fn lease_ttl(t: &TargetConfig) -> Duration {
    run_budget(t)
}

/// What a restored cluster writes regardless of the backup's size.
pub(crate) const CLUSTER_ALLOWANCE: u64 = 1 << 30;

/// Refuses to start when `scratch_dir` lacks room for the restore; returns the most
/// the restore may write: the backup's size × `max_expansion` plus what any cluster
/// needs (1 GiB: catalogs, WAL up to `max_wal_size`), at most the free space less a
/// reserve (5 % of the file system, at most 1 GiB), so a bomb never fills the disk.
pub(crate) fn check_disk(sandbox: &SandboxConfig, backup: &Backup) -> Result<(u64, u64), Stop> {
    check_disk_in(&sandbox.scratch_dir, sandbox, backup)
}

/// [`check_disk`] in `dir` (a follower's copy lives in `state_dir`).
pub(crate) fn check_disk_in(
    dir: &std::path::Path,
    sandbox: &SandboxConfig,
    backup: &Backup,
) -> Result<(u64, u64), Stop> {
    // A configured scratch_dir that does not exist yet is made, as the private directory
    // inside it would be (issue 34: it was an error, "cannot check free space … ENOENT").
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| {
            Stop::incomplete("sandbox", format!("cannot create sandbox.scratch_dir {}: {e}", dir.display()))
        })?;
    }
    let stat = nix::sys::statvfs::statvfs(dir)
        .map_err(|e| Stop::incomplete("sandbox", format!("cannot check free space in {}: {e}", dir.display())))?;
    let free = stat.blocks_available() as u64 * stat.fragment_size() as u64;
    let total = stat.blocks() as u64 * stat.fragment_size() as u64;
    let reserve = (total / 20).min(1 << 30);
    let ceiling = (backup.size as f64 * sandbox.max_expansion).min(u64::MAX as f64) as u64;
    let ceiling = ceiling.saturating_add(CLUSTER_ALLOWANCE);
    let need = (backup.size as f64 * sandbox.expansion_factor) as u64;
    if free < need {
        return Err(Stop::incomplete(
            "sandbox",
            format!(
                "not enough space in {}: {free} bytes free, restoring a {}-byte backup needs about {need} (size × expansion_factor {})",
                dir.display(),
                backup.size,
                sandbox.expansion_factor
            ),
        ));
    }
    Ok((ceiling, free.saturating_sub(reserve)))
}
