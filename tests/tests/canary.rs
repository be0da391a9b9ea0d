//! End-to-end: the canary (issue 38). A dump target and a base-backup target with a WAL
//! archive, both proven by a verification; the daemon's canary makes defective copies
//! of each in its scratch space — a changed row, a flipped page, a segment left out —
//! and every one is caught and named by the check that owns it; the canary alert
//! reaches a webhook and a real Alertmanager, labelled `canary`, and resolves; the
//! targets' runs, coverage and last success are untouched, and the store gets no write
//! (moto's request log). With `checksums` disabled the changed row passes and
//! `DrcheckCanaryUndetected` is paged; a sink on a closed port makes
//! `DrcheckAlertPathBroken`. A dump of a primary without commit times: the changed row
//! is seen but not provable — `inconclusive`, and no page.

use drcheck_e2e::recorder::Recorder;
use drcheck_e2e::{
    ClusterOptions, Daemon, PgPrimary, PromService, S3Server, TempRoot, drcheck, free_port, http_get, s3_writes,
    sample, stderr, stdout, unique,
};
use std::path::Path;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(300);
const PASSWORD: &str = "canary-verifier";

/// The webhook's alerts from request `from` on: (alertname, state, canary).
fn hooked(hook: &Recorder, from: usize) -> Vec<(String, String, bool)> {
    hook.requests()
        .iter()
        .skip(from)
        .filter_map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).ok())
        .map(|a| {
            (
                a["alertname"].as_str().unwrap_or_default().to_string(),
                a["state"].as_str().unwrap_or_default().to_string(),
                a["canary"] == true,
            )
        })
        .collect()
}

/// `drcheck canary --target T --json` with `config`: its one canary, after checking the exit code.
fn canary_of(config: &str, target: &str, code: i32) -> serde_json::Value {
    let (out, _) = drcheck(&["--config", config, "canary", "--target", target, "--json"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(code), "{}\n{}", stdout(&out), stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["canaries"][0].clone()
}

fn defect<'a>(canary: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    canary["defects"].as_array().unwrap().iter().find(|d| d["defect"] == name).unwrap_or_else(|| panic!("{canary:#}"))
}

#[test]
fn canaries_are_caught_paged_and_never_counted_as_verifications() {
    let root = TempRoot::new();
    // A server of its own: its request log is this test's alone.
    let s3 = S3Server::start_own(&root);
    let archive = root.pg_dir("archive");
    // Commit times tell a row changed on the primary since a dump from a defect.
    let primary = PgPrimary::start_archiving_with(&root, &archive, &[("track_commit_timestamp", "on")]);
    primary.psql("postgres", &format!("create role verifier login password '{PASSWORD}'"));
    primary.psql("postgres", "grant pg_read_all_data to verifier");
    primary.psql("postgres", "create database orders");
    primary.psql(
        "orders",
        "create table items (id int primary key, note text not null);
         insert into items select g, 'note number ' || g from generate_series(1, 2000) g;
         create table tiny (id int primary key, v int); insert into tiny values (1, 1)",
    );
    // The backup's own code must not decide what the canary changes: a trigger that
    // undoes any change of items.note, enabled ALWAYS (it fires even for a replica's
    // session), would make the changed row pass and page for nothing.
    primary.psql(
        "orders",
        "create function public.keep_note() returns trigger language plpgsql as
           $$ begin new.note := old.note; return new; end $$;
         create trigger keep before update on items for each row execute function public.keep_note();
         alter table items enable always trigger keep",
    );
    let bucket = unique("canary");
    s3.make_bucket(&bucket);
    let bb = root.path().join("bb");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-z", "-X", "stream", "--checkpoint=fast"]);
    for f in ["base.tar.gz", "pg_wal.tar.gz", "backup_manifest"] {
        s3.upload(&bb.join(f), &bucket, &format!("phys/b1/{f}"));
    }
    // WAL after the backup: six segments, a row each.
    for i in 2..8 {
        primary.psql("orders", &format!("insert into tiny values ({i}, {i})"));
        primary.archive_all(&archive);
    }
    for e in std::fs::read_dir(&archive).unwrap().filter_map(Result::ok) {
        s3.upload(&e.path(), &bucket, &format!("wal/{}", e.file_name().to_string_lossy()));
    }
    // The dump, of the primary as it stays.
    let dump = root.path().join("orders.dump");
    primary.tool("pg_dump", &["-Fc", "-f", &dump.display().to_string(), "orders"]);
    s3.upload(&dump, &bucket, "dumps/orders-1.dump");

    let hook = Recorder::start(200);
    let am = PromService::alertmanager(&root, free_port());
    let scratch = root.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    drcheck_e2e::make_world_enterable(&scratch);
    let port = free_port();
    let url = primary.url("verifier", PASSWORD, "orders");
    let config = |daemon: &str, dump_extra: &str, sinks: &str| {
        let path = root.path().join(unique("drcheck") + ".toml");
        std::fs::write(
            &path,
            format!(
                "[state]\nurl = \"sqlite://{r}/history.db\"\n[sandbox]\nscratch_dir = \"{s}\"\n\
                 [metrics]\nlisten = \"127.0.0.1:{port}\"\ntextfile = \"{r}/drcheck.prom\"\n\
                 [daemon]\n{daemon}\n\
                 [storage.s3]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{e}\"\npath_style = true\n\
                 [[alert]]\nname = \"hook\"\nkind = \"webhook\"\nurl = \"{hook}\"\n\
                 [[alert]]\nname = \"am\"\nkind = \"alertmanager\"\nurl = \"{am}\"\n{sinks}\n\
                 [[target]]\nname = \"cluster\"\nstorage = \"s3\"\nprefix = \"phys/\"\nwal_prefix = \"wal/\"\n\
                 primary = \"{url}\"\nrto = \"10m\"\nrpo = \"30d\"\n\
                 [[target]]\nname = \"orders\"\nstorage = \"s3\"\nprefix = \"dumps/\"\n\
                 primary = \"{url}\"\nrto = \"10m\"\nrpo = \"30d\"\n{dump_extra}\n",
                r = root.path().display(),
                s = scratch.display(),
                e = s3.endpoint(),
                hook = hook.url(),
                am = am.url(),
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let textfile = || std::fs::read_to_string(root.path().join("drcheck.prom")).unwrap_or_default();

    const WITHIN: &str = "canary_alert_within = \"20s\"";
    let plain = config(WITHIN, "", "");
    // Nothing proven yet: nothing to copy — skipped and said, exit 3, nothing paged.
    let (out, _) = drcheck(&["--config", &plain, "canary", "--json"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}\n{}", stdout(&out), stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for c in v["canaries"].as_array().unwrap() {
        assert_eq!(c["result"], "skipped", "{c}");
        assert!(c["skipped"].as_str().unwrap().starts_with("no backup of this target was proven yet"), "{c}");
    }
    assert!(hook.requests().is_empty(), "a skipped canary sends no canary alert");

    // Both targets proven by an ordinary verification.
    let (out, took) = drcheck(&["--config", &plain, "verify", "--json"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stdout(&out), stderr(&out));
    eprintln!("canary: the two verifications took {:.1}s", took.as_secs_f64());
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cluster_run = runs["runs"].as_array().unwrap().iter().find(|r| r["target"] == "cluster").unwrap();
    let archive_finding =
        cluster_run["validators"].as_array().unwrap().iter().find(|v| v["name"] == "archive").unwrap();
    assert_eq!(archive_finding["status"], "passed", "the archive runs on without a gap: {archive_finding}");
    let before = textfile();
    let last_success =
        |text: &str, t: &str| sample(text, "drcheck_last_success_timestamp_seconds", &format!("target=\"{t}\""));
    let proven = |text: &str, t: &str| sample(text, "drcheck_backups_proven", &format!("target=\"{t}\""));
    let (cluster_success, orders_success) = (last_success(&before, "cluster"), last_success(&before, "orders"));
    assert!(cluster_success.is_some() && orders_success.is_some(), "{before}");
    let writes_before = s3_writes(&root.path().join("moto.log"));
    let heard_before = hook.requests().len();

    // The daemon's canary: once a day, at a second a few seconds from now — far enough
    // that a daemon slow to start on a loaded machine does not miss it (it would be
    // tomorrow's).
    let at = chrono::Utc::now() + chrono::Duration::seconds(4);
    let daily = config(&format!("{WITHIN}\ncanary = \"{}\"", at.format("%-S %-M %-H * * *")), "", "");
    let mut daemon = Daemon::start(Path::new(&daily), port, &[]);
    let deadline = Instant::now() + LIMIT;
    let canaries = loop {
        let (out, _) = drcheck(&["--config", &plain, "history", "--canaries", "--json"], &[], LIMIT);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        // Newest first; the two skipped ones from before the verification are older.
        if v["canaries"].as_array().is_some_and(|c| c.iter().filter(|c| c["result"] != "skipped").count() == 2) {
            break v;
        }
        if Instant::now() >= deadline {
            // Stopped first: a running daemon's log is not there to show.
            daemon.terminate(Duration::from_secs(30));
            panic!("the daemon's canary did not finish: {}", daemon.stderr_text());
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let metrics = http_get(port, "/metrics");
    let status_page = http_get(port, "/");
    let (status, _) = daemon.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}");
    let canary = |t: &str| canaries["canaries"].as_array().unwrap().iter().find(|c| c["target"] == t).unwrap().clone();
    // What a canary costs, beside the verification it repeats per defect.
    for c in canaries["canaries"].as_array().unwrap() {
        let at = |k: &str| humantime::parse_rfc3339_weak(c[k].as_str().unwrap()).unwrap();
        let took = at("finished_at").duration_since(at("started_at")).unwrap_or_default();
        let runs: Vec<String> = c["defects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                format!(
                    "{} {:.1}s",
                    d["defect"].as_str().unwrap(),
                    d["run"]["rto"]["measured_seconds"].as_f64().unwrap_or(0.0)
                )
            })
            .collect();
        eprintln!("canary: {} took {:.1}s (restores: {})", c["target"], took.as_secs_f64(), runs.join(", "));
    }

    // The dump: its changed row caught by checksums, naming the table — not items, whose
    // trigger would undo the change: another table's row.
    let orders = canary("orders");
    assert_eq!(orders["result"], "caught", "{orders:#}");
    assert_eq!(orders["backup"], "dumps/orders-1.dump");
    let row = defect(&orders, "changed_row");
    assert_eq!(row["outcome"], "detected", "{row:#}");
    assert_eq!(row["named_by"], serde_json::json!(["checksums"]), "{row:#}");
    assert!(row["made"].as_str().unwrap().starts_with("public.tiny: column v"), "{row}");
    assert!(row["detail"].as_str().unwrap().contains("public.tiny"), "{row}");
    assert_eq!(row["run"]["canary"], "changed_row", "the defective copy's run is marked: {row}");
    assert_eq!(row["run"]["result"], "failed");

    // The base backup: the flipped page and the missing segment, each by its owner.
    let cluster = canary("cluster");
    assert_eq!(cluster["result"], "caught", "{cluster:#}");
    let page = defect(&cluster, "flipped_page");
    assert_eq!(page["outcome"], "detected", "{page:#}");
    assert!(page["named_by"].as_array().unwrap().iter().any(|n| n == "checksums"), "{page:#}");
    assert!(page["made"].as_str().unwrap().contains("phys/b1/base.tar.gz: byte"), "{page}");
    let segment = defect(&cluster, "missing_segment");
    assert_eq!(segment["outcome"], "detected", "{segment:#}");
    assert_eq!(segment["named_by"], serde_json::json!(["archive"]), "{segment:#}");
    let left_out = segment["made"].as_str().unwrap().split(' ').nth(2).unwrap().to_string();
    assert!(segment["detail"].as_str().unwrap().contains(&format!("gap at {left_out}")), "{segment}");

    // Every sink took the canary alert, labelled, firing then resolved.
    for c in [&orders, &cluster] {
        let sinks: Vec<(&str, bool)> = c["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["sink"].as_str().unwrap(), s["accepted"] == true))
            .collect();
        assert_eq!(sinks, vec![("hook", true), ("am", true)], "{c:#}");
    }
    let heard = hooked(&hook, heard_before);
    for state in ["firing", "resolved"] {
        let n = heard.iter().filter(|(a, s, c)| a == "DrcheckCanary" && s == state && *c).count();
        assert_eq!(n, 2, "one {state} canary alert per target: {heard:?}");
    }
    assert!(!heard.iter().any(|(a, _, _)| a != "DrcheckCanary"), "nothing else paged: {heard:?}");
    let at_am: serde_json::Value = serde_json::from_str(&am.get("/api/v2/alerts")).unwrap();
    let canary_at_am: Vec<&serde_json::Value> =
        at_am.as_array().unwrap().iter().filter(|a| a["labels"]["alertname"] == "DrcheckCanary").collect();
    assert!(
        canary_at_am.iter().all(|a| a["labels"]["canary"] == "true" && a["status"]["state"] != "active"),
        "the canary alert is labelled and resolved at Alertmanager: {at_am}"
    );

    // The metrics say so; the targets' runs, coverage and last success do not move.
    for (t, d) in [("orders", "changed_row"), ("cluster", "flipped_page"), ("cluster", "missing_segment")] {
        let label = format!("defect=\"{d}\",target=\"{t}\"");
        assert_eq!(sample(&metrics, "drcheck_canary_detected", &label), Some(1.0), "{label}\n{metrics}");
    }
    assert!(sample(&metrics, "drcheck_canary_last_success_timestamp_seconds", "target=\"cluster\"").is_some());
    assert_eq!(sample(&metrics, "drcheck_canary_alert_accepted", "sink=\"hook\",target=\"orders\""), Some(1.0));
    assert_eq!(last_success(&metrics, "cluster"), cluster_success, "a canary is not a verification");
    assert_eq!(last_success(&metrics, "orders"), orders_success);
    assert_eq!(proven(&metrics, "orders"), proven(&before, "orders"));
    // The status page and `drcheck status` say each target's last canary.
    for t in ["orders", "cluster"] {
        assert!(status_page.contains(&format!("id=\"canary-{t}\" data-result=\"caught\"")), "{status_page}");
    }
    let (out, _) = drcheck(&["--config", &plain, "status", "--json"], &[], LIMIT);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = status["targets"].as_array().unwrap().iter().find(|r| r["target"] == "cluster").unwrap();
    let said = row["canary"].as_str().unwrap_or_default();
    assert!(said.starts_with("caught: flipped_page by") && said.contains("missing_segment by archive"), "{row}");
    let (out, _) = drcheck(&["--config", &plain, "history", "--json"], &[], LIMIT);
    let history: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(history["runs"].as_array().unwrap().len(), 2, "only the two verifications are runs: {history}");
    assert_eq!(s3_writes(&root.path().join("moto.log")), writes_before, "the canary wrote to the store");

    // checksums disabled for the dump, and a sink on a closed port: the changed row
    // passes and is paged; the dead sink is named.
    let closed = free_port();
    let broken = config(
        "canary_alert_within = \"3s\"",
        "[target.validators]\nenabled = [\"row_counts\", \"schema\", \"sequences\"]",
        &format!("[[alert]]\nname = \"down\"\nkind = \"webhook\"\nurl = \"http://127.0.0.1:{closed}/hook\"\n"),
    );
    let heard_before = hook.requests().len();
    // A defect that passed: exit 1.
    let missed = &canary_of(&broken, "orders", 1);
    assert_eq!(missed["result"], "missed", "{missed:#}");
    let row = defect(missed, "changed_row");
    assert_eq!(row["outcome"], "undetected", "{row:#}");
    assert!(row["detail"].as_str().unwrap().contains("none of them ran"), "{row}");
    let down = missed["alerts"].as_array().unwrap().iter().find(|s| s["sink"] == "down").unwrap();
    assert_eq!(down["accepted"], false, "{down}");
    assert!(down["detail"].as_str().unwrap().starts_with("not accepted within 3s"), "{down}");
    let heard = hooked(&hook, heard_before);
    for alert in ["DrcheckCanaryUndetected", "DrcheckAlertPathBroken"] {
        assert!(heard.iter().any(|(a, s, _)| a == alert && s == "firing"), "{alert} paged: {heard:?}");
    }
    let text = textfile();
    assert_eq!(
        sample(&text, "drcheck_canary_detected", "defect=\"changed_row\",target=\"orders\""),
        Some(0.0),
        "{text}"
    );
    assert_eq!(sample(&text, "drcheck_canary_alert_accepted", "sink=\"down\",target=\"orders\""), Some(0.0), "{text}");
    assert_eq!(sample(&text, "drcheck_canary_alert_accepted", "sink=\"hook\",target=\"orders\""), Some(1.0), "{text}");
    assert_eq!(s3_writes(&root.path().join("moto.log")), writes_before, "the canary wrote to the store");

    // A dump of a primary without commit times: the changed row is seen by checksums but
    // cannot be told from a change on the primary since the dump — inconclusive, said,
    // exit 3, and no DrcheckCanaryUndetected (it would page every week for a known limit).
    let bare = PgPrimary::start_opts(
        &root,
        &ClusterOptions {
            name: "bare",
            local_auth: "trust",
            host_auth: "scram-sha-256",
            open_socket: false,
            settings: &[],
        },
    );
    bare.psql("postgres", &format!("create role verifier login password '{PASSWORD}'"));
    bare.psql("postgres", "grant pg_read_all_data to verifier");
    bare.psql("postgres", "create database notes");
    bare.psql("notes", "create table notes (id int primary key, body text); insert into notes select g, 'body ' || g from generate_series(1, 50) g");
    let bare_dump = root.path().join("notes.dump");
    bare.tool("pg_dump", &["-Fc", "-f", &bare_dump.display().to_string(), "notes"]);
    s3.upload(&bare_dump, &bucket, "bare/notes-1.dump");
    let with_bare = config(
        WITHIN,
        &format!(
            "\n[[target]]\nname = \"bare\"\nstorage = \"s3\"\nprefix = \"bare/\"\nprimary = \"{}\"\nrto = \"10m\"\nrpo = \"30d\"\n",
            bare.url("verifier", PASSWORD, "notes")
        ),
        "",
    );
    let (out, _) = drcheck(&["--config", &with_bare, "verify", "--target", "bare"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stdout(&out), stderr(&out));
    let writes_before = s3_writes(&root.path().join("moto.log"));
    let heard_before = hook.requests().len();
    let seen = &canary_of(&with_bare, "bare", 3);
    assert_eq!(seen["result"], "inconclusive", "{seen:#}");
    let row = defect(seen, "changed_row");
    assert_eq!(row["outcome"], "inconclusive", "{row:#}");
    assert!(row["detail"].as_str().unwrap().contains("checksums saw it"), "{row}");
    assert!(row["detail"].as_str().unwrap().contains("track_commit_timestamp"), "says what would prove it: {row}");
    let heard = hooked(&hook, heard_before);
    assert!(heard.iter().any(|(a, s, c)| a == "DrcheckCanary" && s == "firing" && *c), "{heard:?}");
    assert!(!heard.iter().any(|(a, _, _)| a == "DrcheckCanaryUndetected"), "no page for a known limit: {heard:?}");
    assert_eq!(sample(&textfile(), "drcheck_canary_detected", "target=\"bare\""), None);
    assert_eq!(s3_writes(&root.path().join("moto.log")), writes_before, "the canary wrote to the store");
    // Nothing of the canaries is left in the scratch directory.
    let left: Vec<_> = std::fs::read_dir(&scratch).unwrap().filter_map(Result::ok).map(|e| e.file_name()).collect();
    assert!(left.iter().all(|n| !n.to_string_lossy().starts_with("drcheck-canary")), "{left:?}");
}

/// Issue 48: every layout the canary claims, the newest proven backup that still
/// exists, and a budgeted target. An uncompressed base backup in S3 (`bb/<stamp>/`
/// `base.tar` + `pg_wal.tar` + manifest, WAL under `wal/`) and a gzip one in a directory
/// store: each flipped page caught (and the segment left out of the S3 one's archive).
/// Two proven dumps, the newer deleted since: the canary copies the older and says so.
/// A dump target with `primary_read_budget` far under the primary's size: the changed
/// row's table is compared whole by the defective copy's run (said in its detail), so
/// the defect is caught, not left to the slice's luck.
#[test]
fn every_layout_is_rewritten_and_caught_and_the_newest_existing_proof_is_copied() {
    let root = TempRoot::new();
    let s3 = S3Server::start(&root);
    let archive = root.pg_dir("archive");
    let primary = PgPrimary::start_archiving_with(&root, &archive, &[("track_commit_timestamp", "on")]);
    primary.psql("postgres", &format!("create role verifier login password '{PASSWORD}'"));
    primary.psql("postgres", "grant pg_read_all_data to verifier");
    primary.psql("postgres", "create database orders");
    primary.psql(
        "orders",
        "create table items (id int primary key, note text not null);
         insert into items select g, 'note number ' || g from generate_series(1, 20000) g;
         create table tiny (id int primary key, v int); insert into tiny values (1, 1)",
    );
    let bucket = unique("layouts");
    s3.make_bucket(&bucket);
    // Uncompressed, in S3, under a timestamped prefix.
    let bb = root.path().join("bb");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "stream", "--checkpoint=fast"]);
    for f in ["base.tar", "pg_wal.tar", "backup_manifest"] {
        s3.upload(&bb.join(f), &bucket, &format!("bb/20261207T125553Z/{f}"));
    }
    // Gzip, in a directory store, one file (WAL inside, `-X fetch`) beside its manifest.
    let store = root.path().join("store");
    let bbz = store.join("bbz/20261207T130000Z");
    primary.tool("pg_basebackup", &["-D", &bbz.display().to_string(), "-Ft", "-z", "-X", "fetch", "--checkpoint=fast"]);
    for i in 2..6 {
        primary.psql("orders", &format!("insert into tiny values ({i}, {i})"));
        primary.archive_all(&archive);
    }
    for e in std::fs::read_dir(&archive).unwrap().filter_map(Result::ok) {
        s3.upload(&e.path(), &bucket, &format!("wal/{}", e.file_name().to_string_lossy()));
    }
    // Two dumps, both proven below; the newer is deleted afterwards.
    for n in 1..=2 {
        let dump = root.path().join(format!("orders-{n}.dump"));
        primary.tool("pg_dump", &["-Fc", "-f", &dump.display().to_string(), "orders"]);
        s3.upload(&dump, &bucket, &format!("dumps/orders-{n}.dump"));
    }
    let scratch = root.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    drcheck_e2e::make_world_enterable(&scratch);
    let url = primary.url("verifier", PASSWORD, "orders");
    let config = root.path().join("drcheck.toml");
    std::fs::write(
        &config,
        format!(
            "[state]\nurl = \"sqlite://{r}/history.db\"\n[sandbox]\nscratch_dir = \"{s}\"\n\
             [storage.s3]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{e}\"\npath_style = true\n\
             [storage.dir]\nkind = \"filesystem\"\npath = \"{store}\"\n\
             [[target]]\nname = \"plain\"\nstorage = \"s3\"\nprefix = \"bb/\"\nwal_prefix = \"wal/\"\n\
             primary = \"{url}\"\nrto = \"10m\"\nrpo = \"30d\"\n\
             [[target]]\nname = \"gz\"\nstorage = \"dir\"\nprefix = \"bbz/\"\n\
             primary = \"{url}\"\nrto = \"10m\"\nrpo = \"30d\"\n\
             [[target]]\nname = \"orders\"\nstorage = \"s3\"\nprefix = \"dumps/\"\nprimary_read_budget = \"1MiB\"\n\
             primary = \"{url}\"\nrto = \"10m\"\nrpo = \"30d\"\n",
            r = root.path().display(),
            s = scratch.display(),
            e = s3.endpoint(),
            store = store.display(),
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let verify = |args: &[&str]| {
        let mut all = vec!["--config", config.as_str(), "verify"];
        all.extend_from_slice(args);
        let (out, _) = drcheck(&all, &[], LIMIT);
        assert_eq!(out.status.code(), Some(0), "{args:?}\n{}\n{}", stdout(&out), stderr(&out));
    };
    verify(&["--target", "orders", "--backup", "dumps/orders-1.dump"]);
    verify(&["--target", "orders", "--backup", "dumps/orders-2.dump"]);
    verify(&["--target", "plain"]);
    verify(&["--target", "gz"]);
    s3.delete(&bucket, "dumps/orders-2.dump");

    let (out, _) = drcheck(&["--config", &config, "canary", "--json"], &[], LIMIT);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{v:#}\n{}", stderr(&out));
    let canary = |t: &str| v["canaries"].as_array().unwrap().iter().find(|c| c["target"] == t).unwrap().clone();

    let plain = canary("plain");
    assert_eq!(plain["result"], "caught", "{plain:#}");
    let page = defect(&plain, "flipped_page");
    assert!(page["made"].as_str().unwrap().starts_with("bb/20261207T125553Z/base.tar: byte"), "{page}");
    assert_eq!(defect(&plain, "missing_segment")["outcome"], "detected", "{plain:#}");
    let gz = canary("gz");
    assert_eq!(gz["result"], "caught", "{gz:#}");
    assert!(defect(&gz, "flipped_page")["made"].as_str().unwrap().contains("/base.tar.gz: byte"), "{gz}");

    let orders = canary("orders");
    assert_eq!(orders["result"], "caught", "{orders:#}");
    assert_eq!(orders["backup"], "dumps/orders-1.dump", "the newest proven backup still there: {orders:#}");
    let row = defect(&orders, "changed_row");
    assert_eq!(row["named_by"], serde_json::json!(["checksums"]), "{row:#}");
    let table = row["made"].as_str().unwrap().split(':').next().unwrap().to_string();
    let sums = row["run"]["validators"].as_array().unwrap().iter().find(|x| x["name"] == "checksums").unwrap();
    let detail = sums["detail"].as_str().unwrap();
    assert!(detail.contains("primary_read_budget") && detail.contains(&format!("{table} whole")), "{detail}");
    let said = orders["notes"]
        .as_array()
        .map(|n| n.iter().map(|s| s.as_str().unwrap_or_default().to_string()).collect::<Vec<_>>())
        .unwrap_or_default();
    assert!(said.iter().any(|s| s.contains("dumps/orders-2.dump")), "says the newer proof is gone: {orders:#}");
}
