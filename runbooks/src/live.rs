//! Live output on stderr while a drill runs: each step as it starts and ends, with its
//! duration and the RTO clock, and the output of shell steps as it arrives.

use crate::outcome::{Outcome, Status};
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct Live {
    color: bool,
    lock: Arc<std::sync::Mutex<()>>,
}

impl Live {
    pub fn stderr() -> Self {
        Live { color: std::io::stderr().is_terminal(), lock: Arc::default() }
    }

    fn write(&self, text: &str) {
        let _g = self.lock.lock();
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(text.as_bytes());
        let _ = e.flush();
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_string() }
    }

    pub fn section(&self, title: &str) {
        self.write(&format!("\n{}\n", self.paint("1", &format!("== {title}"))));
    }

    pub fn started(&self, label: &str, what: &str, at: Duration) {
        self.write(&format!("{} {}  {}\n      {}\n", self.paint("2", &clock(at)), self.paint("1", "▶"), label, what));
    }

    pub fn output(&self, line: &str) {
        self.write(&format!("      │ {line}\n"));
    }

    pub fn finished(&self, o: &Outcome, took: Duration, rto: Option<(Duration, Duration)>) {
        let (mark, code) = match o.status {
            Status::Passed => ("✔", "32"),
            Status::Failed => ("✘", "31"),
            Status::TimedOut => ("✘", "31"),
            Status::Aborted => ("■", "33"),
            Status::Skipped => ("·", "2"),
        };
        let rto = match rto {
            Some((used, budget)) => format!("   RTO clock {} / {}", clock(used), clock(budget)),
            None => String::new(),
        };
        self.write(&format!(
            "      {} {} in {:.2}s: {}{}\n",
            self.paint(code, mark),
            self.paint(code, o.status.as_str()),
            took.as_secs_f64(),
            o.detail,
            rto
        ));
    }

    pub fn note(&self, text: &str) {
        self.write(&format!("{}\n", self.paint("33", text)));
    }

    pub fn prompt(&self, instruction: &str) {
        self.write(&format!(
            "\n    {}\n    {instruction}\n    Done? Type yes to confirm, no to fail the step: ",
            self.paint("1;33", "OPERATOR ACTION")
        ));
    }
}

/// `m:ss` (or `h:mm:ss`) for the live clock.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{:2}:{:02}", s / 60, s % 60)
    }
}
