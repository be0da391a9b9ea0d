//! Acknowledgements (issue 48): what an operator decided about a target's backups —
//! a proven backup deleted on purpose, WAL segments known lost — with who, when and why.
//! Recorded once, never removed; the evidence report lists them.

use super::{History, ts};
use std::time::SystemTime;

/// One acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Ack {
    pub id: String,
    pub target: String,
    /// `forgotten_backup` or `wal_gap`.
    pub kind: String,
    /// The backup's key, or the gap's first segment.
    pub subject: String,
    /// A gap's last segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_to: Option<String>,
    pub reason: String,
    pub by: String,
    pub at: String,
}

pub(crate) const FORGOTTEN_BACKUP: &str = "forgotten_backup";
pub(crate) const WAL_GAP: &str = "wal_gap";

impl Ack {
    /// Whether WAL segment `segment` lies in this acknowledged gap (same timeline).
    pub(crate) fn covers_segment(&self, segment: &str) -> bool {
        let Some(to) = &self.subject_to else { return false };
        self.kind == WAL_GAP
            && segment.len() == 24
            && segment[..8] == self.subject[..8.min(self.subject.len())]
            && segment >= self.subject.as_str()
            && segment <= to.as_str()
    }

    /// The acknowledgement said in a finding.
    pub(crate) fn describe(&self) -> String {
        format!("acknowledged by {} at {}: {}", self.by, self.at, self.reason)
    }
}

/// A row: id, target, kind, subject, subject_to, reason, by, at.
type AckRow = (String, String, String, String, Option<String>, String, String, String);

fn ack_of(r: AckRow) -> Ack {
    Ack { id: r.0, target: r.1, kind: r.2, subject: r.3, subject_to: r.4, reason: r.5, by: r.6, at: r.7 }
}

impl History {
    /// Records an acknowledgement (and, for a forgotten backup, drops its proof and pins
    /// in the same transaction); returns it.
    pub(crate) async fn acknowledge(
        &self,
        target: &str,
        kind: &str,
        subject: &str,
        subject_to: Option<&str>,
        reason: &str,
        by: &str,
    ) -> anyhow::Result<Ack> {
        let ack = Ack {
            id: crate::ids::new_run_id(),
            target: target.into(),
            kind: kind.into(),
            subject: subject.into(),
            subject_to: subject_to.map(str::to_string),
            reason: reason.into(),
            by: by.into(),
            at: ts(SystemTime::now()),
        };
        let mut tx = self.pool.begin().await?;
        if kind == FORGOTTEN_BACKUP {
            let gone = sqlx::query("delete from backup_proofs where target = $1 and backup_key = $2")
                .bind(target)
                .bind(subject)
                .execute(&mut *tx)
                .await?;
            if gone.rows_affected() == 0 {
                anyhow::bail!("{subject} is not a proven backup of {target}: there is no proof to forget");
            }
        }
        sqlx::query(
            "insert into acknowledgements (id, target, kind, subject, subject_to, reason, acknowledged_by, acknowledged_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&ack.id)
        .bind(&ack.target)
        .bind(&ack.kind)
        .bind(&ack.subject)
        .bind(ack.subject_to.clone())
        .bind(&ack.reason)
        .bind(&ack.by)
        .bind(&ack.at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(ack)
    }

    /// Every acknowledgement of `target` of `kind`, oldest first.
    pub(crate) async fn acks(&self, target: &str, kind: &str) -> anyhow::Result<Vec<Ack>> {
        let rows: Vec<AckRow> = sqlx::query_as(
            "select id, target, kind, subject, subject_to, reason, acknowledged_by, acknowledged_at
               from acknowledgements where target = $1 and kind = $2 order by acknowledged_at",
        )
        .bind(target)
        .bind(kind)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(ack_of).collect())
    }

    /// The acknowledgements of `target` made in `[from, to)` (RFC 3339), oldest first.
    pub(crate) async fn acks_between(&self, target: &str, from: &str, to: &str) -> anyhow::Result<Vec<Ack>> {
        let rows: Vec<AckRow> = sqlx::query_as(
            "select id, target, kind, subject, subject_to, reason, acknowledged_by, acknowledged_at
               from acknowledgements where target = $1 and acknowledged_at >= $2 and acknowledged_at < $3
              order by acknowledged_at",
        )
        .bind(target)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(ack_of).collect())
    }
}

/// Who is acknowledging, on this machine: the login name drcheck runs as.
pub(crate) fn who_here() -> String {
    std::env::var("USER")
        .ok()
        .or_else(|| nix::unistd::User::from_uid(nix::unistd::Uid::current()).ok().flatten().map(|u| u.name))
        .unwrap_or_else(|| format!("uid {}", nix::unistd::Uid::current()))
}

/// What is wrong with a WAL gap's bounds.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GapError {
    #[error("{0:?} is not a WAL segment name (24 upper-case hex digits, e.g. 000000010000000000000042)")]
    NotASegment(String),
    #[error("{0} and {1} are of different timelines")]
    Timelines(String, String),
    #[error("{0} comes after {1}")]
    Backwards(String, String),
}

/// Checks a WAL gap's bounds: two segment names of one timeline, in order.
pub(crate) fn gap_bounds(from: &str, to: &str) -> Result<(), GapError> {
    let is_segment = |s: &str| s.len() == 24 && s.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase());
    if let Some(s) = [from, to].into_iter().find(|s| !is_segment(s)) {
        return Err(GapError::NotASegment(s.into()));
    }
    if from[..8] != to[..8] {
        return Err(GapError::Timelines(from.into(), to.into()));
    }
    if from > to {
        return Err(GapError::Backwards(from.into(), to.into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store(dir: &tempfile::TempDir) -> History {
        let url = format!("sqlite://{}", dir.path().join("h.db").display());
        History::open(&drcheck_config::Secret::new(url)).await.unwrap()
    }

    #[test]
    fn a_gap_covers_its_own_segments_only() {
        let gap = Ack {
            id: "a".into(),
            target: "t".into(),
            kind: WAL_GAP.into(),
            subject: "000000010000000000000010".into(),
            subject_to: Some("000000010000000000000012".into()),
            reason: "lost in the migration".into(),
            by: "ada".into(),
            at: "2026-12-07T00:00:00.000Z".into(),
        };
        assert!(gap.covers_segment("000000010000000000000010"));
        assert!(gap.covers_segment("000000010000000000000012"));
        assert!(!gap.covers_segment("000000010000000000000013"));
        assert!(!gap.covers_segment("000000020000000000000011"), "another timeline");
        assert!(gap_bounds("000000010000000000000010", "000000010000000000000012").is_ok());
        assert!(matches!(
            gap_bounds("000000010000000000000012", "000000010000000000000010"),
            Err(GapError::Backwards(..))
        ));
        assert_eq!(gap_bounds("x", "000000010000000000000010"), Err(GapError::NotASegment("x".into())));
        assert!(matches!(
            gap_bounds("000000010000000000000010", "000000020000000000000012"),
            Err(GapError::Timelines(..))
        ));
    }

    /// A proven backup deleted on purpose: its proof goes, the decision stays — who, when,
    /// why. A backup never proven has no proof to forget.
    #[tokio::test]
    async fn forgetting_a_proof_is_recorded_never_silent() {
        let dir = tempfile::tempdir().unwrap();
        let h = store(&dir).await;
        let run = serde_json::json!({
            "run_id": "r1", "target": "orders", "result": "passed",
            "started_at": "2026-12-01T00:00:00.000Z", "finished_at": "2026-12-01T00:00:01.000Z",
            "backup": {"key": "orders/a.dump", "size_bytes": 1, "created_at": null, "format": "custom"},
            "phases": [], "validators": [],
            "rto": {"target_seconds": 60.0, "measured_seconds": 1.0, "met": true},
            "rpo": {"target_seconds": 60.0, "backup_age_seconds": null, "met": null}
        });
        h.record(&serde_json::from_value(run).unwrap()).await.unwrap();
        assert!(h.proofs("orders").await.unwrap().contains_key("orders/a.dump"));
        let ack = h
            .acknowledge("orders", FORGOTTEN_BACKUP, "orders/a.dump", None, "deleted: it held a bad migration", "ada")
            .await
            .unwrap();
        assert!(!h.proofs("orders").await.unwrap().contains_key("orders/a.dump"));
        let listed = h.acks("orders", FORGOTTEN_BACKUP).await.unwrap();
        assert_eq!(listed, vec![ack.clone()]);
        assert!(ack.describe().contains("acknowledged by ada") && ack.describe().contains("bad migration"));
        let e = h.acknowledge("orders", FORGOTTEN_BACKUP, "orders/never.dump", None, "x", "ada").await.unwrap_err();
        assert!(e.to_string().contains("not a proven backup"), "{e}");
        assert_eq!(h.acks("orders", FORGOTTEN_BACKUP).await.unwrap().len(), 1, "nothing recorded for it");
        let all = h.acks_between("orders", "2000-01-01T00:00:00Z", "2100-01-01T00:00:00Z").await.unwrap();
        assert_eq!(all.len(), 1);
    }
}
