//! `drcheck drill check|run`: DR-drill runbooks. The runbooks crate does the work; this
//! file loads the config when the runbook needs it, implements `verify` steps with the
//! verification pipeline, wires Ctrl-C/SIGTERM to the kill switch, and writes the
//! journal, the report and the drill metrics.

use super::DEFAULT_CONFIG;
use crate::exit::{CliError, Exit};
use crate::history::History;
use crate::progress::Progress;
use crate::run_report::RunResult;
use anyhow::Context;
use clap::{Args, Subcommand};
use drcheck_config::Config;
use drcheck_runbooks::live::Live;
use drcheck_runbooks::{DrillResult, Env, Journal, KillSwitch, Runbook, VerifyError, VerifyOutcome};
use drcheck_validators::Status;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Subcommand)]
pub(crate) enum DrillCommand {
    /// Check a runbook without running anything; every problem names its line.
    Check {
        /// The runbook (YAML).
        file: PathBuf,
        /// Override a runbook variable (repeatable).
        #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
        vars: Vec<(String, String)>,
    },
    /// Run a drill: steady state, method, steady state again, rollbacks.
    Run(DrillRunArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DrillRunArgs {
    /// The runbook (YAML).
    pub file: PathBuf,
    /// Print the resolved plan and execute nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Confirm every manual step (unattended runs).
    #[arg(long)]
    pub yes: bool,
    /// Override a runbook variable (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
    pub vars: Vec<(String, String)>,
    /// Print the journal as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Where to write the HTML report (the JSON journal goes next to it, as .json)
    /// [default: drill-<runbook>-<time>.html in the current directory].
    #[arg(long)]
    pub report: Option<PathBuf>,
}

pub(crate) async fn run(config_path: Option<&Path>, cmd: DrillCommand) -> Result<Exit, CliError> {
    match cmd {
        DrillCommand::Check { file, vars } => {
            // A check reads only the config's targets: secrets the drill host lacks
            // (`${ORDERS_PW}`) are not demanded.
            let config = load_config(config_path, drcheck_config::load_shape)?;
            let rb = load_runbook(&file, &vars, config.as_ref())?;
            let recovery = rb.steps.iter().filter(|s| s.recovery).count();
            crate::outln!(
                "{}: ok — {:?}: {} steady-state check(s), {} step(s) ({recovery} on the RTO clock), {} rollback(s)",
                file.display(),
                rb.title,
                rb.steady_state.len(),
                rb.steps.len(),
                rb.rollbacks.len()
            );
            for (line, target) in &rb.unresolved_targets {
                crate::outln!(
                    "{}:{line}: target {target:?} not checked: no config loaded (--config or DRCHECK_CONFIG checks it)",
                    file.display()
                );
            }
            Ok(Exit::Passed)
        }
        DrillCommand::Run(args) => run_drill(load_config(config_path, drcheck_config::load)?, args).await,
    }
}

/// The config named by `--config`/`DRCHECK_CONFIG` (which must load), else
/// `./drcheck.toml` if there is one, else none.
fn load_config(
    path: Option<&Path>,
    load: fn(&Path) -> Result<Config, drcheck_config::ConfigError>,
) -> Result<Option<Config>, CliError> {
    match path {
        Some(p) => Ok(Some(load(p)?)),
        None if Path::new(DEFAULT_CONFIG).exists() => Ok(Some(load(Path::new(DEFAULT_CONFIG))?)),
        None => Ok(None),
    }
}

fn load_runbook(file: &Path, vars: &[(String, String)], config: Option<&Config>) -> Result<Runbook, CliError> {
    drcheck_runbooks::load(file, vars, config).map_err(|e| CliError::usage(anyhow::anyhow!("{e}")))
}

async fn run_drill(config: Option<Config>, args: DrillRunArgs) -> Result<Exit, CliError> {
    let rb = load_runbook(&args.file, &args.vars, config.as_ref())?;
    if !rb.unresolved_targets.is_empty() {
        let list: Vec<String> = rb
            .unresolved_targets
            .iter()
            .map(|(line, t)| format!("{}:{line}: target {t:?}", args.file.display()))
            .collect();
        return Err(CliError::usage(anyhow::anyhow!(
            "the runbook needs drcheck's config (--config or DRCHECK_CONFIG) for: {}",
            list.join("; ")
        )));
    }
    if args.dry_run {
        crate::out!("{}", drcheck_runbooks::dry_run::plan_text(&rb));
        return Ok(Exit::Passed);
    }
    let needs_verifier =
        rb.steps.iter().chain(&rb.steady_state).chain(&rb.rollbacks).any(|s| s.action.kind() == "verify");
    let verifier = match (&config, needs_verifier) {
        (Some(c), true) => Some(PipelineVerifier {
            config: c.clone(),
            history: History::open(&c.state.url).await.map_err(CliError::incomplete)?,
            holder: crate::history::lease_holder_name("drill"),
        }),
        _ => None,
    };
    let (report_path, journal_path) = output_paths(&rb, args.report.as_deref());
    let kill = KillSwitch::default();
    let live = Live::stderr();
    // The journal so far, rewritten whole (a temporary file renamed over it) after
    // every step: a drill killed outright leaves a readable record of what ran.
    let latest: std::sync::Arc<std::sync::Mutex<Option<Journal>>> = Default::default();
    let checkpoint = {
        let (path, latest) = (journal_path.clone(), latest.clone());
        move |j: &Journal| {
            if let Ok(mut l) = latest.lock() {
                *l = Some(j.clone());
            }
            if let Err(e) = write_journal(j, &path) {
                tracing::warn!("{e:#}");
            }
        }
    };
    watch_signals(kill.clone(), live.clone(), latest.clone(), journal_path.clone());
    let mut shell_env = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        shell_env.push(("DRCHECK_BIN".to_string(), exe.display().to_string()));
    }
    if let Some(c) = &config {
        let path = std::fs::canonicalize(&c.path).unwrap_or_else(|_| c.path.clone());
        shell_env.push(("DRCHECK_CONFIG".to_string(), path.display().to_string()));
    }
    let env = Env {
        config: config.as_ref(),
        verifier: verifier.as_ref().map(|v| v as &dyn drcheck_runbooks::Verifier),
        yes: args.yes,
        live: &live,
        shell_env,
        checkpoint: Some(&checkpoint),
    };
    live.note(&format!("drill {:?} ({}) — Ctrl-C stops the running step and runs the rollbacks", rb.title, rb.name));
    let journal = drcheck_runbooks::run(&rb, &env, &kill).await;
    if let Some(v) = verifier {
        v.history.close().await;
    }

    let written = write_outputs(&journal, &report_path, &journal_path);
    if let Some(c) = &config {
        let totals = drill_totals(c, &journal).await;
        export_metrics(c, &journal, totals.as_deref()).await;
    }
    if args.json {
        let text = serde_json::to_string_pretty(&journal).map_err(CliError::incomplete)?;
        crate::outln!("{text}");
    } else {
        crate::out!("{}", summary(&journal));
    }
    match written {
        Ok(()) => crate::errln!("report: {}\njournal: {}", report_path.display(), journal_path.display()),
        Err(e) => crate::errln!("drcheck: warning: {e:#}"),
    }
    Ok(match journal.result {
        DrillResult::Completed => Exit::Passed,
        DrillResult::Failed => Exit::Failed,
        DrillResult::Aborted | DrillResult::Running => Exit::Incomplete,
    })
}

/// `--report PATH` (journal: PATH with `.json`), or `drill-<runbook>-<time>.html`.
fn output_paths(rb: &Runbook, report: Option<&Path>) -> (PathBuf, PathBuf) {
    let report = report.map(Path::to_path_buf).unwrap_or_else(|| {
        PathBuf::from(format!("drill-{}-{}.html", rb.name, chrono::Utc::now().format("%Y%m%dT%H%M%SZ")))
    });
    let journal = report.with_extension("json");
    (report, journal)
}

fn write_outputs(j: &Journal, report: &Path, journal: &Path) -> anyhow::Result<()> {
    write_journal(j, journal)?;
    std::fs::write(report, drcheck_runbooks::drill_report::html(j))
        .with_context(|| format!("writing the report to {}", report.display()))?;
    Ok(())
}

/// Writes the journal atomically: to a temporary file beside it, then renamed over it.
fn write_journal(j: &Journal, path: &Path) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(j)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).with_context(|| format!("writing the journal to {}", path.display()))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes())
        .and_then(|()| tmp.as_file().sync_data())
        .with_context(|| format!("writing the journal to {}", path.display()))?;
    tmp.persist(path).map_err(|e| anyhow::anyhow!("writing the journal to {}: {}", path.display(), e.error))?;
    Ok(())
}

/// Records the drill in the history store and returns its runbook's drill counts by
/// result (so the pushed counter is a total, not this run alone); `None` (with a
/// warning) when the store cannot be used.
async fn drill_totals(config: &Config, j: &Journal) -> Option<Vec<(String, i64)>> {
    let run = async {
        let history = History::open(&config.state.url).await?;
        history.record_drill(j).await?;
        let totals = history.drill_counts(&j.runbook.name).await?;
        history.close().await;
        anyhow::Ok(totals)
    };
    match run.await {
        Ok(t) => Some(t),
        Err(e) => {
            crate::errln!(
                "drcheck: warning: the drill is not in the history store (its counter counts it alone): {e:#}"
            );
            None
        }
    }
}

/// Pushed like one-shot verification metrics: to the Pushgateway (grouped by runbook)
/// and/or a textfile next to the configured one. Failures warn; the verdict stands.
async fn export_metrics(config: &Config, j: &Journal, totals: Option<&[(String, i64)]>) {
    let body = crate::metrics::drill_exposition(j, totals);
    if let Some(gateway) = &config.metrics.pushgateway {
        let group = format!("job/drcheck_drill/runbook/{}", j.runbook.name);
        if let Err(e) = crate::metrics::push_group(gateway, &group, body.clone()).await {
            crate::errln!("drcheck: warning: {e:#}");
        }
    }
    if let Some(path) = &config.metrics.textfile {
        let file = path.with_file_name(format!("drcheck-drill-{}.prom", j.runbook.name));
        if let Err(e) = crate::metrics::write_textfile(&file, &body) {
            crate::errln!("drcheck: warning: {e:#}");
        }
    }
}

fn summary(j: &Journal) -> String {
    use drcheck_runbooks::drill_report::secs;
    let mut o = format!("\ndrill {:?}: {}\n", j.runbook.title, j.result.as_str().to_uppercase());
    o.push_str(&format!(
        "  hypothesis: {}\n",
        match j.hypothesis_held {
            Some(true) => "held",
            Some(false) => "did not hold",
            None => "not tested",
        }
    ));
    match (j.rto.measured_seconds, j.rto.objective_seconds) {
        (Some(m), Some(o_)) if !j.rto.complete => {
            o.push_str(&format!("  RTO: recovery did not finish ({} spent of {})\n", secs(m), secs(o_)))
        }
        (Some(m), Some(o_)) => o.push_str(&format!(
            "  RTO: {} of {} — {}\n",
            secs(m),
            secs(o_),
            if j.rto.met == Some(true) { "met" } else { "MISSED" }
        )),
        (Some(m), None) => o.push_str(&format!("  RTO: {} (no objective)\n", secs(m))),
        _ => {}
    }
    for r in &j.reasons {
        o.push_str(&format!("  why: {r}\n"));
    }
    if !j.action_items.is_empty() {
        o.push_str("  action items:\n");
        for i in &j.action_items {
            o.push_str(&format!("    - {i}\n"));
        }
    }
    o
}

/// First SIGINT/SIGTERM: stop the method, run the rollbacks. Second: stop the
/// rollbacks too. Third: exit at once — the running step's process group killed, the
/// journal so far written as `aborted`.
fn watch_signals(
    kill: KillSwitch,
    live: Live,
    latest: std::sync::Arc<std::sync::Mutex<Option<Journal>>>,
    journal_path: PathBuf,
) {
    use tokio::signal::unix::{SignalKind, signal};
    // Installed before the first step starts, so no signal can kill the drill unhandled.
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::warn!("cannot install signal handlers");
        return;
    };
    tokio::spawn(async move {
        for n in 0.. {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            match n {
                0 => live.note(&format!(
                    "{name}: stopping the running step; the rollbacks run next (again to stop them too)"
                )),
                1 => live.note(&format!("{name}: stopping the rollbacks")),
                _ => {
                    live.note(&format!("{name}: exiting now; the running step's processes are killed"));
                    drcheck_runbooks::steps::kill_running_groups();
                    let last = latest.lock().ok().and_then(|l| l.clone());
                    if let Some(mut j) = last {
                        j.result = DrillResult::Aborted;
                        j.interrupted_by = Some(format!("{name} (third signal: exited at once)"));
                        j.reasons.push("stopped by a third signal: the rest did not run".into());
                        let _ = write_journal(&j, &journal_path);
                    }
                    std::process::exit(Exit::Incomplete as i32)
                }
            }
            kill.trip(name);
        }
    });
}

/// `verify` steps: the same pipeline as `drcheck verify`, recorded in the history store.
struct PipelineVerifier {
    config: Config,
    history: History,
    /// The drill's name in leases.
    holder: String,
}

#[async_trait::async_trait]
impl drcheck_runbooks::Verifier for PipelineVerifier {
    async fn verify(
        &self,
        target: &str,
        backup: Option<&str>,
        cancel: CancellationToken,
    ) -> Result<VerifyOutcome, VerifyError> {
        let t = self.config.target(target).ok_or_else(|| VerifyError::UnknownTarget(target.into()))?;
        // The target's lease, as a scheduled or one-shot verification takes it: a drill
        // and the daemon never restore the same target at once.
        let ttl = crate::verify::lease_ttl(t);
        match self.history.acquire_lease(target, &self.holder, ttl).await {
            Ok(true) => {}
            Ok(false) => {
                let who = self.history.lease_holder(target).await.ok().flatten().unwrap_or_default();
                return Err(VerifyError::Busy { target: target.into(), holder: who });
            }
            Err(e) => return Err(VerifyError::Unavailable(format!("cannot take the lease on {target}: {e:#}"))),
        }
        let progress = Progress::new(false);
        let report = crate::verify::verify(&self.config, t, backup, &self.history, &cancel, &progress).await;
        let _ = self.history.release_lease(target, &self.holder).await;
        let sinks: Vec<String> = self.config.alerts.iter().map(|a| a.name.clone()).collect();
        if let Err(e) = self.history.record_with_alerts(&report, &sinks).await {
            tracing::warn!(target, "cannot record the drill's verification: {e:#}");
        }
        let failed: Vec<&str> =
            report.validators.iter().filter(|v| v.status == Status::Failed).map(|v| v.name.as_str()).collect();
        let mut summary = format!("verification {}", report.result.as_str());
        if let Some(b) = &report.backup {
            summary.push_str(&format!(" of {} ({} bytes)", b.key, b.size_bytes));
        }
        if let Some(m) = report.rto.measured_seconds {
            summary.push_str(&format!(", restored in {m:.1}s"));
        }
        if !failed.is_empty() {
            summary.push_str(&format!(", failed validators: {}", failed.join(", ")));
        }
        if let Some(e) = &report.error {
            summary.push_str(&format!(", {} failed: {}", e.stage, e.message));
        }
        Ok(VerifyOutcome {
            passed: report.result == RunResult::Passed,
            summary,
            backup_age_seconds: report.rpo.backup_age_seconds,
            report: serde_json::to_value(&report).map_err(|e| VerifyError::Unavailable(e.to_string()))?,
        })
    }
}

/// `--var NAME=VALUE`.
fn parse_var(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected NAME=VALUE, got {s:?}")),
    }
}
