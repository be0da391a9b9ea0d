//! `shell`: a command run by `/bin/sh -c` in its own process group, so a timeout or the
//! kill switch stops it and everything it started (SIGTERM, then SIGKILL after a grace).

use super::{Outcome, Status, StepCtx};
use crate::format::RawShell;
use crate::plan::output_regex;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Pid, Uid, User};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// The process groups of the shell steps running now, for a last-resort stop
/// ([`kill_running_groups`]): a third signal exits the drill at once, and takes them
/// along.
static RUNNING: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// SIGKILLs the process group of every shell step still running.
pub fn kill_running_groups() {
    if let Ok(groups) = RUNNING.lock() {
        for g in groups.iter() {
            let _ = killpg(Pid::from_raw(*g), Signal::SIGKILL);
        }
    }
}

use tokio::process::Command;

/// Output kept for `expect_output`, `reject_output` and `capture`.
const KEEP_BYTES: usize = 1 << 20;
/// Output kept in the journal.
const TAIL_BYTES: usize = 4096;
const GRACE: Duration = Duration::from_secs(5);

pub async fn run(s: &RawShell, ctx: &StepCtx<'_>) -> Result<Outcome, Outcome> {
    // Values reach the shell as environment variables, never spliced into its code.
    let (command, values) =
        ctx.scope.resolve_for_shell(&s.command).map_err(|e| Outcome::failed(format!("command: {e}")))?;
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(&command).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.process_group(0).kill_on_drop(true);
    for (k, v) in &ctx.env.shell_env {
        cmd.env(k, v);
    }
    for (k, v) in values {
        cmd.env(k, v);
    }
    for (k, v) in &s.env {
        cmd.env(k, ctx.resolve(&format!("env.{k}"), v)?);
    }
    if let Some(dir) = &s.workdir {
        cmd.current_dir(ctx.resolve("workdir", dir)?);
    }
    if let Some(user) = &s.run_as {
        let user = ctx.resolve("run_as", user)?;
        if !user.is_empty() {
            switch_user(&mut cmd, &user)?;
        }
    }
    let expect = |what: &str, re: &Option<String>| -> Result<Option<regex::Regex>, Outcome> {
        match re {
            None => Ok(None),
            Some(r) => {
                let r = ctx.resolve(what, r)?;
                output_regex(&r).map(Some).map_err(|e| Outcome::failed(format!("{what}: invalid regex: {e}")))
            }
        }
    };
    let must = expect("expect_output", &s.expect_output)?;
    let must_not = expect("reject_output", &s.reject_output)?;

    let mut child = cmd.spawn().map_err(|e| Outcome::failed(format!("cannot start /bin/sh: {e}")))?;
    let pgid = child.id().map(|id| Pid::from_raw(id as i32));
    let mut group = GroupGuard(pgid);
    let _listed = Listed::new(pgid);
    let collected = Arc::new(Mutex::new(Collected::default()));
    let readers = [
        child.stdout.take().map(|o| {
            tokio::spawn(read_lines(o, true, collected.clone(), ctx.env.live.clone(), ctx.scope.secret_values()))
        }),
        child.stderr.take().map(|e| {
            tokio::spawn(read_lines(e, false, collected.clone(), ctx.env.live.clone(), ctx.scope.secret_values()))
        }),
    ];

    let mut interrupted = None;
    let status = tokio::select! {
        st = child.wait() => st.ok(),
        _ = tokio::time::sleep_until(ctx.deadline) => { interrupted = Some(Status::TimedOut); None }
        _ = ctx.cancel.cancelled() => { interrupted = Some(Status::Aborted); None }
    };
    let status = match status {
        // A normal exit: what the command left running in the background (a server
        // started with `pg_ctl start`, say) is the step's intended effect.
        Some(s) => {
            group.0 = None;
            Some(s)
        }
        None => terminate(&mut child, pgid).await,
    };
    // A background process the command started (a server) may hold the pipes open:
    // read what is there, but do not wait for it to exit.
    let mut still_open = false;
    for r in readers.into_iter().flatten() {
        if tokio::time::timeout(Duration::from_secs(2), r).await.is_err() {
            still_open = true;
        }
    }
    let c = collected.lock().map(|c| c.clone()).unwrap_or_default();
    let mut out = judge(s, ctx, status, interrupted, &c, must.as_ref(), must_not.as_ref());
    out.output = ctx.scrub(&super::tail(&c.combined, TAIL_BYTES));
    if still_open {
        out.detail.push_str(" (a background process still holds the output open)");
    }
    Ok(out)
}

fn judge(
    s: &RawShell,
    ctx: &StepCtx<'_>,
    status: Option<std::process::ExitStatus>,
    interrupted: Option<Status>,
    c: &Collected,
    must: Option<&regex::Regex>,
    must_not: Option<&regex::Regex>,
) -> Outcome {
    match interrupted {
        Some(Status::TimedOut) => return super::timed_out(ctx),
        Some(_) => return super::aborted(),
        None => {}
    }
    let expected = s.expect_exit.unwrap_or(0);
    let Some(status) = status else { return Outcome::failed("the command's exit status is unknown") };
    let Some(code) = status.code() else {
        use std::os::unix::process::ExitStatusExt;
        return Outcome::failed(format!("killed by signal {}", status.signal().unwrap_or(0)));
    };
    if code != expected {
        return Outcome::failed(format!("exit {code}, expected {expected}"));
    }
    if let Some(re) = must
        && !re.is_match(&c.combined)
    {
        return Outcome::failed(format!("exit {code}, but the output does not match /{}/", re.as_str()));
    }
    if let Some(re) = must_not
        && let Some(m) = re.find(&c.combined)
    {
        return Outcome::failed(format!(
            "exit {code}, but the output matches /{}/: {:?}",
            re.as_str(),
            ctx.scrub(m.as_str())
        ));
    }
    let mut o = Outcome::passed(format!("exit {code}"));
    if s.capture.is_some() {
        o.value = Some(c.stdout.trim().to_string());
    }
    o
}

/// SIGTERM to the group, SIGKILL after the grace period.
async fn terminate(child: &mut tokio::process::Child, pgid: Option<Pid>) -> Option<std::process::ExitStatus> {
    if let Some(p) = pgid {
        let _ = killpg(p, Signal::SIGTERM);
    }
    if let Ok(Ok(st)) = tokio::time::timeout(GRACE, child.wait()).await {
        return Some(st);
    }
    if let Some(p) = pgid {
        let _ = killpg(p, Signal::SIGKILL);
    }
    child.wait().await.ok()
}

/// A step's process group in [`RUNNING`] while the step runs.
struct Listed(Option<i32>);

impl Listed {
    fn new(pgid: Option<Pid>) -> Self {
        let g = pgid.map(|p| p.as_raw());
        if let (Some(g), Ok(mut list)) = (g, RUNNING.lock()) {
            list.push(g);
        }
        Listed(g)
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        if let (Some(g), Ok(mut list)) = (self.0, RUNNING.lock()) {
            list.retain(|x| *x != g);
        }
    }
}

/// Kills the step's process group if the step is dropped while it runs (a panic, or
/// the runner giving up) or was stopped.
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            let _ = killpg(p, Signal::SIGKILL);
        }
    }
}

fn switch_user(cmd: &mut Command, user: &str) -> Result<(), Outcome> {
    let u =
        User::from_name(user).ok().flatten().ok_or_else(|| Outcome::failed(format!("run_as: no OS user {user:?}")))?;
    if u.uid == Uid::effective() {
        return Ok(());
    }
    if !Uid::effective().is_root() {
        return Err(Outcome::failed(format!("run_as: switching to {user:?} needs drcheck to run as root")));
    }
    cmd.uid(u.uid.as_raw()).gid(u.gid.as_raw()).env("USER", &u.name).env("HOME", &u.dir);
    Ok(())
}

#[derive(Debug, Clone, Default)]
struct Collected {
    stdout: String,
    combined: String,
}

async fn read_lines(
    r: impl AsyncRead + Unpin,
    is_stdout: bool,
    into: Arc<Mutex<Collected>>,
    live: crate::live::Live,
    secrets: Vec<String>,
) {
    // Bytes, not text: a command may print anything (Latin-1, binary); each line is
    // decoded lossily, and the pipe is read to its end whatever it holds.
    let mut reader = BufReader::new(r);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&buf);
        let line = text.strip_suffix('\n').unwrap_or(&text);
        let line = line.strip_suffix('\r').unwrap_or(line);
        live.output(&crate::scope::scrub(line, &secrets));
        let Ok(mut c) = into.lock() else { return };
        if is_stdout && c.stdout.len() < KEEP_BYTES {
            c.stdout.push_str(line);
            c.stdout.push('\n');
        }
        if c.combined.len() >= KEEP_BYTES {
            // Keep the most recent output: what matters when a command fails is its end.
            let cut = c.combined.len() / 2;
            let cut = (cut..c.combined.len()).find(|i| c.combined.is_char_boundary(*i)).unwrap_or(0);
            c.combined.drain(..cut);
        }
        c.combined.push_str(line);
        c.combined.push('\n');
    }
}
