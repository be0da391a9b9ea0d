//! Whether a `delta_restore` target's restore goes onto the previous copy (`pgbackrest
//! restore --delta`) this run — decided by what the target's own restores measured, not
//! assumed (issue 50: on local disk a delta restore took 1.075× a full one; through a
//! distant store it fetches less and wins). The decision and its figures are said in the
//! report (`restore.delta`).

use crate::run_report::RunReport;

/// After this many runs of the one way, the other is measured again: the database grows
/// and the churn changes, and a decision must not outlive its measurement.
pub(crate) const REMEASURE_AFTER: usize = 10;

/// One past restore of the target: whether it went onto the previous copy, and its RTO.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Past {
    pub delta: bool,
    pub seconds: f64,
}

/// The decision: go onto the copy or not, and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Choice {
    pub delta: bool,
    pub why: String,
}

/// The target's restores with a measured RTO, newest first, from its recent reports.
pub(crate) fn past_of(recent: &[RunReport]) -> Vec<Past> {
    recent
        .iter()
        .filter(|r| r.mode != "follow")
        .filter_map(|r| {
            let seconds = r.rto.measured_seconds?;
            let restore = r.restore.as_ref()?;
            Some(Past { delta: restore.bytes_fetched.is_some(), seconds })
        })
        .collect()
}

/// Delta or full, from `past` (newest first): each way is measured before it is judged,
/// the faster of the last of each is used, and the other is measured again after
/// [`REMEASURE_AFTER`] runs.
pub(crate) fn choose(past: &[Past]) -> Choice {
    let last_full = past.iter().position(|p| !p.delta);
    let last_delta = past.iter().position(|p| p.delta);
    match (last_full, last_delta) {
        (None, _) => {
            Choice { delta: true, why: "no restore measured yet: onto the previous copy when there is one".into() }
        }
        (Some(_), None) => {
            Choice { delta: true, why: "no delta restore measured yet: measuring one onto the previous copy".into() }
        }
        (Some(f), Some(d)) => {
            let (full, delta) = (past[f].seconds, past[d].seconds);
            let figures = format!(
                "the last delta restore took {}, the last full one {}",
                crate::out::whole(delta),
                crate::out::whole(full)
            );
            if delta <= full {
                if f >= REMEASURE_AFTER {
                    Choice { delta: false, why: format!("measuring a full restore again after {f} runs ({figures})") }
                } else {
                    Choice { delta: true, why: format!("delta: {figures}") }
                }
            } else if d >= REMEASURE_AFTER {
                Choice { delta: true, why: format!("measuring a delta restore again after {d} runs ({figures})") }
            } else {
                Choice { delta: false, why: format!("full: a full restore is faster here — {figures}") }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(delta: bool, seconds: f64) -> Past {
        Past { delta, seconds }
    }

    #[test]
    fn each_way_is_measured_before_it_is_judged() {
        assert!(choose(&[]).delta);
        let c = choose(&[p(false, 60.0)]);
        assert!(c.delta && c.why.starts_with("no delta restore measured yet"), "{c:?}");
    }

    #[test]
    fn the_faster_way_is_used_and_said_with_its_figures() {
        let c = choose(&[p(true, 40.0), p(false, 60.0)]);
        assert!(c.delta, "{c:?}");
        assert_eq!(c.why, "delta: the last delta restore took 40s, the last full one 1m");
        // On local disk a delta restore was slower: full it is.
        let c = choose(&[p(false, 60.0), p(true, 65.0)]);
        assert!(!c.delta, "{c:?}");
        assert!(c.why.starts_with("full: a full restore is faster here — the last delta restore took 1m 5s"), "{c:?}");
    }

    #[test]
    fn the_way_not_taken_is_measured_again_after_ten_runs() {
        let mut past = vec![p(false, 60.0); REMEASURE_AFTER];
        past.push(p(true, 65.0));
        let c = choose(&past);
        assert!(c.delta && c.why.starts_with("measuring a delta restore again after 10 runs"), "{c:?}");
        let mut past = vec![p(true, 40.0); REMEASURE_AFTER];
        past.push(p(false, 60.0));
        let c = choose(&past);
        assert!(!c.delta && c.why.starts_with("measuring a full restore again after 10 runs"), "{c:?}");
        // Nine runs: not yet.
        let mut past = vec![p(true, 40.0); REMEASURE_AFTER - 1];
        past.push(p(false, 60.0));
        assert!(choose(&past).delta);
    }
}
