//! The daemon's and the reports' surface: idle clients cost the scheduler nothing, and a
//! signed report is exactly what was signed — nothing appended, nothing added.

use drcheck_e2e::hostile::{Lab, assert_ran};
use drcheck_e2e::{Daemon, drcheck, free_port, http_request, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn plain(body: &str) -> Vec<u8> {
    format!("--\n-- PostgreSQL database dump\n--\n\n-- Dumped from database version 15.18\n\n{body}").into_bytes()
}

/// 500 clients connect to the daemon and send nothing, with the daemon started under
/// a service manager's usual open-files limit (soft 256, hard 4096). `/healthz` still
/// answers within a second, and the schedule keeps running and recording its runs.
#[test]
fn idle_connections_starve_neither_the_api_nor_the_scheduler() {
    let lab = Lab::new();
    lab.put("ok.sql", &plain("create table t (id int);\ninsert into t values (1);\n"));
    let port = free_port();
    let config = lab.config("", "schedule = \"*/4 * * * * *\"");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"));
    std::fs::write(&config, text).unwrap();
    let _daemon = Daemon::start_limited(&config, port, &[], Some((256, 4096)));
    let idle: Vec<std::net::TcpStream> = (0..500)
        .map(|i| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("#{i}: {e}")))
        .collect();
    let runs_before = recorded_runs(port);
    for _ in 0..5 {
        let started = Instant::now();
        let (status, body) = http_request(port, "GET", "/healthz", &[], "");
        assert_eq!((status, body.as_str()), (200, "ok\n"));
        assert!(started.elapsed() < Duration::from_secs(1), "/healthz took {:?}", started.elapsed());
        std::thread::sleep(Duration::from_millis(500));
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    while recorded_runs(port) < runs_before + 2 {
        assert!(Instant::now() < deadline, "the scheduled runs stopped while clients sat idle");
        std::thread::sleep(Duration::from_millis(500));
    }
    // The idle clients were really held open all along.
    let still_open = idle.iter().filter(|s| s.peer_addr().is_ok()).count();
    assert_eq!(still_open, 500);
}

/// Runs the daemon recorded, as `GET /api/v1/runs` (no token configured) says.
fn recorded_runs(port: u16) -> usize {
    let (status, body) = http_request(port, "GET", "/api/v1/runs?limit=1000", &[], "");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["runs"].as_array().map_or(0, |r| r.iter().filter(|r| r["result"] == "passed").count())
}

fn signing_keys(dir: &Path) -> (PathBuf, PathBuf) {
    let (key, public) = (dir.join("ev-key.pem"), dir.join("ev-pub.pem"));
    assert!(
        Command::new("openssl")
            .args(["genpkey", "-algorithm", "ed25519", "-out"])
            .arg(&key)
            .status()
            .unwrap()
            .success()
    );
    let ok =
        Command::new("openssl").args(["pkey", "-pubout", "-in"]).arg(&key).arg("-out").arg(&public).status().unwrap();
    assert!(ok.success());
    // The key is drcheck's (in the unprivileged pass, not the test's root).
    let (uid, gid) = drcheck_e2e::hostile::drcheck_user();
    std::os::unix::fs::chown(&key, Some(uid), Some(gid)).unwrap();
    (key, public)
}

/// `report verify` of `file`: the exit code and what it printed.
fn verify_report(file: &Path, public: &Path) -> (Option<i32>, String) {
    let (out, _) = drcheck(
        &["report", "verify", &file.display().to_string(), "--public-key", &public.display().to_string()],
        &[],
        Duration::from_secs(60),
    );
    (out.status.code(), format!("{}{}", stdout(&out), stderr(&out)))
}

/// A signed report with content appended after its trailer (a style that hides the real
/// body and a line saying every run passed), a second trailer, or a JSON field nobody
/// signed: each is a named failure. The untouched report verifies, and the signature
/// of each tampered one still holds — only the bytes around it differ.
#[test]
fn signed_reports_are_exactly_what_was_signed() {
    let lab = Lab::new();
    let (key, public) = signing_keys(lab.root.path());
    lab.put("bad.sql", &plain("select 1/0;\n"));
    let config = lab.config("", "");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!("[evidence]\nsigning_key = \"{}\"\n", key.display()));
    std::fs::write(&config, text).unwrap();
    let (code, run, all) = lab.verify(&config, "bad.sql");
    assert_ran(&run, code, 1, &all);
    let c = config.display().to_string();
    for format in ["html", "markdown", "json"] {
        let file = lab.root.path().join(format!("report.{format}"));
        let (out, _) = drcheck(
            &["--config", &c, "report", "--format", format, "--output", &file.display().to_string()],
            &[],
            Duration::from_secs(60),
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let original = std::fs::read_to_string(&file).unwrap();
        let (code, said) = verify_report(&file, &public);
        assert_eq!(code, Some(0), "{format}: {said}");

        let tampered: Vec<(&str, String, &str)> = if format == "json" {
            let mut v: serde_json::Value = serde_json::from_str(&original).unwrap();
            v["evidence"]["note"] = "All runs passed".into();
            vec![(
                "field",
                serde_json::to_string_pretty(&v).unwrap(),
                "field /evidence/note is not part of the signed report",
            )]
        } else {
            let trailer_at = original.find("<!-- drcheck-evidence v1").unwrap();
            let trailer = &original[trailer_at..];
            vec![
                (
                    "appended",
                    format!("{original}<style>body>*{{display:none}}</style>\n<p>All runs passed.</p>\n"),
                    "follow the signed evidence trailer",
                ),
                ("second trailer", format!("{original}{trailer}"), "a second evidence trailer"),
            ]
        };
        for (what, doc, expected) in tampered {
            std::fs::write(&file, &doc).unwrap();
            let (code, said) = verify_report(&file, &public);
            assert_eq!(code, Some(1), "{format}/{what} verified: {said}");
            assert!(said.contains(expected), "{format}/{what}: {said}");
            assert!(!said.contains("signature does not verify"), "{format}/{what}: the seal itself holds: {said}");
        }
    }
}
