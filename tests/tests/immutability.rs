//! End-to-end: backups an attacker cannot quietly destroy (issue 37), against moto with
//! versioning and Object Lock. The verified backup's lock is reported and, under
//! `require_lock`, required; every proven backup is pinned, and one overwritten or
//! deleted since is named at the next listing; `storage check` reports what the
//! credentials may do, and writes nothing unless `probe_write` allows it (the server's
//! request log says so).

use drcheck_e2e::{AWS_ENV, PgPrimary, S3Server, TempRoot, drcheck, only_run, s3_writes, stderr, stdout, unique};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

/// `aws s3api ARGS` against moto; returns stdout.
fn s3api(s3: &S3Server, args: &[&str]) -> String {
    let out = Command::new("aws")
        .arg("--endpoint-url")
        .arg(s3.endpoint())
        .arg("s3api")
        .args(args)
        .envs(AWS_ENV)
        .output()
        .unwrap();
    assert!(out.status.success(), "aws s3api {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn finding(run: &serde_json::Value, name: &str) -> serde_json::Value {
    run["validators"].as_array().unwrap().iter().find(|v| v["name"] == name).cloned().unwrap_or_default()
}

#[test]
fn locks_are_required_proofs_are_pinned_and_the_verifier_writes_nothing() {
    let root = TempRoot::new();
    // A server of its own: its request log is this test's alone.
    let s3 = S3Server::start_own(&root);
    let primary = PgPrimary::start(&root);
    primary.psql("postgres", "create database orders");
    primary.psql("orders", "create table items (id int primary key, note text); insert into items select g, 'n' || g from generate_series(1, 50) g");
    let dump = |name: &str| {
        let path = root.path().join(name);
        primary.tool("pg_dump", &["-Fc", "-f", &path.display().to_string(), "orders"]);
        path
    };
    let first = dump("first.dump");

    // A bucket with Object Lock (COMPLIANCE for 40 days by default), and a plain one.
    let locked = unique("locked");
    s3api(&s3, &["create-bucket", "--bucket", &locked, "--object-lock-enabled-for-bucket"]);
    s3api(
        &s3,
        &[
            "put-object-lock-configuration",
            "--bucket",
            &locked,
            "--object-lock-configuration",
            r#"{"ObjectLockEnabled":"Enabled","Rule":{"DefaultRetention":{"Mode":"COMPLIANCE","Days":40}}}"#,
        ],
    );
    let plain = unique("plain");
    s3.make_bucket(&plain);
    // A locked bucket wants a checksum with each put (as AWS does): the real CLI sends one.
    let put_locked = |file: &Path, key: &str| {
        s3.aws(&["cp", &file.display().to_string(), &format!("s3://{locked}/{key}")]);
    };
    put_locked(&first, "dumps/orders-1.dump");
    s3.upload(&first, &plain, "dumps/orders-0.dump");
    s3.upload(&first, &plain, "dumps/orders-1.dump");

    let storage = |name: &str, bucket: &str, extra: &str| {
        format!(
            "[storage.{name}]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{}\"\npath_style = true\n{extra}\n",
            s3.endpoint()
        )
    };
    let target = |name: &str, storage: &str| {
        format!(
            "[[target]]\nname = \"{name}\"\nstorage = \"{storage}\"\nprefix = \"dumps/\"\nrto = \"10m\"\nrpo = \"30d\"\n"
        )
    };
    let config = root.path().join("drcheck.toml");
    std::fs::write(
        &config,
        format!(
            "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{root}/scratch\"\n\
             [metrics]\ntextfile = \"{root}/drcheck.prom\"\n{}{}{}{}{}{}{}{}",
            storage("l35", &locked, "require_lock = \"compliance\"\nretain_until_at_least = \"35d\""),
            storage("l60", &locked, "require_lock = \"governance\"\nretain_until_at_least = \"60d\""),
            storage("u", &plain, ""),
            storage("ureq", &plain, "require_lock = \"governance\"\nprobe_write = true"),
            target("held", "l35"),
            target("short", "l60"),
            target("plain", "u"),
            target("unlocked", "ureq"),
            root = root.path().display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(root.path().join("scratch")).unwrap();
    drcheck_e2e::make_world_enterable(&root.path().join("scratch"));
    let cfg = config.display().to_string();
    let metric = |name: &str, target: &str| -> Option<f64> {
        let text = std::fs::read_to_string(root.path().join("drcheck.prom")).unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&format!("target=\"{target}\"")))
            .find_map(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let verify = |t: &str| {
        let (out, _) = drcheck(&["--config", &cfg, "verify", "--target", t, "--json"], &[], LIMIT);
        (out.status.code(), only_run(&out), stderr(&out))
    };

    // Locked in COMPLIANCE for 40 days, 35 required: passed, the mode and date said.
    let (code, run, err) = verify("held");
    let lock = finding(&run, "immutability");
    assert_eq!(code, Some(0), "{run:#}\n{err}");
    assert_eq!(lock["status"], "passed", "{lock}");
    let detail = lock["detail"].as_str().unwrap();
    assert!(detail.contains("COMPLIANCE until") && detail.contains("versioning Enabled"), "{detail}");
    assert_eq!(lock["measurements"]["locked"], 1.0, "{lock}");
    assert!(lock["measurements"]["lock_remaining_seconds"].as_f64().unwrap() > 39.0 * 86400.0, "{lock}");
    assert_eq!(finding(&run, "pinned")["status"], "skipped", "nothing pinned before the first pass");
    assert_eq!(metric("drcheck_backup_locked", "held"), Some(1.0));
    assert!(metric("drcheck_backup_lock_remaining_seconds", "held").is_some_and(|s| s > 39.0 * 86400.0));
    assert_eq!(metric("drcheck_backups_changed_since_proven", "held"), Some(0.0));
    let pinned = &run["backup"]["pinned"][0];
    assert_eq!(pinned["key"], "dumps/orders-1.dump");
    assert!(pinned["version_id"].as_str().is_some_and(|v| !v.is_empty()), "the version is pinned: {run}");
    // …and the bytes drcheck read while restoring: the file's own SHA-256.
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(&first).unwrap()))
    };
    assert_eq!(pinned["sha256"], digest.as_str(), "{run}");

    // A lock that ends before the 60 days required: failed, naming the dates.
    let (code, run, _) = verify("short");
    let lock = finding(&run, "immutability");
    assert_eq!((code, lock["status"].as_str()), (Some(1), Some("failed")), "{lock}");
    let detail = lock["detail"].as_str().unwrap();
    assert!(
        detail.contains("dumps/orders-1.dump: locked until") && detail.contains("60d past the backup's time"),
        "{detail}"
    );

    // No lock, nothing required: a note, not a failure.
    let (code, run, err) = verify("plain");
    let lock = finding(&run, "immutability");
    assert_eq!(code, Some(0), "{run:#}\n{err}");
    assert_eq!(lock["status"], "skipped", "{lock}");
    let detail = lock["detail"].as_str().unwrap();
    assert!(detail.contains("nothing required") && detail.contains("Object Lock off"), "{detail}");
    // No lock, one required: failed.
    let (code, run, _) = verify("unlocked");
    let lock = finding(&run, "immutability");
    assert_eq!((code, lock["status"].as_str()), (Some(1), Some("failed")), "{lock}");
    assert!(lock["detail"].as_str().unwrap().contains("dumps/orders-1.dump: not locked"), "{lock}");
    assert_eq!(metric("drcheck_backup_locked", "unlocked"), Some(0.0));

    // A proven backup overwritten (a new version over the locked one) and one deleted
    // while an older one remains: each named at the next listing.
    primary.psql("orders", "insert into items values (51, 'after')");
    let second = dump("second.dump");
    put_locked(&second, "dumps/orders-1.dump");
    s3.delete(&plain, "dumps/orders-1.dump");
    let (out, _) = drcheck(&["--config", &cfg, "backups", "list", "--json"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let of = |t: &str| listing["targets"].as_array().unwrap().iter().find(|x| x["target"] == t).unwrap().clone();
    let held = of("held");
    assert!(held["protection"].as_str().unwrap().contains("Object Lock on (default COMPLIANCE, 40 days)"), "{held}");
    let changed = held["backups"][0]["changed_since_proven"].to_string();
    assert!(changed.contains("dumps/orders-1.dump: ") && changed.contains("when proven"), "{held}");
    let gone = of("plain")["vanished_since_proven"].to_string();
    assert!(gone.contains("dumps/orders-1.dump") && gone.contains("older backups are still there"), "{gone}");
    let (out, _) = drcheck(&["--config", &cfg, "backups", "list", "--target", "held"], &[], LIMIT);
    assert!(stdout(&out).contains("CHANGED SINCE PROVEN"), "{}", stdout(&out));

    let (code, run, _) = verify("held");
    let pin = finding(&run, "pinned");
    assert_eq!((code, pin["status"].as_str()), (Some(1), Some("failed")), "{pin}");
    let detail = pin["detail"].as_str().unwrap();
    assert!(detail.contains("dumps/orders-1.dump: ") && detail.contains("when proven"), "{pin}");
    assert_eq!(pin["measurements"]["changed"], 1.0);
    assert_eq!(metric("drcheck_backups_changed_since_proven", "held"), Some(1.0));
    let (code, run, _) = verify("plain");
    let pin = finding(&run, "pinned");
    assert_eq!((code, pin["status"].as_str()), (Some(1), Some("failed")), "{pin}");
    assert!(pin["detail"].as_str().unwrap().contains("dumps/orders-1.dump: gone from the store"), "{pin}");

    // Issue 48: deleted on purpose — the operator says so, once; the next run's pins hold,
    // and the decision is in the evidence with who and why. Never silent: no reason, no
    // forgetting; a backup never proven has nothing to forget.
    let (out, _) = drcheck(
        &["--config", &cfg, "backups", "forget", "--target", "plain", "dumps/orders-1.dump", "--reason", ""],
        &[],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let (out, _) = drcheck(
        &["--config", &cfg, "backups", "forget", "--target", "plain", "dumps/never.dump", "--reason", "x"],
        &[],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a proven backup"), "{}", stderr(&out));
    let (out, _) = drcheck(
        &[
            "--config",
            &cfg,
            "backups",
            "forget",
            "--target",
            "plain",
            "dumps/orders-1.dump",
            "--reason",
            "held a bad migration",
            "--by",
            "ada",
        ],
        &[],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("acknowledged by ada"), "{}", stdout(&out));
    let (code, run, _) = verify("plain");
    let pin = finding(&run, "pinned");
    assert_ne!(pin["status"], "failed", "forgotten on purpose: {pin}");
    assert_ne!(code, Some(1), "{run}");
    let (out, _) = drcheck(
        &["--config", &cfg, "report", "--format", "markdown", "--since", "1d", "--target", "plain"],
        &[],
        LIMIT,
    );
    assert!(
        stdout(&out).contains("Acknowledged: backup dumps/orders-1.dump deleted on purpose")
            && stdout(&out).contains("held a bad migration"),
        "{}",
        stdout(&out)
    );

    // storage check: without probe_write, no write request reaches the server.
    let log = root.path().join("moto.log");
    let before = s3_writes(&log);
    let (out, _) = drcheck(&["--config", &cfg, "storage", "check", "--target", "plain"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(said.contains("write:      not probed") && said.contains("Object Lock off"), "{said}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(s3_writes(&log), before, "storage check without probe_write wrote to the store");
    // With it, the credentials' write access is learned by trying, and the policy printed.
    let (out, _) = drcheck(&["--config", &cfg, "storage", "check", "--target", "unlocked"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(said.contains("delete:     ALLOWED") && said.contains("put:        ALLOWED"), "{said}");
    assert!(said.contains("\"s3:GetObject\"") && !said.contains("s3:PutObject"), "{said}");
    assert!(s3_writes(&log).len() > before.len(), "the probe tried");
    let left = s3api(&s3, &["list-objects-v2", "--bucket", &plain, "--prefix", "dumps/.drcheck-probe/"]);
    assert!(!left.contains("\"Key\""), "the probe's object was removed: {left}");
    // `config check` says what storage check would do, without a request.
    let (out, _) = drcheck(&["--config", &cfg, "config", "check"], &[], LIMIT);
    let said = stdout(&out);
    assert!(said.contains("# storage.l35: COMPLIANCE lock required, 35d past each backup"), "{said}");
    assert!(
        said.contains("# storage.ureq: GOVERNANCE lock required; `drcheck storage check` will try a delete and a put"),
        "{said}"
    );
}
