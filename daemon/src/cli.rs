//! Command-line parsing and dispatch. Every path ends in an [`Exit`] code; errors are
//! printed once, with their cause chain.

use crate::commands;
use crate::commands::alerts::AlertsCommand;
use crate::commands::backups::BackupsCommand;
use crate::commands::config_check::ConfigCommand;
use crate::commands::deploy::DeployCommand;
use crate::commands::drill::DrillCommand;
use crate::commands::heartbeat::HeartbeatCommand;
use crate::commands::history::HistoryArgs;
use crate::commands::lease::LeaseCommand;
use crate::commands::report::{ReportArgs, ReportCommand};
use crate::commands::storage::StorageCommand;
use crate::commands::verify::VerifyArgs;
use crate::exit::{CliError, Exit};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "drcheck",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("DRCHECK_COMMIT"), ")"),
    about = "Proves PostgreSQL backups restore — fast enough and fresh enough"
)]
pub(crate) struct Cli {
    /// Config file [default: drcheck.toml].
    #[arg(long, global = true, env = "DRCHECK_CONFIG")]
    pub config: Option<PathBuf>,
    /// More logging on stderr (-v info, -vv debug). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// `drcheck daemon`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct DaemonArgs {
    /// Serve only this target (repeatable): its schedule, its follower, its metrics —
    /// one daemon per target, as `deploy kubernetes` runs a follower's StatefulSet.
    /// Default: every target of the config.
    #[arg(long)]
    pub target: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Restore and validate the latest backup of one target, or of all.
    Verify(VerifyArgs),
    /// Run unattended: schedules, /metrics, health, the trigger API, alerts.
    Daemon(DaemonArgs),
    /// Prove drcheck would notice a bad backup: defective copies of each target's newest
    /// proven backup (made in scratch space, never in the store) must each fail, named
    /// by the check that owns the defect; the canary alert goes through every sink.
    /// Exits 0 when every defect was caught and every sink took the alert, 1 when a
    /// defect passed, 3 otherwise (nothing could be made for any target included).
    Canary(crate::commands::canary::CanaryArgs),
    /// Work with the backups in a target's store.
    #[command(subcommand)]
    Backups(BackupsCommand),
    /// What the store's credentials may do to the backups, and how the bucket protects them.
    #[command(subcommand)]
    Storage(StorageCommand),
    /// Decisions about a target's WAL archive.
    #[command(subcommand)]
    Archive(crate::commands::archive::ArchiveCommand),
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

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, matches!(cli.command, Command::Daemon(_)));
    harden_process();
    // A verification is a deep chain of futures (a daemon's canary runs one inside its
    // own): worker threads get the main thread's 8 MiB, not tokio's 2 MiB.
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().thread_stack_size(8 << 20).build() {
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
    drcheck_restore::finish_teardowns();
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

/// The command the manual pages are made of: without clap's `help` subcommand, which
/// has no page of its own (`drcheck help X` shows what `drcheck-X(1)` says), so no page
/// refers to a `drcheck-help(1)` that does not exist.
fn man_command() -> clap::Command {
    <Cli as clap::CommandFactory>::command().disable_help_subcommand(true)
}

pub(crate) async fn run(cli: Cli) -> Result<Exit, CliError> {
    match &cli.command {
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut cmd, "drcheck", &mut out);
            crate::out!("{}", String::from_utf8_lossy(&out));
            return Ok(Exit::Passed);
        }
        Command::Man { dir: Some(dir) } => {
            std::fs::create_dir_all(dir).map_err(|e| {
                CliError::incomplete(anyhow::anyhow!("creating {} for the manual pages: {e}", dir.display()))
            })?;
            clap_mangen::generate_to(man_command(), dir).map_err(|e| {
                CliError::incomplete(anyhow::anyhow!("writing the manual pages into {}: {e}", dir.display()))
            })?;
            let pages = std::fs::read_dir(dir).map(|d| d.filter_map(Result::ok).count()).unwrap_or(0);
            crate::errln!("man: {pages} pages in {}", dir.display());
            return Ok(Exit::Passed);
        }
        Command::Man { dir: None } => {
            let mut out = Vec::new();
            clap_mangen::Man::new(man_command())
                .render(&mut out)
                .map_err(|e| CliError::incomplete(anyhow::anyhow!("rendering the manual page: {e}")))?;
            crate::out!("{}", String::from_utf8_lossy(&out));
            return Ok(Exit::Passed);
        }
        _ => {}
    }
    let path = cli.config_path();
    if !matches!(cli.command, Command::Daemon(_)) {
        drcheck_restore::breaker::mark_one_shot();
    }
    // A drill loads the config only if it needs one (verify steps, sql on a target).
    let command = match cli.command {
        Command::Drill(cmd) => return commands::drill::run(cli.config.as_deref(), cmd).await,
        // An auditor verifies a report without drcheck's config.
        Command::Report(ReportArgs {
            command: Some(ReportCommand::Verify { file, public_key, sign_offs, reviewer_key }),
            ..
        }) => {
            return commands::report::verify(&file, &public_key, &sign_offs, reviewer_key.as_deref());
        }
        // A reviewer signs off without drcheck's config too.
        Command::Report(ReportArgs {
            command: Some(ReportCommand::SignOff { file, by, role, key, output }), ..
        }) => {
            return commands::report::sign_off(&file, &by, &role, &key, output.as_deref());
        }
        other => other,
    };
    // Manifests describe a pod elsewhere: its Secret's variables and its files are not here.
    let config = if matches!(command, Command::Deploy(_)) {
        drcheck_config::load_shape(&path)?
    } else {
        drcheck_config::load(&path)?
    };
    if matches!(command, Command::Daemon(_) | Command::Deploy(_)) {
        for w in crate::verify::config_warnings(&config, matches!(command, Command::Deploy(_))) {
            tracing::warn!("{w}");
        }
    }
    match command {
        Command::Verify(args) => commands::verify::run(&config, args).await,
        Command::Daemon(args) => commands::daemon::run(config, args.target).await,
        Command::Canary(args) => commands::canary::run(&config, args).await,
        Command::Backups(BackupsCommand::List { target, json }) => {
            commands::backups::list(&config, target.as_deref(), json).await
        }
        Command::Backups(BackupsCommand::Fetch { target, backup, output, decode }) => {
            commands::backups::fetch(&config, &target, backup.as_deref(), &output, decode).await
        }
        Command::Backups(BackupsCommand::Forget { target, key, reason, by }) => {
            commands::backups::forget(&config, &target, &key, &reason, by.as_deref()).await
        }
        Command::Archive(commands::archive::ArchiveCommand::AcknowledgeGap { target, from, to, reason, by }) => {
            commands::archive::acknowledge_gap(&config, &target, &from, &to, &reason, by.as_deref()).await
        }
        Command::Storage(StorageCommand::Check { target, json }) => {
            commands::storage::check(&config, target.as_deref(), json).await
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
            let stores = commands::deploy::store_mounts(&config);
            let o = commands::deploy::Options { image, secret, secret_per_target, config_map, scratch_size, stores };
            commands::deploy::run(&config, target.as_deref(), output_dir.as_deref(), &o).await
        }
        Command::Drill(cmd) => commands::drill::run(Some(&path), cmd).await,
        Command::Report(args) => commands::report::make(&config, args.make).await,
        Command::Completions { .. } | Command::Man { .. } => unreachable!("answered before the config is loaded"),
    }
}

impl Cli {
    /// `--config`, `DRCHECK_CONFIG`, or `./drcheck.toml`.
    pub(crate) fn config_path(&self) -> PathBuf {
        self.config.clone().unwrap_or_else(|| PathBuf::from(commands::DEFAULT_CONFIG))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 48: every page a manual page refers to (`drcheck-X(1)`) is generated, the
    /// top page printed by `drcheck man` included.
    #[test]
    fn every_manual_page_referred_to_exists() {
        let dir = tempfile::tempdir().unwrap();
        clap_mangen::generate_to(man_command(), dir.path()).unwrap();
        let mut top = Vec::new();
        clap_mangen::Man::new(man_command()).render(&mut top).unwrap();
        let mut texts = vec![String::from_utf8(top).unwrap()];
        for e in std::fs::read_dir(dir.path()).unwrap() {
            texts.push(std::fs::read_to_string(e.unwrap().path()).unwrap());
        }
        let mut referred = std::collections::BTreeSet::new();
        for t in &texts {
            let t = t.replace("\\-", "-");
            for (i, _) in t.match_indices("(1)") {
                let start = t[..i].rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).map_or(0, |s| s + 1);
                let name = &t[start..i];
                if name.starts_with("drcheck") {
                    referred.insert(name.to_string());
                }
            }
        }
        assert!(referred.len() > 20 && referred.contains("drcheck-verify"), "{referred:?}");
        for name in &referred {
            assert!(dir.path().join(format!("{name}.1")).is_file(), "{name}(1) is referred to but not generated");
        }
    }
}
