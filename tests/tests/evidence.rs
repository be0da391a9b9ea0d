//! Evidence for audits and the status page, end to end: real verifications (a pass, a
//! failure on a truncated backup, a run aborted by SIGTERM mid-restore) and a real drill
//! feed `drcheck report` in all four formats; the HTML is loaded in headless Chromium,
//! the JUnit XML read by a real JUnit parser (`junitparser`); a signed report verifies,
//! and an edited one fails naming the run. The daemon's status page is rendered by
//! Chromium with the right verdicts, and asks for the token when one is configured.

use base64::Engine as _;
use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{Daemon, Throttle, drcheck, free_port, http_get, http_request, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(300);

/// A config with three targets on the scene's bucket: `orders` (its good dump),
/// `ledger` (a truncated dump) and `archive` (a ~15 MB dump behind a slow link).
fn three_targets(scene: &Scene, slow: &str, extra: &str) -> PathBuf {
    let text = format!(
        r#"[state]
url = "sqlite://{root}/history.db"
[sandbox]
scratch_dir = "{scratch}"
[storage.backups]
kind = "s3"
bucket = "{bucket}"
endpoint = "{endpoint}"
path_style = true
[storage.slow]
kind = "s3"
bucket = "{bucket}"
endpoint = "{slow}"
path_style = true
part_size = "64KiB"
[[target]]
name = "orders"
storage = "backups"
prefix = "orders/"
rto = "10m"
rpo = "26h"
[[target]]
name = "ledger"
storage = "backups"
prefix = "ledger/"
rto = "10m"
rpo = "26h"
[[target]]
name = "archive"
storage = "slow"
prefix = "archive/"
rto = "10m"
rpo = "26h"
{extra}
"#,
        root = scene.root.path().display(),
        scratch = scene.scratch.display(),
        bucket = scene.bucket,
        endpoint = scene.s3.endpoint(),
    );
    let path = scene.root.path().join(format!("{}.toml", drcheck_e2e::unique("evidence")));
    std::fs::write(&path, text).unwrap();
    path
}

/// Uploads the truncated `ledger` backup and the big `archive` one.
fn upload_backups(scene: &Scene) {
    let bytes = std::fs::read(&scene.dump).unwrap();
    let truncated = scene.root.path().join("ledger.dump");
    std::fs::write(&truncated, &bytes[..bytes.len() * 2 / 3]).unwrap();
    scene.s3.upload(&truncated, &scene.bucket, "ledger/ledger-1.dump");
    scene.upload_big_backup();
    let big = scene.root.path().join("big.dump");
    scene.s3.upload(&big, &scene.bucket, "archive/archive-1.dump");
}

fn verify(config: &Path, target: &str, scene: &Scene) -> Option<i32> {
    let c = config.display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--target", target], &scene.env(), LIMIT);
    out.status.code()
}

/// Verifies `archive` and sends SIGTERM once pg_restore runs: an aborted run.
fn abort_archive(config: &Path, scene: &Scene) {
    let mut child = Command::new(drcheck_e2e::drcheck_bin())
        .args(["--config", &config.display().to_string(), "verify", "--target", "archive"])
        .envs(drcheck_e2e::AWS_ENV)
        .envs(scene.env())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = scene.wait_for_pg_restore(Duration::from_secs(90));
    let status = drcheck_e2e::proc::signal_and_wait(
        &mut child,
        nix::sys::signal::Signal::SIGTERM,
        Duration::from_secs(60),
        "drcheck verify",
    );
    assert!(started.is_some(), "the archive restore never started");
    assert_eq!(status.code(), Some(3), "an interrupted run exits 3");
}

/// Chromium's DOM of `url` after it rendered the page (scripts, layout and all).
fn chromium_dom(url: &str, profile: &Path) -> String {
    let out = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=2000", "--dump-dom", url])
        .output()
        .expect("chromium runs (scripts/setup.sh installs it)");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(dom.contains("<html"), "chromium rendered nothing: {}", String::from_utf8_lossy(&out.stderr));
    dom
}

/// A screenshot by Chromium; returns its size in bytes.
fn chromium_screenshot(url: &str, png: &Path, profile: &Path, width: u32, height: u32) -> u64 {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(url)
        .output()
        .unwrap();
    assert!(png.exists(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::metadata(png).unwrap().len()
}

fn chromium() -> &'static str {
    if Path::new("/usr/bin/chromium").exists() { "/usr/bin/chromium" } else { "chromium-browser" }
}

/// The `<tr …>` element of the DOM whose id is `id`.
fn row<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no element {id} in {dom}"));
    let start = dom[..at].rfind("<tr").unwrap();
    let end = at + dom[at..].find("</tr>").unwrap();
    &dom[start..end]
}

fn signing_keys(dir: &Path) -> (PathBuf, PathBuf) {
    let (key, public) = (dir.join("evidence-key.pem"), dir.join("evidence-pub.pem"));
    let ok = Command::new("openssl").args(["genpkey", "-algorithm", "ed25519", "-out"]).arg(&key).status().unwrap();
    assert!(ok.success());
    let ok =
        Command::new("openssl").args(["pkey", "-pubout", "-in"]).arg(&key).arg("-out").arg(&public).status().unwrap();
    assert!(ok.success());
    (key, public)
}

#[test]
fn a_signed_report_shows_passed_failed_aborted_runs_and_a_drill_in_every_format() {
    let scene = Scene::start();
    upload_backups(&scene);
    let slow = Throttle::start(scene.s3.port, 400_000);
    let (key, public) = signing_keys(scene.root.path());
    let config = three_targets(
        &scene,
        &slow.endpoint(),
        &format!("[evidence]\nsigning_key = \"{}\"\ncontrols = [\"soc2\", \"dora\"]", key.display()),
    );
    assert_eq!(verify(&config, "orders", &scene), Some(0));
    assert_eq!(verify(&config, "ledger", &scene), Some(1));
    abort_archive(&config, &scene);

    // A drill, its journal in its own directory.
    let drills = scene.root.path().join("drills");
    std::fs::create_dir_all(&drills).unwrap();
    let runbook = scene.root.path().join("game-day.yaml");
    std::fs::write(
        &runbook,
        "title: Quarterly game day\nobjectives: {rto: 10m}\nsteps:\n  - name: fail over\n    recovery: true\n    shell: {command: \"true\"}\n",
    )
    .unwrap();
    let report = drills.join("drill.html");
    let (out, _) = drcheck(
        &["drill", "run", &runbook.display().to_string(), "--yes", "--report", &report.display().to_string()],
        &[],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    std::fs::write(drills.join("notes.json"), "{\"not\": \"a journal\"}").unwrap();

    let c = config.display().to_string();
    let dir = scene.root.path().join("reports");
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = std::collections::BTreeMap::new();
    for format in ["json", "markdown", "junit", "html"] {
        let file = dir.join(format!("evidence.{format}"));
        let (out, _) = drcheck(
            &[
                "--config",
                &c,
                "report",
                "--since",
                "1d",
                "--format",
                format,
                "--drills",
                &drills.display().to_string(),
                "--output",
                &file.display().to_string(),
            ],
            &[],
            LIMIT,
        );
        assert_eq!(out.status.code(), Some(0), "{format}: {}", stderr(&out));
        assert!(stderr(&out).contains("(signed)"), "{}", stderr(&out));
        assert!(stderr(&out).contains("notes.json is not a drill journal"), "{}", stderr(&out));
        files.insert(format, file);
    }

    // JSON: every verdict and the drill, the summaries.
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&files["json"]).unwrap()).unwrap();
    let e = &j["evidence"];
    let target = |n: &str| e["targets"].as_array().unwrap().iter().find(|t| t["name"] == n).unwrap().clone();
    let (orders, ledger, archive) = (target("orders"), target("ledger"), target("archive"));
    assert_eq!(orders["runs"][0]["result"], "passed", "{orders}");
    assert_eq!(orders["summary"]["pass_rate"], 1.0);
    assert!(
        orders["runs"][0]["validators"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "full_read" && v["covered"]["tables"].as_f64() > Some(0.0))
    );
    assert_eq!(ledger["runs"][0]["result"], "failed", "{ledger}");
    assert!(ledger["runs"][0]["reasons"][0].as_str().unwrap().contains("end of file"), "{ledger}");
    assert_eq!(ledger["summary"]["pass_rate"], 0.0);
    assert_eq!(archive["runs"][0]["result"], "aborted", "{archive}");
    assert_eq!(e["drills"][0]["result"], "completed", "{e}");
    assert_eq!(e["drills"][0]["title"], "Quarterly game day");
    assert!(j["signature"]["signature"].is_string());
    let run_id = |t: &serde_json::Value| t["runs"][0]["run_id"].as_str().unwrap().to_string();
    // The controls asked for: each with what it asks, met and missed measures, the runs
    // that prove them and every miss named.
    let soc2 = &e["controls"][0];
    assert_eq!((soc2["framework"].as_str(), e["controls"][1]["framework"].as_str()), (Some("soc2"), Some("dora")));
    let a13 = soc2["controls"].as_array().unwrap().iter().find(|c| c["id"] == "A1.3").unwrap().clone();
    assert!(a13["asks"].as_str().unwrap().contains("tested"), "{a13}");
    assert_eq!(a13["verdict"], "missed", "ledger never passed: {a13}");
    let measure = |n: &str| a13["measures"].as_array().unwrap().iter().find(|m| m["name"] == n).unwrap().clone();
    let schedule = measure("verified_on_schedule");
    let misses: Vec<&str> = schedule["misses"].as_array().unwrap().iter().filter_map(|m| m.as_str()).collect();
    assert!(misses.iter().any(|m| m.starts_with("ledger: no passing verification")), "{schedule}");
    assert!(!misses.iter().any(|m| m.starts_with("orders:")), "{schedule}");
    assert!(schedule["proof"].as_array().unwrap().iter().any(|p| *p == run_id(&orders).as_str()), "{schedule}");
    let drills_run = measure("drills_run");
    assert_eq!(drills_run["verdict"], "met", "{drills_run}");
    assert_eq!(measure("restores_isolated")["verdict"], "met", "{a13}");
    // No canary ran in the window: a miss, said so (never "met" for want of one).
    let canaries = measure("canaries_caught");
    assert_eq!(canaries["verdict"], "missed", "{a13}");
    assert!(canaries["misses"][0].as_str().unwrap().starts_with("no canary ran in the window"), "{canaries}");

    // Markdown: a row per run with its verdict.
    let md = std::fs::read_to_string(&files["markdown"]).unwrap();
    for (t, verdict) in [(&orders, "passed"), (&ledger, "failed"), (&archive, "aborted")] {
        let line = md.lines().find(|l| l.contains(&run_id(t))).unwrap_or_else(|| panic!("{md}"));
        assert!(line.contains(&format!("**{verdict}**")), "{line}");
    }
    assert!(md.contains("| **completed** |"), "{md}");

    // JUnit, read by junitparser: a suite per target and one for drills.
    let parsed = Command::new("python3").args(["-c", JUNIT_READER]).arg(&files["junit"]).output().unwrap();
    assert!(parsed.status.success(), "junitparser: {}", String::from_utf8_lossy(&parsed.stderr));
    let suites: serde_json::Value = serde_json::from_slice(&parsed.stdout).unwrap();
    assert_eq!(suites["orders"], serde_json::json!(["passed"]), "{suites}");
    assert_eq!(suites["ledger"], serde_json::json!(["failure"]), "{suites}");
    assert_eq!(suites["archive"], serde_json::json!(["error"]), "{suites}");
    assert_eq!(suites["DR drills"], serde_json::json!(["passed"]), "{suites}");
    let soc2_suite =
        suites.as_object().unwrap().iter().find(|(k, _)| k.starts_with("controls: SOC 2")).unwrap().1.clone();
    assert!(soc2_suite.as_array().unwrap().iter().any(|r| r == "failure"), "{suites}");

    // HTML, rendered by Chromium.
    let profile = scene.root.path().join("chromium");
    let dom = chromium_dom(&format!("file://{}", files["html"].display()), &profile);
    assert!(row(&dom, "summary-ledger").contains("<td>1</td>"), "{dom}");
    assert!(row(&dom, &format!("run-{}", run_id(&orders))).contains("data-result=\"passed\""));
    assert!(row(&dom, "control-soc2-A1.3").contains("data-verdict=\"missed\""), "{dom}");
    let failed = row(&dom, &format!("run-{}", run_id(&ledger)));
    assert!(failed.contains("data-result=\"failed\"") && failed.contains("end of file"), "{failed}");
    assert!(row(&dom, &format!("run-{}", run_id(&archive))).contains("data-result=\"aborted\""));
    assert!(row(&dom, &format!("drill-{}", e["drills"][0]["drill_id"].as_str().unwrap())).contains("completed"));
    assert!(dom.matches("class=\"rto-trend\"").count() == 3, "an RTO trend per target");
    assert!(dom.contains("class=\"point passed\""), "the passing run is drawn in the trend");
    let png = scene.root.path().join("report.png");
    assert!(chromium_screenshot(&format!("file://{}", files["html"].display()), &png, &profile, 1200, 1400) > 10_000);
    if let Ok(docs) = std::env::var("DRCHECK_DOCS_SCREENSHOTS") {
        std::fs::copy(&png, Path::new(&docs).join("report.png")).unwrap();
    }

    // Every format verifies with the public key…
    let p = public.display().to_string();
    for (format, file) in &files {
        let (out, _) = drcheck(&["report", "verify", &file.display().to_string(), "--public-key", &p], &[], LIMIT);
        assert_eq!(out.status.code(), Some(0), "{format}: {}{}", stdout(&out), stderr(&out));
        assert!(stdout(&out).contains("verified — 3 runs of 3 targets and 1 drills"), "{}", stdout(&out));
    }
    // A reviewer signs the HTML off with a key of their own: it verifies with the report,
    // and the same sign-off offered for another report (the JSON one) does not.
    let reviewer = scene.root.path().join("reviewer");
    std::fs::create_dir_all(&reviewer).unwrap();
    let (reviewer_key, reviewer_public) = signing_keys(&reviewer);
    let html_file = files["html"].display().to_string();
    let (out, _) = drcheck(
        &[
            "report",
            "sign-off",
            &html_file,
            "--by",
            "Ada Auditor",
            "--role",
            "CISO",
            "--key",
            &reviewer_key.display().to_string(),
        ],
        &[],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let signoff = format!("{html_file}.signoff.json");
    let attested: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&signoff).unwrap()).unwrap();
    assert_eq!(attested["attestation"]["by"], "Ada Auditor");
    let rp = reviewer_public.display().to_string();
    let with_signoff = |report: &str| {
        drcheck(
            &["report", "verify", report, "--public-key", &p, "--sign-off", &signoff, "--reviewer-key", &rp],
            &[],
            LIMIT,
        )
        .0
    };
    let out = with_signoff(&html_file);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("sign-off verified — Ada Auditor (CISO)"), "{}", stdout(&out));
    let out = with_signoff(&files["json"].display().to_string());
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("the sign-off is of another report"), "{}", stdout(&out));
    // …and one changed byte in a run fails, naming that run.
    let html = std::fs::read_to_string(&files["html"]).unwrap();
    let aborted_row = row(&html, &format!("run-{}", run_id(&archive))).to_string();
    let edited_row = aborted_row.replacen("data-result=\"aborted\"", "data-result=\"passed\"", 1);
    let edited = dir.join("edited.html");
    std::fs::write(&edited, html.replacen(&aborted_row, &edited_row, 1)).unwrap();
    let (out, _) = drcheck(&["report", "verify", &edited.display().to_string(), "--public-key", &p], &[], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains(&format!("run {} of archive", run_id(&archive))), "{}", stdout(&out));
    let json = std::fs::read_to_string(&files["json"]).unwrap();
    let edited = dir.join("edited.json");
    let ledger_reason = ledger["runs"][0]["reasons"][0].as_str().unwrap();
    let changed = serde_json::to_string(ledger_reason).unwrap();
    // One byte replaced: the reason's last letter ("file" → "filf").
    let mut one_byte = changed.clone().into_bytes();
    let at = one_byte.len() - 2;
    one_byte[at] = if one_byte[at] == b'f' { b'g' } else { b'f' };
    let one_byte = String::from_utf8(one_byte).unwrap();
    assert_eq!(json.matches(&changed).count(), 1);
    std::fs::write(&edited, json.replacen(&changed, &one_byte, 1)).unwrap();
    let (out, _) = drcheck(&["report", "verify", &edited.display().to_string(), "--public-key", &p], &[], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("run {} of ledger", run_id(&ledger))) && stdout(&out).contains("changed"),
        "{}",
        stdout(&out)
    );
    // Another key: not verified.
    let other = scene.root.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let (_, other_public) = signing_keys(&other);
    let (out, _) = drcheck(
        &[
            "report",
            "verify",
            &files["junit"].display().to_string(),
            "--public-key",
            &other_public.display().to_string(),
        ],
        &[],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("it was made with key"), "{}", stdout(&out));
    // The key never appears in a report.
    let pem = std::fs::read_to_string(&key).unwrap();
    let secret_line = pem.lines().nth(1).unwrap();
    for file in files.values() {
        assert!(!std::fs::read_to_string(file).unwrap().contains(secret_line));
    }
}

/// Reads a JUnit file with junitparser; prints {suite: [result of each case]}.
const JUNIT_READER: &str = r#"
import json, sys
from junitparser import JUnitXml, Failure, Error, Skipped
xml = JUnitXml.fromfile(sys.argv[1])
out = {}
for suite in xml:
    results = []
    for case in suite:
        kinds = [type(r).__name__.lower() for r in case.result]
        results.append(kinds[0] if kinds else "passed")
    out[suite.name] = results
print(json.dumps(out))
"#;

#[test]
fn the_status_page_renders_each_targets_verdict_in_chromium_and_asks_for_the_token() {
    let scene = Scene::start();
    upload_backups(&scene);
    let slow = Throttle::start(scene.s3.port, 50_000_000);
    let port = free_port();
    let listen = format!("[metrics]\nlisten = \"127.0.0.1:{port}\"");
    let config = three_targets(&scene, &slow.endpoint(), &listen);
    assert_eq!(verify(&config, "orders", &scene), Some(0));
    assert_eq!(verify(&config, "ledger", &scene), Some(1));
    // Issue 48: archive failed once with a very long reason (a check's unbroken output),
    // then passed: its row shows the pass and that last failure.
    let long = three_targets(
        &scene,
        &slow.endpoint(),
        &format!("[[target.check]]\nname = \"long\"\nsql = \"select repeat('ab', 1500)\"\nexpect = \"x\"\n{listen}"),
    );
    assert_eq!(verify(&long, "archive", &scene), Some(1));
    assert_eq!(verify(&config, "archive", &scene), Some(0));
    // Issue 34: the same table in the terminal, from the history store (no daemon).
    let c = config.display().to_string();
    let (out, _) = drcheck_e2e::drcheck(&["--config", &c, "status"], &scene.env(), Duration::from_secs(60));
    let table = drcheck_e2e::stdout(&out);
    assert_eq!(out.status.code(), Some(1), "a target failed: {table}{}", drcheck_e2e::stderr(&out));
    assert!(table.starts_with("2 of 3 targets passed"), "{table}");
    let ledger = table.lines().position(|l| l.starts_with("ledger ")).expect("a ledger row");
    assert!(table.lines().nth(ledger).unwrap().contains(" failed "), "{table}");
    let why = table.lines().nth(ledger + 1).unwrap();
    assert!(why.starts_with("    last failure: ") && why.contains("end of file"), "{table}");
    let (out, _) = drcheck_e2e::drcheck(&["--config", &c, "status", "--json"], &scene.env(), Duration::from_secs(60));
    let j: serde_json::Value = serde_json::from_str(&drcheck_e2e::stdout(&out)).unwrap();
    assert_eq!(j["targets"].as_array().unwrap().len(), 3, "{j}");
    let mut d = Daemon::start(&config, port, &scene.env());
    let profile = scene.root.path().join("chromium");
    let dom = chromium_dom(&format!("http://127.0.0.1:{port}/"), &profile);
    assert!(row(&dom, "target-orders").contains("data-verdict=\"passed\""), "{dom}");
    assert!(row(&dom, "target-archive").contains("data-verdict=\"passed\""), "{dom}");
    let ledger = row(&dom, "target-ledger");
    assert!(ledger.contains("data-verdict=\"failed\"") && ledger.contains("end of file"), "{ledger}");
    assert!(dom.contains("2 of 3 targets passed"), "{dom}");
    assert!(dom.contains("http-equiv=\"refresh\""), "refreshes itself");
    assert!(!dom.contains("<script"), "no JavaScript");
    // Issue 48: laid out by Chromium at 1280 px, every verdict badge is one unbroken box,
    // the last-failure cells are bounded, and nothing overflows the window. (The page has
    // no script: a copy of it measures itself.)
    let html = http_get(port, "/");
    let probe = r#"<script>addEventListener('load',()=>{const r=[];
document.querySelectorAll('.verdict').forEach(e=>r.push('badge '+e.textContent+' '+e.getClientRects().length+' '+Math.round(e.getBoundingClientRect().height)));
document.querySelectorAll('td.why').forEach(e=>{const b=e.getBoundingClientRect();r.push('why '+Math.round(b.width)+' '+Math.round(b.height))});
r.push('scroll '+document.documentElement.scrollWidth);
const p=document.createElement('pre');p.id='layout';p.textContent=r.join('\n');document.body.appendChild(p)});</script>"#;
    let measured = scene.root.path().join("status-measured.html");
    std::fs::write(&measured, html.replacen("</head>", &format!("{probe}</head>"), 1)).unwrap();
    let out = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--window-size=1280,900", "--virtual-time-budget=2000", "--dump-dom"])
        .arg(format!("file://{}", measured.display()))
        .output()
        .unwrap();
    let laid = String::from_utf8_lossy(&out.stdout).into_owned();
    let layout = laid
        .split("<pre id=\"layout\">")
        .nth(1)
        .and_then(|r| r.split("</pre>").next())
        .unwrap_or_else(|| panic!("{laid}"));
    let mut badges = 0;
    for line in layout.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "badge" => {
                badges += 1;
                assert_eq!(f[2], "1", "a verdict badge broke over lines: {layout}");
                assert!(f[3].parse::<u32>().unwrap() < 40, "a badge taller than one line: {layout}");
            }
            "why" => assert!(f[1].parse::<u32>().unwrap() <= 500 && f[2].parse::<u32>().unwrap() <= 260, "{layout}"),
            "scroll" => assert!(f[1].parse::<u32>().unwrap() <= 1280, "the page overflows 1280 px: {layout}"),
            _ => {}
        }
    }
    assert!(badges >= 3, "{layout}");
    let page = chromium_dom(&format!("http://127.0.0.1:{port}/targets/ledger"), &profile);
    assert!(page.contains("class=\"rto-trend\"") && page.contains("data-result=\"failed\""), "{page}");
    // A phone-sized screenshot and a desktop one (kept under docs/ when asked).
    for (name, w, h) in [("status.png", 1200, 700), ("status-phone.png", 390, 844)] {
        let png = scene.root.path().join(name);
        assert!(chromium_screenshot(&format!("http://127.0.0.1:{port}/"), &png, &profile, w, h) > 5_000);
        if let Ok(docs) = std::env::var("DRCHECK_DOCS_SCREENSHOTS") {
            std::fs::copy(&png, Path::new(&docs).join(name)).unwrap();
        }
    }
    d.terminate(Duration::from_secs(30));

    // With [api] token: the page asks for it (HTTP Basic), and opens with it.
    let token = drcheck_e2e::unique("tok");
    let text = std::fs::read_to_string(&config).unwrap() + &format!("\n[api]\ntoken = \"{token}\"\n");
    std::fs::write(&config, text).unwrap();
    let mut d = Daemon::start(&config, port, &scene.env());
    let (status, body) = http_request(port, "GET", "/", &[], "");
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains("ledger"), "{body}");
    let (status, _) = http_request(port, "GET", "/targets/ledger", &[], "");
    assert_eq!(status, 401);
    let encode = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let basic = format!("Basic {}", encode(&format!("auditor:{token}")));
    let (status, body) = http_request(port, "GET", "/", &[("Authorization", &basic)], "");
    assert_eq!(status, 200);
    assert!(body.contains("data-verdict=\"failed\""), "{body}");
    let wrong = format!("Basic {}", encode("auditor:nope"));
    assert_eq!(http_request(port, "GET", "/", &[("Authorization", &wrong)], "").0, 401);
    let bearer = format!("Bearer {token}");
    assert_eq!(http_request(port, "GET", "/targets/orders", &[("Authorization", &bearer)], "").0, 200);
    // /healthz and /metrics stay open.
    assert_eq!(http_request(port, "GET", "/healthz", &[], "").0, 200);
    d.terminate(Duration::from_secs(30));
}

/// A backup controls the text of its own failure: here a plain SQL backup whose failing
/// statement carries markup, echoed by psql into the run's reason. The status page and
/// the HTML report show it as text: Chromium's DOM has no element the backup wrote, and
/// the page's title is drcheck's. (Remove `esc` from either and this fails.)
#[test]
fn markup_in_a_backups_error_stays_text_on_the_status_page_and_in_the_report() {
    let scene = Scene::start();
    // No single quote: it sits in an SQL string literal.
    let attack = r#"<script>document.title=`pwned`</script><img id="injected" src="x" onerror="document.title=`pwned`"><b id="bold">"#;
    let sql = format!("--\n-- PostgreSQL database dump\n--\nSET statement_timeout = 0;\nSELECT '{attack}'::int;\n");
    let file = scene.root.path().join("evil.sql");
    std::fs::write(&file, sql).unwrap();
    scene.s3.upload(&file, &scene.bucket, "ledger/evil.sql");
    let port = free_port();
    let config = three_targets(&scene, &scene.s3.endpoint(), &format!("[metrics]\nlisten = \"127.0.0.1:{port}\""));
    assert_eq!(verify(&config, "ledger", &scene), Some(1), "the backup's own statement fails the run");
    let c = config.display().to_string();
    let (out, _) = drcheck(&["--config", &c, "history", "--json"], &[], LIMIT);
    assert!(stdout(&out).contains("<script>document.title"), "the reason carries the markup: {}", stdout(&out));

    let report = scene.root.path().join("evidence.html");
    let (out, _) =
        drcheck(&["--config", &c, "report", "--format", "html", "--output", &report.display().to_string()], &[], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut d = Daemon::start(&config, port, &scene.env());
    let profile = scene.root.path().join("chromium");
    for url in [
        format!("file://{}", report.display()),
        format!("http://127.0.0.1:{port}/"),
        format!("http://127.0.0.1:{port}/targets/ledger"),
    ] {
        let dom = chromium_dom(&url, &profile);
        assert!(dom.contains("&lt;script&gt;document.title"), "{url}: the markup is shown as text: {dom}");
        assert!(!dom.contains("<script>document.title"), "{url}: a script element from the backup: {dom}");
        // Text keeps its quotes when serialized; an element would start with a real `<`.
        assert!(
            !dom.contains("<img id=\"injected\"") && !dom.contains("<b id=\"bold\""),
            "{url}: elements from the backup: {dom}"
        );
        assert!(!dom.contains("<title>pwned</title>"), "{url}: the backup's script ran: {dom}");
    }
    d.terminate(Duration::from_secs(30));
}
