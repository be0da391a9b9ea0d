//! One measurement record per run: the instants a verification observes, each taken
//! once, and every objective computed from them here — so RTO, RPO and the `as_of`
//! cut-off always mean the same thing and use the right clock.
//!
//! - **RTO**: from the start of the fetch until the restored database accepts
//!   connections and is consistent.
//! - **RPO**: ages are taken at *listing time* (when drcheck learned which backups
//!   exist), never after the restore: the backup's age is listing time − its
//!   consistency time (a dump's own start time, a base backup's `backup_label`, the
//!   tool's catalog stop); where WAL was replayed, the recoverable point's age is listing
//!   time − the last replayed commit, and that is what the RPO judges. An object's
//!   upload time is reported (`backup.uploaded_at`), never used as the data's time; when
//!   nothing records the data's time the backup's age is not measured — unless even the
//!   upload is already older than the RPO, which is then missed for certain.
//! - **as_of cut-off**: rows written at or before the consistency time (or the last
//!   replayed commit) must be in the copy; later ones need not be.

pub use drcheck_restore::request::Consistency;
use std::time::{Duration, Instant, SystemTime};

#[derive(Debug, Clone, Default)]
pub struct Measurements {
    /// When the store's listing or the tool's catalog answered.
    pub listed_at: Option<SystemTime>,
    /// The chosen object's last-modified time (reported only).
    pub uploaded_at: Option<SystemTime>,
    /// When the backup's data is consistent as of.
    pub consistent: Option<Consistency>,
    /// The RTO clock's start: the first request of the fetch.
    pub fetch_started: Option<Instant>,
    /// From `fetch_started`: the first byte handed to the restore, the last byte
    /// received, the restored database answering (consistent, out of recovery).
    pub first_byte: Option<Duration>,
    pub fetch_ended: Option<Duration>,
    pub ready: Option<Duration>,
    /// After WAL replay: the last replayed commit.
    pub recovered_to: Option<SystemTime>,
}

impl Measurements {
    /// The measured RTO.
    pub fn rto(&self) -> Option<Duration> {
        self.ready
    }

    /// The backup's data age at listing time.
    pub fn backup_age(&self) -> Option<Duration> {
        Some(self.listed_at?.duration_since(self.consistent?.at).unwrap_or_default())
    }

    /// What a restore right now would lose: listing time − the last replayed commit.
    pub fn recoverable_point_age(&self) -> Option<Duration> {
        Some(self.listed_at?.duration_since(self.recovered_to?).unwrap_or_default())
    }

    /// Whether the RPO is met: judged on the recoverable point where WAL was replayed,
    /// else on the backup's age; `None` when neither is known — except that an upload
    /// older than the RPO means data older still: missed.
    pub fn rpo_met(&self, rpo: Duration) -> Option<bool> {
        if let Some(age) = self.recoverable_point_age().or_else(|| self.backup_age()) {
            return Some(age <= rpo);
        }
        let uploaded_age = self.listed_at?.duration_since(self.uploaded_at?).unwrap_or_default();
        (uploaded_age > rpo).then_some(false)
    }

    /// The `as_of` cut-off: rows written at or before it must be in the copy.
    pub fn as_of_cutoff(&self) -> Option<SystemTime> {
        self.recovered_to.or(self.consistent.map(|c| c.at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    /// Issue 22: a dump taken at 0, uploaded at 600 (rows written in between are on the
    /// primary, rightly not in the dump): the cut-off is the dump's time, not the upload.
    #[test]
    fn the_cut_off_is_the_backups_own_time_not_its_upload() {
        let m = Measurements {
            listed_at: Some(t(900)),
            uploaded_at: Some(t(600)),
            consistent: Some(Consistency { at: t(0), source: "dump header" }),
            ..Default::default()
        };
        assert_eq!(m.as_of_cutoff(), Some(t(0)));
        assert_eq!(m.backup_age(), Some(Duration::from_secs(900)));
    }

    /// Issue 22: the recoverable point's age is taken at listing time, so a long restore
    /// does not eat into the RPO.
    #[test]
    fn the_recoverable_points_age_excludes_the_restore() {
        let m = Measurements {
            listed_at: Some(t(1000)),
            recovered_to: Some(t(900)),
            consistent: Some(Consistency { at: t(0), source: "catalog (backup stop)" }),
            ready: Some(Duration::from_secs(3600)),
            ..Default::default()
        };
        assert_eq!(m.recoverable_point_age(), Some(Duration::from_secs(100)));
        assert_eq!(m.rpo_met(Duration::from_secs(15 * 60)), Some(true), "an hour of restore is not data lost");
        assert_eq!(m.as_of_cutoff(), Some(t(900)), "replayed rows count");
    }

    #[test]
    fn without_a_recorded_time_the_age_is_unknown_unless_the_upload_already_misses() {
        let m = Measurements { listed_at: Some(t(1000)), uploaded_at: Some(t(900)), ..Default::default() };
        assert_eq!(m.backup_age(), None);
        assert_eq!(m.rpo_met(Duration::from_secs(3600)), None, "not measured is not met");
        assert_eq!(m.rpo_met(Duration::from_secs(60)), Some(false), "older than the upload is older still");
        assert_eq!(m.as_of_cutoff(), None);
    }
}
