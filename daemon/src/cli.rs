//! Command-line parsing and dispatch. Every path ends in an [`Exit`] code; errors are
//! printed once, with their cause chain.

use crate::commands;
use crate::exit::{CliError, Exit};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "drcheck",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("DRCHECK_COMMIT"), ")"),
    about = "Proves PostgreSQL backups restore — fast enough and fresh enough"
)]
pub struct Cli {
    /// Config file [default: drcheck.toml].
    #[arg(long, global = true, env = "DRCHECK_CONFIG")]
    pub config: Option<PathBuf>,
    /// More logging on stderr (-v info, -vv debug). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Restore and validate the latest backup of one target, or of all.
    Verify(VerifyArgs),
    /// Run unattended: schedules, /metrics, health, the trigger API, alerts.
    Daemon,
    /// Work with the backups in a target's store.
    #[command(subcommand)]
    Backups(BackupsCommand),
    /// Show past runs from the history store.
    History(HistoryArgs),
    /// Each target's last verdict, RTO and RPO against their targets, proven backups,
    /// next run and last failure — the status page's table, from the history store.
    /// Exits 0 when every target passed, 1 when one failed, 3 otherwise.
    Status {
        /// Print JSON (`{"targets": [...]}`) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Work with the config file.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// The alert outbox: pending alerts and dead letters.
    #[command(subcommand)]
    Alerts(AlertsCommand),
    /// Deployment manifests generated from the config.
    #[command(subcommand)]
    Deploy(DeployCommand),
    /// DR-drill runbooks: rehearse recovery with timed, checked, reversible steps.
    #[command(subcommand)]
    Drill(DrillCommand),
    /// The per-target leases that keep two runs off one target: list them, release one.
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// The primary's heartbeat, the clock that proves where a point-in-time replay stopped.
    #[command(subcommand)]
    Heartbeat(HeartbeatCommand),
    /// Restore-test evidence for audits (HTML, Markdown, JUnit, JSON), signed with
    /// [evidence] signing_key; `report verify` checks a report.
    Report(ReportArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// drcheck's manual: with --dir, a page for drcheck and one for each command
    /// (drcheck.1, drcheck-verify.1, drcheck-backups-fetch.1, …) written there, e.g.
    /// `drcheck man --dir /usr/local/share/man/man1`; without, drcheck.1 on stdout.
    Man {
        /// Where to write every page.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ReportArgs {
    #[command(subcommand)]
    pub command: Option<ReportCommand>,
    #[command(flatten)]
    pub make: MakeReportArgs,
}

#[derive(Debug, Subcommand)]
pub enum ReportCommand {
    /// Check a report's signature and that nothing in it changed; names what did.
    /// Needs no config.
    Verify {
        /// The report file (HTML, Markdown or JSON) to check.
        file: PathBuf,
        /// The signer's Ed25519 public key (PEM).
        #[arg(long)]
        public_key: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct MakeReportArgs {
    /// Runs that started this long ago until now (e.g. 90d, 12h).
    #[arg(long, default_value = "90d", conflicts_with = "from")]
    pub since: String,
    /// Window start: RFC 3339 or YYYY-MM-DD (UTC).
    #[arg(long)]
    pub from: Option<String>,
    /// Window end (exclusive; default now): RFC 3339 or YYYY-MM-DD (UTC).
    #[arg(long)]
    pub to: Option<String>,
    /// Only these targets (repeatable); default every target of the config.
    #[arg(long = "target")]
    pub targets: Vec<String>,
    /// The document to write: html (people), markdown, junit (CI systems), json (tools).
    #[arg(long, value_enum, default_value = "html")]
    pub format: crate::evidence::render::Format,
    /// Write here instead of stdout.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// A directory of drill journals (`drcheck drill run` writes them; repeatable).
    #[arg(long = "drills")]
    pub drills: Vec<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum DrillCommand {
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
pub struct DrillRunArgs {
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

fn parse_var(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected NAME=VALUE, got {s:?}")),
    }
}

#[derive(Debug, Subcommand)]
pub enum HeartbeatCommand {
    /// Print the SQL that creates a target's [target.heartbeat] table on its primary, an
    /// INSERT-only writer role, and the pg_cron line for fleets without `drcheck daemon`.
    Setup {
        /// The target (its [target.heartbeat] table); every target with one when absent.
        #[arg(long)]
        target: Option<String>,
        /// The writer role the daemon's heartbeat.url logs in as.
        #[arg(long, default_value = "drcheck_heartbeat")]
        role: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum DeployCommand {
    /// One CronJob per target (or --target), as YAML on stdout.
    Kubernetes {
        /// Only this target's CronJob (default: every target, as one YAML stream).
        #[arg(long, conflicts_with = "all")]
        target: Option<String>,
        /// Every target, one file each plus a kustomization.yaml, into --output-dir.
        #[arg(long, requires = "output_dir")]
        all: bool,
        /// Where --all writes its files.
        #[arg(long)]
        output_dir: Option<PathBuf>,
        /// The drcheck image the CronJobs run (required: a tag you built and pushed,
        /// e.g. registry.example.com/drcheck:0.1.0).
        #[arg(long)]
        image: String,
        /// The Secret holding the environment (${VAR}s of the config, AWS credentials).
        #[arg(long, default_value = "drcheck-secrets")]
        secret: String,
        /// Each CronJob also reads a Secret of its own, named like the CronJob
        /// (drcheck-TARGET): put each target's credentials there and only what all share
        /// in --secret, so no pod holds another target's password.
        #[arg(long)]
        secret_per_target: bool,
        /// The ConfigMap holding drcheck.toml.
        #[arg(long, default_value = "drcheck-config")]
        config_map: String,
        /// Scratch size where [target.kubernetes] scratch is not set and no backup can
        /// be listed to size it from.
        #[arg(long, default_value = "50Gi")]
        scratch_size: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum LeaseCommand {
    /// Every lease: target, holder, when it expires, and whether its holder still runs
    /// (known on the holder's own machine only), as JSON.
    List,
    /// Release a target's lease — one left by a run that died (a deleted pod, a lost
    /// node). Refuses a holder that still runs on this machine, and one on another
    /// machine whose lease is live, unless --force.
    Release {
        /// The target whose lease to release.
        #[arg(long)]
        target: String,
        /// Release it even from a holder that may still be running.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AlertsCommand {
    /// Pending alerts, dead letters and the count delivered, as JSON.
    List,
    /// Deliver pending alerts now (for up to --seconds).
    Deliver {
        /// Keep delivering (with back-off) for at most this many seconds.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
    },
    /// Move every pending alert of a sink to the dead letters (a sink removed for good).
    DeadLetter {
        /// The sink's name, as `drcheck alerts list` shows it.
        #[arg(long)]
        sink: String,
    },
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Verify only this target (default: every target, one after another).
    #[arg(long)]
    pub target: Option<String>,
    /// Verify this backup key instead of the latest (needs --target).
    #[arg(long, requires = "target")]
    pub backup: Option<String>,
    /// Print `{"runs": [...]}` instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Check the backup tool's repository only (the `repository` validator: the tool's
    /// own verification, WAL continuity), without restoring; not recorded as a run.
    #[arg(long, conflicts_with = "backup")]
    pub integrity_only: bool,
}

#[derive(Debug, Subcommand)]
pub enum BackupsCommand {
    /// List a target's backups, newest first.
    List {
        /// Only this target (default: every target).
        #[arg(long)]
        target: Option<String>,
        /// Print JSON (`{"targets": [...]}`) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Download a backup (the latest, or --backup KEY) with drcheck's concurrent fetcher.
    Fetch {
        /// The target whose store holds the backup.
        #[arg(long)]
        target: String,
        /// The backup's key (default: the latest).
        #[arg(long)]
        backup: Option<String>,
        /// Where to write it.
        #[arg(long)]
        output: PathBuf,
        /// Undo its compression and encryption as `verify` does (gzip, zstd, lz4, age,
        /// OpenPGP, with the target's [target.decrypt] keys): what lands is what
        /// pg_restore or psql reads.
        #[arg(long)]
        decode: bool,
    },
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only this target's runs.
    #[arg(long)]
    pub target: Option<String>,
    /// How many runs to show.
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Print `{"runs": [...]}` instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the config and print it as drcheck understands it, secrets redacted.
    Check,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, matches!(cli.command, Command::Daemon));
    harden_process();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            crate::errln!("drcheck: cannot start the async runtime: {e}");
            return Exit::Incomplete.into();
        }
    };
    let exit = match runtime.block_on(run(cli)) {
        Ok(exit) => exit,
        Err(CliError { exit, error }) => {
            crate::errln!("drcheck: {error:#}");
            exit
        }
    };
    // Blocking work still running gets a bounded time: an unpacking thread told to stop
    // ends within a chunk, and a drill's manual step may still be blocked reading the
    // terminal (it must not hold the exit). Sandbox teardowns run on threads of their
    // own and are waited for, so nothing is left.
    runtime.shutdown_timeout(std::time::Duration::from_secs(3));
    drcheck_restore::sandbox::finish_teardowns();
    exit.into()
}

/// drcheck holds secrets (the primary's password, storage keys, the API token) in its
/// memory and environment. Non-dumpable, its `/proc` files (`environ`, `mem`) are out of
/// reach of other processes of the same user — such as a sandbox server when drcheck
/// runs unprivileged — and it cannot be ptraced by them. The restore's processes are
/// started through the containment helper, which is this binary.
fn harden_process() {
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(error = %e, "cannot make drcheck non-dumpable");
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| std::path::PathBuf::from("/proc/self/exe"));
    drcheck_restore::contain::install_helper(exe);
}

pub async fn run(cli: Cli) -> Result<Exit, CliError> {
    match &cli.command {
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut cmd, "drcheck", &mut out);
            crate::out!("{}", String::from_utf8_lossy(&out));
            return Ok(Exit::Passed);
        }
        Command::Man { dir: Some(dir) } => {
            let cmd = <Cli as clap::CommandFactory>::command();
            clap_mangen::generate_to(cmd, dir).map_err(|e| {
                CliError::incomplete(anyhow::anyhow!("writing the manual pages into {}: {e}", dir.display()))
            })?;
            let pages = std::fs::read_dir(dir).map(|d| d.filter_map(Result::ok).count()).unwrap_or(0);
            crate::errln!("man: {pages} pages in {}", dir.display());
            return Ok(Exit::Passed);
        }
        Command::Man { dir: None } => {
            let mut out = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
                .render(&mut out)
                .map_err(|e| CliError::incomplete(anyhow::anyhow!("rendering the manual page: {e}")))?;
            crate::out!("{}", String::from_utf8_lossy(&out));
            return Ok(Exit::Passed);
        }
        _ => {}
    }
    let path = cli.config_path();
    if !matches!(cli.command, Command::Daemon) {
        drcheck_restore::breaker::mark_one_shot();
    }
    // A drill loads the config only if it needs one (verify steps, sql on a target).
    let command = match cli.command {
        Command::Drill(cmd) => return commands::drill::run(cli.config.as_deref(), cmd).await,
        // An auditor verifies a report without drcheck's config.
        Command::Report(ReportArgs { command: Some(ReportCommand::Verify { file, public_key }), .. }) => {
            return commands::report::verify(&file, &public_key);
        }
        other => other,
    };
    // Manifests describe a pod elsewhere: its Secret's variables and its files are not here.
    let config = if matches!(command, Command::Deploy(_)) {
        drcheck_config::load_shape(&path)?
    } else {
        drcheck_config::load(&path)?
    };
    if matches!(command, Command::Daemon | Command::Deploy(_)) {
        for w in crate::verify::config_warnings(&config, matches!(command, Command::Deploy(_))) {
            tracing::warn!("{w}");
        }
    }
    match command {
        Command::Verify(args) => commands::verify::run(&config, args).await,
        Command::Daemon => commands::daemon::run(config).await,
        Command::Backups(BackupsCommand::List { target, json }) => {
            commands::backups::list(&config, target.as_deref(), json).await
        }
        Command::Backups(BackupsCommand::Fetch { target, backup, output, decode }) => {
            commands::backups::fetch(&config, &target, backup.as_deref(), &output, decode).await
        }
        Command::History(args) => commands::history::run(&config, args).await,
        Command::Status { json } => commands::status::run(&config, json).await,
        Command::Config(ConfigCommand::Check) => commands::config_check::run(&config),
        Command::Alerts(cmd) => commands::alerts::run(&config, cmd).await,
        Command::Lease(cmd) => commands::lease::run(&config, cmd).await,
        Command::Heartbeat(HeartbeatCommand::Setup { target, role }) => {
            commands::heartbeat::setup(&config, target.as_deref(), &role)
        }
        Command::Deploy(DeployCommand::Kubernetes {
            target,
            all: _,
            output_dir,
            image,
            secret,
            secret_per_target,
            config_map,
            scratch_size,
        }) => {
            let o = commands::deploy::Options { image, secret, secret_per_target, config_map, scratch_size };
            commands::deploy::run(&config, target.as_deref(), output_dir.as_deref(), &o).await
        }
        Command::Drill(cmd) => commands::drill::run(Some(&path), cmd).await,
        Command::Report(args) => commands::report::make(&config, args.make).await,
        Command::Completions { .. } | Command::Man { .. } => unreachable!("answered before the config is loaded"),
    }
}

impl Cli {
    /// `--config`, `DRCHECK_CONFIG`, or `./drcheck.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.config.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG))
    }
}

pub const DEFAULT_CONFIG: &str = "drcheck.toml";

fn init_logging(verbose: u8, daemon: bool) {
    // sqlx reports every query over 1 s as a warning; long validator queries are
    // expected, so those reports only show with -vv. A daemon speaks at INFO by default
    // (start-up, each run's start and verdict, reloads, shutdown) — its own lines, not
    // its libraries'.
    let default = match verbose {
        // aws-config warns once per credential provider it tries (IMDS, …) and aws-runtime
        // of a missing AWS_CONFIG_FILE, at every client: the run's
        // error says what to set; -v shows the providers.
        0 if daemon => {
            "warn,drcheck=info,drcheck_restore=info,drcheck_validators=info,sqlx::query=error,aws_config=error,aws_runtime=error"
        }
        0 => "warn,sqlx::query=error,aws_config=error,aws_runtime=error",
        1 => "info,sqlx::query=error",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        // On a closed stderr it would say so with `eprintln!`, which panics there.
        .log_internal_errors(false)
        .init();
}

#[cfg(test)]
mod help_tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every option and argument of every command says what it is for in `--help`.
    #[test]
    fn every_option_has_a_help_line() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() {
                    missing.push(format!("{path} {} (the command)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "drcheck", &mut missing);
        assert!(missing.is_empty(), "no help line: {missing:#?}");
    }
}
