//! `wait`: a fixed pause, or polling a check until it passes within the step's timeout.

use super::{Outcome, Raced, Status, StepCtx, race};
use crate::plan::Wait;

pub async fn run(w: &Wait, ctx: &StepCtx<'_>) -> Result<Outcome, Outcome> {
    match w {
        Wait::Pause(d) => match race(ctx, tokio::time::sleep(*d)).await {
            Raced::Done(()) => Ok(Outcome::passed(format!("waited {}", drcheck_config::format_duration(*d)))),
            Raced::TimedOut => Err(super::timed_out(ctx)),
            Raced::Cancelled => Err(super::aborted()),
        },
        Wait::Until { probe, every } => {
            let started = tokio::time::Instant::now();
            let mut attempts = 0u32;
            loop {
                attempts += 1;
                let last = super::run(probe, ctx).await;
                match last.status {
                    Status::Passed => {
                        let mut o = Outcome::passed(format!(
                            "passed after {attempts} attempt(s), {:.1}s: {}",
                            started.elapsed().as_secs_f64(),
                            last.detail
                        ));
                        o.output = last.output;
                        o.value = last.value;
                        return Ok(o);
                    }
                    Status::Aborted => return Err(super::aborted()),
                    Status::TimedOut => {
                        let mut o = super::timed_out(ctx);
                        o.detail = format!("{} ({attempts} attempt(s); the last was cut short)", o.detail);
                        return Err(o);
                    }
                    _ => {}
                }
                match race(ctx, tokio::time::sleep(*every)).await {
                    Raced::Done(()) => {}
                    Raced::TimedOut => {
                        let mut o = super::timed_out(ctx);
                        o.detail = format!("{} ({attempts} attempt(s); last: {})", o.detail, last.detail);
                        o.output = last.output;
                        return Err(o);
                    }
                    Raced::Cancelled => return Err(super::aborted()),
                }
            }
        }
    }
}
