//! The history store: every run, its phases and validator results, through sqlx in
//! SQLite (WAL mode, so a crash at any moment leaves it consistent). A run and its
//! parts are written in one transaction.

use crate::report::RunReport;
use anyhow::Context as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use std::str::FromStr;
use std::time::Duration;

pub struct History {
    pool: SqlitePool,
}

impl History {
    /// Opens (creating if needed) the store at `url` and applies migrations.
    /// `url` is shown in errors only redacted.
    pub async fn open(url: &drcheck_config::Secret) -> anyhow::Result<History> {
        let shown = url.redacted();
        let raw = url.expose();
        if !raw.starts_with("sqlite:") {
            anyhow::bail!("history store {shown}: only sqlite:// URLs are supported so far");
        }
        let opts = SqliteConnectOptions::from_str(raw)
            .with_context(|| format!("history store {shown}: not a valid sqlite URL"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        if let Some(parent) = opts.get_filename().parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("history store {shown}: cannot create {}", parent.display()))?;
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts)
            .await
            .with_context(|| format!("cannot open history store {shown}"))?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .with_context(|| format!("history store {shown}: migrations failed"))?;
        Ok(History { pool })
    }

    /// Records a run with its phases and validator results, atomically.
    pub async fn record(&self, r: &RunReport) -> anyhow::Result<()> {
        let json = serde_json::to_string(r)?;
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "insert into runs (run_id, target, result, started_at, finished_at, backup_key, backup_size_bytes,
                 backup_created_at, backup_format, rto_target_seconds, rto_measured_seconds, rto_met,
                 rpo_target_seconds, rpo_backup_age_seconds, rpo_met, error_stage, error_message, report_json)
             values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&r.run_id)
        .bind(&r.target)
        .bind(r.result.as_str())
        .bind(&r.started_at)
        .bind(&r.finished_at)
        .bind(r.backup.as_ref().map(|b| b.key.clone()))
        .bind(r.backup.as_ref().map(|b| b.size_bytes as i64))
        .bind(r.backup.as_ref().map(|b| b.created_at.clone()))
        .bind(r.backup.as_ref().and_then(|b| b.format.clone()))
        .bind(r.rto.target_seconds)
        .bind(r.rto.measured_seconds)
        .bind(r.rto.met)
        .bind(r.rpo.target_seconds)
        .bind(r.rpo.backup_age_seconds)
        .bind(r.rpo.met)
        .bind(r.error.as_ref().map(|e| e.stage.clone()))
        .bind(r.error.as_ref().map(|e| e.message.clone()))
        .bind(json)
        .execute(&mut *tx)
        .await?;
        for p in &r.phases {
            sqlx::query("insert into run_phases (run_id, name, seconds) values (?, ?, ?)")
                .bind(&r.run_id)
                .bind(&p.name)
                .bind(p.seconds)
                .execute(&mut *tx)
                .await?;
        }
        for v in &r.validators {
            sqlx::query("insert into run_validators (run_id, name, status, detail) values (?, ?, ?, ?)")
                .bind(&r.run_id)
                .bind(&v.name)
                .bind(&v.status)
                .bind(&v.detail)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The most recent runs, newest first, optionally of one target.
    pub async fn recent(&self, target: Option<&str>, limit: u32) -> anyhow::Result<Vec<RunReport>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "select report_json from runs where (?1 is null or target = ?1)
              order by started_at desc, run_id desc limit ?2",
        )
        .bind(target)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(json,)| serde_json::from_str(&json).context("a history row holds an unreadable report"))
            .collect()
    }

    pub async fn close(self) {
        self.pool.close().await;
    }
}
