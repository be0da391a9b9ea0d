//! Process helpers: bounded runs, group shutdown, and finding processes by command line.

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` to completion, draining its output; kills it and panics after `timeout`.
pub fn run_with_timeout(mut cmd: Command, timeout: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let out_t = drain(child.stdout.take().unwrap());
    let err_t = drain(child.stderr.take().unwrap());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            let err = err_t.join().unwrap_or_default();
            panic!("{cmd:?} ran longer than {timeout:?}; stderr: {}", String::from_utf8_lossy(&err));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    (Output { status, stdout: out_t.join().unwrap(), stderr: err_t.join().unwrap() }, elapsed)
}

pub fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// Sends `signal` to `child` and waits up to `limit` for it to exit; kills it and
/// panics (naming `what`) if it does not.
pub fn signal_and_wait(child: &mut Child, signal: Signal, limit: Duration, what: &str) -> std::process::ExitStatus {
    let _ = kill(Pid::from_raw(child.id() as i32), signal);
    let sent = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if sent.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {limit:?} of {signal}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGINT to the child, then SIGKILL to its process group after `grace`.
pub fn stop_group(mut child: Child, grace: Duration) {
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGINT);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            let _ = killpg(pid, Signal::SIGKILL);
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = killpg(pid, Signal::SIGKILL);
    let _ = child.wait();
}

/// Live processes whose command line contains `needle`, as (pid, command line).
pub fn processes_mentioning(needle: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.filter_map(Result::ok) {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.contains(needle) && pid as u32 != std::process::id() {
            found.push((pid, cmdline));
        }
    }
    found
}

/// A child process killed (with its group) if the test ends before it exits; its
/// output is drained from the start so it never blocks on a full pipe.
pub struct KillOnDrop {
    child: Option<Child>,
    out: Option<std::thread::JoinHandle<Vec<u8>>>,
    err: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl KillOnDrop {
    pub fn new(mut child: Child) -> Self {
        let out = child.stdout.take().map(drain);
        let err = child.stderr.take().map(drain);
        KillOnDrop { child: Some(child), out, err }
    }

    /// Waits up to `limit` for the exit (panics after killing it otherwise).
    pub fn wait_with_output(mut self, limit: Duration) -> Output {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
                let _ = child.kill();
                let _ = child.wait();
                panic!("the process did not exit within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let take =
            |h: Option<std::thread::JoinHandle<Vec<u8>>>| h.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        Output { status, stdout: take(self.out.take()), stderr: take(self.err.take()) }
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
