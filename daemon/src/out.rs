//! The CLI's standard output and error. A reader that goes away (`drcheck history |
//! head -1`, `drcheck verify 2>&1 | head`) closes the pipe: from then on output is
//! dropped quietly and the command finishes its work (recording runs, releasing its
//! lease, tearing down sandboxes) instead of panicking half-way as `println!` and
//! `eprintln!` do.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout; a closed pipe silences the rest of the output.
pub fn write(text: &str) {
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

/// Writes `text` to stderr; a failure (a closed pipe) is ignored: there is nowhere
/// left to say it.
pub fn write_err(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(text.as_bytes()).and_then(|()| stderr.flush());
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
