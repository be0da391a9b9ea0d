//! Schedules mean what crontab and Kubernetes mean, identically in the daemon and in
//! the CronJobs drcheck generates (issue 22).

use drcheck_config::Schedule;
use drcheck_e2e::hostile::Lab;
use drcheck_e2e::{Daemon, drcheck, free_port, http_get, stderr, stdout};
use std::time::Duration;

/// A table of schedules: the daemon's firings (drcheck's `Schedule`) over a year, and
/// croniter's — Kubernetes' semantics, on the line `deploy kubernetes` writes — are the
/// same instants.
#[test]
fn the_daemon_and_its_cronjobs_fire_at_the_same_instants_for_a_year() {
    let table = [
        "0 3 * * *",
        "0 3 * * 1",
        "0 3 * * 0",
        "0 3 * * 7",
        "0 3 * * 1-5",
        "0 3 * * THU",
        "0 3 1 * 1",
        "0 3 */2 * 1",
        "*/15 2 1,15 * *",
        "30 4 * jan,jul mon",
        "0 0 29 2 *",
        "@weekly",
        "@monthly",
        "H 3 * * *",
        "H(0-29) H/6 * * sat",
        "5/20 9-17 * * mon-fri",
    ];
    // A year with a 29 February in it.
    let start = chrono::DateTime::parse_from_rfc3339("2027-09-01T00:00:00Z").unwrap().with_timezone(&chrono::Utc);
    let end = start + chrono::Duration::days(366);
    for s in table {
        let sched = Schedule::parse("orders", s).unwrap_or_else(|e| panic!("{s}: {e}"));
        let line = sched.to_kubernetes().unwrap();
        let mut ours = Vec::new();
        let mut t = start;
        while let Some(next) = sched.next_after(t) {
            if next > end {
                break;
            }
            ours.push(next.format("%Y-%m-%dT%H:%M:%S").to_string());
            t = next;
        }
        let script = format!(
            "import croniter, datetime\n\
             it = croniter.croniter({line:?}, datetime.datetime(2027, 9, 1, tzinfo=datetime.timezone.utc))\n\
             end = datetime.datetime(2027, 9, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(days=366)\n\
             while True:\n    n = it.get_next(datetime.datetime)\n    if n > end: break\n    print(n.strftime('%Y-%m-%dT%H:%M:%S'))\n"
        );
        let out = std::process::Command::new("python3").args(["-c", &script]).output().unwrap();
        assert!(out.status.success(), "croniter: {}", String::from_utf8_lossy(&out.stderr));
        let theirs: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
        assert!(!theirs.is_empty(), "{s}: no firings");
        assert_eq!(ours, theirs, "{s} (CronJob line {line:?}): the daemon and Kubernetes disagree");
    }
}

/// Through the binary: Monday is 1 and Sunday both 0 and 7 on the daemon's status page
/// (its next runs) and in the generated CronJobs; `THU` is a day, not an H.
#[test]
fn the_daemon_and_the_generated_cronjobs_agree_on_days() {
    let lab = Lab::new();
    let port = free_port();
    let base = std::fs::read_to_string(lab.config("", "")).unwrap();
    let mut text = base.replace("name = \"t\"", "name = \"monday\"\nschedule = \"0 3 * * 1\"");
    for (name, schedule) in [("sunday", "0 3 * * 7"), ("thursday", "0 3 * * THU"), ("weekdays", "0 3 * * 1-5")] {
        text.push_str(&format!(
            "[[target]]\nname = \"{name}\"\nstorage = \"local\"\nrto = \"10m\"\nrpo = \"1d\"\nschedule = \"{schedule}\"\n"
        ));
    }
    text.push_str(&format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"));
    let config = lab.root.path().join("days.toml");
    std::fs::write(&config, &text).unwrap();
    let pod = lab.root.path().join("days-pod.toml");
    std::fs::write(&pod, drcheck_e2e::pod_ready(&text)).unwrap();
    let p = pod.display().to_string();
    let (out, _) =
        drcheck(&["--config", &p, "deploy", "kubernetes", "--image", "drcheck:test"], &[], Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let yaml = stdout(&out);
    for line in ["schedule: 0 3 * * 1\n", "schedule: 0 3 * * 0\n", "schedule: 0 3 * * 4\n", "schedule: 0 3 * * 1-5\n"] {
        assert!(yaml.contains(line), "{line:?} missing from {yaml}");
    }
    let _daemon = Daemon::start(&config, port, &[]);
    let page = http_get(port, "/");
    let weekday = |target: &str| {
        let row = page.split(&format!("/targets/{target}\"")).nth(1).unwrap_or_else(|| panic!("{target} in {page}"));
        let next = row.split("data-label=\"next\">").nth(1).unwrap_or_else(|| panic!("no next run in {row}"));
        let at = next.split("<time>").nth(1).unwrap_or_else(|| panic!("no time in {next}"));
        let date = &at[..10];
        chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").unwrap().format("%a").to_string()
    };
    assert_eq!(weekday("monday"), "Mon", "{page}");
    assert_eq!(weekday("sunday"), "Sun", "{page}");
    assert_eq!(weekday("thursday"), "Thu", "{page}");
    assert!(["Mon", "Tue", "Wed", "Thu", "Fri"].contains(&weekday("weekdays").as_str()), "{page}");
}
