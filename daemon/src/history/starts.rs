//! Runs from their start (issue 48): a row when a run starts, so that one killed
//! outright is recorded `aborted` by the next under the id its log printed, and a
//! triggered run that never started is kept `skipped` under the id the API answered.

use super::{History, ts};
use crate::run_report::{RunReport, RunResult};
use serde::Serialize;
use std::time::SystemTime;

/// A run not (or not yet) in `runs`: `running` (started, not recorded — alive, or
/// killed and not yet found) or `skipped` (triggered, never started: `reason`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RunStart {
    pub run_id: String,
    pub target: String,
    pub state: String,
    pub started_at: String,
    /// Who ran it (`drcheck verify pid …`, `drcheck daemon pid …`).
    pub holder: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

pub(crate) const RUNNING: &str = "running";
pub(crate) const SKIPPED: &str = "skipped";

impl History {
    /// Records that run `run_id` of `target` started, held by `holder` (its lease taken).
    pub(crate) async fn run_started(&self, run_id: &str, target: &str, holder: &str) -> anyhow::Result<()> {
        sqlx::query(
            "insert into run_starts (run_id, target, holder, state, started_at) values ($1, $2, $3, $4, $5)
             on conflict (run_id) do update set state = excluded.state, started_at = excluded.started_at",
        )
        .bind(run_id)
        .bind(target)
        .bind(holder)
        .bind(RUNNING)
        .bind(ts(SystemTime::now()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records that run `run_id` of `target` (triggered, its id given out) did not run.
    pub(crate) async fn run_skipped(
        &self,
        run_id: &str,
        target: &str,
        holder: &str,
        reason: &str,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "insert into run_starts (run_id, target, holder, state, started_at, reason) values ($1, $2, $3, $4, $5, $6)
             on conflict (run_id) do update set state = excluded.state, reason = excluded.reason",
        )
        .bind(run_id)
        .bind(target)
        .bind(holder)
        .bind(SKIPPED)
        .bind(ts(SystemTime::now()))
        .bind(reason)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Forgets the start of `run_id`: it turned out not to be a run (a usage mistake).
    pub(crate) async fn run_start_dropped(&self, run_id: &str) -> anyhow::Result<()> {
        sqlx::query("delete from run_starts where run_id = $1").bind(run_id).execute(&self.pool).await?;
        Ok(())
    }

    /// Runs of `target` (or all) that are not in `runs`, newest first.
    pub(crate) async fn run_starts(&self, target: Option<&str>, limit: u32) -> anyhow::Result<Vec<RunStart>> {
        let rows: Vec<(String, String, String, String, String, Option<String>)> = sqlx::query_as(
            "select run_id, target, state, started_at, holder, reason from run_starts
              where (cast($1 as text) is null or target = $1) order by started_at desc, run_id desc limit $2",
        )
        .bind(target)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(run_id, target, state, started_at, holder, reason)| RunStart {
                run_id,
                target,
                state,
                started_at,
                holder,
                reason,
            })
            .collect())
    }

    /// The start of `run_id` when it is not (yet) in `runs`.
    pub(crate) async fn run_start(&self, run_id: &str) -> anyhow::Result<Option<RunStart>> {
        let rows: Vec<(String, String, String, String, String, Option<String>)> = sqlx::query_as(
            "select run_id, target, state, started_at, holder, reason from run_starts where run_id = $1",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().next().map(|(run_id, target, state, started_at, holder, reason)| RunStart {
            run_id,
            target,
            state,
            started_at,
            holder,
            reason,
        }))
    }

    /// Called by the run `by` that just took `target`'s lease: every other run of the
    /// target still `running` died without recording itself (nobody runs a target
    /// without its lease), and is recorded `aborted` under its own id and start. Returns
    /// the reports recorded.
    pub(crate) async fn abort_dead_runs(
        &self,
        target: &drcheck_config::TargetConfig,
        by: &str,
    ) -> anyhow::Result<Vec<RunReport>> {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "select run_id, holder, started_at from run_starts where target = $1 and state = $2 and run_id <> $3",
        )
        .bind(&target.name)
        .bind(RUNNING)
        .bind(by)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::new();
        for (run_id, holder, started_at) in rows {
            let mut r = crate::run_report::died_report(target, &holder);
            r.run_id = run_id;
            r.started_at = started_at;
            if let Some(e) = r.error.as_mut() {
                e.message = format!(
                    "{holder} died without recording its run (its process is gone; found when run {by} took its lease)"
                );
            }
            debug_assert_eq!(r.result, RunResult::Aborted);
            self.record(&r).await?;
            out.push(r);
        }
        Ok(out)
    }

    /// Skipped runs beyond the newest `keep` of each target are removed (with `prune`).
    pub(crate) async fn prune_starts(&self, keep: u32) -> anyhow::Result<()> {
        sqlx::query(
            "delete from run_starts where state = $2 and run_id in (
               select run_id from (select run_id, row_number() over (partition by target order by started_at desc) as n
                                     from run_starts where state = $2) as ranked
                where ranked.n > $1)",
        )
        .bind(i64::from(keep))
        .bind(SKIPPED)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_killed_run_is_aborted_under_its_own_id_and_a_skipped_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("h.db").display());
        let h = History::open(&drcheck_config::Secret::new(url)).await.unwrap();
        let target = drcheck_config::parse(
            "[storage.s]\nkind = \"filesystem\"\npath = \"/tmp\"\n[[target]]\nname = \"t\"\nstorage = \"s\"\nprefix = \"p/\"\nrto = \"1h\"\nrpo = \"1d\"\n",
            std::path::Path::new("c.toml"),
        )
        .unwrap()
        .targets[0]
            .clone();
        h.run_started("dead-1", "t", "drcheck verify pid 1 on m").await.unwrap();
        assert_eq!(h.run_start("dead-1").await.unwrap().unwrap().state, RUNNING);
        h.run_started("next-2", "t", "drcheck daemon pid 2 on m").await.unwrap();
        let aborted = h.abort_dead_runs(&target, "next-2").await.unwrap();
        assert_eq!(aborted.len(), 1);
        let r = h.run("dead-1").await.unwrap().expect("recorded under the id it started with");
        assert_eq!(r.result, RunResult::Aborted);
        assert!(r.error.as_ref().unwrap().message.contains("found when run next-2 took its lease"));
        assert!(h.run_start("dead-1").await.unwrap().is_none(), "its start is replaced by its record");
        assert!(h.abort_dead_runs(&target, "next-2").await.unwrap().is_empty(), "the run itself is not dead");
        // The dead run was alive after all (its lease released by hand) and records
        // its own report: it replaces the aborted record, no conflict.
        let mut late = r.clone();
        late.result = RunResult::Passed;
        late.error = None;
        h.record(&late).await.unwrap();
        assert_eq!(h.run("dead-1").await.unwrap().unwrap().result, RunResult::Passed);
        // A triggered run that never started: kept, with why.
        h.run_skipped("trig-3", "t", "drcheck daemon pid 2 on m", "another instance is verifying this target")
            .await
            .unwrap();
        let s = h.run_start("trig-3").await.unwrap().unwrap();
        assert_eq!(
            (s.state.as_str(), s.reason.as_deref()),
            (SKIPPED, Some("another instance is verifying this target"))
        );
        assert!(h.abort_dead_runs(&target, "next-2").await.unwrap().is_empty(), "a skipped run is not running");
    }
}
