use super::*;

const GOOD: &str = r#"
[state]
url = "sqlite:///tmp/h.db"
[sandbox]
scratch_dir = "/var/tmp/drcheck"
[storage.backups]
kind = "s3"
bucket = "db-backups"
endpoint = "http://127.0.0.1:9000"
region = "us-east-1"
path_style = true
[storage.local]
kind = "filesystem"
path = "/srv/backups"
[[target]]
name = "orders"
primary = "postgres://verifier:${ORDERS_PW}@db.internal:5432/orders"
storage = "backups"
prefix = "orders/"
rto = "30m"
rpo = "26h"
"#;

fn env(name: &str) -> Option<String> {
    (name == "ORDERS_PW").then(|| "hunter2".to_string())
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    let raw: RawConfig =
        toml::from_str(text).map_err(|e| ConfigError::Parse { path: "drcheck.toml".into(), message: e.to_string() })?;
    validate(raw, text, Path::new("drcheck.toml"), &env, true)
}

#[test]
fn the_documented_example_validates() {
    let c = parse(GOOD).unwrap();
    let t = c.target("orders").unwrap();
    assert_eq!(t.rto, Duration::from_secs(1800));
    assert_eq!(t.rpo, Duration::from_secs(26 * 3600));
    assert_eq!(t.prefix, "orders/");
    assert_eq!(t.row_count_tolerance, 0.001);
    assert_eq!(t.primary.as_ref().unwrap().expose(), "postgres://verifier:hunter2@db.internal:5432/orders");
    match &c.storage["backups"] {
        StorageConfig::S3(s) => {
            assert_eq!(s.bucket, "db-backups");
            assert!(s.path_style);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn redacted_toml_hides_the_password() {
    let shown = parse(GOOD).unwrap().to_redacted_toml();
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("verifier:***@db.internal"), "{shown}");
    assert!(shown.contains("rpo = \"1day 2h\""), "{shown}");
}

fn invalid(text: &str) -> (String, Option<usize>, String) {
    match parse(text).unwrap_err() {
        ConfigError::Invalid { key, line, message, .. } => (key, line, message),
        other => panic!("expected Invalid, got {other}"),
    }
}

#[test]
fn typo_in_key_names_the_key_and_line() {
    let text = GOOD.replace("rpo = \"26h\"", "rpoo = \"26h\"");
    let msg = parse(&text).unwrap_err().to_string();
    assert!(msg.contains("rpoo"), "{msg}");
    assert!(msg.contains("line 21"), "{msg}");
}

#[test]
fn bad_duration_names_key_and_line() {
    let (key, line, msg) = invalid(&GOOD.replace("rto = \"30m\"", "rto = \"half an hour\""));
    assert_eq!(key, "target[0].rto");
    assert_eq!(line, Some(20));
    assert!(msg.contains("half an hour"), "{msg}");
}

#[test]
fn unknown_storage_lists_the_defined_ones() {
    let (key, _, msg) = invalid(&GOOD.replace("storage = \"backups\"", "storage = \"backup\""));
    assert_eq!(key, "target[0].storage");
    assert!(msg.contains("\"backup\"") && msg.contains("backups, local"), "{msg}");
}

#[test]
fn missing_env_var_names_it_without_leaking() {
    let (key, _, msg) = invalid(&GOOD.replace("${ORDERS_PW}", "${NOT_SET_PW}"));
    assert_eq!(key, "target[0].primary");
    assert!(msg.contains("NOT_SET_PW is not set"), "{msg}");
}

#[test]
fn missing_required_key_is_named() {
    let msg = parse(&GOOD.replace("rto = \"30m\"\n", "")).unwrap_err().to_string();
    assert!(msg.contains("missing field `rto`"), "{msg}");
}

#[test]
fn keys_of_the_wrong_kind_are_rejected() {
    let (key, _, _) = invalid(&GOOD.replace("path = \"/srv/backups\"", "path = \"/srv\"\nbucket = \"x\""));
    assert_eq!(key, "storage.local.bucket");
    let (key, _, msg) = invalid(&GOOD.replace("kind = \"filesystem\"", "kind = \"ftp\""));
    assert_eq!(key, "storage.local.kind");
    assert!(msg.contains("\"ftp\""));
}

#[test]
fn duplicate_and_bad_target_names() {
    let twice = format!("{GOOD}\n[[target]]\nname = \"orders\"\nstorage = \"local\"\nrto = \"1m\"\nrpo = \"1h\"\n");
    let (key, _, msg) = invalid(&twice);
    assert_eq!(key, "target[1].name");
    assert!(msg.contains("duplicate"));
    let (key, _, _) = invalid(&GOOD.replace("name = \"orders\"", "name = \"or ders\""));
    assert_eq!(key, "target[0].name");
}

#[test]
fn tolerance_and_abort_factor() {
    let c = parse(&GOOD.replace("rpo = \"26h\"", "rpo = \"26h\"\nrow_count_tolerance = \"2.5%\"\nabort_factor = 3.0"))
        .unwrap();
    assert!((c.targets[0].row_count_tolerance - 0.025).abs() < 1e-12);
    assert_eq!(c.targets[0].abort_factor, 3.0);
    let (key, _, _) = invalid(&GOOD.replace("rpo = \"26h\"", "rpo = \"26h\"\nrow_count_tolerance = \"0.1\""));
    assert_eq!(key, "target[0].row_count_tolerance");
}

#[test]
fn defaults_apply() {
    let c = parse("[storage.s]\nkind = \"filesystem\"\npath = \"/b\"\n").unwrap();
    assert_eq!(c.state.url.expose(), DEFAULT_STATE_URL);
    assert_eq!(c.sandbox.scratch_dir, crate::validated::default_scratch_dir());
    if nix::unistd::Uid::effective().is_root() {
        assert_eq!(c.sandbox.scratch_dir, std::path::PathBuf::from("/var/lib/drcheck"), "never the shared temp dir");
    }
    assert!(c.targets.is_empty());
}

#[test]
fn restore_keys_parse_and_reject_nonsense() {
    let extra = "format = \"physical\"\nrestore_jobs = 2\nwal_prefix = \"orders-wal/\"\nrecovery_target = \"2026-11-30T03:00:00Z\"\nglobals_key = \"globals.sql\"";
    let c = parse(&GOOD.replace("rpo = \"26h\"", &format!("rpo = \"26h\"\n{extra}"))).unwrap();
    let t = &c.targets[0];
    assert_eq!(t.format, FormatSetting::Physical);
    assert_eq!(t.restore_jobs, 2);
    assert_eq!(t.recovery_target, RecoveryTarget::Time("2026-11-30T03:00:00Z".into()));
    assert_eq!(t.wal_prefix.as_deref(), Some("orders-wal/"));
    let (key, _, _) = invalid(&GOOD.replace("rpo = \"26h\"", "rpo = \"26h\"\nformat = \"zip\""));
    assert_eq!(key, "target[0].format");
    let (key, _, _) = invalid(&GOOD.replace("rpo = \"26h\"", "rpo = \"26h\"\nrecovery_target = \"yesterday\""));
    assert_eq!(key, "target[0].recovery_target");
}

#[test]
fn sandbox_and_fetch_tuning() {
    let text = GOOD
        .replace(
            "scratch_dir = \"/var/tmp/drcheck\"",
            "scratch_dir = \"/var/tmp/drcheck\"\nprofile = \"fast\"\nexpansion_factor = 3.0",
        )
        .replace("path_style = true", "path_style = true\npart_size = \"16MiB\"\nconcurrency = 8");
    let c = parse(&text).unwrap();
    assert_eq!(c.sandbox.profile, Profile::Fast);
    match &c.storage["backups"] {
        StorageConfig::S3(s) => assert_eq!((s.part_size, s.concurrency), (16 << 20, 8)),
        other => panic!("{other:?}"),
    }
    let (key, _, msg) = invalid(&GOOD.replace("path_style = true", "path_style = true\npart_size = \"8 megs\""));
    assert_eq!(key, "storage.backups.part_size");
    assert!(msg.contains("8 megs"));
    let (key, _, _) =
        invalid(&GOOD.replace("scratch_dir = \"/var/tmp/drcheck\"", "scratch_dir = \"/x\"\nprofile = \"turbo\""));
    assert_eq!(key, "sandbox.profile");
}

#[test]
fn validators_as_of_and_custom_checks() {
    let extra = r#"
[target.validators]
enabled = ["schema", "checksums", "custom"]
statement_timeout = "30s"
primary_concurrency = 3
checksum_chunk_rows = 5000
[target.as_of]
"public.orders" = "placed_at"
"audit" = "at"
[[target.check]]
name = "no orphans"
sql = "select 0"
expect = "0"
[[target.check]]
name = "same total"
sql = "select sum(total) from orders"
compare = "primary"
"#;
    let c = parse(&format!("{GOOD}{extra}")).unwrap();
    let v = &c.targets[0].validators;
    assert_eq!(v.enabled, ["schema", "checksums", "custom"]);
    assert_eq!(v.statement_timeout, Duration::from_secs(30));
    assert_eq!(v.primary_concurrency, 3);
    assert_eq!(v.checksum_chunk_rows, 5000);
    assert!(v.as_of.contains(&("public".into(), "orders".into(), "placed_at".into())));
    assert!(v.as_of.contains(&("public".into(), "audit".into(), "at".into())));
    assert_eq!(v.checks[0].expect.as_deref(), Some("0"));
    assert_eq!(v.checks[1].expect, None);
    let (key, _, msg) = invalid(&format!("{GOOD}\n[target.validators]\nenabled = [\"schema\", \"checksum\"]\n"));
    assert_eq!(key, "target[0].validators.enabled");
    assert!(msg.contains("\"checksum\""), "{msg}");
    let (key, _, _) = invalid(&format!("{GOOD}\n[[target.check]]\nname = \"x\"\nsql = \"select 1\"\n"));
    assert_eq!(key, "target[0].check[0]");
    let defaults = parse(GOOD).unwrap();
    // point_in_time only where it has something to check.
    assert_eq!(defaults.targets[0].validators.enabled.len(), ALL_VALIDATORS.len() - 1);
    assert!(!defaults.targets[0].validators.enabled.iter().any(|v| v == "point_in_time"));
}

#[test]
fn random_targets_and_heartbeats_parse_and_reject_nonsense() {
    let with = |extra: &str| GOOD.replace("rpo = \"26h\"", &format!("rpo = \"26h\"\n{extra}"));
    let wal = "format = \"physical\"\nwal_prefix = \"wal/\"\n";
    let c = parse(&with(&format!("{wal}recovery_target = \"random\""))).unwrap();
    assert_eq!(c.targets[0].recovery_target, RecoveryTarget::Random(None));
    assert!(c.targets[0].validators.enabled.iter().any(|v| v == "point_in_time"));
    let c = parse(&with(&format!("{wal}recovery_target = \"random:7d\""))).unwrap();
    assert_eq!(c.targets[0].recovery_target, RecoveryTarget::Random(Some(Duration::from_secs(7 * 86400))));
    for bad in ["random:", "random:0s", "random:soon"] {
        let (key, line, msg) = invalid(&with(&format!("{wal}recovery_target = \"{bad}\"")));
        assert_eq!(key, "target[0].recovery_target", "{bad}");
        assert!(line.is_some() && msg.contains("random:7d"), "{bad}: {msg}");
    }
    // No archive to draw from: said, not discovered at 3 a.m.
    let (key, _, msg) = invalid(&with("recovery_target = \"random\""));
    assert_eq!(key, "target[0].recovery_target");
    assert!(msg.contains("wal_prefix"), "{msg}");

    let hb = "[target.heartbeat]\ntable = \"drcheck.heartbeat\"\ninterval = \"10s\"\nurl = \"postgres://hb:s3cret@db/orders\"\n";
    let c = parse(&format!("{GOOD}\n{hb}")).unwrap();
    let h = c.targets[0].heartbeat.as_ref().unwrap();
    assert_eq!((h.schema.as_str(), h.table.as_str(), h.interval), ("drcheck", "heartbeat", Duration::from_secs(10)));
    assert_eq!(h.quoted(), "\"drcheck\".\"heartbeat\"");
    assert!(c.targets[0].validators.enabled.iter().any(|v| v == "point_in_time"));
    // Its rows say when they were written: compared up to the replayed point.
    assert!(c.targets[0].validators.as_of.contains(&("drcheck".into(), "heartbeat".into(), "at".into())));
    let c = parse(&format!("{GOOD}\n[target.heartbeat]\ntable = \"beats\"\n")).unwrap();
    let h = c.targets[0].heartbeat.as_ref().unwrap();
    assert_eq!((h.schema.as_str(), h.interval), ("public", Duration::from_secs(60)));
    let (key, _, msg) = invalid(&format!("{GOOD}\n{}", hb.replace("10s", "500ms")));
    assert_eq!(key, "target[0].heartbeat.interval");
    assert!(msg.contains("at least 1s"), "{msg}");
    let (key, _, _) = invalid(&format!("{GOOD}\n{}", hb.replace("drcheck.heartbeat", "a.b.c")));
    assert_eq!(key, "target[0].heartbeat.table");
    let (key, _, msg) = invalid(&format!("{GOOD}\n{}", hb.replace("postgres://", "mysql://")));
    assert_eq!(key, "target[0].heartbeat.url");
    assert!(!msg.contains("s3cret"), "{msg}");
    let e = parse(&format!("{GOOD}\n{}", hb.replace("interval", "intervall"))).unwrap_err().to_string();
    assert!(e.contains("intervall"), "{e}");
}

#[test]
fn daemon_metrics_and_alerts() {
    let extra = r#"
schedule = "30 2 * * *"
jitter = "5m"
stale_after = "36h"
[metrics]
listen = "127.0.0.1:9999"
pushgateway = "http://127.0.0.1:9091"
textfile = "/tmp/drcheck.prom"
[api]
token = "${ORDERS_PW}"
[daemon]
max_concurrent_restores = 2
[[alert]]
kind = "alertmanager"
url = "http://127.0.0.1:9093"
[[alert]]
kind = "webhook"
url = "http://127.0.0.1:8080/hook"
secret = "k"
max_attempts = 3
"#;
    let c = parse(&format!("{GOOD}{extra}")).unwrap();
    let t = &c.targets[0];
    assert_eq!(t.schedule.as_ref().map(|s| s.to_kubernetes().unwrap()).as_deref(), Some("30 2 * * *"));
    assert_eq!(t.jitter, Duration::from_secs(300));
    assert_eq!(t.stale_after, Some(Duration::from_secs(36 * 3600)));
    assert_eq!(c.metrics.listen, "127.0.0.1:9999");
    assert_eq!(c.api.token.as_ref().unwrap().expose(), "hunter2");
    assert_eq!(c.daemon.max_concurrent_restores, 2);
    assert_eq!(c.alerts.len(), 2);
    assert_eq!((c.alerts[0].name.as_str(), c.alerts[0].max_attempts), ("alertmanager", 8));
    assert_eq!((c.alerts[1].name.as_str(), c.alerts[1].max_attempts), ("webhook", 3));
    let shown = c.to_redacted_toml();
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("url = \"http://127.0.0.1:8080/***\"") && !shown.contains("/hook"), "{shown}");
    let (key, _, msg) = invalid(&GOOD.replace("rpo = \"26h\"", "rpo = \"26h\"\nschedule = \"every night\""));
    assert_eq!(key, "target[0].schedule");
    assert!(msg.contains("every night"), "{msg}");
    let (key, _, _) = invalid(&format!("{GOOD}\n[[alert]]\nkind = \"pagerduty\"\nurl = \"http://x\"\n"));
    assert_eq!(key, "alert[0].kind");
    let (key, _, _) = invalid(&format!("{GOOD}\n[metrics]\nlisten = \"localhost\"\n"));
    assert_eq!(key, "metrics.listen");
}

#[test]
fn schedules_parse_as_crontab() {
    use crate::Schedule;
    assert_eq!(Schedule::parse("t", "0 3 * * *").unwrap().to_kubernetes().unwrap(), "0 3 * * *");
    assert!(Schedule::parse("t", "15 0 3 * * *").unwrap().to_kubernetes().is_err(), "seconds");
    assert_eq!(Schedule::parse("t", "@daily").unwrap().to_kubernetes().unwrap(), "0 0 * * *");
    assert!(Schedule::parse("t", "61 3 * * *").is_err());
    let (key, _, msg) = invalid(&GOOD.replace("rto = ", "schedule = \"0 3 * * 8\"\nrto = "));
    assert_eq!(key, "target[0].schedule", "{msg}");
    assert!(msg.contains("day-of-week") && msg.contains("outside 0-7"), "{msg}");
}

#[test]
fn duplicate_check_names_are_an_error_naming_the_line() {
    let text = format!(
        "{GOOD}[[target.check]]\nname = \"no orphans\"\nsql = \"select 0\"\nexpect = \"0\"\n\
         [[target.check]]\nname = \"no orphans\"\nsql = \"select 1\"\nexpect = \"1\"\n"
    );
    let e = parse(&text).unwrap_err().to_string();
    assert!(e.contains("duplicate check name \"no orphans\""), "{e}");
    assert!(e.contains("target[0].check[1].name"), "{e}");
    let line = text.lines().position(|l| l == "name = \"no orphans\"").unwrap();
    let second = text.lines().enumerate().filter(|(_, l)| *l == "name = \"no orphans\"").nth(1).unwrap().0 + 1;
    assert!(line + 1 < second && e.contains(&format!("drcheck.toml:{second}:")), "{e}");
}

#[test]
fn the_sandbox_user_owns_nothing_else() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.sandbox.user, "drcheck-sandbox");
    let own = GOOD.replace("scratch_dir = \"/var/tmp/drcheck\"", "scratch_dir = \"/x\"\nuser = \"restore-only\"");
    assert_eq!(parse(&own).unwrap().sandbox.user, "restore-only");
    for shared in ["postgres", "root", ""] {
        let text =
            GOOD.replace("scratch_dir = \"/var/tmp/drcheck\"", &format!("scratch_dir = \"/x\"\nuser = \"{shared}\""));
        let (key, _, msg) = invalid(&text);
        assert_eq!(key, "sandbox.user", "{shared}: {msg}");
        assert!(msg.contains("owns nothing else"), "{msg}");
    }
}

#[test]
fn sandbox_containment_and_expansion_keys() {
    let c = parse(GOOD).unwrap();
    assert!(c.sandbox.require_containment, "containment is required by default");
    assert_eq!(c.sandbox.max_expansion, 200.0);
    let text = GOOD.replace(
        "scratch_dir = \"/var/tmp/drcheck\"",
        "scratch_dir = \"/var/tmp/drcheck\"\nrequire_containment = false\nmax_expansion = 50",
    );
    let c = parse(&text).unwrap();
    assert!(!c.sandbox.require_containment);
    assert_eq!(c.sandbox.max_expansion, 50.0);
    let bad =
        GOOD.replace("scratch_dir = \"/var/tmp/drcheck\"", "scratch_dir = \"/var/tmp/drcheck\"\nmax_expansion = 0.5");
    let e = parse(&bad).unwrap_err().to_string();
    assert!(e.contains("sandbox.max_expansion") && e.contains("expected a number ≥ 1"), "{e}");
}

const PGBR: &str = r#"
[storage.repo]
kind = "s3"
bucket = "pgbr"
endpoint = "https://127.0.0.1:9443"
path_style = true
verify_tls = false
[[target]]
name = "orders"
source = "pgbackrest"
storage = "repo"
stanza = "main"
repo_path = "/pgbackrest"
cipher_pass = "${ORDERS_PW}"
rto = "30m"
rpo = "26h"
recovery_target = "lsn:0/3000028"
select = "random:3d"
integrity_schedule = "*/15 * * * *"
"#;

#[test]
fn backup_tool_sources_validate_with_their_own_keys() {
    let c = parse(PGBR).unwrap();
    let t = c.target("orders").unwrap();
    match &t.source {
        SourceConfig::Pgbackrest { stanza, repo_path, cipher_pass } => {
            assert_eq!((stanza.as_str(), repo_path.as_str()), ("main", "/pgbackrest"));
            assert_eq!(cipher_pass.as_ref().unwrap().expose(), "hunter2");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(t.recovery_target, RecoveryTarget::Lsn("0/3000028".into()));
    assert_eq!(t.select, Selection::Random(Duration::from_secs(3 * 86400)));
    assert_eq!(
        t.integrity_schedule.as_ref().map(|s| s.to_kubernetes().unwrap()).as_deref(),
        Some("0,15,30,45 * * * *")
    );
    let StorageConfig::S3(s3) = &c.storage["repo"] else { panic!() };
    assert!(!s3.verify_tls);
    // The passphrase never shows in the redacted config.
    assert!(!c.to_redacted_toml().contains("hunter2"));

    let barman = r#"
[storage.cnpg]
kind = "s3"
bucket = "b"
[[target]]
name = "pg"
source = "barman-cloud"
storage = "cnpg"
server_name = "cluster-example"
prefix = "clusters/"
rto = "1h"
rpo = "1h"
"#;
    let c = parse(barman).unwrap();
    assert_eq!(c.targets[0].source, SourceConfig::BarmanCloud { server_name: "cluster-example".into() });
}

#[test]
fn backup_tool_source_mistakes_are_named() {
    let cases = [
        (PGBR.replace("source = \"pgbackrest\"", "source = \"pgbackrst\""), "source", "expected \"objects\""),
        (PGBR.replace("stanza = \"main\"\n", ""), "stanza", "needs stanza"),
        (
            PGBR.replace("stanza = \"main\"", "stanza = \"main\"\nserver_name = \"x\""),
            "server_name",
            "not a key of source",
        ),
        (PGBR.replace("select = \"random:3d\"", "select = \"newest\""), "select", "random:7d"),
        (PGBR.replace("lsn:0/3000028", "lsn:zz"), "recovery_target", "lsn:0/3000028"),
        (
            PGBR.replace("source = \"pgbackrest\"\n", "")
                .replace("stanza = \"main\"\nrepo_path = \"/pgbackrest\"\ncipher_pass = \"${ORDERS_PW}\"\n", ""),
            "integrity_schedule",
            "needs a backup tool",
        ),
        (
            PGBR.replace("path_style = true", "path_style = true\nca_file = \"/nonexistent/ca.pem\""),
            "ca_file",
            "not a readable file",
        ),
        (
            PGBR.replace("rto = \"30m\"", "rto = \"30m\"\nwal_prefix = \"wal/\""),
            "wal_prefix",
            "the tool's catalog says",
        ),
    ];
    for (text, key, says) in cases {
        let (k, line, msg) = invalid(&text);
        assert!(k.ends_with(key), "{key}: got {k}: {msg}");
        assert!(line.is_some(), "{key}: no line");
        assert!(msg.contains(says), "{key}: {msg}");
    }
}

#[test]
fn h_spreads_a_fleet_over_the_hour_stably_by_name() {
    let names: Vec<String> = (0..300).map(|i| format!("db-{i:03}")).collect();
    let mut minutes = std::collections::BTreeSet::new();
    for n in &names {
        let s = crate::schedule::spread(n, "H 3 * * *").unwrap();
        assert_eq!(s, crate::schedule::spread(n, "H 3 * * *").unwrap(), "stable");
        let f: Vec<&str> = s.split_whitespace().collect();
        assert_eq!((f[1], &f[2..]), ("3", &["*", "*", "*"][..]), "{s}");
        let minute: u32 = f[0].parse().unwrap();
        assert!(minute < 60, "{s}");
        minutes.insert(minute);
    }
    // 300 targets over 60 minutes: nearly every minute is used, none by all.
    assert!(minutes.len() >= 55, "{} distinct minutes", minutes.len());
    // Pinned: the same name gives the same minute in every version of drcheck.
    assert_eq!(
        crate::schedule::spread("orders", "H 3 * * *").unwrap(),
        crate::schedule::spread("orders", "H 3 * * *").unwrap()
    );
    let pinned = crate::schedule::spread("orders", "H H * * *").unwrap();
    let f: Vec<u32> = pinned.split_whitespace().take(2).map(|x| x.parse().unwrap()).collect();
    assert!(f[0] < 60 && f[1] < 24, "{pinned}");
    let ranged = crate::schedule::spread("orders", "H(10-19) 2 * * *").unwrap();
    let m: u32 = ranged.split_whitespace().next().unwrap().parse().unwrap();
    assert!((10..=19).contains(&m), "{ranged}");
    let step = crate::schedule::spread("orders", "H/15 * * * *").unwrap();
    assert!(step.split_whitespace().next().unwrap().ends_with("/15"), "{step}");
    assert!(crate::schedule::spread("orders", "0 3 H * *").unwrap_err().to_string().contains("minute and hour"));
    assert!(crate::schedule::spread("orders", "H(50-70) 3 * * *").is_err());
    assert_eq!(crate::schedule::spread("orders", "5 3 * * *").unwrap(), "5 3 * * *");
    // The same minute as every earlier version picked for this name.
    assert_eq!(crate::schedule::spread("orders", "H 3 * * *").unwrap(), format!("{} 3 * * *", HISTORIC_ORDERS_MINUTE));
    // In a config: the key and line of a bad one are named.
    let (key, _, msg) = invalid(&GOOD.replace("rto = ", "schedule = \"H 3 H * *\"\nrto = "));
    assert_eq!(key, "target[0].schedule", "{msg}");
}

/// The minute `H` picked for the target `orders` by every version so far (FNV-1a of the
/// name and "minute", mod 60): fleets keep their minutes across upgrades.
const HISTORIC_ORDERS_MINUTE: u64 = 20;

/// Issue 27: `[target.decrypt]` keys are secrets (never shown), a typo is named with its
/// line, and an inline age identity must look like one.
#[test]
fn decrypt_keys_are_secrets_and_typos_are_named() {
    let text = format!(
        "{GOOD}[target.decrypt]\nage_identity = \"AGE-SECRET-KEY-1QQQ${{ORDERS_PW}}\"\ngpg_passphrase = \"${{ORDERS_PW}}\"\n"
    );
    let c = parse(&text).unwrap();
    let d = &c.target("orders").unwrap().decrypt;
    assert_eq!(d.gpg_passphrase.as_ref().unwrap().expose(), "hunter2");
    assert!(d.age_identity.as_ref().unwrap().expose().starts_with("AGE-SECRET-KEY-1"));
    let shown = c.to_redacted_toml();
    assert!(!shown.contains("hunter2") && !shown.contains("AGE-SECRET-KEY-1QQQ"), "{shown}");
    assert!(shown.contains("gpg_passphrase = \"***\""), "{shown}");

    let err = parse(&format!("{GOOD}[target.decrypt]\ngpg_pasphrase = \"x\"\n")).unwrap_err().to_string();
    assert!(err.contains("gpg_pasphrase") && err.contains("gpg_passphrase") && err.contains("line 23"), "{err}");
    let (key, _, msg) = invalid(&format!("{GOOD}[target.decrypt]\nage_identity = \"AGE-PUBLIC-KEY-1abc\"\n"));
    assert_eq!(key, "target[0].decrypt.age_identity");
    assert!(msg.contains("AGE-SECRET-KEY-1") && !msg.contains("AGE-PUBLIC-KEY-1abc"), "{msg}");
    let (key, _, _) = invalid(&format!("{GOOD}[target.decrypt]\ngpg_secret_key = \"\"\n"));
    assert_eq!(key, "target[0].decrypt.gpg_secret_key");
}

/// Issue 26: `config check`'s output loads back as a config that means the same, for
/// every example config (the README's, the Kubernetes example, this file's, one with
/// every kind of secret); `${VAR}` references stay references; literal secrets are `***`.
#[test]
fn the_effective_config_of_every_example_loads_back_the_same() {
    let env = |name: &str| -> Option<String> {
        Some(match name {
            "DRCHECK_STATE_URL" => "sqlite:///tmp/state.db".into(),
            other => format!("secret-{other}-value"),
        })
    };
    let readme = include_str!("../../../README.md");
    let block = |after: &str| -> String {
        let start = readme.find(after).unwrap();
        let open = start + readme[start..].find("```toml\n").unwrap() + 8;
        let close = open + readme[open..].find("```").unwrap();
        readme[open..close].to_string()
    };
    let literal = format!(
        "{GOOD}[api]\ntoken = \"literal-token-26\"\n[[alert]]\nkind = \"webhook\"\nurl = \"https://u:pw-26@hooks.example.com/x\"\n\
         secret = \"${{HOOK_SECRET}}\"\n[metrics]\npushgateway = \"http://gw:gwpw-26@127.0.0.1:9091\"\n[target.decrypt]\ngpg_passphrase = \"${{GPG_PASSPHRASE}}\"\n\
         [target.heartbeat]\ntable = \"drcheck.heartbeat\"\nurl = \"postgres://hb:hbpw-26@db/orders\"\n"
    );
    let examples = [
        ("README Config", block("### Config")),
        ("kubernetes example", include_str!("../../../deploy/kubernetes/overlays/example/drcheck.toml").to_string()),
        ("kubernetes base", include_str!("../../../deploy/kubernetes/base/drcheck.toml").to_string()),
        (
            "cloudnativepg example",
            include_str!("../../../deploy/kubernetes/overlays/cloudnativepg/drcheck.toml").to_string(),
        ),
        ("GOOD", GOOD.to_string()),
        ("literal secrets", literal.clone()),
    ];
    let path = Path::new("drcheck.toml");
    for (name, text) in &examples {
        let once = crate::effective_with(text, path, &env).unwrap_or_else(|e| panic!("{name}: {e}"));
        let twice =
            crate::effective_with(&once, path, &env).unwrap_or_else(|e| panic!("{name}: loads back: {e}\n{once}"));
        assert_eq!(once, twice, "{name}: the effective config is its own effective config");
        let parsed = |t: &str| {
            let raw: RawConfig = toml::from_str(t).unwrap();
            validate(raw, t, path, &env, true).unwrap().to_redacted_toml()
        };
        if *name != "literal secrets" {
            assert_eq!(parsed(text), parsed(&once), "{name}: means the same\n{once}");
        }
        assert!(!once.contains("-value"), "{name}: a secret's value was printed: {once}");
    }
    let once = crate::effective_with(&literal, path, &env).unwrap();
    assert!(once.contains("token = \"***\"") && !once.contains("literal-token-26"), "{once}");
    assert!(
        !once.contains("pw-26")
            && !once.contains("gwpw")
            && !once.contains("hbpw")
            && once.contains("interval = \"1m\"")
            && once.contains("${HOOK_SECRET}")
            && once.contains("${ORDERS_PW}"),
        "{once}"
    );
    assert!(once.contains("gpg_passphrase = \"${GPG_PASSPHRASE}\""), "{once}");
}

#[test]
fn a_follower_needs_a_wal_archive_and_sane_intervals() {
    let with = |extra: &str, follow: &str| {
        GOOD.replace("rpo = \"26h\"", &format!("rpo = \"26h\"\n{extra}")) + &format!("\n[target.follow]\n{follow}")
    };
    let wal = "format = \"physical\"\nwal_prefix = \"wal/\"\n";
    let c = parse(&with(wal, "")).unwrap();
    let f = c.targets[0].follow.as_ref().unwrap();
    assert_eq!((f.interval, f.reseed_after), (Duration::from_secs(60), Duration::from_secs(7 * 86400)));
    assert_eq!(c.sandbox.state_dir, c.sandbox.scratch_dir, "state_dir defaults to scratch_dir");
    let c = parse(&with(wal, "interval = \"10s\"\nreseed_after = \"2d\"")).unwrap();
    assert_eq!(c.targets[0].follow.as_ref().unwrap().interval, Duration::from_secs(10));
    // Nothing to follow without an archive: said at config time.
    let (key, _, msg) = invalid(&with("", ""));
    assert_eq!(key, "target[0].follow");
    assert!(msg.contains("wal_prefix"), "{msg}");
    for (bad, key) in [("interval = \"500ms\"", "interval"), ("reseed_after = \"10m\"", "reseed_after")] {
        let (k, _, msg) = invalid(&with(wal, bad));
        assert!(k.ends_with(key) && k.contains("follow"), "{bad}: {k}: {msg}");
    }
    // A delta restore is pgBackRest's: refused elsewhere, naming the key.
    let (key, line, msg) = invalid(&GOOD.replace("rpo = \"26h\"", "rpo = \"26h\"\ndelta_restore = true"));
    assert_eq!(key, "target[0].delta_restore");
    assert!(line.is_some() && msg.contains("pgBackRest"), "{msg}");
    // A backup tool's repository has its own archive: followed without wal_prefix.
    let c = parse(&format!("{PGBR}[target.follow]\ninterval = \"30s\"\n")).unwrap();
    assert_eq!(c.targets[0].follow.as_ref().unwrap().interval, Duration::from_secs(30));
    // A typo is refused by name, like every other key.
    let e = parse(&with(wal, "every = \"1m\"")).unwrap_err().to_string();
    assert!(e.contains("every"), "{e}");
}

#[test]
fn a_storage_may_require_a_lock_and_say_whether_it_may_be_probed() {
    let with = |extra: &str| GOOD.replace("path_style = true\n", &format!("path_style = true\n{extra}\n"));
    let c = parse(&with("require_lock = \"compliance\"\nretain_until_at_least = \"35d\"\nprobe_write = true")).unwrap();
    let StorageConfig::S3(s3) = &c.storage["backups"] else { panic!() };
    assert_eq!(s3.require_lock, Some(LockMode::Compliance));
    assert_eq!(s3.retain_until_at_least, Some(Duration::from_secs(35 * 86400)));
    assert!(s3.probe_write);
    assert!(c.targets[0].pin, "pins are on by default");
    // Defaults: nothing required, never a write.
    let c = parse(GOOD).unwrap();
    let StorageConfig::S3(s3) = &c.storage["backups"] else { panic!() };
    assert_eq!((s3.require_lock, s3.retain_until_at_least, s3.probe_write), (None, None, false));
    // A mode that does not exist, and a date without a mode: named.
    let (key, line, msg) = invalid(&with("require_lock = \"strict\""));
    assert_eq!(key, "storage.backups.require_lock");
    assert!(line.is_some() && msg.contains("\"compliance\" or \"governance\""), "{msg}");
    let (key, _, msg) = invalid(&with("retain_until_at_least = \"35d\""));
    assert_eq!(key, "storage.backups.retain_until_at_least");
    assert!(msg.contains("only with require_lock"), "{msg}");
    // A directory has no locks.
    let (key, _, _) =
        invalid(&GOOD.replace("path = \"/srv/backups\"", "path = \"/srv/backups\"\nrequire_lock = \"governance\""));
    assert_eq!(key, "storage.local.require_lock");
    let c = parse(&GOOD.replace("rpo = \"26h\"", "rpo = \"26h\"\npin = false")).unwrap();
    assert!(!c.targets[0].pin);
}

#[test]
fn evidence_maps_to_the_frameworks_asked_for() {
    let c = parse(&format!("{GOOD}[evidence]\ncontrols = [\"soc2\", \"hipaa\"]\n")).unwrap();
    assert_eq!(c.evidence.controls, vec!["soc2".to_string(), "hipaa".to_string()]);
    assert!(c.evidence.mapping.contains_key("dora"), "the built-in mapping is in force");
    let (key, line, msg) = invalid(&format!("{GOOD}[evidence]\ncontrols = [\"sox\"]\n"));
    assert_eq!(key, "evidence.controls");
    assert!(line.is_some() && msg.contains("unknown framework \"sox\"") && msg.contains("soc2"), "{msg}");
    // A mapping of one's own replaces the built-in one, read and checked at load.
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("controls.toml");
    std::fs::write(&own, "[internal]\ntitle = \"Our policy\"\n[[internal.controls]]\nid = \"BK-1\"\nasks = \"Backups are restored monthly.\"\nevidence = [\"verified_on_schedule\"]\n").unwrap();
    let text = format!("{GOOD}[evidence]\ncontrols = [\"internal\"]\ncontrols_file = \"{}\"\n", own.display());
    let c = parse(&text).unwrap();
    assert_eq!(c.evidence.mapping.keys().collect::<Vec<_>>(), vec!["internal"]);
    std::fs::write(
        &own,
        "[internal]\ntitle = \"X\"\n[[internal.controls]]\nid = \"BK-1\"\nasks = \"x\"\nevidence = [\"vibes\"]\n",
    )
    .unwrap();
    let (key, _, msg) = invalid(&text);
    assert_eq!(key, "evidence.controls_file");
    assert!(msg.contains("unknown measure \"vibes\""), "{msg}");
}

#[test]
fn the_canary_is_scheduled_and_its_alert_given_a_time() {
    let c = parse(GOOD).unwrap();
    assert_eq!((c.daemon.canary.is_none(), c.daemon.canary_alert_within), (true, Duration::from_secs(120)));
    let c = parse(&format!("[daemon]\ncanary = \"0 4 * * 0\"\ncanary_alert_within = \"30s\"\n{GOOD}")).unwrap();
    assert_eq!(c.daemon.canary.as_ref().map(|s| s.to_kubernetes().unwrap()).as_deref(), Some("0 4 * * 0"));
    assert_eq!(c.daemon.canary_alert_within, Duration::from_secs(30));
    let (key, line, msg) = invalid(&format!("[daemon]\ncanary = \"0 4 * * 9\"\n{GOOD}"));
    assert_eq!((key.as_str(), line), ("daemon.canary", Some(2)), "{msg}");
    let (key, _, msg) = invalid(&format!("[daemon]\ncanary_alert_within = \"2h\"\n{GOOD}"));
    assert_eq!(key, "daemon.canary_alert_within");
    assert!(msg.contains("at most 1h"), "{msg}");
}
