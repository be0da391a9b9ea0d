//! The history store: every run, its phases and validator results, through sqlx in
//! SQLite (WAL mode, so a crash at any moment leaves it consistent). A run and its
//! parts are written in one transaction.

use crate::alerts::{self, Alert};
use crate::report::RunReport;
use anyhow::Context as _;
use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyConnection, Executor};
use std::os::unix::fs::OpenOptionsExt as _;
use std::time::Duration;
use std::time::SystemTime;

/// A backup's proof record: kept while the backup is in the store, whatever `keep_runs`
/// prunes from the runs.
/// Each proven backup's proof record, by key.
pub type Proven = std::collections::HashMap<String, Proof>;

#[derive(Debug, Clone, PartialEq)]
pub struct Proof {
    /// Its last passing verification.
    pub last_passed: SystemTime,
    /// When its data is consistent as of, as that run read it.
    pub consistent_at: Option<String>,
    pub last_run_id: String,
    /// Passing runs that replayed it to a recovery target (points in time proven).
    pub points_proven: u64,
}

pub struct History {
    pool: AnyPool,
    /// PostgreSQL (else SQLite): claims skip rows another dispatcher has locked.
    postgres: bool,
}

/// How long a dispatcher's claim on an outbox row lasts: past it (the dispatcher died
/// mid-delivery), another one delivers the row again — at least once.
pub const CLAIM_TTL: Duration = Duration::from_secs(300);

/// Creates the SQLite file 0600 if it does not exist (SQLite gives its `-wal` and
/// `-shm` files the database file's mode), and takes group and other access from one
/// that does: the history holds what the API token guards.
fn private_file(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            for p in [path.to_path_buf(), with_suffix(path, "-wal"), with_suffix(path, "-shm")] {
                if let Ok(m) = std::fs::symlink_metadata(&p)
                    && m.is_file()
                    && m.permissions().mode() & 0o077 != 0
                {
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m.permissions().mode() & 0o700))?;
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn with_suffix(path: &std::path::Path, suffix: &str) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    std::path::PathBuf::from(s)
}

impl History {
    /// Opens (creating if needed) the store at `url` and applies migrations.
    /// `url` is shown in errors only redacted.
    pub async fn open(url: &drcheck_config::Secret) -> anyhow::Result<History> {
        let shown = url.redacted();
        let raw = url.expose();
        sqlx::any::install_default_drivers();
        let url = if let Some(rest) = raw.strip_prefix("sqlite:") {
            let path = rest.trim_start_matches("//");
            let file = path.split('?').next().unwrap_or_default();
            if let Some(parent) = std::path::Path::new(file).parent()
                && !parent.as_os_str().is_empty()
            {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("history store {shown}: cannot create {}", parent.display()))?;
            }
            if !file.is_empty() && file != ":memory:" {
                private_file(std::path::Path::new(file))
                    .with_context(|| format!("history store {shown}: cannot create {file} private"))?;
            }
            if raw.contains('?') { raw.to_string() } else { format!("{raw}?mode=rwc") }
        } else {
            raw.to_string()
        };
        let pool = AnyPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(|conn, _| {
                Box::pin(async move {
                    if conn.backend_name() == "SQLite" {
                        // WAL: a crash at any moment leaves the store consistent.
                        conn.execute(
                            "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 10000; PRAGMA foreign_keys = ON",
                        )
                        .await?;
                    } else {
                        conn.execute("SET statement_timeout = '60s'").await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot open history store {shown}: {}",
                    drcheck_validators::primary::scrub(&e.to_string(), raw)
                )
            })?;
        let postgres = !raw.starts_with("sqlite:");
        migrate(&pool, postgres, raw).await.with_context(|| format!("history store {shown}: migrations failed"))?;
        Ok(History { pool, postgres })
    }

    /// Records a run with its phases and validator results, atomically.
    pub async fn record(&self, r: &RunReport) -> anyhow::Result<()> {
        self.record_with_alerts(r, &[]).await
    }

    /// Records a run and, in the same transaction, the alerts it raises or resolves
    /// for each of `sinks` — so a crash can never keep one without the other.
    pub async fn record_with_alerts(&self, r: &RunReport, sinks: &[String]) -> anyhow::Result<()> {
        let json = serde_json::to_string(r)?;
        let mut tx = self.pool.begin().await?;
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
                .bind(&v.status)
                .bind(&v.detail)
                .execute(&mut *tx)
                .await?;
        }
        if r.result == crate::report::RunResult::Passed
            && let Some(b) = &r.backup
        {
            // The backup's proof outlives the run's row (keep_runs prunes runs, not proofs).
            let point = r.restore.as_ref().is_some_and(|i| i.recovery_target.is_some());
            sqlx::query(
                "insert into backup_proofs (target, backup_key, consistent_at, first_passed_at, last_passed_at,
                     last_run_id, points_proven)
                 values ($1, $2, $3, $4, $4, $5, $6)
                 on conflict (target, backup_key) do update set
                     consistent_at = coalesce(excluded.consistent_at, backup_proofs.consistent_at),
                     last_passed_at = excluded.last_passed_at, last_run_id = excluded.last_run_id,
                     points_proven = backup_proofs.points_proven + excluded.points_proven",
            )
            .bind(&r.target)
            .bind(&b.key)
            .bind(b.created_at.clone())
            .bind(&r.finished_at)
            .bind(&r.run_id)
            .bind(i64::from(point))
            .persistent(false)
            .execute(&mut *tx)
            .await?;
        }
        if r.result != crate::report::RunResult::Aborted {
            record_freshness(&mut tx, r).await?;
        }
        if !sinks.is_empty() && r.result != crate::report::RunResult::Aborted {
            enqueue_run_alerts(&mut tx, r, sinks).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The newest points `target`'s runs have seen: (the newest backup's time, the newest
    /// recoverable point, when that was measured), RFC 3339.
    pub async fn freshness(&self, target: &str) -> anyhow::Result<Freshness> {
        let row: Option<(Option<String>, Option<String>, Option<String>)> =
            sqlx::query_as("select backup_at, recoverable_point, measured_at from freshness where target = $1")
                .bind(target)
                .fetch_optional(&self.pool)
                .await?;
        let (backup_at, recoverable_point, measured_at) = row.unwrap_or_default();
        Ok(Freshness { backup_at, recoverable_point, measured_at })
    }

    /// The newest run of the tool's own verification of `target`'s repository: when, and
    /// whether it passed.
    pub async fn tool_check(&self, target: &str) -> anyhow::Result<Option<(SystemTime, bool)>> {
        let row: Option<(String, i64)> = sqlx::query_as("select checked_at, passed from tool_checks where target = $1")
            .bind(target)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.and_then(|(at, passed)| Some((humantime::parse_rfc3339_weak(&at).ok()?, passed != 0))))
    }

    /// Records a run of the tool's own verification of `target`'s repository.
    pub async fn record_tool_check(
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

    /// Claims the alerts of `sink` that are due, for `holder`, until [`CLAIM_TTL`]:
    /// of each alert (sink, target, alert name) only the oldest row — so one alert's
    /// states reach a sink in order, the next only once the one before is delivered or
    /// dead — and no row another dispatcher holds. Oldest first.
    pub async fn claim_due(&self, holder: &str, sink: &str, now: SystemTime) -> anyhow::Result<Vec<OutboxRow>> {
        let lock = if self.postgres { "for update skip locked" } else { "" };
        let sql = format!(
            "update alert_outbox set claimed_by = $1, claim_expires_at = $2
              where id in (
                  select a.id from alert_outbox a
                   where a.sink = $3 and a.next_attempt_at <= $4
                     and (a.claim_expires_at is null or a.claim_expires_at < $4)
                     and not exists (
                         select 1 from alert_outbox o
                          where o.sink = a.sink and o.target = a.target and o.alertname = a.alertname
                            and (o.created_at < a.created_at or (o.created_at = a.created_at and o.id < a.id)))
                   order by a.created_at, a.id limit 200 {lock})
                and (claim_expires_at is null or claim_expires_at < $4)
             returning id, sink, target, alertname, state, dedup_key, run_id, payload, attempts, created_at"
        );
        let mut rows: Vec<OutboxRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(holder)
            .bind(ts(now + CLAIM_TTL))
            .bind(sink)
            .bind(ts(now))
            .fetch_all(&self.pool)
            .await?;
        rows.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
        Ok(rows)
    }

    /// The sinks that have alerts waiting, delivered or not.
    pub async fn outbox_sinks(&self) -> anyhow::Result<Vec<String>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("select distinct sink from alert_outbox order by sink").fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(|(s,)| s).collect())
    }

    /// Records a delivery by `holder`: the row leaves the outbox, the delivery is
    /// recorded once (a second record of the same row is no error).
    pub async fn mark_delivered(&self, row: &OutboxRow, holder: &str) -> anyhow::Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("delete from alert_outbox where id = $1 and claimed_by = $2")
            .bind(&row.id)
            .bind(holder)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "insert into alerts_delivered (id, sink, dedup_key, delivered_at) values ($1, $2, $3, $4)
             on conflict (id) do nothing",
        )
        .bind(&row.id)
        .bind(&row.sink)
        .bind(&row.dedup_key)
        .bind(ts(SystemTime::now()))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A failed attempt by `holder`: counted, the claim released, due again at `next`.
    pub async fn mark_failed(
        &self,
        row: &OutboxRow,
        holder: &str,
        error: &str,
        next: SystemTime,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "update alert_outbox set attempts = attempts + 1, last_error = $1, next_attempt_at = $2,
                    claimed_by = null, claim_expires_at = null
              where id = $3 and claimed_by = $4",
        )
        .bind(error)
        .bind(ts(next))
        .bind(&row.id)
        .bind(holder)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Moves an alert `holder` has claimed to the dead letters, in one transaction.
    pub async fn dead_letter(&self, row: &OutboxRow, holder: &str, error: &str) -> anyhow::Result<()> {
        self.dead_letter_where("id = $3 and claimed_by = $4", &row.id, holder, error).await.map(|_| ())
    }

    /// Moves to the dead letters every unclaimed alert of `sink` (all of them with
    /// `older_than` None, else those created before it): `drcheck alerts dead-letter`,
    /// and a dispatcher's clean-up of sinks no dispatcher has delivered for that long.
    pub async fn dead_letter_sink(&self, sink: &str, older_than: Option<SystemTime>, why: &str) -> anyhow::Result<u64> {
        let before = older_than.map(ts).unwrap_or_else(|| "9999".into());
        let now = ts(SystemTime::now());
        let filter = format!(
            "sink = $3 and created_at < $4 and (claim_expires_at is null or claim_expires_at < '{}')",
            now.replace('\'', "")
        );
        let mut tx = self.pool.begin().await?;
        let moved = dead_letter_rows(&mut tx, &filter, sink, &before, why).await?;
        tx.commit().await?;
        Ok(moved)
    }

    async fn dead_letter_where(&self, filter: &str, a: &str, b: &str, error: &str) -> anyhow::Result<u64> {
        let mut tx = self.pool.begin().await?;
        let moved = dead_letter_rows(&mut tx, filter, a, b, error).await?;
        tx.commit().await?;
        Ok(moved)
    }

    pub async fn outbox_depth_of(&self, sink: &str) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar("select count(*) from alert_outbox where sink = $1")
            .bind(sink)
            .fetch_one(&self.pool)
            .await?)
    }

    pub async fn outbox_depth(&self) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar("select count(*) from alert_outbox").fetch_one(&self.pool).await?)
    }

    /// Every alert not yet delivered and every dead letter, for `drcheck alerts`.
    pub async fn alert_listing(&self) -> anyhow::Result<serde_json::Value> {
        let pending: Vec<(String, String, String, String, i64, Option<String>)> = sqlx::query_as(
            "select sink, target, alertname, state, attempts, last_error from alert_outbox order by created_at",
        )
        .fetch_all(&self.pool)
        .await?;
        let dead: Vec<(String, String, String, String, i64, Option<String>)> = sqlx::query_as(
            "select sink, target, alertname, state, attempts, last_error from alert_dead_letters order by dead_at",
        )
        .fetch_all(&self.pool)
        .await?;
        let delivered: i64 = sqlx::query_scalar("select count(*) from alerts_delivered").fetch_one(&self.pool).await?;
        let rows = |v: Vec<(String, String, String, String, i64, Option<String>)>| -> Vec<serde_json::Value> {
            v.into_iter()
                .map(|(sink, target, alertname, state, attempts, last_error)| {
                    serde_json::json!({"sink": sink, "target": target, "alertname": alertname, "state": state,
                                       "attempts": attempts, "last_error": last_error})
                })
                .collect()
        };
        Ok(serde_json::json!({"pending": rows(pending), "dead_letters": rows(dead), "delivered": delivered}))
    }

    /// Raises the stale alert for `target` (no success for too long) unless it fires already.
    pub async fn raise_stale(&self, target: &str, description: &str, sinks: &[String]) -> anyhow::Result<bool> {
        let mut tx = self.pool.begin().await?;
        let firing: Option<(String,)> =
            sqlx::query_as("select episode from alert_state where target = $1 and alertname = $2")
                .bind(target)
                .bind(alerts::STALE)
                .fetch_optional(&mut *tx)
                .await?;
        if firing.is_some() {
            return Ok(false);
        }
        let now = ts(SystemTime::now());
        let episode = uuid::Uuid::new_v4().to_string();
        sqlx::query("insert into alert_state (target, alertname, episode, since) values ($1, $2, $3, $4)")
            .bind(target)
            .bind(alerts::STALE)
            .bind(&episode)
            .bind(&now)
            .execute(&mut *tx)
            .await?;
        let alert = Alert {
            alertname: alerts::STALE.into(),
            target: target.into(),
            severity: alerts::severity_of(alerts::STALE).into(),
            state: "firing".into(),
            summary: format!("{} for {target}", alerts::STALE),
            description: description.into(),
            run_id: None,
            starts_at: now.clone(),
            ends_at: None,
            dedup_key: alerts::dedup_key(target, alerts::STALE, &episode, "firing"),
        };
        remember_firing(&mut tx, &alert).await?;
        enqueue(&mut tx, &alert, sinks, None).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Queues again, for `sinks`, every alert that fires and was last queued more than
    /// `every` ago — so Alertmanager hears it before its `endsAt` for as long as it
    /// fires. Each alert is taken by one dispatcher only (its last-queued time is
    /// compared and set in one statement). Returns how many were queued.
    pub async fn resend_firing(&self, sinks: &[String], every: Duration) -> anyhow::Result<usize> {
        if sinks.is_empty() {
            return Ok(0);
        }
        let now = SystemTime::now();
        let due: Vec<(String, String, String, Option<String>)> = sqlx::query_as(
            "select target, alertname, payload, last_sent_at from alert_state
              where payload is not null and (last_sent_at is null or last_sent_at < $1)",
        )
        .bind(ts(now - every))
        .fetch_all(&self.pool)
        .await?;
        let mut queued = 0;
        for (target, alertname, payload, last) in due {
            let Ok(alert) = serde_json::from_str::<Alert>(&payload) else { continue };
            let mut tx = self.pool.begin().await?;
            let taken = sqlx::query(
                "update alert_state set last_sent_at = $1
                  where target = $2 and alertname = $3 and coalesce(last_sent_at, '') = $4",
            )
            .bind(ts(now))
            .bind(&target)
            .bind(&alertname)
            .bind(last.unwrap_or_default())
            .execute(&mut *tx)
            .await?;
            if taken.rows_affected() == 1 {
                enqueue(&mut tx, &alert, sinks, None).await?;
                queued += 1;
            }
            tx.commit().await?;
        }
        Ok(queued)
    }

    /// Records a finished drill (once: a drill id is recorded one time).
    pub async fn record_drill(&self, j: &drcheck_runbooks::Journal) -> anyhow::Result<()> {
        sqlx::query(
            "insert into drill_runs (drill_id, runbook, result, started_at, finished_at) values ($1, $2, $3, $4, $5)
             on conflict (drill_id) do nothing",
        )
        .bind(&j.drill_id)
        .bind(&j.runbook.name)
        .bind(j.result.as_str())
        .bind(&j.started_at)
        .bind(&j.finished_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// How many drills of `runbook` ended with each result.
    pub async fn drill_counts(&self, runbook: &str) -> anyhow::Result<Vec<(String, i64)>> {
        Ok(sqlx::query_as("select result, count(*) from drill_runs where runbook = $1 group by result")
            .bind(runbook)
            .fetch_all(&self.pool)
            .await?)
    }

    /// When `target` last passed (RFC 3339), if ever.
    pub async fn last_success(&self, target: &str) -> anyhow::Result<Option<String>> {
        Ok(sqlx::query_scalar("select max(finished_at) from runs where target = $1 and result = 'passed'")
            .bind(target)
            .fetch_one(&self.pool)
            .await?)
    }

    /// [`History::proofs`], or `None` with a log line when the history cannot be read —
    /// then `least-proven` takes the newest and coverage is not reported.
    pub async fn proven(&self, target: &str) -> Option<Proven> {
        self.proofs(target)
            .await
            .map_err(|e| tracing::warn!(target, "cannot read which backups were proven: {e:#}"))
            .ok()
    }

    /// Each proven backup of `target` (by backup key): its proof record, which outlives
    /// the runs' rows.
    pub async fn proofs(&self, target: &str) -> anyhow::Result<std::collections::HashMap<String, Proof>> {
        let rows: Vec<(String, Option<String>, String, String, i64)> = sqlx::query_as(
            "select backup_key, consistent_at, last_passed_at, last_run_id, points_proven
               from backup_proofs where target = $1",
        )
        .bind(target)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(key, consistent_at, at, run_id, points)| {
                let last_passed = humantime::parse_rfc3339_weak(&at).ok()?;
                Some((
                    key,
                    Proof { last_passed, consistent_at, last_run_id: run_id, points_proven: points.max(0) as u64 },
                ))
            })
            .collect())
    }

    /// Forgets the proofs of `target`'s backups that are no longer in its store (`listed`:
    /// every backup a full listing found). Returns how many were forgotten.
    pub async fn keep_proofs_of(&self, target: &str, listed: &[String]) -> anyhow::Result<u64> {
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

    /// Takes the lease on `target` for `ttl` unless another holder's lease is live.
    pub async fn acquire_lease(&self, target: &str, holder: &str, ttl: Duration) -> anyhow::Result<bool> {
        Ok(self.lease_for(target, holder, ttl).await?.taken())
    }

    /// [`Self::acquire_lease`], saying whether the lease was taken over from a holder whose
    /// process is gone — a run that died without recording itself, which the taker then
    /// records as `aborted` ([`crate::verify::died_report`]).
    pub async fn lease_for(&self, target: &str, holder: &str, ttl: Duration) -> anyhow::Result<Leased> {
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
    pub async fn lease_holder(&self, target: &str) -> anyhow::Result<Option<String>> {
        Ok(sqlx::query_scalar::<_, String>("select holder from leases where target = $1 and expires_at >= $2")
            .bind(target)
            .bind(ts(SystemTime::now()))
            .fetch_optional(&self.pool)
            .await?)
    }

    /// Every lease recorded, live or expired: target, holder, expiry (RFC 3339).
    pub async fn leases(&self) -> anyhow::Result<Vec<(String, String, String)>> {
        Ok(sqlx::query_as("select target, holder, expires_at from leases order by target")
            .fetch_all(&self.pool)
            .await?)
    }

    /// The live lease on `target`: its holder and when it expires.
    pub async fn lease(&self, target: &str) -> anyhow::Result<Option<(String, String)>> {
        Ok(sqlx::query_as("select holder, expires_at from leases where target = $1 and expires_at >= $2")
            .bind(target)
            .bind(ts(SystemTime::now()))
            .fetch_optional(&self.pool)
            .await?)
    }

    /// Releases `target`'s lease whoever holds it (`drcheck lease release`): whether
    /// there was one.
    pub async fn release_any_lease(&self, target: &str) -> anyhow::Result<bool> {
        Ok(sqlx::query("delete from leases where target = $1").bind(target).execute(&self.pool).await?.rows_affected()
            > 0)
    }

    pub async fn release_lease(&self, target: &str, holder: &str) -> anyhow::Result<()> {
        sqlx::query("delete from leases where target = $1 and holder = $2")
            .bind(target)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Keeps the newest `keep` runs of each target; deletes older ones.
    pub async fn prune(&self, keep: u32) -> anyhow::Result<u64> {
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
    pub async fn recent(&self, target: Option<&str>, limit: u32) -> anyhow::Result<Vec<RunReport>> {
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

    /// The run recorded under `run_id`, if any.
    pub async fn run(&self, run_id: &str) -> anyhow::Result<Option<RunReport>> {
        let row: Option<(String,)> = sqlx::query_as("select report_json from runs where run_id = $1")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|(json,)| serde_json::from_str(&json).context("a history row holds an unreadable report")).transpose()
    }

    /// The newest run of `target` that reached a verdict (not `aborted`).
    pub async fn latest_verdict(&self, target: &str) -> anyhow::Result<Option<RunReport>> {
        let row: Option<(String,)> = sqlx::query_as(
            "select report_json from runs where target = $1 and result <> 'aborted'
              order by started_at desc, run_id desc limit 1",
        )
        .bind(target)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|(json,)| serde_json::from_str(&json).context("a history row holds an unreadable report")).transpose()
    }

    /// Every run that started in `[from, to)` (RFC 3339 UTC, as recorded), oldest first.
    pub async fn between(&self, from: &str, to: &str) -> anyhow::Result<Vec<RunReport>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "select report_json from runs where started_at >= $1 and started_at < $2 order by started_at, run_id",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(json,)| serde_json::from_str(&json).context("a history row holds an unreadable report"))
            .collect()
    }

    /// The runs of `target` that started in `[from, to)`, oldest first.
    pub async fn between_for(&self, target: &str, from: &str, to: &str) -> anyhow::Result<Vec<RunReport>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "select report_json from runs where target = $1 and started_at >= $2 and started_at < $3
              order by started_at, run_id",
        )
        .bind(target)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(json,)| serde_json::from_str(&json).context("a history row holds an unreadable report"))
            .collect()
    }

    /// Each target's newest run.
    pub async fn latest_per_target(&self) -> anyhow::Result<std::collections::HashMap<String, RunReport>> {
        self.newest_where("1 = 1").await
    }

    /// Each target's newest run that did not pass.
    pub async fn last_failure_per_target(&self) -> anyhow::Result<std::collections::HashMap<String, RunReport>> {
        self.newest_where("result <> 'passed'").await
    }

    async fn newest_where(&self, filter: &'static str) -> anyhow::Result<std::collections::HashMap<String, RunReport>> {
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
    pub async fn target_names(&self) -> anyhow::Result<Vec<String>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("select distinct target from runs order by target").fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(|(t,)| t).collect())
    }

    pub async fn close(self) {
        self.pool.close().await;
    }
}

/// An alert waiting in the outbox.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OutboxRow {
    pub id: String,
    pub sink: String,
    pub target: String,
    pub alertname: String,
    pub state: String,
    pub dedup_key: String,
    pub run_id: Option<String>,
    pub payload: String,
    pub attempts: i64,
    pub created_at: String,
}

fn ts(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Moves the outbox rows matching `filter` (over `$3` and `$4`) to the dead letters.
async fn dead_letter_rows(tx: &mut AnyConnection, filter: &str, a: &str, b: &str, error: &str) -> anyhow::Result<u64> {
    let copy = format!(
        "insert into alert_dead_letters (id, sink, target, alertname, state, dedup_key, run_id, payload, attempts,
                                         created_at, dead_at, last_error)
         select id, sink, target, alertname, state, dedup_key, run_id, payload, attempts + 1, created_at, $1, $2
           from alert_outbox where {filter}"
    );
    sqlx::query(sqlx::AssertSqlSafe(copy))
        .bind(ts(SystemTime::now()))
        .bind(error)
        .bind(a)
        .bind(b)
        .execute(&mut *tx)
        .await?;
    let delete = format!("delete from alert_outbox where {}", filter.replace("$3", "$1").replace("$4", "$2"));
    let r = sqlx::query(sqlx::AssertSqlSafe(delete)).bind(a).bind(b).execute(&mut *tx).await?;
    Ok(r.rows_affected())
}

/// Applies the migrations, one process at a time: PostgreSQL's migrator takes an
/// advisory lock; SQLite's does not, so two processes opening a fresh history at once
/// would both create its tables — a lock file beside the database orders them.
/// The newest points a target's runs have seen (see [`History::freshness`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Freshness {
    pub backup_at: Option<String>,
    pub recoverable_point: Option<String>,
    pub measured_at: Option<String>,
}

/// The later of two RFC 3339 times (either may be missing or unreadable).
fn later(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let (ta, tb) = (humantime::parse_rfc3339_weak(&a).ok(), humantime::parse_rfc3339_weak(&b).ok());
            Some(if tb > ta { b } else { a })
        }
        (a, b) => a.or(b),
    }
}

/// Moves `r`'s target's freshness forward to what `r` saw, in the run's transaction.
async fn record_freshness(tx: &mut AnyConnection, r: &RunReport) -> anyhow::Result<()> {
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

async fn migrate(pool: &AnyPool, postgres: bool, raw: &str) -> anyhow::Result<()> {
    let file = raw.strip_prefix("sqlite:").map(|r| r.trim_start_matches("//").split('?').next().unwrap_or_default());
    let _lock = match file {
        Some(f) if !postgres && !f.is_empty() && f != ":memory:" => {
            let path = with_suffix(std::path::Path::new(f), ".migrate-lock");
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            let lock = tokio::task::spawn_blocking(move || {
                nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e)
            })
            .await?
            .with_context(|| format!("cannot lock {}", path.display()))?;
            Some(lock)
        }
        _ => None,
    };
    sqlx::migrate!("./migrations").run(pool).await?;
    Ok(())
}

/// Queues `a` for each of `sinks`. A firing of the same alert still waiting there (not
/// being delivered) is superseded — dropped, never sent. A resolution goes only where
/// its firing (`firing_key`) was delivered or is being delivered: resolving what a sink
/// never saw is noise.
async fn enqueue(tx: &mut AnyConnection, a: &Alert, sinks: &[String], firing_key: Option<&str>) -> anyhow::Result<()> {
    let payload = serde_json::to_string(a)?;
    let now = ts(SystemTime::now());
    for sink in sinks {
        sqlx::query(
            "delete from alert_outbox where sink = $1 and target = $2 and alertname = $3 and state = 'firing'
                and (claim_expires_at is null or claim_expires_at < $4)",
        )
        .bind(sink)
        .bind(&a.target)
        .bind(&a.alertname)
        .bind(&now)
        .execute(&mut *tx)
        .await?;
        if let Some(key) = firing_key.filter(|_| a.state == "resolved") {
            let seen: i64 = sqlx::query_scalar(
                "select (select count(*) from alerts_delivered where sink = $1 and dedup_key = $2)
                      + (select count(*) from alert_outbox where sink = $1 and dedup_key = $2)",
            )
            .bind(sink)
            .bind(key)
            .fetch_one(&mut *tx)
            .await?;
            if seen == 0 {
                continue;
            }
        }
        sqlx::query(
            "insert into alert_outbox (id, sink, target, alertname, state, dedup_key, run_id, payload, attempts,
                                       next_attempt_at, created_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10)",
        )
        .bind(uuid::Uuid::new_v4().to_string())
        .bind(sink)
        .bind(&a.target)
        .bind(&a.alertname)
        .bind(&a.state)
        .bind(&a.dedup_key)
        .bind(&a.run_id)
        .bind(&payload)
        .bind(&now)
        .bind(&now)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// Remembers what a firing alert says and that it was queued now (re-sends start from
/// here).
async fn remember_firing(tx: &mut AnyConnection, a: &Alert) -> anyhow::Result<()> {
    sqlx::query("update alert_state set payload = $1, last_sent_at = $2 where target = $3 and alertname = $4")
        .bind(serde_json::to_string(a)?)
        .bind(ts(SystemTime::now()))
        .bind(&a.target)
        .bind(&a.alertname)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Fires (again) every alert the run raises, resolves those that stopped firing.
async fn enqueue_run_alerts(tx: &mut AnyConnection, r: &RunReport, sinks: &[String]) -> anyhow::Result<()> {
    let now_firing = alerts::firing(r);
    let names = alerts::RUN_ALERTS.iter().chain(std::iter::once(&alerts::STALE));
    for &name in names {
        let prev: Option<(String, String)> =
            sqlx::query_as("select episode, since from alert_state where target = $1 and alertname = $2")
                .bind(&r.target)
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
        let fires = now_firing.iter().find(|(n, _, _)| *n == name);
        let (state, episode, since, severity, description) = match (fires, prev) {
            (Some((_, sev, desc)), Some((episode, since))) => ("firing", episode, since, *sev, desc.clone()),
            (Some((_, sev, desc)), None) => {
                sqlx::query("insert into alert_state (target, alertname, episode, since) values ($1, $2, $3, $4)")
                    .bind(&r.target)
                    .bind(name)
                    .bind(&r.run_id)
                    .bind(&r.started_at)
                    .execute(&mut *tx)
                    .await?;
                ("firing", r.run_id.clone(), r.started_at.clone(), *sev, desc.clone())
            }
            // The stale alert resolves only with a passing run.
            (None, Some(_)) if name == alerts::STALE && r.result != crate::report::RunResult::Passed => continue,
            (None, Some((episode, since))) => {
                sqlx::query("delete from alert_state where target = $1 and alertname = $2")
                    .bind(&r.target)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
                ("resolved", episode, since, alerts::severity_of(name), format!("{name} resolved by run {}", r.run_id))
            }
            (None, None) => continue,
        };
        let alert = Alert {
            alertname: name.to_string(),
            target: r.target.clone(),
            severity: severity.to_string(),
            state: state.to_string(),
            summary: format!("{name} for {}", r.target),
            description,
            run_id: Some(r.run_id.clone()),
            starts_at: since,
            ends_at: (state == "resolved").then(|| r.finished_at.clone()),
            dedup_key: alerts::dedup_key(&r.target, name, &episode, state),
        };
        if state == "firing" {
            remember_firing(tx, &alert).await?;
        }
        let firing_key = alerts::dedup_key(&r.target, name, &episode, "firing");
        enqueue(tx, &alert, sinks, Some(&firing_key)).await?;
    }
    Ok(())
}

/// The name a lease is taken under: who (`drcheck verify pid 3873 (b6187f5e)`, what a
/// process finding the target taken prints) and, in brackets, where — this machine
/// ([`machine_id`](drcheck_restore::leftovers::machine_id)) and the process's start time —
/// so a drcheck on the same machine can tell that the holder crashed.
pub fn lease_holder_name(role: &str) -> String {
    let me = drcheck_restore::leftovers::Owner::current(None);
    holder_name(role, me.pid, me.start, drcheck_restore::leftovers::machine_id().as_deref())
}

fn holder_name(role: &str, pid: i32, start: u64, machine: Option<&str>) -> String {
    let run = &crate::ids::new_run_id()[..8];
    match machine {
        Some(m) => format!("drcheck {role} pid {pid} ({run}) [machine {m} start {start}]"),
        None => format!("drcheck {role} pid {pid} ({run})"),
    }
}

/// What taking a lease came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leased {
    Taken,
    /// Taken from this holder, whose process is gone.
    TookOver(String),
    Held,
}

impl Leased {
    pub fn taken(&self) -> bool {
        !matches!(self, Leased::Held)
    }
}

/// What is known of `holder` (a [`lease_holder_name`]) from here: `Some(true)` a drcheck
/// on this machine that still runs, `Some(false)` one whose process is gone, `None`
/// another machine's (or one that does not say).
pub fn holder_alive_here(holder: &str) -> Option<bool> {
    let here = drcheck_restore::leftovers::machine_id()?;
    let (who, place) = holder.rsplit_once(" [machine ")?;
    let (machine, start) = place.strip_suffix(']').and_then(|p| p.split_once(" start "))?;
    let pid = who.split_once(" pid ").and_then(|(_, r)| r.split_whitespace().next()).and_then(|p| p.parse().ok())?;
    let start = start.parse().ok()?;
    (machine == here).then(|| drcheck_restore::leftovers::process_running(pid, start))
}

/// Whether `holder` (a [`lease_holder_name`]) is a drcheck on this machine whose process
/// is gone. A holder from elsewhere, or one that does not say, is never judged.
fn crashed_here(holder: &str) -> bool {
    holder_alive_here(holder) == Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store(dir: &tempfile::TempDir) -> History {
        let url = format!("sqlite://{}", dir.path().join("h.db").display());
        History::open(&drcheck_config::Secret::new(url)).await.unwrap()
    }

    /// A pid that no longer runs: a child that has exited and been reaped.
    fn dead_pid() -> i32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        pid
    }

    fn passing_run(id: &str, key: &str, at: &str, point: bool) -> RunReport {
        let mut v = serde_json::json!({
            "run_id": id, "target": "orders", "result": "passed",
            "started_at": at, "finished_at": at,
            "backup": {"key": key, "size_bytes": 1, "created_at": "2026-12-01T00:00:00.000Z", "format": "custom"},
            "phases": [], "validators": [],
            "rto": {"target_seconds": 60.0, "measured_seconds": 1.0, "met": true},
            "rpo": {"target_seconds": 60.0, "backup_age_seconds": null, "met": null}
        });
        if point {
            v["restore"] = serde_json::json!({"profile": "production", "jobs": 1, "server_major": 15,
                "recovered_to": at, "recovery_target": {"kind": "time", "value": at, "random": true}});
        }
        serde_json::from_value(v).unwrap()
    }

    /// Issue 32: `least-proven` with `keep_runs = 2` and 4 backups never proved backup 1
    /// (its proof lived in pruned runs). Proofs outlive the runs, and leave with the backup.
    #[tokio::test]
    async fn proofs_outlive_pruned_runs_and_leave_with_their_backup() {
        let dir = tempfile::tempdir().unwrap();
        let h = store(&dir).await;
        for (i, key) in ["b1", "b2", "b3", "b4"].iter().enumerate() {
            h.record(&passing_run(&format!("r{i}"), key, &format!("2026-12-0{}T00:00:00.000Z", i + 1), i == 0))
                .await
                .unwrap();
        }
        h.record(&passing_run("r9", "b1", "2026-12-09T00:00:00.000Z", true)).await.unwrap();
        assert!(h.prune(2).await.unwrap() >= 3);
        let proofs = h.proofs("orders").await.unwrap();
        assert_eq!(proofs.len(), 4, "{proofs:?}");
        let b1 = &proofs["b1"];
        assert_eq!(b1.last_run_id, "r9");
        assert_eq!(b1.points_proven, 2, "two points in time proven from b1");
        assert_eq!(b1.consistent_at.as_deref(), Some("2026-12-01T00:00:00.000Z"));
        assert_eq!(proofs["b2"].last_passed, humantime::parse_rfc3339("2026-12-02T00:00:00Z").unwrap());
        // A failed run proves nothing.
        let mut failed = passing_run("r10", "b5", "2026-12-10T00:00:00.000Z", false);
        failed.result = crate::report::RunResult::Failed;
        h.record(&failed).await.unwrap();
        assert!(!h.proofs("orders").await.unwrap().contains_key("b5"));
        // b2 left the store: its proof goes; the others stay.
        let listed: Vec<String> = ["b1", "b3", "b4"].iter().map(|s| s.to_string()).collect();
        assert_eq!(h.keep_proofs_of("orders", &listed).await.unwrap(), 1);
        let keys: std::collections::BTreeSet<String> = h.proofs("orders").await.unwrap().into_keys().collect();
        assert_eq!(keys.into_iter().collect::<Vec<_>>(), ["b1", "b3", "b4"]);
    }

    /// Issue 32: proving an older backup moved drcheck_backup_timestamp_seconds back (and
    /// fired the RPO alert). What the runs saw only moves forward.
    #[tokio::test]
    async fn freshness_only_moves_forward() {
        let dir = tempfile::tempdir().unwrap();
        let h = store(&dir).await;
        let mut newer = passing_run("r1", "b2", "2026-12-02T00:00:00.000Z", false);
        newer.backup.as_mut().unwrap().created_at = Some("2026-12-02T00:00:00.000Z".into());
        newer.rpo.recoverable_point = Some("2026-12-02T00:05:00.000Z".into());
        newer.rpo.measured_at = Some("2026-12-02T00:06:00.000Z".into());
        h.record(&newer).await.unwrap();
        let mut older = passing_run("r2", "b1", "2026-12-03T00:00:00.000Z", true);
        older.backup.as_mut().unwrap().created_at = Some("2026-12-01T00:00:00.000Z".into());
        older.rpo.measured_at = Some("2026-12-03T00:01:00.000Z".into());
        h.record(&older).await.unwrap();
        let f = h.freshness("orders").await.unwrap();
        assert_eq!(f.backup_at.as_deref(), Some("2026-12-02T00:00:00.000Z"), "never back to the older backup");
        assert_eq!(f.recoverable_point.as_deref(), Some("2026-12-02T00:05:00.000Z"));
        assert_eq!(f.measured_at.as_deref(), Some("2026-12-03T00:01:00.000Z"), "the later listing");
        assert_eq!(h.freshness("other").await.unwrap(), Freshness::default());
    }

    #[tokio::test]
    async fn a_lease_held_by_a_crashed_drcheck_on_this_machine_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let h = store(&dir).await;
        let ttl = Duration::from_secs(3600);
        let here = drcheck_restore::leftovers::machine_id().expect("this machine has /proc");
        let me = drcheck_restore::leftovers::Owner::current(None);
        let live = lease_holder_name("verify");
        let next = lease_holder_name("daemon");

        // A running holder (this test) keeps its lease.
        assert!(h.acquire_lease("a", &live, ttl).await.unwrap());
        assert!(!h.acquire_lease("a", &next, ttl).await.unwrap(), "taken from a running holder");

        // Crashed here: its pid is gone, or reused by a process started at another time.
        for (target, crashed) in [
            ("b", holder_name("verify", dead_pid(), 1, Some(&here))),
            ("c", holder_name("verify", me.pid, me.start + 1, Some(&here))),
        ] {
            assert!(h.acquire_lease(target, &crashed, ttl).await.unwrap());
            assert!(h.acquire_lease(target, &next, ttl).await.unwrap(), "not taken over from {crashed}");
            assert_eq!(h.lease_holder(target).await.unwrap().as_deref(), Some(next.as_str()));
        }

        // Elsewhere (another machine or container), or saying nothing: waited out.
        for (target, other) in [
            ("d", holder_name("verify", dead_pid(), 1, Some("00000000-1"))),
            ("e", holder_name("verify", dead_pid(), 1, None)),
            ("f", "drcheck verify pid 1 (abcdef12)".to_string()),
        ] {
            assert!(h.acquire_lease(target, &other, ttl).await.unwrap());
            assert!(!h.acquire_lease(target, &next, ttl).await.unwrap(), "taken over from {other}");
        }
    }
}
