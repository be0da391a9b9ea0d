//! Runs and what they prove: recording a run (with its freshness and alerts, in one
//! transaction), reading runs back, pruning, each backup's proof record, and the
//! backup tool's last own verification.

use super::History;
use super::outbox::enqueue_run_alerts;
use super::ts;
use crate::run_report::RunReport;
use anyhow::Context as _;
use sqlx::AnyConnection;
use std::time::SystemTime;

/// A backup's proof record: kept while the backup is in the store, whatever `keep_runs`
/// prunes from the runs.
/// Each proven backup's proof record, by key.
pub(crate) type Proven = std::collections::HashMap<String, Proof>;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Proof {
    /// Its last passing verification.
    pub last_passed: SystemTime,
    /// When its data is consistent as of, as that run read it.
    pub consistent_at: Option<String>,
    pub last_run_id: String,
    /// Passing runs that replayed it to a recovery target (points in time proven).
    pub points_proven: u64,
    /// Its objects as they were when last proven (none for proofs older than pins).
    pub pin: Option<Pin>,
}

/// A `backup_proofs` row: key, consistent_at, last_passed_at, last_run_id, points, pin.
type ProofRow = (String, Option<String>, String, String, i64, Option<String>);

/// A proven backup's identity: what a later listing must still find.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Pin {
    /// The backup's time as its listing says (RFC 3339): its upload, or a tool's
    /// catalog stop — what retention orders backups by.
    pub at: Option<String>,
    pub parts: Vec<crate::run_report::PinnedPart>,
}

/// Applies the migrations, one process at a time: PostgreSQL's migrator takes an
/// advisory lock; SQLite's does not, so two processes opening a fresh history at once
/// would both create its tables — a lock file beside the database orders them.
/// The newest points a target's runs have seen (see [`History::freshness`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Freshness {
    pub backup_at: Option<String>,
    pub recoverable_point: Option<String>,
    pub measured_at: Option<String>,
}

/// The later of two RFC 3339 times (either may be missing or unreadable).
pub(super) fn later(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let (ta, tb) = (humantime::parse_rfc3339_weak(&a).ok(), humantime::parse_rfc3339_weak(&b).ok());
            Some(if tb > ta { b } else { a })
        }
        (a, b) => a.or(b),
    }
}

/// Moves `r`'s target's freshness forward to what `r` saw, in the run's transaction.
pub(super) async fn record_freshness(tx: &mut AnyConnection, r: &RunReport) -> anyhow::Result<()> {
    let old: Option<(Option<String>, Option<String>, Option<String>)> =
        sqlx::query_as("select backup_at, recoverable_point, measured_at from freshness where target = $1")
            .bind(&r.target)
            .fetch_optional(&mut *tx)
            .await?;
    let (b, p, m) = old.clone().unwrap_or_default();
    let new = (
        later(b, r.backup.as_ref().and_then(|b| b.created_at.clone())),
        later(p, r.rpo.recoverable_point.clone()),
        later(m, r.rpo.measured_at.clone()),
    );
    if old.as_ref() == Some(&new) {
        return Ok(());
    }
    // An upsert: two processes recording runs of one target never collide on its row.
    sqlx::query(
        "insert into freshness (target, backup_at, recoverable_point, measured_at) values ($1, $2, $3, $4)
         on conflict (target) do update set backup_at = excluded.backup_at,
             recoverable_point = excluded.recoverable_point, measured_at = excluded.measured_at",
    )
    .bind(&r.target)
    .bind(new.0)
    .bind(new.1)
    .bind(new.2)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

impl History {
    /// Records a run with its phases and validator results, atomically.
    pub(crate) async fn record(&self, r: &RunReport) -> anyhow::Result<()> {
        self.record_with_alerts(r, &[]).await
    }

    /// Records a run and, in the same transaction, the alerts it raises or resolves
    /// for each of `sinks` — so a crash can never keep one without the other.
    pub(crate) async fn record_with_alerts(&self, r: &RunReport, sinks: &[String]) -> anyhow::Result<()> {
        // A full listing's backups: the proofs of the others go (a proof is kept while its
        // backup is in the store).
        if let Some(listed) = &r.still_listed {
            match self.keep_proofs_of(&r.target, listed).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(target = %r.target, forgotten = n, "proofs of backups no longer in the store forgotten")
                }
                Err(e) => tracing::warn!(target = %r.target, "cannot forget the proofs of removed backups: {e:#}"),
            }
        }
        // What the run decided of the target's tables, and the slice it compared.
        if let Some(tables) = &r.tables_decided
            && let Err(e) = self.record_tables(&r.target, tables, std::time::SystemTime::now()).await
        {
            tracing::warn!(target = %r.target, "cannot record the tables compared: {e:#}");
        }
        if let Some((slices, slice)) = r.slice_compared
            && let Err(e) = self.slice_compared(&r.target, slices, slice, std::time::SystemTime::now()).await
        {
            tracing::warn!(target = %r.target, "cannot record the slice compared: {e:#}");
        }
        let json = serde_json::to_string(r)?;
        let mut tx = self.pool.begin().await?;
        // Its start is done with; an `aborted` record another run made of it while it was
        // alive after all (its lease released by hand) gives way to its own.
        sqlx::query("delete from run_starts where run_id = $1").bind(&r.run_id).execute(&mut *tx).await?;
        if let Some(phantom) =
            sqlx::query_scalar::<_, String>("select run_id from runs where run_id = $1 and result = 'aborted'")
                .bind(&r.run_id)
                .fetch_optional(&mut *tx)
                .await?
        {
            for table in ["run_phases", "run_validators", "runs"] {
                sqlx::query(sqlx::AssertSqlSafe(format!("delete from {table} where run_id = $1")))
                    .bind(&phantom)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        sqlx::query(
            "insert into runs (run_id, target, result, started_at, finished_at, backup_key, backup_size_bytes,
                 backup_created_at, backup_format, rto_target_seconds, rto_measured_seconds, rto_met,
                 rpo_target_seconds, rpo_backup_age_seconds, rpo_met, error_stage, error_message, report_json)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
        )
        .bind(&r.run_id)
        .bind(&r.target)
        .bind(r.result.as_str())
        .bind(&r.started_at)
        .bind(&r.finished_at)
        .bind(r.backup.as_ref().map(|b| b.key.clone()))
        .bind(r.backup.as_ref().map(|b| b.size_bytes as i64))
        .bind(r.backup.as_ref().and_then(|b| b.created_at.clone()))
        .bind(r.backup.as_ref().and_then(|b| b.format.clone()))
        .bind(r.rto.target_seconds)
        .bind(r.rto.measured_seconds)
        .bind(r.rto.met.map(i64::from))
        .bind(r.rpo.target_seconds)
        .bind(r.rpo.backup_age_seconds)
        .bind(r.rpo.met.map(i64::from))
        .bind(r.error.as_ref().map(|e| e.stage.clone()))
        .bind(r.error.as_ref().map(|e| e.message.clone()))
        .bind(json)
        // Not a cached prepared statement: sqlx 0.9's Any driver declares a null
        // `Option<f64>` as float4 (any/arguments.rs swaps Real and Double), and a
        // statement cached after a run without a measured RTO would then refuse every
        // later run's 8-byte float on PostgreSQL ("incorrect binary data format").
        .persistent(false)
        .execute(&mut *tx)
        .await?;
        for p in &r.phases {
            sqlx::query("insert into run_phases (run_id, name, seconds) values ($1, $2, $3)")
                .bind(&r.run_id)
                .bind(&p.name)
                .bind(p.seconds)
                .execute(&mut *tx)
                .await?;
        }
        for v in &r.validators {
            sqlx::query("insert into run_validators (run_id, name, status, detail) values ($1, $2, $3, $4)")
                .bind(&r.run_id)
                .bind(&v.name)
                .bind(v.status.as_str())
                .bind(&v.detail)
                .execute(&mut *tx)
                .await?;
        }
        // A follower's validation proves the archive to its point, not a restore of the
        // backup it was seeded from: only restores count as a backup's proof.
        if r.result == crate::run_report::RunResult::Passed
            && r.mode != "follow"
            && let Some(b) = &r.backup
        {
            // The backup's proof outlives the run's row (keep_runs prunes runs, not proofs).
            let point = r.restore.as_ref().is_some_and(|i| i.recovery_target.is_some());
            // Pinned as proven: what every later listing must still find.
            let pin = (!b.pinned.is_empty())
                .then(|| Pin { at: b.uploaded_at.clone().or(b.created_at.clone()), parts: b.pinned.clone() })
                .and_then(|p| serde_json::to_string(&p).ok());
            sqlx::query(
                "insert into backup_proofs (target, backup_key, consistent_at, first_passed_at, last_passed_at,
                     last_run_id, points_proven, pin)
                 values ($1, $2, $3, $4, $4, $5, $6, $7)
                 on conflict (target, backup_key) do update set
                     consistent_at = coalesce(excluded.consistent_at, backup_proofs.consistent_at),
                     last_passed_at = excluded.last_passed_at, last_run_id = excluded.last_run_id,
                     points_proven = backup_proofs.points_proven + excluded.points_proven,
                     pin = coalesce(excluded.pin, backup_proofs.pin)",
            )
            .bind(&r.target)
            .bind(&b.key)
            .bind(b.created_at.clone())
            .bind(&r.finished_at)
            .bind(&r.run_id)
            .bind(i64::from(point))
            .bind(pin)
            .persistent(false)
            .execute(&mut *tx)
            .await?;
        }
        if r.result != crate::run_report::RunResult::Aborted {
            record_freshness(&mut tx, r).await?;
        }
        if !sinks.is_empty() && r.result != crate::run_report::RunResult::Aborted {
            enqueue_run_alerts(&mut tx, r, sinks).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The newest points `target`'s runs have seen: (the newest backup's time, the newest
    /// recoverable point, when that was measured), RFC 3339.
    pub(crate) async fn freshness(&self, target: &str) -> anyhow::Result<Freshness> {
        let row: Option<(Option<String>, Option<String>, Option<String>)> =
            sqlx::query_as("select backup_at, recoverable_point, measured_at from freshness where target = $1")
                .bind(target)
                .fetch_optional(&self.pool)
                .await?;
        let (backup_at, recoverable_point, measured_at) = row.unwrap_or_default();
        Ok(Freshness { backup_at, recoverable_point, measured_at })
    }

    /// Keeps the newest `keep` runs of each target; deletes older ones.
    pub(crate) async fn prune(&self, keep: u32) -> anyhow::Result<u64> {
        self.prune_starts(keep).await?;
        let r = sqlx::query(
            "delete from runs where run_id in (
               select run_id from (select run_id, row_number() over (partition by target order by started_at desc) as n from runs) as ranked
                where ranked.n > $1)",
        )
        .bind(keep as i64)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    /// The most recent runs, newest first, optionally of one target.
    pub(crate) async fn recent(&self, target: Option<&str>, limit: u32) -> anyhow::Result<Vec<RunReport>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "select report_json from runs where (cast($1 as text) is null or target = $1)
              order by started_at desc, run_id desc limit $2",
        )
        .bind(target)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(json,)| serde_json::from_str(&json).context("a history row holds an unreadable report"))
            .collect()
    }

    /// `target`'s newest measured restores (a measured RTO, a backup with a size and a
    /// data time), newest first, for the RTO forecast: at most `limit`.
    pub(crate) async fn rto_samples(&self, target: &str, limit: u32) -> anyhow::Result<Vec<crate::forecast::Sample>> {
        type Row = (String, String, i64, f64, Option<f64>, Option<f64>, Option<f64>);
        let rows: Vec<Row> = sqlx::query_as(
            "select r.backup_key, r.backup_created_at, r.backup_size_bytes, r.rto_measured_seconds,
                    (select sum(p.seconds) from run_phases p where p.run_id = r.run_id and p.name = 'sandbox'),
                    (select sum(p.seconds) from run_phases p where p.run_id = r.run_id and p.name = 'fetch'),
                    (select sum(p.seconds) from run_phases p where p.run_id = r.run_id and p.name = 'restore')
               from runs r
              where r.target = $1 and r.rto_measured_seconds is not null and r.backup_key is not null
                and r.backup_created_at is not null and r.backup_size_bytes is not null and r.result <> 'aborted'
              order by r.started_at desc, r.run_id desc limit $2",
        )
        .bind(target)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(backup, at, size, rto, sandbox, fetch, restore)| {
                let at = humantime::parse_rfc3339_weak(&at).ok()?;
                Some(crate::forecast::Sample {
                    backup,
                    data_at: at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64(),
                    size_bytes: size as f64,
                    rto_seconds: rto,
                    fixed_seconds: sandbox.unwrap_or(0.0).min(rto),
                    fetch_seconds: fetch,
                    restore_seconds: restore,
                })
            })
            .collect())
    }

    /// The run recorded under `run_id`, if any.
    pub(crate) async fn run(&self, run_id: &str) -> anyhow::Result<Option<RunReport>> {
        let row: Option<(String,)> = sqlx::query_as("select report_json from runs where run_id = $1")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|(json,)| serde_json::from_str(&json).context("a history row holds an unreadable report")).transpose()
    }

    /// The newest run of `target` that reached a verdict (not `aborted`).
    pub(crate) async fn latest_verdict(&self, target: &str) -> anyhow::Result<Option<RunReport>> {
        let row: Option<(String,)> = sqlx::query_as(
            "select report_json from runs where target = $1 and result <> 'aborted'
              order by started_at desc, run_id desc limit 1",
        )
        .bind(target)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|(json,)| serde_json::from_str(&json).context("a history row holds an unreadable report")).transpose()
    }

    /// The runs of `target` that started in `[from, to)`, oldest first, drawn one at a
    /// time: each report is read, handed to
    /// `each` and dropped — what stays is what `each` keeps (the evidence keeps a small
    /// summary of each of a target's 25,000 runs, never their reports).
    pub(crate) async fn each_between<T>(
        &self,
        target: &str,
        from: &str,
        to: &str,
        mut each: impl FnMut(RunReport) -> T,
    ) -> anyhow::Result<Vec<T>> {
        use futures::TryStreamExt as _;
        let mut rows = sqlx::query_as::<_, (String,)>(
            "select report_json from runs where target = $1 and started_at >= $2 and started_at < $3
              order by started_at, run_id",
        )
        .bind(target)
        .bind(from)
        .bind(to)
        .fetch(&self.pool);
        let mut out = Vec::new();
        while let Some((json,)) = rows.try_next().await? {
            let r: RunReport = serde_json::from_str(&json).context("a history row holds an unreadable report")?;
            out.push(each(r));
        }
        out.shrink_to_fit();
        Ok(out)
    }

    /// Each target's newest run.
    pub(crate) async fn latest_per_target(&self) -> anyhow::Result<std::collections::HashMap<String, RunReport>> {
        self.newest_where("1 = 1").await
    }

    /// Each target's newest run that did not pass.
    pub(crate) async fn last_failure_per_target(&self) -> anyhow::Result<std::collections::HashMap<String, RunReport>> {
        self.newest_where("result <> 'passed'").await
    }

    pub(super) async fn newest_where(
        &self,
        filter: &'static str,
    ) -> anyhow::Result<std::collections::HashMap<String, RunReport>> {
        let sql = format!(
            "select r.report_json from runs r
              where {filter} and r.started_at = (select max(o.started_at) from runs o where o.target = r.target and {filter})"
        );
        let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(&self.pool).await?;
        let mut out = std::collections::HashMap::new();
        for (json,) in rows {
            let r: RunReport = serde_json::from_str(&json).context("a history row holds an unreadable report")?;
            out.insert(r.target.clone(), r);
        }
        Ok(out)
    }

    /// The targets the history has runs of.
    pub(crate) async fn target_names(&self) -> anyhow::Result<Vec<String>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("select distinct target from runs order by target").fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(|(t,)| t).collect())
    }

    /// When `target` last passed (RFC 3339), if ever.
    pub(crate) async fn last_success(&self, target: &str) -> anyhow::Result<Option<String>> {
        Ok(sqlx::query_scalar("select max(finished_at) from runs where target = $1 and result = 'passed'")
            .bind(target)
            .fetch_one(&self.pool)
            .await?)
    }

    /// [`History::proofs`], or `None` with a log line when the history cannot be read —
    /// then `least-proven` takes the newest and coverage is not reported.
    pub(crate) async fn proven(&self, target: &str) -> Option<Proven> {
        self.proofs(target)
            .await
            .map_err(|e| tracing::warn!(target, "cannot read which backups were proven: {e:#}"))
            .ok()
    }

    /// Each proven backup of `target` (by backup key): its proof record, which outlives
    /// the runs' rows.
    pub(crate) async fn proofs(&self, target: &str) -> anyhow::Result<std::collections::HashMap<String, Proof>> {
        let rows: Vec<ProofRow> = sqlx::query_as(
            "select backup_key, consistent_at, last_passed_at, last_run_id, points_proven, pin
               from backup_proofs where target = $1",
        )
        .bind(target)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(key, consistent_at, at, run_id, points, pin)| {
                let last_passed = humantime::parse_rfc3339_weak(&at).ok()?;
                let pin = pin.and_then(|p| serde_json::from_str(&p).ok());
                Some((
                    key,
                    Proof { last_passed, consistent_at, last_run_id: run_id, points_proven: points.max(0) as u64, pin },
                ))
            })
            .collect())
    }

    /// Forgets the proofs of `target`'s backups that are no longer in its store (`listed`:
    /// every backup a full listing found). Returns how many were forgotten.
    pub(crate) async fn keep_proofs_of(&self, target: &str, listed: &[String]) -> anyhow::Result<u64> {
        let known: Vec<String> = sqlx::query_scalar("select backup_key from backup_proofs where target = $1")
            .bind(target)
            .fetch_all(&self.pool)
            .await?;
        let listed: std::collections::HashSet<&str> = listed.iter().map(String::as_str).collect();
        let mut gone = 0;
        for key in known.iter().filter(|k| !listed.contains(k.as_str())) {
            gone += sqlx::query("delete from backup_proofs where target = $1 and backup_key = $2")
                .bind(target)
                .bind(key)
                .execute(&self.pool)
                .await?
                .rows_affected();
        }
        Ok(gone)
    }

    /// The newest run of the tool's own verification of `target`'s repository: when, and
    /// whether it passed.
    pub(crate) async fn tool_check(&self, target: &str) -> anyhow::Result<Option<(SystemTime, bool)>> {
        let row: Option<(String, i64)> = sqlx::query_as("select checked_at, passed from tool_checks where target = $1")
            .bind(target)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.and_then(|(at, passed)| Some((humantime::parse_rfc3339_weak(&at).ok()?, passed != 0))))
    }

    /// Records a run of the tool's own verification of `target`'s repository.
    pub(crate) async fn record_tool_check(
        &self,
        target: &str,
        at: SystemTime,
        passed: bool,
        seconds: f64,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "insert into tool_checks (target, checked_at, passed, seconds) values ($1, $2, $3, $4)
             on conflict (target) do update set checked_at = excluded.checked_at, passed = excluded.passed,
                                                seconds = excluded.seconds",
        )
        .bind(target)
        .bind(ts(at))
        .bind(i64::from(passed))
        .bind(seconds)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The slice of `slices` a run of `target` compares next (`primary_read_budget`): one
    /// never compared, else the one compared longest ago — with when the oldest slice
    /// was compared (`None` while one never was). A new number of slices starts over.
    pub(crate) async fn next_slice(&self, target: &str, slices: u32) -> anyhow::Result<(u32, Option<String>)> {
        let rows: Vec<(i64, i64, String)> =
            sqlx::query_as("select slices, slice, compared_at from comparison_slices where target = $1")
                .bind(target)
                .fetch_all(&self.pool)
                .await?;
        if rows.iter().any(|(n, _, _)| *n != i64::from(slices)) {
            sqlx::query("delete from comparison_slices where target = $1").bind(target).execute(&self.pool).await?;
            return Ok((0, None));
        }
        if let Some(missing) = (0..slices).find(|s| !rows.iter().any(|(_, slice, _)| *slice == i64::from(*s))) {
            return Ok((missing, None));
        }
        let oldest = rows.iter().min_by(|a, b| a.2.cmp(&b.2)).map(|(_, s, at)| (*s as u32, at.clone()));
        Ok(oldest.map(|(s, at)| (s, Some(at))).unwrap_or((0, None)))
    }

    /// Records that a run of `target` compared `slice` of `slices` (its checksums passed).
    pub(crate) async fn slice_compared(
        &self,
        target: &str,
        slices: u32,
        slice: u32,
        at: SystemTime,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "insert into comparison_slices (target, slices, slice, compared_at) values ($1, $2, $3, $4)
             on conflict (target, slice) do update set slices = excluded.slices, compared_at = excluded.compared_at",
        )
        .bind(target)
        .bind(i64::from(slices))
        .bind(i64::from(slice))
        .bind(ts(at))
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
