//! `drcheck report`: restore-test evidence over a window of the history store and the
//! drill journals; `drcheck report verify`: an auditor's check of a report.

use crate::evidence::{self, RunEvidence, check, sign, signoff, stream};
use crate::exit::{CliError, Exit};
use crate::history::History;
use crate::run_report::timestamp;
use clap::{Args, Subcommand};
use drcheck_config::Config;
use std::path::Path;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct ReportArgs {
    #[command(subcommand)]
    pub command: Option<ReportCommand>,
    #[command(flatten)]
    pub make: MakeReportArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ReportCommand {
    /// Check a report's signature and that nothing in it changed; names what did.
    /// Needs no config.
    Verify {
        /// The report file (HTML, Markdown or JSON) to check.
        file: PathBuf,
        /// The signer's Ed25519 public key (PEM).
        #[arg(long)]
        public_key: PathBuf,
        /// A reviewer's sign-off of this report to check with it (repeatable).
        #[arg(long = "sign-off", requires = "reviewer_key")]
        sign_offs: Vec<PathBuf>,
        /// The reviewers' Ed25519 public key (PEM) the sign-offs were made with.
        #[arg(long)]
        reviewer_key: Option<PathBuf>,
    },
    /// Sign off a report as its reviewer: who, in what role, when, and which report (by
    /// the SHA-256 of its bytes), signed with the reviewer's own Ed25519 key, written to
    /// FILE.signoff.json (or --output). Needs no config.
    SignOff {
        /// The report file being signed off.
        file: PathBuf,
        /// The reviewer's name.
        #[arg(long)]
        by: String,
        /// The reviewer's role (e.g. "Head of Platform", "CISO").
        #[arg(long)]
        role: String,
        /// The reviewer's Ed25519 private key: a PKCS#8 PEM file (`openssl genpkey -algorithm ed25519`).
        #[arg(long)]
        key: PathBuf,
        /// Where to write the sign-off (default: next to the report, FILE.signoff.json).
        #[arg(long)]
        output: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct MakeReportArgs {
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

/// A window bound: RFC 3339, or a date (midnight UTC).
fn parse_time(flag: &str, s: &str) -> Result<SystemTime, CliError> {
    let with_time = if s.len() == 10 { format!("{s}T00:00:00Z") } else { s.to_string() };
    chrono::DateTime::parse_from_rfc3339(&with_time)
        .map(|d| SystemTime::UNIX_EPOCH + Duration::from_millis(d.timestamp_millis().max(0) as u64))
        .map_err(|e| CliError::usage(anyhow::anyhow!("--{flag} {s:?}: expected RFC 3339 or YYYY-MM-DD: {e}")))
}

pub(crate) async fn make(config: &Config, args: MakeReportArgs) -> Result<Exit, CliError> {
    let to = match &args.to {
        Some(t) => parse_time("to", t)?,
        None => SystemTime::now(),
    };
    let from = match &args.from {
        Some(f) => parse_time("from", f)?,
        None => {
            let d = drcheck_config::parse_duration(&args.since)
                .map_err(|e| CliError::usage(anyhow::anyhow!("--since {:?}: {e}", args.since)))?;
            to.checked_sub(d).unwrap_or(SystemTime::UNIX_EPOCH)
        }
    };
    if from >= to {
        return Err(CliError::usage(anyhow::anyhow!("the window is empty: --from is not before --to")));
    }
    // Load the key first: a report that was asked to be signed is never written unsigned.
    let key = match &config.evidence.signing_key {
        Some(k) => Some(sign::load_signing_key(k.expose()).map_err(CliError::usage)?),
        None => None,
    };
    let history = History::open(&config.state.url).await.map_err(CliError::incomplete)?;
    let known = history.target_names().await.map_err(CliError::incomplete)?;
    let names: Vec<String> = if args.targets.is_empty() {
        let mut n: Vec<String> = config.targets.iter().map(|t| t.name.clone()).collect();
        n.sort();
        n
    } else {
        for t in &args.targets {
            if config.target(t).is_none() && !known.contains(t) {
                return Err(CliError::usage(anyhow::anyhow!(
                    "no target named {t:?} in {} nor in the history",
                    config.path.display()
                )));
            }
        }
        args.targets.clone()
    };
    let (from_s, to_s) = (timestamp(from), timestamp(to));
    let (from_e, to_e) = (evidence::epoch(&from_s).unwrap_or(0.0), evidence::epoch(&to_s).unwrap_or(0.0));
    let mut drills = Vec::new();
    for dir in &args.drills {
        drills.extend(read_drills(dir, &from_s, &to_s)?);
    }
    drills.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.drill_id.cmp(&b.drill_id)));
    // One target at a time: first every target's summary (the document's head), then
    // each target's runs again as its section is written — never the whole window in
    // memory at once.
    let load = |name: String| {
        let (history, from_s, to_s) = (&history, from_s.clone(), to_s.clone());
        async move {
            let runs = history.each_between(&name, &from_s, &to_s, |r| RunEvidence::from_report(&r)).await?;
            let acknowledgements = history.acks_between(&name, &from_s, &to_s).await?;
            anyhow::Ok(evidence::TargetEvidence {
                acknowledgements,
                ..evidence::target_evidence(&name, runs, from_e, to_e)
            })
        }
    };
    let mut heads = Vec::with_capacity(names.len());
    // What the controls section measures, kept small (each run without its details).
    let asked = &config.evidence.controls;
    let mut facts = Vec::new();
    for name in &names {
        let t = load(name.clone()).await.map_err(CliError::incomplete)?;
        if !asked.is_empty() {
            let interval = config.target(name).and_then(|t| schedule_interval(t.schedule.as_ref())).unwrap_or(86_400.0);
            facts.push(evidence::controls::facts(&t, interval));
        }
        heads.push(evidence::TargetEvidence { runs: Vec::new(), ..t });
    }
    let canaries = if asked.is_empty() {
        Vec::new()
    } else {
        let mut c = history.canaries_between(&from_s, &to_s).await.map_err(CliError::incomplete)?;
        c.retain(|c| names.contains(&c.target));
        c
    };
    let controls = evidence::controls::section(&config.evidence.mapping, asked, &facts, &drills, &canaries);
    drop(facts);
    let frame = stream::Frame {
        format_version: evidence::FORMAT_VERSION,
        generated_at: timestamp(SystemTime::now()),
        from: from_s.clone(),
        to: to_s.clone(),
        heads,
        drills,
        controls,
    };
    let mut loader = |name: &str| Box::pin(load(name.to_string())) as futures::future::BoxFuture<'_, _>;
    let written = match &args.output {
        Some(path) => {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let fail = |e: std::io::Error| CliError::incomplete(anyhow::anyhow!("writing {}: {e}", path.display()));
            let tmp = tempfile::NamedTempFile::new_in(dir).map_err(fail)?;
            let mut out = std::io::BufWriter::new(tmp);
            stream::write(args.format, &frame, &mut loader, key.as_ref(), &mut out)
                .await
                .map_err(CliError::incomplete)?;
            let tmp = out.into_inner().map_err(|e| fail(e.into_error()))?;
            // Evidence is for sharing, and holds no secret.
            tmp.as_file().set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(fail)?;
            tmp.persist(path).map_err(|e| fail(e.error))?;
            Some(path)
        }
        None => {
            let mut out = StdoutWriter;
            stream::write(args.format, &frame, &mut loader, key.as_ref(), &mut out)
                .await
                .map_err(CliError::incomplete)?;
            None
        }
    };
    history.close().await;
    if let Some(path) = written {
        crate::errln!("report: {}{}", path.display(), if key.is_some() { " (signed)" } else { " (not signed)" });
    }
    Ok(Exit::Passed)
}

/// Standard output through `out!` (a closed pipe ends the output quietly).
struct StdoutWriter;

impl std::io::Write for StdoutWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        crate::out::write(&String::from_utf8_lossy(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The drill journals in `dir` whose drill started in the window. A JSON file that is
/// not a journal is skipped with a warning naming it; an unreadable directory is an error.
fn read_drills(dir: &Path, from: &str, to: &str) -> Result<Vec<evidence::DrillEvidence>, CliError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| CliError::usage(anyhow::anyhow!("--drills {}: {e}", dir.display())))?;
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let parsed = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).map_err(|e| e.to_string()));
        match parsed.as_ref().ok().and_then(|v| evidence::drill_from_journal(v, &name)) {
            Some(d) if d.started_at.as_str() >= from && d.started_at.as_str() < to => out.push(d),
            Some(_) => {}
            None => crate::errln!(
                "drcheck: warning: {} is not a drill journal ({}); left out",
                path.display(),
                parsed.err().unwrap_or_else(|| "no drill_id, runbook, started_at or result".into())
            ),
        }
    }
    Ok(out)
}

/// Exit 0: the signature verifies and the document is what was signed. Exit 1: it does
/// not, with every difference named. Exit 2: the file or the key cannot be read.
pub(crate) fn verify(
    file: &Path,
    public_key: &Path,
    sign_offs: &[PathBuf],
    reviewer_key: Option<&Path>,
) -> Result<Exit, CliError> {
    let key = sign::load_public_key(public_key).map_err(CliError::usage)?;
    let reviewer = reviewer_key.map(sign::load_public_key).transpose().map_err(CliError::usage)?;
    if let Err(e) = std::fs::metadata(file) {
        return Err(CliError::usage(anyhow::anyhow!("cannot read {}: {e}", file.display())));
    }
    let verdict = check::check_file(file, &key)
        .map_err(|e| CliError::usage(anyhow::anyhow!("cannot read {}: {e:#}", file.display())))?;
    let mut exit = Exit::Passed;
    if verdict.problems.is_empty() {
        crate::outln!(
            "{}: verified — {}, signed by key sha256:{}",
            file.display(),
            verdict.what,
            &sign::fingerprint(&key)[..16]
        );
    } else {
        crate::outln!("{}: NOT VERIFIED", file.display());
        for p in &verdict.problems {
            crate::outln!("  - {p}");
        }
        exit = Exit::Failed;
    }
    // Each sign-off: of exactly these bytes, by the reviewer's key.
    for path in sign_offs {
        let (Some(reviewer), Ok(s)) = (&reviewer, signoff::read(path)) else {
            crate::outln!("{}: NOT VERIFIED\n  - not a drcheck sign-off (or unreadable)", path.display());
            exit = Exit::Failed;
            continue;
        };
        let problems = signoff::check(file, &s, reviewer).map_err(CliError::usage)?;
        let a = &s.attestation;
        let who =
            format!("{} ({}) at {}", crate::out::shown(&a.by), crate::out::shown(&a.role), crate::out::shown(&a.at));
        if problems.is_empty() {
            crate::outln!("{}: sign-off verified — {who}, of this report", path.display());
        } else {
            crate::outln!("{}: sign-off NOT VERIFIED — {who}", path.display());
            for p in &problems {
                crate::outln!("  - {p}");
            }
            exit = Exit::Failed;
        }
    }
    Ok(exit)
}

/// `drcheck report sign-off`: a reviewer's signed attestation of `file`.
pub(crate) fn sign_off(file: &Path, by: &str, role: &str, key: &Path, output: Option<&Path>) -> Result<Exit, CliError> {
    let signing = sign::load_signing_key_as("--key", &key.display().to_string()).map_err(CliError::usage)?;
    let at = timestamp(SystemTime::now());
    let s = signoff::sign_off(file, by, role, &at, &signing).map_err(CliError::usage)?;
    let out = output.map(Path::to_path_buf).unwrap_or_else(|| signoff::default_path(file));
    let text = serde_json::to_string_pretty(&s).map_err(CliError::incomplete)? + "\n";
    std::fs::write(&out, text)
        .map_err(|e| CliError::incomplete(anyhow::anyhow!("cannot write {}: {e}", out.display())))?;
    crate::outln!(
        "{}: signed off by {} ({}) — report sha256:{}",
        out.display(),
        crate::out::shown(by),
        crate::out::shown(role),
        &s.attestation.report_sha256[..16]
    );
    Ok(Exit::Passed)
}

/// Seconds between two fires of `schedule` (from now), if it has one.
fn schedule_interval(schedule: Option<&drcheck_config::Schedule>) -> Option<f64> {
    let s = schedule?;
    let first = s.next_after(chrono::Utc::now())?;
    let second = s.next_after(first)?;
    Some((second - first).num_seconds().max(1) as f64)
}
