//! Drill runs: each runbook's journal, and how often each outcome came.

use super::History;

impl History {
    /// Records a finished drill (once: a drill id is recorded one time).
    pub(crate) async fn record_drill(&self, j: &drcheck_runbooks::Journal) -> anyhow::Result<()> {
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
    pub(crate) async fn drill_counts(&self, runbook: &str) -> anyhow::Result<Vec<(String, i64)>> {
        Ok(sqlx::query_as("select result, count(*) from drill_runs where runbook = $1 group by result")
            .bind(runbook)
            .fetch_all(&self.pool)
            .await?)
    }
}
