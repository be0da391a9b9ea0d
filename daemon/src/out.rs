//! The CLI's standard output. A reader that goes away (`drcheck history | head -1`)
//! closes the pipe: from then on output is dropped quietly and the command finishes its
//! work (recording runs, tearing down sandboxes) instead of panicking half-way.

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
            eprintln!("drcheck: cannot write to standard output: {e}");
        }
        CLOSED.store(true, Ordering::Relaxed);
    }
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
