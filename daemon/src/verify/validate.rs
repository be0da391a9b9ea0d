//! The third stage: what the restored copy holds, checked on its own and against the
//! primary.

use super::repository::{ToolCheck, check_repository};
use super::restore::Ready;
use super::select::Selected;
use super::stop::{Stop, restored_unreachable};
use crate::history::History;
use crate::ids::Settings;
use crate::progress::Progress;
use crate::run_report::{Content, Phase, PrimaryQueries, ValidatorReport, secs};
use drcheck_config::{Comparisons, TargetConfig};
use drcheck_validators::Status;
use std::time::{Instant, SystemTime};
use tokio_util::sync::CancellationToken;

/// What validating learned, for the run's verdict: the findings (the validators', the
/// repository check's), what the content comparisons decided, what they cost the
/// primary, and what could not run.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    pub validators: Vec<ValidatorReport>,
    pub content: Option<Content>,
    /// The heartbeat's (else the `as_of` columns') lag behind the primary.
    pub data_lag_seconds: Option<f64>,
    pub primary_queries: Option<PrimaryQueries>,
    pub degraded: Option<String>,
    /// Which tables this run decided, and the rotation's slice it compared: applied to
    /// the history with the run, never before.
    pub tables_decided: Option<Box<[(String, bool)]>>,
    pub slice_compared: Option<(u32, u32)>,
    pub phases: Vec<Phase>,
}

impl Checked {
    fn failed(&self) -> bool {
        self.validators.iter().any(|v| v.status == Status::Failed)
    }

    /// The validators' findings on a copy: the slice they compared, the tables they
    /// decided (and those no run decided in time), the content proven, the data's lag.
    pub(crate) async fn of(
        target: &TargetConfig,
        mut validated: crate::validate::Validated,
        rotation: Option<&drcheck_validators::Rotation>,
        history: &History,
    ) -> Checked {
        let slice_compared = crate::validate::rotated(rotation, &validated.findings);
        let (tables_decided, unproven) = crate::validate::tables_decided(target, &validated.findings, history).await;
        validated.findings.extend(unproven);
        let validators: Vec<ValidatorReport> = validated.findings.iter().map(ValidatorReport::from).collect();
        // The heartbeat is the data's own clock: its lag is preferred to the as_of columns'.
        let lag_of = |name: &str| {
            validated
                .findings
                .iter()
                .filter(|f| f.name == name)
                .find_map(|f| f.measurements.get("data_lag_seconds").copied())
        };
        Checked {
            content: Content::of(&validators, target.max_undecided),
            data_lag_seconds: lag_of("point_in_time").or_else(|| lag_of("freshness")),
            validators,
            primary_queries: validated.primary_queries,
            tables_decided,
            slice_compared,
            ..Default::default()
        }
    }

    /// Comparisons with the primary that could not run (`why`): the run is degraded, or
    /// — comparisons required and the copy's own checks held — incomplete.
    pub(crate) fn primary_unavailable(&mut self, target: &TargetConfig, why: &str) -> Result<(), Stop> {
        match target.comparisons {
            // The copy failed its own checks: the backup is bad whatever the primary
            // would have said (failed outranks incomplete); the report still says
            // what did not run.
            _ if self.failed() => {
                self.degraded = Some(format!("comparisons with the primary could not run: {why}"));
            }
            // A verdict says what ran: without its comparisons the run did not complete.
            Comparisons::Required => {
                return Err(Stop::incomplete(
                    "validate",
                    format!(
                        "the comparisons with the primary could not run: {why}. The restore and the self-checks \
                         are recorded; fix the primary's URL, password or grant, or set comparisons = \
                         \"best-effort\" for this target to accept runs without them"
                    ),
                ));
            }
            Comparisons::BestEffort => {
                self.degraded = Some(format!("comparisons with the primary skipped (best-effort): {why}"));
            }
        }
        Ok(())
    }
}

/// The third stage: the validators on the restored copy and against the primary as of
/// `cutoff` (the copy's point), the data's own lag, comparisons the primary refused or
/// could not run, and the backup tool's repository check.
#[allow(clippy::too_many_arguments)]
pub(super) async fn validate_stage(
    settings: Settings<'_>,
    selected: &Selected,
    ready: Ready,
    cutoff: Option<SystemTime>,
    run_id: &str,
    history: &History,
    cancel: &CancellationToken,
    progress: &Progress,
) -> (Checked, Result<(), Stop>) {
    let target = &selected.target;
    let Ready { sandbox, database, physical, horizon } = ready;
    progress.phase(&target.name, "validating");
    let t = Instant::now();
    let horizon = horizon.as_ref().map(|h| drcheck_validators::asof::CopyHorizon {
        next_xid: h.next_xid,
        system_identifier: h.system_identifier.clone(),
    });
    let rotation = crate::validate::rotation(target, physical, history).await;
    let journal = crate::validate::journal_for(target, cutoff, history).await;
    let copy = crate::validate::Copy {
        sandbox: &sandbox,
        database: &database,
        physical,
        at: cutoff,
        horizon,
        on_follower: false,
        rotation: rotation.clone(),
        journal,
    };
    let validated = match crate::validate::run(settings.sandbox, target, copy).await {
        Ok(v) => v,
        Err(e) => return (Checked::default(), Err(restored_unreachable(&sandbox, "validate", format!("{e:#}")).await)),
    };
    let unavailable = validated.primary_unavailable.clone();
    let mut checked = Checked::of(target, validated, rotation.as_ref(), history).await;
    if target.comparisons == Comparisons::BestEffort && unavailable.is_none() {
        // A missing grant on the primary is comparisons that cannot run, like a wrong
        // password: best-effort makes those checks skipped and the verdict degraded.
        let denied = refused_by_the_primary(&mut checked.validators);
        if !denied.is_empty() && !checked.failed() {
            checked.degraded = Some(format!(
                "comparisons the primary refused to drcheck's role skipped (best-effort): {}",
                denied.join(", ")
            ));
        }
    }
    if let Some(why) = &unavailable
        && let Err(stop) = checked.primary_unavailable(target, why)
    {
        checked.phases.push(Phase { name: "validate".into(), seconds: secs(t.elapsed()) });
        return (checked, Err(stop));
    }
    if let Some(c) = &selected.catalog
        && target.validators.enabled.iter().any(|v| v == "repository")
    {
        let f = check_repository(
            settings,
            target,
            &selected.store,
            run_id,
            c,
            Some(history),
            ToolCheck::AtMostOncePerSchedule,
        )
        .await;
        checked.validators.push(ValidatorReport::from(&f));
    }
    checked.phases.push(Phase { name: "validate".into(), seconds: secs(t.elapsed()) });
    if cancel.is_cancelled() {
        return (checked, Err(Stop::aborted("validate")));
    }
    sandbox.teardown();
    (checked, Ok(()))
}
/// The checks that erred because the primary refused drcheck's role (it answered
/// SQLSTATE 42501 — a missing grant — while they ran), made `skipped` saying so; their names.
pub(crate) fn refused_by_the_primary(validators: &mut [ValidatorReport]) -> Vec<String> {
    let mut names = Vec::new();
    for v in validators.iter_mut().filter(|v| v.status == Status::Error && v.refused_by_primary) {
        v.status = Status::Skipped;
        v.detail = format!("skipped (comparisons = \"best-effort\"): the primary refused drcheck's role: {}", v.detail);
        names.push(v.name.clone());
    }
    names
}
