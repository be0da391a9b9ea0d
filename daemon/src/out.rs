//! The CLI's standard output and error. A reader that goes away (`drcheck history |
//! head -1`, `drcheck verify 2>&1 | head`) closes the pipe: from then on output is
//! dropped quietly and the command finishes its work (recording runs, releasing its
//! lease, tearing down sandboxes) instead of panicking half-way as `println!` and
//! `eprintln!` do.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout; a closed pipe silences the rest of the output.
pub(crate) fn write(text: &str) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            write_err(&format!("drcheck: cannot write to standard output: {e}\n"));
        }
        CLOSED.store(true, Ordering::Relaxed);
    }
}

/// `n` and `noun`, plural when `n` is not 1 ("1 backup", "3 backups", "0 CronJobs").
pub(crate) fn count(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// Writes `text` to stderr; a failure (a closed pipe) is ignored: there is nowhere
/// left to say it.
pub(crate) fn write_err(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(text.as_bytes()).and_then(|()| stderr.flush());
}

/// Text a backup or a store chose (object keys, a tool's output) as it may reach a
/// terminal: control characters — escape sequences that erase or recolour lines,
/// carriage returns, newlines — are shown escaped (`\x1b`, `\r`, `\n`), so such text
/// can neither rewrite what drcheck printed nor forge a line of its own.
pub(crate) fn shown(text: &str) -> String {
    escape(text, None)
}

/// [`shown`] for multi-line text (a tool's error): its lines stay lines, each one after
/// the first indented by `indent`, so none can pass for a line of drcheck's own.
pub(crate) fn shown_lines(text: &str, indent: &str) -> String {
    escape(text.trim_end(), Some(indent))
}

fn escape(text: &str, indent: Option<&str>) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' if indent.is_some() => {
                out.push('\n');
                out.push_str(indent.unwrap_or_default());
            }
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `eprintln!` to [`write_err`].
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => { $crate::out::write_err(&format!("{}\n", format_args!($($arg)*))) };
}

/// `print!` to [`write`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write(&format!($($arg)*)) };
}

/// `println!` to [`write`].
#[macro_export]
macro_rules! outln {
    () => { $crate::out::write("\n") };
    ($($arg:tt)*) => { $crate::out::write(&format!("{}\n", format_args!($($arg)*))) };
}

/// `text` cut to `max` characters, for one log line.
pub(crate) fn short(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// A duration in whole seconds, the config's way: `1h 5m`, `40s`.
pub(crate) fn whole(secs: f64) -> String {
    drcheck_config::format_duration(std::time::Duration::from_secs_f64(secs.max(0.0).round()))
}

/// A duration for people: `42.0 s`, `12.5 min`, `3.2 h`, `4.0 d`.
pub(crate) fn human(secs: f64) -> String {
    if secs < 120.0 {
        format!("{secs:.1} s")
    } else if secs < 7200.0 {
        format!("{:.1} min", secs / 60.0)
    } else if secs < 172_800.0 {
        format!("{:.1} h", secs / 3600.0)
    } else {
        format!("{:.1} d", secs / 86400.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_never_reach_the_terminal() {
        let key = "orders/x\u{1b}[2K\u{1b}[1A\u{1b}[32mpassed\u{1b}[0m\r\nfake: PASSED\u{9b}.dump";
        let s = shown(key);
        assert!(!s.chars().any(char::is_control), "{s:?}");
        assert_eq!(s, "orders/x\\x1b[2K\\x1b[1A\\x1b[32mpassed\\x1b[0m\\r\\nfake: PASSED\\x9b.dump");
        let m = shown_lines("psql failed:\nline two\u{1b}[1A\n", "    ");
        assert_eq!(m, "psql failed:\n    line two\\x1b[1A");
    }
}
