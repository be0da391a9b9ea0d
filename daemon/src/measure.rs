//! One measurement record per run: the instants a verification observes, each taken
//! once, and every objective computed from them here — so RTO, RPO and the `as_of`
//! cut-off always mean the same thing and use the right clock.
//!
//! - **RTO**: from the start of the fetch until the restored database accepts
//!   connections and is consistent.
//! - **RPO** is what a restore *now* would lose, judged at *listing time* (when drcheck
//!   learned what exists), never after the restore: listing time − the newest
//!   recoverable point. With a WAL archive that point is the archive's newest replayable
//!   commit (read from the WAL before the restore, or the last commit a replay to the
//!   archive's end reached); without one it is the newest backup's consistency time (a
//!   dump's own start, a base backup's `backup_label`, the tool's catalog stop). The point
//!   a run *proved* — a fixed or random T, an older backup — is reported beside it
//!   (`rpo.proven_point`) and never judged against the RPO. An object's upload time is
//!   reported (`backup.uploaded_at`), never used as the data's time; when nothing records
//!   the data's time the RPO is not measured — unless even the newest upload is already
//!   older than the RPO, which is then missed for certain.
//! - **as_of cut-off**: rows written at or before the consistency time (or the last
//!   replayed commit) must be in the copy; later ones need not be.

pub(crate) use drcheck_restore::Consistency;
use std::time::{Duration, Instant, SystemTime};

#[derive(Debug, Clone, Default)]
pub(crate) struct Measurements {
    /// When the store's listing or the tool's catalog answered.
    pub listed_at: Option<SystemTime>,
    /// The chosen object's last-modified time (reported only).
    pub uploaded_at: Option<SystemTime>,
    /// When the chosen backup's data is consistent as of.
    pub consistent: Option<Consistency>,
    /// The target keeps a WAL archive (`wal_prefix`, a backup tool's repository): the RPO
    /// is the archive's, not a backup's.
    pub has_archive: bool,
    /// The archive's newest replayable commit, read from the WAL (time targets).
    pub archive_reach: Option<SystemTime>,
    /// The run replays to the archive's end (the latest point): its last replayed
    /// commit is the archive's reach.
    pub replays_to_end: bool,
    /// The chosen backup is the newest restorable one.
    pub chosen_is_newest: bool,
    /// Without an archive, when the chosen backup is not the newest: the newest's
    /// consistency time, where its catalog records it, and its upload time (a bound).
    pub newest_consistent: Option<SystemTime>,
    pub newest_uploaded_at: Option<SystemTime>,
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
    pub(crate) fn rto(&self) -> Option<Duration> {
        self.ready
    }

    /// The chosen backup's data age at listing time (reported; not what the RPO judges).
    pub(crate) fn backup_age(&self) -> Option<Duration> {
        Some(self.listed_at?.duration_since(self.consistent?.at).unwrap_or_default())
    }

    /// The point this run proved: where replay stopped, else the chosen backup's own time.
    pub(crate) fn proven_point(&self) -> Option<SystemTime> {
        self.recovered_to.or(self.consistent.map(|c| c.at))
    }

    /// The newest recoverable point known at listing time: the archive's reach where
    /// there is an archive, else the newest backup's consistency time.
    pub(crate) fn recoverable_point(&self) -> Option<SystemTime> {
        if self.has_archive {
            let replayed = self.recovered_to.filter(|_| self.replays_to_end);
            return match (self.archive_reach, replayed) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
        if self.chosen_is_newest { self.proven_point() } else { self.newest_consistent }
    }

    /// What a restore right now would lose: listing time − the recoverable point.
    pub(crate) fn recoverable_point_age(&self) -> Option<Duration> {
        Some(self.listed_at?.duration_since(self.recoverable_point()?).unwrap_or_default())
    }

    /// Whether the RPO is met: judged on the recoverable point's age; `None` when it is
    /// unknown — except that, without an archive, a newest upload older than the RPO means
    /// data older still: missed.
    pub(crate) fn rpo_met(&self, rpo: Duration) -> Option<bool> {
        if let Some(age) = self.recoverable_point_age() {
            return Some(age <= rpo);
        }
        if self.has_archive {
            return None;
        }
        let newest_upload = if self.chosen_is_newest { self.uploaded_at } else { self.newest_uploaded_at };
        let uploaded_age = self.listed_at?.duration_since(newest_upload?).unwrap_or_default();
        (uploaded_age > rpo).then_some(false)
    }

    /// The `as_of` cut-off: rows written at or before it must be in the copy.
    pub(crate) fn as_of_cutoff(&self) -> Option<SystemTime> {
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
            chosen_is_newest: true,
            ..Default::default()
        };
        assert_eq!(m.as_of_cutoff(), Some(t(0)));
        assert_eq!(m.backup_age(), Some(Duration::from_secs(900)));
        assert_eq!(m.recoverable_point_age(), Some(Duration::from_secs(900)));
    }

    /// Issue 22: the recoverable point's age is taken at listing time, so a long restore
    /// does not eat into the RPO.
    #[test]
    fn the_recoverable_points_age_excludes_the_restore() {
        let m = Measurements {
            listed_at: Some(t(1000)),
            recovered_to: Some(t(900)),
            has_archive: true,
            replays_to_end: true,
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
        let m = Measurements {
            listed_at: Some(t(1000)),
            uploaded_at: Some(t(900)),
            chosen_is_newest: true,
            ..Default::default()
        };
        assert_eq!(m.backup_age(), None);
        assert_eq!(m.rpo_met(Duration::from_secs(3600)), None, "not measured is not met");
        assert_eq!(m.rpo_met(Duration::from_secs(60)), Some(false), "older than the upload is older still");
        assert_eq!(m.as_of_cutoff(), None);
    }

    /// Issue 32: a point in time T 21 minutes back, with a 15-minute RPO and an archive
    /// current to 2 minutes ago, failed on T's age. The RPO is the archive's; T is what
    /// the run proved.
    #[test]
    fn a_point_in_time_is_proven_and_the_rpo_is_the_archives() {
        let m = Measurements {
            listed_at: Some(t(3600)),
            has_archive: true,
            archive_reach: Some(t(3600 - 120)),
            recovered_to: Some(t(3600 - 21 * 60)),
            consistent: Some(Consistency { at: t(0), source: "catalog (backup stop)" }),
            ..Default::default()
        };
        assert_eq!(m.recoverable_point_age(), Some(Duration::from_secs(120)));
        assert_eq!(m.rpo_met(Duration::from_secs(15 * 60)), Some(true));
        assert_eq!(m.proven_point(), Some(t(3600 - 21 * 60)));
        // A stalled archive misses it, whatever the run proved.
        let stalled = Measurements { archive_reach: Some(t(0)), ..m.clone() };
        assert_eq!(stalled.rpo_met(Duration::from_secs(15 * 60)), Some(false));
        // An archive whose reach could not be read is not judged by a base backup's age.
        let unknown = Measurements { archive_reach: None, ..m };
        assert_eq!(unknown.rpo_met(Duration::from_secs(15 * 60)), None);
    }

    /// Issue 32: `least-proven` proving an older backup of a target without an archive is
    /// judged on the newest backup, not on the one it proved.
    #[test]
    fn an_older_backup_proven_leaves_the_rpo_to_the_newest() {
        let m = Measurements {
            listed_at: Some(t(86_400 * 3)),
            consistent: Some(Consistency { at: t(0), source: "dump header" }),
            chosen_is_newest: false,
            newest_consistent: Some(t(86_400 * 3 - 600)),
            ..Default::default()
        };
        assert_eq!(m.rpo_met(Duration::from_secs(3600)), Some(true));
        assert_eq!(m.backup_age(), Some(Duration::from_secs(86_400 * 3)), "reported, not judged");
        // Objects record no time for the newest: unknown, unless its upload already misses.
        let objects = Measurements { newest_consistent: None, newest_uploaded_at: Some(t(86_400 * 3 - 600)), ..m };
        assert_eq!(objects.rpo_met(Duration::from_secs(3600)), None);
        assert_eq!(objects.rpo_met(Duration::from_secs(60)), Some(false));
    }
}
