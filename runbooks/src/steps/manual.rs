//! `manual`: an instruction the operator confirms at the terminal (`yes` or `no`);
//! `--yes` confirms for unattended runs. Who confirmed, how and when is recorded.

use super::{Confirmation, Outcome, Raced, StepCtx, race};
use crate::format::RawManual;
use std::io::IsTerminal;
use tokio::io::AsyncBufReadExt;

pub async fn run(m: &RawManual, ctx: &StepCtx<'_>) -> Result<Outcome, Outcome> {
    let instruction = ctx.resolve("instruction", &m.instruction)?;
    let by = operator();
    if ctx.env.yes {
        let mut o = Outcome::passed(format!("confirmed by --yes ({by})"));
        o.confirmation = Some(Confirmation { by, at: now(), how: "--yes".into() });
        return Ok(o);
    }
    if !std::io::stdin().is_terminal() {
        return Err(Outcome::failed(
            "needs an operator: run on a terminal to confirm, or pass --yes for an unattended drill",
        ));
    }
    ctx.env.live.prompt(&ctx.scope.display(&instruction));
    let answer = async {
        // One reader of the terminal for every gate of the drill: a gate that timed out
        // leaves what was typed since for the next one (reading lines is cancel-safe).
        let mut lines = stdin_lines().lock().await;
        loop {
            match lines.next_line().await {
                Ok(Some(l)) => match l.trim().to_ascii_lowercase().as_str() {
                    "yes" | "y" => return Some(true),
                    "no" | "n" => return Some(false),
                    _ => eprint!("    type yes or no: "),
                },
                _ => return None,
            }
        }
    };
    match race(ctx, answer).await {
        Raced::Done(Some(true)) => {
            let mut o = Outcome::passed(format!("confirmed by {by} at the terminal"));
            o.confirmation = Some(Confirmation { by, at: now(), how: "terminal".into() });
            Ok(o)
        }
        Raced::Done(Some(false)) => {
            let mut o = Outcome::failed(format!("{by} answered no"));
            o.confirmation = Some(Confirmation { by, at: now(), how: "terminal".into() });
            Err(o)
        }
        Raced::Done(None) => Err(Outcome::failed("the terminal closed before the step was confirmed")),
        Raced::TimedOut => Err(super::timed_out(ctx)),
        Raced::Cancelled => Err(super::aborted()),
    }
}

type StdinLines = tokio::io::Lines<tokio::io::BufReader<tokio::io::Stdin>>;

fn stdin_lines() -> &'static tokio::sync::Mutex<StdinLines> {
    static LINES: std::sync::OnceLock<tokio::sync::Mutex<StdinLines>> = std::sync::OnceLock::new();
    LINES.get_or_init(|| tokio::sync::Mutex::new(tokio::io::BufReader::new(tokio::io::stdin()).lines()))
}

/// The person at the keyboard: the user who ran sudo, else the login user.
fn operator() -> String {
    for var in ["SUDO_USER", "USER", "LOGNAME"] {
        if let Ok(v) = std::env::var(var)
            && !v.is_empty()
        {
            return v;
        }
    }
    nix::unistd::User::from_uid(nix::unistd::Uid::current())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| format!("uid {}", nix::unistd::Uid::current()))
}

fn now() -> String {
    crate::clock::timestamp(std::time::SystemTime::now())
}
