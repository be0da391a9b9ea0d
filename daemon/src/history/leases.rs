//! Leases: one verification of a target at a time, across processes and machines,
//! and how a lease held by a crashed drcheck is told and taken over.

use super::History;
use super::ts;
use std::time::{Duration, SystemTime};

/// The name a lease is taken under: who (`drcheck verify pid 3873 (b6187f5e)`, what a
/// process finding the target taken prints) and, in brackets, where — this machine
/// ([`machine_id`](drcheck_restore::machine_id)) and the process's start time —
/// so a drcheck on the same machine can tell that the holder crashed.
pub(crate) fn lease_holder_name(role: &str) -> String {
    let me = drcheck_restore::Owner::current(None);
    holder_name(role, me.pid, me.start, drcheck_restore::machine_id().as_deref())
}

pub(super) fn holder_name(role: &str, pid: i32, start: u64, machine: Option<&str>) -> String {
    let run = &crate::ids::new_run_id()[..8];
    match machine {
        Some(m) => format!("drcheck {role} pid {pid} ({run}) [machine {m} start {start}]"),
        None => format!("drcheck {role} pid {pid} ({run})"),
    }
}

/// What taking a lease came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Leased {
    Taken,
    /// Taken from this holder, whose process is gone.
    TookOver(String),
    Held,
}

impl Leased {
    pub(crate) fn taken(&self) -> bool {
        !matches!(self, Leased::Held)
    }
}

/// What is known of `holder` (a [`lease_holder_name`]) from here: `Some(true)` a drcheck
/// on this machine that still runs, `Some(false)` one whose process is gone, `None`
/// another machine's (or one that does not say).
pub(crate) fn holder_alive_here(holder: &str) -> Option<bool> {
    let here = drcheck_restore::machine_id()?;
    let (who, place) = holder.rsplit_once(" [machine ")?;
    let (machine, start) = place.strip_suffix(']').and_then(|p| p.split_once(" start "))?;
    let pid = who.split_once(" pid ").and_then(|(_, r)| r.split_whitespace().next()).and_then(|p| p.parse().ok())?;
    let start = start.parse().ok()?;
    (machine == here).then(|| drcheck_restore::process_running(pid, start))
}

/// Whether `holder` (a [`lease_holder_name`]) is a drcheck on this machine whose process
/// is gone. A holder from elsewhere, or one that does not say, is never judged.
pub(super) fn crashed_here(holder: &str) -> bool {
    holder_alive_here(holder) == Some(false)
}

impl History {
    /// Takes the lease on `target` for `ttl` unless another holder's lease is live.
    pub(crate) async fn acquire_lease(&self, target: &str, holder: &str, ttl: Duration) -> anyhow::Result<bool> {
        Ok(self.lease_for(target, holder, ttl).await?.taken())
    }

    /// [`Self::acquire_lease`], saying whether the lease was taken over from a holder whose
    /// process is gone — a run that died without recording itself, which the taker then
    /// records as `aborted` ([`crate::run_report::died_report`]).
    pub(crate) async fn lease_for(&self, target: &str, holder: &str, ttl: Duration) -> anyhow::Result<Leased> {
        let now = SystemTime::now();
        let r = sqlx::query(
            "insert into leases (target, holder, expires_at) values ($1, $2, $3)
             on conflict (target) do update set holder = $2, expires_at = $3
              where leases.expires_at < $4 or leases.holder = $2",
        )
        .bind(target)
        .bind(holder)
        .bind(ts(now + ttl))
        .bind(ts(now))
        .execute(&self.pool)
        .await?;
        if r.rows_affected() == 1 {
            return Ok(Leased::Taken);
        }
        // Held: by a drcheck that crashed on this machine, the lease is taken over rather
        // than waited out (its TTL is the RTO × abort_factor and more: hours). Only if it
        // still names that holder, so two takers cannot both win.
        let Some(previous) = self.lease_holder(target).await? else { return Ok(Leased::Held) };
        if !crashed_here(&previous) {
            return Ok(Leased::Held);
        }
        let r = sqlx::query("update leases set holder = $2, expires_at = $3 where target = $1 and holder = $4")
            .bind(target)
            .bind(holder)
            .bind(ts(now + ttl))
            .bind(&previous)
            .execute(&self.pool)
            .await?;
        if r.rows_affected() == 1 {
            tracing::warn!(target, previous = %previous, "took over the lease of a drcheck that is no longer running");
            return Ok(Leased::TookOver(previous));
        }
        Ok(Leased::Held)
    }

    /// Who holds a live lease on `target`, if anyone.
    pub(crate) async fn lease_holder(&self, target: &str) -> anyhow::Result<Option<String>> {
        Ok(sqlx::query_scalar::<_, String>("select holder from leases where target = $1 and expires_at >= $2")
            .bind(target)
            .bind(ts(SystemTime::now()))
            .fetch_optional(&self.pool)
            .await?)
    }

    /// Every lease recorded, live or expired: target, holder, expiry (RFC 3339).
    pub(crate) async fn leases(&self) -> anyhow::Result<Vec<(String, String, String)>> {
        Ok(sqlx::query_as("select target, holder, expires_at from leases order by target")
            .fetch_all(&self.pool)
            .await?)
    }

    /// The live lease on `target`: its holder and when it expires.
    pub(crate) async fn lease(&self, target: &str) -> anyhow::Result<Option<(String, String)>> {
        Ok(sqlx::query_as("select holder, expires_at from leases where target = $1 and expires_at >= $2")
            .bind(target)
            .bind(ts(SystemTime::now()))
            .fetch_optional(&self.pool)
            .await?)
    }

    /// Releases `target`'s lease whoever holds it (`drcheck lease release`): whether
    /// there was one.
    pub(crate) async fn release_any_lease(&self, target: &str) -> anyhow::Result<bool> {
        Ok(sqlx::query("delete from leases where target = $1").bind(target).execute(&self.pool).await?.rows_affected()
            > 0)
    }

    pub(crate) async fn release_lease(&self, target: &str, holder: &str) -> anyhow::Result<()> {
        sqlx::query("delete from leases where target = $1 and holder = $2")
            .bind(target)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
