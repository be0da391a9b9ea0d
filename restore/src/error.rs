//! Typed errors that say which stage failed and whether the backup or the world is to blame.

use std::fmt;

/// The pipeline stage an error belongs to; it appears in reports as `error.stage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Select,
    Fetch,
    Sandbox,
    Restore,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Select => "select",
            Stage::Fetch => "fetch",
            Stage::Sandbox => "sandbox",
            Stage::Restore => "restore",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a file or a tool's answer holds that is not what drcheck reads — said in one
/// place per format or tool, for the caller to blame (a backup's file: the backup; a
/// tool's answer: the world) and to place (which key, which tool).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

impl From<String> for Malformed {
    fn from(s: String) -> Self {
        Malformed(s)
    }
}

impl From<&str> for Malformed {
    fn from(s: &str) -> Self {
        Malformed(s.to_string())
    }
}

/// Who a failure is for — decided where the failure happens, from what the failing
/// party says in its own terms (a signal, an exit code its tool documents, a SQLSTATE,
/// the file system's free space), never from words in a message afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The backup: corrupt, truncated, missing parts in a consistent listing — exit 1.
    Backup,
    /// The world or drcheck's own limits: killed by a signal (the OOM killer), a full
    /// or unwritable disk, an unreachable or refusing store, TLS, credentials — exit 3.
    World,
}

impl Blame {
    /// The error for a failure of this blame.
    pub fn error(self, stage: Stage, message: impl Into<String>) -> RestoreError {
        match self {
            Blame::Backup => RestoreError::BadBackup { stage, message: message.into() },
            Blame::World => RestoreError::Infrastructure { stage, message: message.into() },
        }
    }
}

/// What the server's SQLSTATE (its log's `%e`) says about who is to blame: insufficient
/// resources (class 53: disk full, out of memory) and I/O errors of the local disk
/// (58030) are the world's; anything else — data corrupted (XX001, XX002), an internal
/// error on a restored data directory (XX000: a missing checkpoint), a missing file
/// (58P01), and what a dump's own statements run into (a refused connection, a denied
/// permission, its session terminated) — the backup's.
pub(crate) fn blame_of_sqlstate(code: &str) -> Blame {
    if code.starts_with("53") || code == "58030" { Blame::World } else { Blame::Backup }
}

/// Who is to blame for one line of the sandbox server's log (`%e` then the level then
/// the message): [`blame_of_sqlstate`], with one exception the sandbox itself causes. It
/// lets the server execute no program, and glibc's `popen` reports any failure to start
/// one as `ENOMEM`, which the server files under out of memory (53200) as `could not
/// execute command …` (`COPY … TO/FROM PROGRAM`): that is a backup asking to run a
/// program — which no dump does — refused, not a machine short of memory.
pub(crate) fn blame_of_server_line(code: &str, message: &str) -> Blame {
    if code == "53200" && message.starts_with("could not execute command") {
        return Blame::Backup;
    }
    blame_of_sqlstate(code)
}

/// The first line of a sandbox server's log (`%e` then the level then the message) that
/// blames the world ([`blame_of_server_line`]) — unless the entry's own context shows it
/// was raised by code the backup defined (`CONTEXT: PL/pgSQL function …`, `SQL
/// function …`, `… at RAISE`): a dump can raise any SQLSTATE it likes, and "disk full"
/// said by its own function is the backup speaking, not the host. (A real shortage met
/// inside a backup's function shows on the host: its free space, checked first.)
pub(crate) fn world_line_of_log(text: &str) -> Option<&str> {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let mut words = line.splitn(3, ' ');
        let (Some(code), Some(level), Some(message)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        if code.len() != 5
            || !["ERROR:", "FATAL:", "PANIC:"].contains(&level)
            || blame_of_server_line(code, message.trim_start()) != Blame::World
        {
            continue;
        }
        // The entry's other lines carry the same code and their own level.
        let raised_by_backup = lines[i + 1..]
            .iter()
            .take_while(|l| {
                let mut w = l.splitn(3, ' ');
                w.next() == Some(code)
                    && w.next().is_some_and(|lv| ["DETAIL:", "HINT:", "CONTEXT:", "STATEMENT:", "QUERY:"].contains(&lv))
            })
            .any(|l| {
                let rest = l.splitn(3, ' ').nth(2).unwrap_or_default();
                l.split(' ').nth(1) == Some("CONTEXT:")
                    && (rest.contains("PL/pgSQL function")
                        || rest.contains("SQL function")
                        || rest.contains(" at RAISE"))
            });
        if !raised_by_backup {
            return Some(line);
        }
    }
    None
}

/// `message`, led by what blamed the world when something did (a full disk, a signal,
/// the server's own error code): the first thing a reader needs.
pub fn with_reason(message: String, why: Option<String>) -> String {
    match why {
        Some(why) => format!("{why} — {message}"),
        None => message,
    }
}

/// An error from a backup store.
#[derive(Debug, thiserror::Error)]
#[error("{store}: {message}")]
pub struct StoreError {
    /// Which store, e.g. `s3://db-backups at http://127.0.0.1:9000`.
    pub store: String,
    pub message: String,
    /// True when the failure is about reaching the store (timeouts, refused connections,
    /// 5xx after retries), false when asking again cannot help (403, 404, bad bucket).
    pub unreachable: bool,
    /// The object is no longer the one that was listed (its ETag changed under a read):
    /// a fresh listing may find a consistent one.
    pub changed: bool,
}

/// Why a restore did not produce a database.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The store could not deliver the bytes: an operational failure, not the backup's fault.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The backup itself is bad: corrupt, truncated, or not the format it claims.
    #[error("{message}")]
    BadBackup { stage: Stage, message: String },
    /// The machinery failed: a sandbox or tool that would not start.
    #[error("{message}")]
    Infrastructure { stage: Stage, message: String },
    /// The backup may be fine, but drcheck cannot restore this kind of it (yet): its
    /// own limit, not the backup's fault.
    #[error("unsupported: {message}")]
    Unsupported { stage: Stage, message: String },
    /// The backup needs something the configuration does not give (a decryption key):
    /// the operator's to fix — exit 2.
    #[error("{message}")]
    Config { stage: Stage, message: String },
    /// Replay ended before the recovery target: the archive does not reach it — the
    /// backup's (its archive's) fault. Says the last transaction replayed and the first
    /// WAL file replay needed that the archive does not hold.
    #[error("{}", target_not_reached(target, last_replayed.as_deref(), missing_wal.as_deref()))]
    TargetNotReached {
        /// `recovery_target_time …`, `recovery_target_lsn …`.
        target: String,
        /// The last replayed transaction's time, as the server logged it.
        last_replayed: Option<String>,
        /// The first WAL file replay needed that the archive does not hold (`None`: the
        /// archive held none after the backup).
        missing_wal: Option<String>,
    },
}

/// How [`RestoreError::TargetNotReached`] reads.
fn target_not_reached(target: &str, last: Option<&str>, missing: Option<&str>) -> String {
    let last = match last {
        Some(t) => format!("the last transaction replayed was at {t}"),
        None => "no transaction was replayed after the backup".into(),
    };
    let missing = match missing {
        Some(m) => format!(
            "; replay needed WAL file {m}, which the archive does not hold (a gap, or an archive that ends before the target)"
        ),
        None => "; the archive held no WAL file after the backup".into(),
    };
    format!("recovery ended before reaching its target ({target}): {last}{missing}")
}

impl RestoreError {
    pub fn stage(&self) -> Stage {
        match self {
            RestoreError::Store(_) => Stage::Fetch,
            RestoreError::BadBackup { stage, .. }
            | RestoreError::Infrastructure { stage, .. }
            | RestoreError::Unsupported { stage, .. }
            | RestoreError::Config { stage, .. } => *stage,
            RestoreError::TargetNotReached { .. } => Stage::Restore,
        }
    }

    /// True when the backup is to blame (the run failed), false when the run could not
    /// complete for reasons outside the backup.
    pub fn is_backup_fault(&self) -> bool {
        matches!(self, RestoreError::BadBackup { .. } | RestoreError::TargetNotReached { .. })
    }

    pub(crate) fn infra(stage: Stage, message: impl fmt::Display) -> Self {
        RestoreError::Infrastructure { stage, message: message.to_string() }
    }

    pub(crate) fn unsupported(stage: Stage, message: impl Into<String>) -> Self {
        RestoreError::Unsupported { stage, message: message.into() }
    }

    pub(crate) fn bad(stage: Stage, message: impl Into<String>) -> Self {
        RestoreError::BadBackup { stage, message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_own_codes_say_who_is_to_blame() {
        for world in ["53100", "53200", "53300", "58030"] {
            assert_eq!(blame_of_sqlstate(world), Blame::World, "{world}");
        }
        // Corruption, a missing checkpoint or file, and what a dump's own statements
        // run into (a refused connection, a denied permission, its session ended).
        for backup in ["XX001", "XX002", "XX000", "58P01", "22P02", "08001", "42501", "57P01"] {
            assert_eq!(blame_of_sqlstate(backup), Blame::Backup, "{backup}");
        }
    }

    #[test]
    fn a_program_the_sandbox_refused_is_the_backups_not_a_memory_shortage() {
        let refused = "could not execute command \"touch /x\": Cannot allocate memory";
        assert_eq!(blame_of_server_line("53200", refused), Blame::Backup);
        assert_eq!(blame_of_server_line("53200", "out of memory"), Blame::World);
        assert_eq!(blame_of_server_line("53100", "could not extend file: No space left on device"), Blame::World);
        // Issue 33: a dump raising "disk full" itself is the backup speaking.
        let raised = "53100 ERROR:  could not extend file: No space left on device\n\
                      53100 CONTEXT:  PL/pgSQL function inline_code_block line 1 at RAISE\n\
                      53100 STATEMENT:  DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '53100'; END $$;\n";
        assert_eq!(world_line_of_log(raised), None);
        let real = "00000 LOG:  checkpoint starting\n53100 ERROR:  could not extend file \"base/1/2\": No space left on device\n\
                    53100 STATEMENT:  COPY t FROM stdin;\n";
        assert!(world_line_of_log(real).is_some_and(|l| l.contains("No space left")));
        let func = "53200 ERROR:  out of memory\n53200 CONTEXT:  SQL function \"f\" statement 1\n";
        assert_eq!(world_line_of_log(func), None);
    }
}
