//! `drcheck report`: restore-test evidence over a window of the history store and the
//! drill journals; `drcheck report verify`: an auditor's check of a report.

use crate::cli::MakeReportArgs;
use crate::evidence::render::{self, Format};
use crate::evidence::sign::{self, Embedded};
use crate::evidence::{self, Evidence, RunEvidence};
use crate::exit::{CliError, Exit};
use crate::history::History;
use crate::report::timestamp;
use drcheck_config::Config;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// A window bound: RFC 3339, or a date (midnight UTC).
fn parse_time(flag: &str, s: &str) -> Result<SystemTime, CliError> {
    let with_time = if s.len() == 10 { format!("{s}T00:00:00Z") } else { s.to_string() };
    chrono::DateTime::parse_from_rfc3339(&with_time)
        .map(|d| SystemTime::UNIX_EPOCH + Duration::from_millis(d.timestamp_millis().max(0) as u64))
        .map_err(|e| CliError::usage(anyhow::anyhow!("--{flag} {s:?}: expected RFC 3339 or YYYY-MM-DD: {e}")))
}

pub async fn make(config: &Config, args: MakeReportArgs) -> Result<Exit, CliError> {
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
    let runs = history.between(&from_s, &to_s).await.map_err(CliError::incomplete)?;
    history.close().await;
    let (from_e, to_e) = (evidence::epoch(&from_s).unwrap_or(0.0), evidence::epoch(&to_s).unwrap_or(0.0));
    let targets = names
        .iter()
        .map(|name| {
            let mine = runs.iter().filter(|r| &r.target == name).map(RunEvidence::from_report).collect();
            evidence::target_evidence(name, mine, from_e, to_e)
        })
        .collect();
    let mut drills = Vec::new();
    for dir in &args.drills {
        drills.extend(read_drills(dir, &from_s, &to_s)?);
    }
    drills.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.drill_id.cmp(&b.drill_id)));
    let evidence = Evidence {
        format_version: evidence::FORMAT_VERSION,
        generated_at: timestamp(SystemTime::now()),
        from: from_s,
        to: to_s,
        targets,
        drills,
    };
    let signature = key.as_ref().map(|k| sign::sign(&evidence, k));
    let doc = render::document(args.format, &Embedded { evidence, signature });
    match &args.output {
        Some(path) => {
            write_atomically(path, doc.as_bytes())
                .map_err(|e| CliError::incomplete(anyhow::anyhow!("writing {}: {e}", path.display())))?;
            crate::errln!("report: {}{}", path.display(), if key.is_some() { " (signed)" } else { " (not signed)" });
        }
        None => crate::out!("{doc}"),
    }
    Ok(Exit::Passed)
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

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    // Evidence is for sharing, and holds no secret.
    tmp.as_file().set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Exit 0: the signature verifies and the document is what was signed. Exit 1: it does
/// not, with every difference named. Exit 2: the file or the key cannot be read.
pub fn verify(file: &Path, public_key: &Path) -> Result<Exit, CliError> {
    let key = sign::load_public_key(public_key).map_err(CliError::usage)?;
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::usage(anyhow::anyhow!("cannot read {}: {e}", file.display())))?;
    let (problems, what) = check(&text, &key);
    if problems.is_empty() {
        crate::outln!("{}: verified — {what}, signed by key sha256:{}", file.display(), &sign::fingerprint(&key)[..16]);
        return Ok(Exit::Passed);
    }
    crate::outln!("{}: NOT VERIFIED", file.display());
    for p in &problems {
        crate::outln!("  - {p}");
    }
    Ok(Exit::Failed)
}

/// Every problem with the document under `key`, and what it covers when it verifies.
/// The whole file must be what drcheck renders from the signed content, byte for byte
/// (trailing whitespace aside): the visible body, one trailer, nothing after it.
pub fn check(text: &str, key: &ed25519_dalek::VerifyingKey) -> (Vec<String>, String) {
    let (embedded, format, body) = if text.trim_start().starts_with('{') {
        match serde_json::from_str::<Embedded>(text) {
            Ok(e) => (e, Format::Json, None),
            Err(e) => {
                return (
                    vec![format!("the JSON report does not parse (line {}, column {}): {e}", e.line(), e.column())],
                    String::new(),
                );
            }
        }
    } else {
        match sign::split(text) {
            Ok((body, e)) => (e, render::detect(body), Some(body)),
            Err(e) => return (vec![e.to_string()], String::new()),
        }
    };
    let mut problems = sign::verify(&embedded, key);
    match body {
        Some(body) => {
            let expected = render::body(format, &embedded.evidence);
            if expected != body {
                problems.push(first_difference(&expected, body, &embedded.evidence));
            } else if let Some(p) = trailer_problem(&text[body.len()..], &embedded) {
                problems.push(p);
            }
        }
        None => {
            // The document must be byte for byte what drcheck writes for this content:
            // a field serde would skip when reading is a field nobody signed.
            let expected = render::document(Format::Json, &embedded);
            if expected.trim_end() != text.trim_end() {
                problems.push(json_difference(&expected, text));
            }
        }
    }
    let runs: usize = embedded.evidence.targets.iter().map(|t| t.runs.len()).sum();
    let what = format!(
        "{runs} runs of {} targets and {} drills from {} to {}",
        embedded.evidence.targets.len(),
        embedded.evidence.drills.len(),
        embedded.evidence.from,
        embedded.evidence.to
    );
    (problems, what)
}

/// Anything about the trailer (and what follows it) that is not exactly what drcheck
/// writes: bytes appended after it are not covered by the signature, whatever they say.
fn trailer_problem(rest: &str, embedded: &Embedded) -> Option<String> {
    let expected = sign::trailer(embedded);
    if rest.trim_end() == expected.trim_end() {
        return None;
    }
    let after = rest.strip_prefix(expected.trim_end()).map(str::trim);
    Some(match after {
        Some(extra) if extra.contains(sign::TRAILER_START) => {
            "a second evidence trailer follows the signed one: only one report is signed".to_string()
        }
        Some(extra) => format!(
            "{} bytes follow the signed evidence trailer: they are not part of the signed report ({:?}…)",
            extra.len(),
            extra.chars().take(60).collect::<String>()
        ),
        None => "the evidence trailer is not the one drcheck writes for its content".to_string(),
    })
}

/// Where a JSON report departs from what drcheck writes for its signed content.
fn json_difference(expected: &str, got: &str) -> String {
    let (Ok(exp), Ok(have)) =
        (serde_json::from_str::<serde_json::Value>(expected), serde_json::from_str::<serde_json::Value>(got))
    else {
        return "the JSON report is not the one drcheck writes for its content".into();
    };
    match value_difference("", &exp, &have) {
        Some(d) => d,
        None => "the JSON report's formatting is not the one drcheck writes (it was re-encoded)".into(),
    }
}

fn value_difference(at: &str, exp: &serde_json::Value, have: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    match (exp, have) {
        (Value::Object(e), Value::Object(h)) => {
            if let Some(k) = h.keys().find(|k| !e.contains_key(*k)) {
                return Some(format!("field {at}/{k} is not part of the signed report"));
            }
            e.iter().find_map(|(k, v)| match h.get(k) {
                None => Some(format!("field {at}/{k} is missing")),
                Some(hv) => value_difference(&format!("{at}/{k}"), v, hv),
            })
        }
        (Value::Array(e), Value::Array(h)) if e.len() == h.len() => {
            e.iter().zip(h).enumerate().find_map(|(i, (a, b))| value_difference(&format!("{at}/{i}"), a, b))
        }
        (a, b) if a == b => None,
        _ => Some(format!("{} differs from the signed content", if at.is_empty() { "/" } else { at })),
    }
}

/// Where the visible text departs from what the signed content draws, naming the run
/// (or drill) of that line when it belongs to one.
fn first_difference(expected: &str, got: &str, e: &Evidence) -> String {
    let (exp, have): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), got.lines().collect());
    let i = exp.iter().zip(have.iter()).position(|(a, b)| a != b).unwrap_or(exp.len().min(have.len()));
    let line = exp.get(i).copied().unwrap_or("");
    // The runs and drills, named as the seal names them.
    if let Some(item) = sign::items(e).into_iter().find(|item| line.contains(&item.id)) {
        return format!(
            "the visible text of {} {} of {} (started {}) differs from the signed content (line {})",
            item.kind,
            item.id,
            item.of,
            item.started_at,
            i + 1
        );
    }
    format!(
        "the visible text differs from the signed content at line {}: {:?}",
        i + 1,
        have.get(i).copied().unwrap_or("(missing)")
    )
}
