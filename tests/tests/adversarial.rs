//! The adversarial corpus: crafted backups and a crafted environment, each built here
//! from scratch, against the built binary. Each test fails when its defence is removed
//! (the attack lands outside, or passes), and checks the run really got to the sandbox
//! (a crash is not a contained attack). See SECURITY.md for the threat model.
//!
//! The corpus continues in `adversarial/`: forged verdicts (`forged.rs`), the sandbox's
//! identity (`identity.rs`), stores and drcheck's own files (`stores.rs`), the daemon
//! and signed reports (`surface.rs`).

#[path = "adversarial/forged.rs"]
mod forged;
#[path = "adversarial/identity.rs"]
mod identity;
#[path = "adversarial/stores.rs"]
mod stores;
#[path = "adversarial/surface.rs"]
mod surface;

use drcheck_e2e::hostile::{Lab, TarBuilder, as_other_run, assert_contained, assert_ran, drcheck_user, sh, write_file};
use drcheck_e2e::{PG_BIN, PgPrimary, TempRoot, unique};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// A plain SQL dump as pg_dump starts one, then `body`.
fn plain(body: &str) -> Vec<u8> {
    format!("--\n-- PostgreSQL database dump\n--\n\n-- Dumped from database version 15.18\n\n{body}").into_bytes()
}

/// A plain SQL dump is a psql script: its meta-commands would run in psql. drcheck runs
/// it under psql's `\restrict` with a key of its own, so none runs — not the shell, not
/// a write or read outside, not a connection elsewhere — and the run fails naming it;
/// the script's own `\restrict`/`\unrestrict` lines (pg_dump 15.14+ writes them) cannot
/// lift it. Each payload is first shown to work in psql unrestricted.
#[test]
fn plain_dump_meta_commands_cannot_reach_outside_the_sandbox() {
    let lab = Lab::new();
    let secret = unique("TOPSECRET-");
    let secret_file = write_file(lab.root.path(), "secret.txt", secret.as_bytes());
    std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = lab.outside.display().to_string();
    let attacks = [
        ("shell", format!("\\! touch {out}/shell-marker"), "shell-marker"),
        ("output", format!("\\o {out}/o-marker\nselect 1;"), "o-marker"),
        ("copy", format!("\\copy (select 1) to '{out}/copy-marker'"), "copy-marker"),
        ("include", format!("\\i {}", secret_file.display()), ""),
        ("unrestrict", format!("\\unrestrict guessed\n\\! touch {out}/unrestrict-marker"), "unrestrict-marker"),
    ];
    // The payloads work in psql as drcheck used to run it (no restriction).
    let scratch = lab.root.pg_dir("plain-proof");
    let proof_primary = PgPrimary::start(&lab.root);
    for (name, attack, marker) in &attacks {
        if marker.is_empty() || *name == "unrestrict" {
            continue;
        }
        let script = write_file(&scratch, &format!("{name}.sql"), format!("{attack}\n").as_bytes());
        let run = std::process::Command::new("psql")
            .args(["-X", "-q", "-h"])
            .arg(&proof_primary.sock)
            .args(["-p", &proof_primary.port.to_string(), "-U", "postgres", "-d", "postgres", "-f"])
            .arg(&script)
            .output()
            .unwrap();
        assert!(lab.outside.join(marker).exists(), "{name}: the payload does nothing even unrestricted: {run:?}");
        std::fs::remove_file(lab.outside.join(marker)).unwrap();
    }
    let config = lab.config("", "");
    for (name, attack, _) in &attacks {
        let key = format!("{name}.sql");
        lab.put(&key, &plain(&format!("create table t (id int);\n{attack}\ninsert into t values (1);\n")));
        let (code, run, all) = lab.verify(&config, &key);
        assert_eq!(run["backup"]["format"], "plain", "{name}: {run}");
        assert!(lab.escaped().is_empty(), "{name}: escaped: {:?}", lab.escaped());
        assert!(!all.contains(&secret), "{name}: the secret file's content reached the output: {all}");
        assert_ran(&run, code, 1, &all);
        let msg = run["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("backslash commands are restricted"), "{name}: {msg}");
        assert_contained(&run);
    }
    // A plain dump as pg_dump 15.14+ writes it, with its own \restrict lines, restores.
    lab.put(
        "benign.sql",
        &plain("\\restrict Rk9xYz123\ncreate table t (id int);\ninsert into t values (1);\n\\unrestrict Rk9xYz123\n"),
    );
    let (code, run, all) = lab.verify(&config, "benign.sql");
    assert_ran(&run, code, 0, &all);
    assert!(lab.leftovers().is_empty(), "{:?}", lab.leftovers());
}

/// Server-side code in a custom dump (a CHECK constraint calling a function that runs
/// `COPY … TO PROGRAM` in the restored database only) and file reads by the server:
/// no program runs, no file outside the run is read.
#[test]
fn server_side_programs_and_reads_outside_fail_inside_the_sandbox() {
    let lab = Lab::new();
    let primary = PgPrimary::start(&lab.root);
    let marker = lab.outside.join("program-marker");
    primary.psql("postgres", "create database orders");
    primary.psql(
        "orders",
        &format!(
            "create function evil() returns boolean language plpgsql as $$ begin \
               if current_database() = 'restored' then \
                 execute format('copy (select 1) to program %L', 'touch {}'); \
               end if; return true; end $$",
            marker.display()
        ),
    );
    primary.psql("orders", "create table t (id int primary key, check (evil()))");
    primary.psql("orders", "insert into t values (1), (2)");
    let dump = lab.root.path().join("evil.dump");
    primary.dump("orders", &dump, &[]);
    lab.put("evil.dump", &std::fs::read(&dump).unwrap());

    let config = lab.config("", "");
    let (code, run, all) = lab.verify(&config, "evil.dump");
    assert_eq!(run["backup"]["format"], "custom", "{run}");
    assert!(!marker.exists(), "COPY TO PROGRAM ran a program outside the sandbox");
    assert_ran(&run, code, 1, &all);
    assert_contained(&run);
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("evil") || msg.contains("program"), "{msg}");

    // The server reading drcheck's own config (it holds the primary's password) and
    // its process's environment.
    let config_text = std::fs::read_to_string(&config).unwrap();
    let reads = [
        ("config", format!("select pg_read_file('{}')", config.display())),
        (
            "environ",
            "select pg_read_file('/proc/' || split_part(pg_read_file('/proc/self/stat'), ' ', 4) || '/environ')"
                .to_string(),
        ),
    ];
    for (name, read) in reads {
        let key = format!("read-{name}.sql");
        lab.put(&key, &plain(&format!("create table leak as {read};\n")));
        let (code, run, all) = lab.verify(&config, &key);
        assert!(!all.contains(config_text.lines().next().unwrap()), "{name}: config leaked: {all}");
        assert_ran(&run, code, 1, &all);
        let msg = run["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.to_lowercase().contains("permission denied"), "{name}: {msg}");
    }
    assert!(lab.escaped().is_empty(), "escaped: {:?}", lab.escaped());
}

/// Another run's contained process (same user as every sandbox server) can reach this
/// run's socket, but not log in: each sandbox has its own password, and the file that
/// holds it is out of the other run's reach.
#[test]
fn another_runs_process_cannot_enter_a_running_sandbox() {
    let lab = Lab::new();
    lab.put("slow.sql", &plain("create table t (id int);\ninsert into t values (1);\nselect pg_sleep(8);\n"));
    let config = lab.config("", "");
    let child = lab.spawn_verify(&config, "slow.sql");
    let private = lab.private_dir();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (sock, passfile) = loop {
        assert!(Instant::now() < deadline, "no running sandbox appeared");
        let found = std::fs::read_dir(&private).ok().and_then(|d| {
            d.filter_map(Result::ok).find(|e| e.file_name().to_string_lossy().ends_with(".owner")).map(|e| e.path())
        });
        if let Some(owner) = found
            && let Some(sock) = std::fs::read_to_string(&owner).ok().and_then(|t| t.lines().nth(1).map(String::from))
            && Path::new(&sock).join(".s.PGSQL.5432").exists()
        {
            let root = owner.with_extension("");
            break (sock, root.join("pgpass"));
        }
        // drcheck before the private directory kept sandboxes in the scratch directory.
        let old = std::fs::read_dir(&lab.scratch).unwrap().filter_map(Result::ok).find_map(|e| {
            let sock = std::fs::read_to_string(e.path().join("socket_dir")).ok()?;
            Path::new(&sock).join(".s.PGSQL.5432").exists().then(|| (sock, e.path().join("pgpass")))
        });
        if let Some(found) = old {
            break found;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(300));
    let other = lab.root.path().join("other-run");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o777)).unwrap();
    let psql = format!("{PG_BIN}/psql");
    let passfile = passfile.display().to_string();
    for env in [vec![], vec![("PGPASSFILE", passfile.as_str())]] {
        // The socket exists once the server listens, which is before it accepts logins:
        // under load "the database system is starting up" can still answer for a while.
        let deadline = Instant::now() + Duration::from_secs(30);
        let (out, text) = loop {
            let out = as_other_run(
                &other,
                &psql,
                &["-h", &sock, "-p", "5432", "-U", "postgres", "-d", "postgres", "-w", "-Atc", "select 'got in'"],
                &env,
            );
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            if !text.contains("is starting up") || Instant::now() > deadline {
                break (out, text);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(!out.status.success(), "another run's process logged in ({env:?}): {text}");
        assert!(text.contains("password"), "refused for another reason ({env:?}): {text}");
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Archives that try to write or read outside their directory, or carry device nodes:
/// the run fails as the backup's fault and nothing outside changes.
#[test]
fn archive_entries_never_leave_the_run_directory() {
    let lab = Lab::new();
    let victim = lab.outside.display().to_string();
    let config = lab.config("", "");
    let case = |key: &str, bytes: Vec<u8>, expect: &str| {
        lab.put(key, &bytes);
        let (code, run, all) = lab.verify(&config, key.trim_end_matches("base.tar"));
        assert!(lab.escaped().is_empty(), "{key}: escaped: {:?}", lab.escaped());
        assert_ran(&run, code, 1, &all);
        let msg = run["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(expect), "{key}: expected {expect:?} in {msg}");
    };

    // A base backup whose pg_wal is a link out; pg_wal.tar would unpack through it.
    let base = TarBuilder::new().file("PG_VERSION", b"15\n", 0o600).symlink("pg_wal", &victim).finish();
    let wal = TarBuilder::new().file("000000010000000000000001", &[0u8; 512], 0o600).finish();
    lab.put("walescape/b1/pg_wal.tar", &wal);
    case("walescape/b1/base.tar", base, "outside");

    // postgresql.conf shipped as a dangling link: writing the sandbox's own config
    // through it would create a file outside.
    let base = TarBuilder::new()
        .file("PG_VERSION", b"15\n", 0o600)
        .symlink("postgresql.conf", &format!("{victim}/created-by-drcheck"))
        .finish();
    case("confescape/b1/base.tar", base, "outside");

    // A tar holding only a link to a directory dump on the host.
    let host_dump = lab.root.path().join("host-dump");
    std::fs::create_dir_all(&host_dump).unwrap();
    std::fs::write(host_dump.join("toc.dat"), b"PGDMP").unwrap();
    case("hostdir.tar", TarBuilder::new().symlink("dump", &host_dump.display().to_string()).finish(), "outside");

    // `..` entries, hard links to host files, device nodes.
    case(
        "dotdot.tar",
        TarBuilder::new().file(&format!("../../{}/x", lab.outside.display()), b"x", 0o644).finish(),
        "..",
    );
    case("hardlink.tar", TarBuilder::new().dir("d/").hardlink("d/passwd", "/etc/passwd").finish(), "would leave");
    case(
        "device.tar",
        TarBuilder::new().dir("d/").file("d/toc.dat", b"PGDMP", 0o644).device("d/null").finish(),
        "device",
    );
}

/// A base backup that brings its own postgresql.auto.conf with a restore_command and
/// recovery_end_command, and a recovery.signal: none of it runs, and the backup —
/// otherwise sound — still restores and passes.
#[test]
fn a_base_backups_own_recovery_commands_never_run() {
    let lab = Lab::new();
    let primary = PgPrimary::start(&lab.root);
    primary.psql("postgres", "create table t as select g from generate_series(1, 100) g");
    let bb = lab.root.pg_dir("bb").join("b");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "stream", "--checkpoint=fast"]);
    let marker = |n: &str| lab.outside.join(n).display().to_string();
    let auto = format!(
        "restore_command = 'touch {}'\nrecovery_end_command = 'touch {}'\narchive_mode = on\narchive_command = 'touch {}'\n",
        marker("restore"),
        marker("end"),
        marker("archive")
    );
    let original = std::fs::read(bb.join("base.tar")).unwrap();
    let base = TarBuilder::new()
        .copy_from(&original, &["postgresql.auto.conf", "recovery.signal"])
        .file("postgresql.auto.conf", auto.as_bytes(), 0o600)
        .file("recovery.signal", b"", 0o600)
        .finish();
    lab.put("phys/b1/base.tar", &base);
    lab.put("phys/b1/pg_wal.tar", &std::fs::read(bb.join("pg_wal.tar")).unwrap());
    let config = lab.config("", "");
    let (code, run, all) = lab.verify(&config, "phys/b1/");
    assert_eq!(run["backup"]["format"], "physical", "{run}");
    assert!(lab.escaped().is_empty(), "the backup's commands ran: {:?}", lab.escaped());
    assert_ran(&run, code, 0, &all);
    assert_contained(&run);
}

/// A tiny archive that expands to gigabytes stops at the configured ceiling, as the
/// backup's fault, long before the disk fills; nothing is left behind.
#[test]
fn a_decompression_bomb_stops_at_the_ceiling() {
    let lab = Lab::new();
    lab.put("bomb.tar.zst", &tar_zst_bomb(&lab));
    // The default ceiling: size × 200 plus 1 GiB for any cluster.
    let config = lab.config("", "");
    let t = Instant::now();
    let (code, run, all) = lab.verify(&config, "bomb.tar.zst");
    assert!(t.elapsed() < Duration::from_secs(120), "took {:?}", t.elapsed());
    assert_ran(&run, code, 1, &all);
    assert_contained(&run);
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("expands beyond"), "{msg}");
    assert!(t.elapsed() < Duration::from_secs(120), "took {:?}", t.elapsed());
    assert!(lab.leftovers().is_empty(), "{:?}", lab.leftovers());
}

/// A directory dump in a tar, zstd-compressed from a stream (so no size in its header),
/// whose toc.dat is 3 GiB of zeros: about 100 KiB.
fn tar_zst_bomb(lab: &Lab) -> Vec<u8> {
    let work = lab.root.path().join("bomb");
    std::fs::create_dir_all(&work).unwrap();
    sh(&format!(
        "cd {w} && mkdir d && truncate -s 3G d/toc.dat && tar -cf - d | zstd -q -1 -T2 -o bomb.tar.zst && rm -r d",
        w = work.display()
    ));
    let bomb = std::fs::read(work.join("bomb.tar.zst")).unwrap();
    assert!(bomb.len() < 1 << 20, "the bomb is {} bytes", bomb.len());
    bomb
}

/// A compressed backup whose zstd header declares it expands past the ceiling is
/// refused before anything is unpacked.
#[test]
fn a_bomb_that_declares_its_size_is_refused_before_unpacking() {
    let lab = Lab::new();
    let work = lab.root.path().join("declared");
    std::fs::create_dir_all(&work).unwrap();
    sh(&format!(
        "head -c 3221225472 /dev/zero | zstd -q -1 -T2 --stream-size=3221225472 -o {}/bomb.sql.zst",
        work.display()
    ));
    lab.put("bomb.sql.zst", &std::fs::read(work.join("bomb.sql.zst")).unwrap());
    let config = lab.config("", "");
    let t = Instant::now();
    let (code, run, all) = lab.verify(&config, "bomb.sql.zst");
    assert_ran(&run, code, 1, &all);
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("expands beyond") && msg.contains("declares 3221225472"), "{msg}");
    assert!(t.elapsed() < Duration::from_secs(30), "took {:?}", t.elapsed());
    assert!(run["phases"].as_array().unwrap().iter().all(|p| p["name"] != "restore"), "{run}");
}

/// SIGTERM while an archive is being unpacked: drcheck exits within seconds, the
/// unpacking thread stops with it, and nothing is written after the run is gone.
#[test]
fn sigterm_during_unpacking_stops_every_write() {
    let lab = Lab::new();
    lab.put("bomb.tar.zst", &tar_zst_bomb(&lab));
    let config = lab.config("", "");
    let mut child = std::process::Command::new(drcheck_e2e::drcheck_bin())
        .args(["--config", &config.display().to_string(), "verify", "--target", "t", "--backup", "bomb.tar.zst"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the unpacking is well under way.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let big = sh(&format!("du -sb {} 2>/dev/null | cut -f1; true", lab.private_dir().display()))
            .trim()
            .parse::<u64>()
            .unwrap_or(0);
        if big > 200 << 20 {
            break;
        }
        assert!(Instant::now() < deadline, "the unpacking never got going");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = drcheck_e2e::proc::signal_and_wait(
        &mut child,
        nix::sys::signal::Signal::SIGTERM,
        Duration::from_secs(10),
        "drcheck",
    );
    assert_eq!(status.code(), Some(3), "an interrupted run is incomplete");
    std::thread::sleep(Duration::from_secs(2));
    assert!(lab.leftovers().is_empty(), "written after the run ended: {:?}", lab.leftovers());
}

/// Leftover reaping trusts nothing in a shared scratch directory: planted "sandboxes"
/// naming an unrelated process (and pid 1) and an unrelated directory are left alone.
#[test]
fn planted_leftovers_neither_kill_nor_delete() {
    let lab = Lab::new();
    lab.put("ok.sql", &plain("create table t (id int);\n"));
    // An unrelated process in its own process group, and an unrelated directory that
    // looks like a socket directory.
    let bystander = std::process::Command::new("sleep").arg("120").process_group(0).spawn().unwrap();
    let bystander = Bystander(bystander);
    let victim = tempfile::Builder::new().prefix("drcheck-").tempdir_in("/tmp").unwrap();
    std::fs::write(victim.path().join("keep"), b"keep").unwrap();
    let pid = bystander.0.id().to_string();
    // The old layout, planted in the (shared) scratch directory.
    for (name, owner) in [("drcheck-sandbox-bait", "999999999"), ("drcheck-sandbox-one", "1")] {
        let d = lab.scratch.join(name);
        std::fs::create_dir_all(d.join("data")).unwrap();
        std::fs::write(d.join("drcheck.pid"), owner).unwrap();
        std::fs::write(d.join("data/postmaster.pid"), format!("{pid}\n")).unwrap();
        std::fs::write(d.join("socket_dir"), victim.path().display().to_string()).unwrap();
    }
    // A planted owner record inside drcheck's private directory naming pid 1 and the
    // victim, and a "sandbox" that is a link to the victim.
    let private = lab.private_dir();
    std::fs::create_dir_all(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::write(private.join("sandbox-bait.owner"), format!("1 0\n{}\n", victim.path().display())).unwrap();
    std::os::unix::fs::symlink(victim.path(), private.join("sandbox-bait")).unwrap();
    // Planted as drcheck's own user would have (only it can write there).
    let (uid, gid) = drcheck_user();
    for p in [private.clone(), private.join("sandbox-bait.owner"), private.join("sandbox-bait")] {
        std::os::unix::fs::lchown(&p, Some(uid), Some(gid)).unwrap();
    }

    let config = lab.config("", "");
    let (code, run, all) = lab.verify(&config, "ok.sql");
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(bystander.0.id() as i32), None).is_ok();
    assert!(alive, "the reaper killed an unrelated process");
    assert!(victim.path().join("keep").exists(), "the reaper deleted an unrelated directory");
    assert!(!private.join("sandbox-bait").exists(), "the planted link itself is reaped");
    assert_ran(&run, code, 0, &all);
    assert_contained(&run);
}

/// A WAL archive whose one segment expands to gigabytes: streamed to disk, bounded,
/// never held in memory.
#[test]
fn a_wal_bomb_is_bounded_and_never_held_in_memory() {
    let lab = Lab::new();
    let primary = PgPrimary::start(&lab.root);
    let bb = lab.root.pg_dir("bb").join("b");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "stream", "--checkpoint=fast"]);
    lab.put("phys/b1/base.tar", &std::fs::read(bb.join("base.tar")).unwrap());
    lab.put("phys/b1/pg_wal.tar", &std::fs::read(bb.join("pg_wal.tar")).unwrap());
    let work = TempRoot::new();
    sh(&format!("cd {w} && truncate -s 2G seg && zstd -q -1 -T2 seg -o seg.zst && rm seg", w = work.path().display()));
    lab.put("wal/0000000100000000000000FF.zst", &std::fs::read(work.path().join("seg.zst")).unwrap());
    let config = lab.config("", "wal_prefix = \"wal/\"");
    let (code, run, all) = lab.verify(&config, "phys/b1/");
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    let peak_mib = usage.max_rss() / 1024;
    assert!(peak_mib < 256, "a child (drcheck) peaked at {peak_mib} MiB");
    assert_ran(&run, code, 1, &all);
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("0000000100000000000000FF") && msg.contains("expands beyond"), "{msg}");
    assert_contained(&run);
    assert!(lab.leftovers().is_empty(), "{:?}", lab.leftovers());
}

/// A WAL segment full of the smallest commits: the archive's newest segment is read
/// with `pg_waldump` to find where the recovery window ends, and one crafted 64 MiB
/// segment makes it print over 200 MB (a 1 GiB one, over 3 GB). drcheck reads it line by line, holding one line,
/// and still finds the newest commit (the segment's last record).
#[test]
fn a_wal_segment_full_of_commits_never_floods_memory() {
    let lab = Lab::new();
    // A base backup, complete by its manifest, never read: the window ends before it.
    lab.put("phys/b1/base.tar", b"never read");
    lab.put("phys/b1/backup_manifest", b"never read");
    let name = "000000010000000000000003";
    let newest = "2021-02-03T04:05:06.789012Z";
    let segment = forged_commit_segment(3, 64 << 20, 15 << 9, newest);
    lab.put(&format!("wal/{name}"), &segment);
    drop(segment);
    // The attack works: pg_waldump prints hundreds of megabytes, ending in `newest`.
    let mut waldump = std::process::Command::new(format!("{PG_BIN}/pg_waldump"))
        .args(["--rmgr=Transaction", &format!("--path={}", lab.store.join("wal").display()), name])
        .env("TZ", "UTC")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (mut printed, mut last) = (0usize, String::new());
    for line in std::io::BufRead::lines(std::io::BufReader::new(waldump.stdout.take().unwrap())) {
        let line = line.unwrap();
        printed += line.len() + 1;
        last = line;
    }
    let _ = waldump.wait();
    assert!(printed > 200_000_000, "pg_waldump printed only {printed} bytes");
    assert!(last.ends_with("desc: COMMIT 2021-02-03 04:05:06.789012 UTC"), "{last}");
    let config = lab.config("", "wal_prefix = \"wal/\"\nrecovery_target = \"random\"");
    let (code, run, all, peak_mib) = lab.verify_measured(&config);
    eprintln!("drcheck peaked at {peak_mib} MiB");
    assert!(peak_mib > 0 && peak_mib < 128, "drcheck peaked at {peak_mib} MiB");
    // The window ends at the forged newest commit, before the only backup: nothing to draw.
    assert_ran(&run, code, 3, &all);
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("replays to 2021-02-03T04:05:06.789Z") && msg.contains(name), "{msg}");
    assert!(lab.leftovers().is_empty(), "{:?}", lab.leftovers());
}

/// A PostgreSQL 15 WAL segment crafted byte by byte: segment `segno` of `seg_size`
/// bytes, its first `pages` 8 KiB pages filled with the smallest commit records (no
/// record crosses a page), the last one committed at `newest`, zeros after.
fn forged_commit_segment(segno: u64, seg_size: u32, pages: usize, newest: &str) -> Vec<u8> {
    const PAGE: usize = 8192;
    const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    let pg_epoch = chrono::DateTime::parse_from_rfc3339("2000-01-01T00:00:00Z").unwrap();
    let newest = (chrono::DateTime::parse_from_rfc3339(newest).unwrap() - pg_epoch).num_microseconds().unwrap();
    let start = segno * u64::from(seg_size);
    let mut wal = vec![0u8; seg_size as usize];
    // Where each record goes: 40 bytes each, the last of a page taking what is left.
    let mut records = Vec::new();
    for page in 0..pages {
        let header = if page == 0 { 40 } else { 24 };
        let usable = PAGE - header;
        let mut at = page * PAGE + header;
        for _ in 0..usable / 40 - 1 {
            records.push((at, 40));
            at += 40;
        }
        records.push((at, 40 + usable % 40));
        let o = page * PAGE;
        wal[o..o + 2].copy_from_slice(&0xD110u16.to_le_bytes()); // XLOG_PAGE_MAGIC of 15
        let info: u16 = if page == 0 { 2 } else { 0 }; // XLP_LONG_HEADER on a segment's first page
        wal[o + 2..o + 4].copy_from_slice(&info.to_le_bytes());
        wal[o + 4..o + 8].copy_from_slice(&1u32.to_le_bytes()); // timeline
        wal[o + 8..o + 16].copy_from_slice(&(start + o as u64).to_le_bytes());
        if page == 0 {
            wal[24..32].copy_from_slice(&7_000_000_000_000_000_000u64.to_le_bytes()); // system id
            wal[32..36].copy_from_slice(&seg_size.to_le_bytes());
            wal[36..40].copy_from_slice(&(PAGE as u32).to_le_bytes());
        }
    }
    let n = records.len() as i64;
    let mut prev = start - 40;
    for (i, &(at, len)) in records.iter().enumerate() {
        // XLogRecord: total length, xid, previous record, info (COMMIT), rmgr (Transaction), CRC.
        let mut record = vec![0u8; len];
        record[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        record[4..8].copy_from_slice(&(1000 + i as u32).to_le_bytes());
        record[8..16].copy_from_slice(&prev.to_le_bytes());
        record[17] = 1;
        // The main data (XLR_BLOCK_ID_DATA_SHORT): xl_xact_commit's xact_time, padding.
        record[24] = 255;
        record[25] = (len - 26) as u8;
        record[26..34].copy_from_slice(&(newest - (n - 1 - i as i64)).to_le_bytes());
        let mut crc = CRC32C.digest();
        crc.update(&record[24..]);
        crc.update(&record[..20]);
        record[20..24].copy_from_slice(&crc.finalize().to_le_bytes());
        wal[at..at + len].copy_from_slice(&record);
        prev = start + at as u64;
    }
    wal
}

/// Stops the test's bystander process however the test ends.
struct Bystander(std::process::Child);

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Credentials in a storage endpoint's or a Pushgateway's URL (userinfo) are shown
/// nowhere: not by `config check`, not in a run's error, not in the history, not in
/// the warnings of a failed push.
#[test]
fn userinfo_in_endpoint_and_gateway_urls_is_never_shown() {
    let lab = Lab::new();
    let dead = drcheck_e2e::free_port();
    let key_id = unique("AKIAUSER");
    let secret = unique("s3cr3tpass");
    let text = format!(
        "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{scratch}\"\n\
         [metrics]\npushgateway = \"http://{key_id}:{secret}@127.0.0.1:{dead}\"\n\
         [storage.s3]\nkind = \"s3\"\nbucket = \"b\"\nendpoint = \"http://{key_id}:{secret}@127.0.0.1:{dead}\"\npath_style = true\nretry_window = \"3s\"\n\
         [[target]]\nname = \"t\"\nstorage = \"s3\"\nrto = \"10m\"\nrpo = \"1d\"\n",
        root = lab.root.path().display(),
        scratch = lab.scratch.display(),
    );
    let config = lab.root.path().join("c.toml");
    std::fs::write(&config, text).unwrap();
    let c = config.display().to_string();
    let mut shown = String::new();
    for args in [
        vec!["--config", &c, "config", "check"],
        vec!["--config", &c, "verify", "--json"],
        vec!["--config", &c, "history", "--json"],
    ] {
        let (out, _) = drcheck_e2e::drcheck(&args, &[], Duration::from_secs(120));
        shown.push_str(&drcheck_e2e::stdout(&out));
        shown.push_str(&drcheck_e2e::stderr(&out));
    }
    assert!(shown.contains("127.0.0.1"), "the commands showed nothing: {shown}");
    assert!(shown.contains("\"stage\""), "no run error was shown: {shown}");
    assert!(!shown.contains(&secret) && !shown.contains(&key_id), "credentials shown: {shown}");
    let db = std::fs::read(lab.root.path().join("history.db")).unwrap();
    let db = String::from_utf8_lossy(&db);
    assert!(!db.contains(&secret) && !db.contains(&key_id), "credentials in the history store");
}

/// Error text quoted from a backup is capped: a dump cannot fill the report, the
/// history or an alert with its own bytes.
#[test]
fn error_text_quoted_from_a_backup_is_capped() {
    let lab = Lab::new();
    let filler = "A".repeat(100_000);
    lab.put("loud.sql", &plain(&format!("select '{filler}'::int;\n")));
    let config = lab.config("", "");
    let (code, run, all) = lab.verify(&config, "loud.sql");
    assert_ran(&run, code, 1, &all);
    let msg = run["error"]["message"].as_str().unwrap();
    assert!(msg.starts_with("psql failed") && msg.contains("characters left out"), "{msg}");
    assert!(msg.chars().count() <= 2100, "{} characters", msg.chars().count());
}

/// `--var` values and captured values reach shell steps as data: a value holding shell
/// syntax is printed, not run.
#[test]
fn drill_variables_are_never_run_as_shell_code() {
    let lab = Lab::new();
    let marker = lab.outside.join("injected");
    let yaml = "title: Injection\nvariables:\n  who: nobody\nsteps:\n  - name: greet\n    shell:\n      command: 'echo \"hello ${who}\"; echo hello ${who}'\n      capture: said\n  - name: again\n    shell:\n      command: 'echo ${said}'\n";
    let file = write_file(lab.root.path(), "inject.yaml", yaml.as_bytes());
    let evil = format!("$(touch {m}); touch {m}2 `touch {m}3`", m = marker.display());
    let report = lab.root.path().join("r.html");
    let (out, _) = drcheck_e2e::drcheck(
        &[
            "drill",
            "run",
            &file.display().to_string(),
            "--report",
            &report.display().to_string(),
            "--var",
            &format!("who={evil}"),
        ],
        &[],
        Duration::from_secs(120),
    );
    let all = format!("{}{}", drcheck_e2e::stdout(&out), drcheck_e2e::stderr(&out));
    assert!(lab.escaped().is_empty(), "a variable ran as shell code: {:?}\n{all}", lab.escaped());
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(all.contains(&format!("hello {evil}")), "the value was not passed through literally: {all}");
}

/// A one-shot `verify` takes the target's lease in the history store, like the daemon:
/// a second one while the first restores says who holds it and exits 3.
#[test]
fn a_second_verify_of_the_same_target_waits_for_the_lease() {
    let lab = Lab::new();
    lab.put("slow.sql", &plain("create table t (id int);\nselect pg_sleep(6);\n"));
    let config = lab.config("", "");
    let c = config.display().to_string();
    let first = lab.spawn_verify(&config, "slow.sql");
    let private = lab.private_dir();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(&private).map(|d| d.count()).unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "the first run never started restoring");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (second, _) = drcheck_e2e::drcheck(
        &["--config", &c, "verify", "--target", "t", "--backup", "slow.sql", "--json"],
        &[],
        Duration::from_secs(60),
    );
    let err = drcheck_e2e::stderr(&second);
    let first = first.wait_with_output().unwrap();
    assert_eq!(second.status.code(), Some(3), "{err}");
    assert!(err.contains("drcheck verify pid") && err.contains("is verifying it"), "{err}");
    assert_eq!(first.status.code(), Some(0), "{}", String::from_utf8_lossy(&first.stderr));
}

/// A `verify` killed outright (SIGKILL, the OOM killer) cannot release its lease, nor
/// record its run. The next run on the same machine sees that the holder's process is
/// gone and takes the lease over, instead of refusing the target until the lease's TTL
/// (hours) runs out — even while the dead process is still a zombie its parent has not
/// reaped (issue 33: a zombie answers signal 0, and was taken for the holder). Issue 48:
/// the run had its history row from its start (`running`, under the id it logged); the
/// daemon, started after the kill, removes the orphaned sandbox (its server stopped) at
/// once, not at that target's next run; the run that takes the lease over records the
/// dead one `aborted` under that same id; and a triggered run skipped for a lease a live
/// `verify` holds answers `skipped`, with the reason, under the id the API gave out.
#[test]
fn a_lease_left_by_a_killed_verify_is_taken_over() {
    let lab = Lab::new();
    lab.put("slow.sql", &plain("create table t (id int);\nselect pg_sleep(6);\n"));
    let config = lab.config("", "");
    let c = config.display().to_string();
    let mut first = lab.spawn_verify(&config, "slow.sql");
    let private = lab.private_dir();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(&private).map(|d| d.count()).unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "the first run never started restoring");
        std::thread::sleep(Duration::from_millis(50));
    }
    let history = || {
        let (out, _) = drcheck_e2e::drcheck(&["--config", &c, "history", "--json"], &[], Duration::from_secs(60));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let v = history();
    let started = &v["not_recorded"][0];
    assert_eq!(started["state"], "running", "the run has its row from its start: {v}");
    let dead_id = started["run_id"].as_str().unwrap().to_string();
    // Its sandbox's server is up: the sandbox directory and processes working in it.
    let sandbox = std::fs::read_dir(&private)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("a sandbox directory");
    let working_in = |dir: &Path| {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .filter(|p| std::fs::read_link(p.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while working_in(&sandbox) == 0 {
        assert!(Instant::now() < deadline, "no process ever worked in {}", sandbox.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    first.kill().unwrap();
    // Not reaped yet: a zombie until the end of the test.
    let zombie = format!("/proc/{}/stat", first.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&zombie).unwrap_or_default().contains(") Z ") {
        assert!(Instant::now() < deadline, "the killed run never became a zombie");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Its sandbox stays behind (and, contained without a pid namespace of its own, its
    // server with it) until some drcheck reaps it.
    std::thread::sleep(Duration::from_millis(500));
    assert!(sandbox.exists(), "the killed run's sandbox is left behind");

    // The daemon removes the orphan when it starts.
    let port = drcheck_e2e::free_port();
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n[api]\ntoken = \"tok-{port}\"\n"));
    std::fs::write(&config, text).unwrap();
    let mut daemon = drcheck_e2e::Daemon::start(&config, port, &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while sandbox.exists() || working_in(&sandbox) > 0 {
        assert!(Instant::now() < deadline, "the daemon left the orphaned sandbox: {}", daemon.stderr_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let auth = format!("Bearer tok-{port}");
    let trigger = || {
        let (status, body) =
            drcheck_e2e::http_request(port, "POST", "/api/v1/targets/t/verify", &[("Authorization", &auth)], "");
        assert_eq!(status, 202, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["run_id"].as_str().unwrap().to_string()
    };
    let answer = |id: &str| {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, body) =
                drcheck_e2e::http_request(port, "GET", &format!("/api/v1/runs/{id}"), &[("Authorization", &auth)], "");
            assert_ne!(status, 404, "run {id}: {body}");
            if status == 200 {
                return serde_json::from_str::<serde_json::Value>(&body).unwrap();
            }
            assert!(Instant::now() < deadline, "run {id} never finished");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let next = trigger();
    let run = answer(&next);
    assert_eq!(run["result"], "passed", "{run}");
    // The dead run is in the history under the id it started with, as aborted, saying who.
    let v = history();
    let died = v["runs"].as_array().unwrap().iter().find(|r| r["run_id"] == dead_id.as_str());
    let died = died.unwrap_or_else(|| panic!("run {dead_id} not recorded: {v}"));
    assert_eq!(died["result"], "aborted", "{died}");
    let msg = died["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("died without recording") && msg.contains(&format!("run {next}")), "{died}");
    assert_eq!(v["runs"].as_array().unwrap().iter().filter(|r| r["result"] == "aborted").count(), 1, "{v}");
    first.wait().unwrap();

    // A live `verify` holds the lease: a triggered run is skipped, and says so under its id.
    let holder = lab.spawn_verify(&config, "slow.sql");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !history()["not_recorded"].as_array().is_some_and(|a| a.iter().any(|r| r["state"] == "running")) {
        assert!(Instant::now() < deadline, "the second verify never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let skipped = trigger();
    let run = answer(&skipped);
    assert_eq!(run["status"], "skipped", "{run}");
    assert!(run["reason"].as_str().unwrap().contains("is verifying this target"), "{run}");
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (status, _) = daemon.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}");
    let log = daemon.stderr_text();
    assert!(
        log.contains("took over the lease") && log.contains("removed a sandbox left by a drcheck process"),
        "{log}"
    );
}

/// With `[api] token`, every API route needs it; only /metrics, /healthz and /readyz
/// stay open.
#[test]
fn the_api_token_guards_every_api_route() {
    let lab = Lab::new();
    let port = drcheck_e2e::free_port();
    let config = lab.config("", "");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n[api]\ntoken = \"tok-{port}\"\n"));
    std::fs::write(&config, text).unwrap();
    let _daemon = drcheck_e2e::Daemon::start(&config, port, &[]);
    let auth = format!("Bearer tok-{port}");
    for (method, path) in [("GET", "/api/v1/runs"), ("POST", "/api/v1/targets/t/verify")] {
        let (status, _) = drcheck_e2e::http_request(port, method, path, &[], "");
        assert_eq!(status, 401, "{method} {path} without the token");
        let (status, _) = drcheck_e2e::http_request(port, method, path, &[("Authorization", "Bearer wrong")], "");
        assert_eq!(status, 401, "{method} {path} with a wrong token");
    }
    let (status, body) = drcheck_e2e::http_request(port, "GET", "/api/v1/runs", &[("Authorization", &auth)], "");
    assert_eq!(status, 200, "{body}");
    for path in ["/metrics", "/healthz", "/readyz"] {
        let (status, _) = drcheck_e2e::http_request(port, "GET", path, &[], "");
        assert_eq!(status, 200, "{path}");
    }
}

/// A backup tool restoring by delegation (pgBackRest, barman-cloud) reads backup content
/// and holds the store's credentials: contained, it may connect to the store's port and
/// nowhere else (not the primary, not the metadata service, not another port on the host).
#[test]
fn a_delegated_backup_tool_connects_to_the_store_port_only() {
    let store = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (store_port, other_port) = (store.local_addr().unwrap().port(), elsewhere.local_addr().unwrap().port());
    let root = TempRoot::new();
    let python = std::fs::canonicalize("/usr/bin/python3").unwrap();
    let probe = |port: u16| {
        let mut cmd = std::process::Command::new(drcheck_e2e::drcheck_bin());
        cmd.arg("__drcheck-contain").arg("--rw").arg(root.path());
        for ro in ["/usr/lib", "/usr/local/lib", "/lib", "/lib64", "/etc/ld.so.cache", "/usr/share"] {
            cmd.args(["--ro", ro]);
        }
        cmd.arg("--exec").arg(&python);
        for l in ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"].iter().filter(|p| Path::new(p).exists())
        {
            cmd.args(["--exec", l]);
        }
        cmd.args(["--connect", &store_port.to_string(), "--abi", "7", "--"]).arg(&python).args([
            "-c",
            &format!(
                "import socket,sys\ntry:\n socket.create_connection(('127.0.0.1', {port}), timeout=5).close(); print('connected')\nexcept OSError as e:\n print('refused', e)"
            ),
        ]);
        let out = cmd.env_clear().output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(probe(store_port), "connected", "the store's port is reachable");
    let other = probe(other_port);
    assert!(other.starts_with("refused") && other.contains("Permission denied"), "another port: {other}");
}

/// Issue 33: bounds on what the backup controls before a byte is restored. (1) An age
/// header of 30,000 recipient stanzas (age re-parses a growing header line by line:
/// minutes of CPU in drcheck's own process) is refused unparsed. (2) Two zstd layers,
/// the outer one expanding into a 2 GiB skippable frame that the inner one skips: the
/// innermost output is a tiny plain dump (the old bound counted only it), but every
/// layer's output now counts and the run fails as the backup's once it passes the bound.
/// (3) SIGTERM during the bomb ends the run within seconds. Each payload is first shown
/// to be what it claims with the real tools.
#[test]
fn bombs_in_layers_and_headers_are_bounded() {
    let lab = Lab::new();
    let dir = lab.root.path();
    let identity = sh("age-keygen 2>/dev/null").lines().find(|l| l.starts_with("AGE-SECRET-KEY-")).unwrap().to_string();
    let recipient = sh(&format!("printf '%s\\n' '{identity}' | age-keygen -y")).trim().to_string();
    let dump = write_file(dir, "tiny.sql", &plain("create table t (id int);\ninsert into t values (1);\n"));

    // (1) The age header: a real file, its one stanza repeated.
    let sealed = dir.join("tiny.sql.age");
    sh(&format!("age -r {recipient} -o {} {}", sealed.display(), dump.display()));
    let bytes = std::fs::read(&sealed).unwrap();
    let text_end = bytes.windows(5).position(|w| w == b"\n--- ").unwrap();
    let header = String::from_utf8(bytes[..text_end].to_vec()).unwrap();
    let stanza_at = header.find("\n-> ").unwrap() + 1;
    let stanza = header[stanza_at..].to_string() + "\n";
    let mut bomb = bytes[..stanza_at].to_vec();
    for _ in 0..30_000 {
        bomb.extend_from_slice(stanza.as_bytes());
    }
    bomb.extend_from_slice(&bytes[stanza_at..]);
    assert!(bomb.len() > 2 << 20, "{}", bomb.len());
    let key_file = write_file(dir, "age.key", format!("{identity}\n").as_bytes());
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    // drcheck may run as another user (the unprivileged pass): the key is its.
    let (uid, gid) = drcheck_user();
    std::os::unix::fs::chown(&key_file, Some(uid), Some(gid)).unwrap();
    let config =
        lab.config("max_expansion = 2", &format!("[target.decrypt]\nage_identity = \"{}\"\n", key_file.display()));
    lab.put("ok.sql.age", &bytes);
    let (code, run, all) = lab.verify(&config, "ok.sql.age");
    assert_ran(&run, code, 0, &all);
    lab.put("header.sql.age", &bomb);
    let started = Instant::now();
    let (code, run, all) = lab.verify(&config, "header.sql.age");
    assert_eq!(code, Some(1), "{all}");
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("more than 256 recipient stanzas"), "{msg}");
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());

    // (2) zstd(skippable frames of 4 GiB + zstd(dump)), written block by block.
    let inner = dir.join("inner.zst");
    sh(&format!("zstd -q -19 -c {} > {}", dump.display(), inner.display()));
    let inner = std::fs::read(&inner).unwrap();
    let layered = write_file(dir, "layered.sql.zst", &skipping_bomb(1, &inner));
    let packed = std::fs::read(&layered).unwrap();
    assert!(packed.len() < 1 << 20, "{}", packed.len());
    // What the layers hold: the dump, behind 4 GiB the inner decoder skips.
    let through = sh(&format!("zstd -q -dc {} | zstd -q -dc", layered.display()));
    assert!(through.contains("insert into t values (1);"), "{through}");
    lab.put("layered.sql.zst", &packed);
    let (code, run, all) = lab.verify(&config, "layered.sql.zst");
    assert_eq!(code, Some(1), "{all}");
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("expands beyond"), "{msg}");

    // (3) SIGTERM while decoding 2 TiB of them (bounded only far beyond): the 64 MiB of
    // blocks that expand to them, compressed once more, are a file of kilobytes.
    let blocks = write_file(dir, "blocks.zst", &skipping_bomb(512, &inner));
    let long = dir.join("long.sql.zst");
    sh(&format!("zstd -q -3 -c {} > {}", blocks.display(), long.display()));
    let long = std::fs::read(&long).unwrap();
    assert!(long.len() < 1 << 20, "{}", long.len());
    lab.put("long.sql.zst", &long);
    let config = lab.config("max_expansion = 1000000000", "");
    let mut child = lab.spawn_verify(&config, "long.sql.zst");
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = sent + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.is_some(), "SIGTERM not honoured within 10 s");
    assert!(sent.elapsed() < Duration::from_secs(3), "SIGTERM took {:?}", sent.elapsed());
    assert!(lab.leftovers().is_empty(), "{:?}", lab.leftovers());
}

/// A zstd frame whose output is `skips` skippable frames of about 4 GiB of zeros each,
/// then `tail` (itself a zstd stream): 4 bytes of input per 128 KiB of output (RLE
/// blocks), so a file of megabytes expands to tens of gigabytes that the next layer's
/// decoder skips without output.
fn skipping_bomb(skips: usize, tail: &[u8]) -> Vec<u8> {
    const BLOCK: u32 = 128 * 1024;
    const BLOCKS: u32 = 32767;
    // Frame header: no content size, not single-segment (a window of 128 KiB), no checksum.
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38];
    let block_header = |size: u32, kind: u32, last: bool| {
        let h = (size << 3) | (kind << 1) | u32::from(last);
        [h as u8, (h >> 8) as u8, (h >> 16) as u8]
    };
    for _ in 0..skips {
        let mut skippable = vec![0x50, 0x2a, 0x4d, 0x18];
        skippable.extend_from_slice(&(BLOCK * BLOCKS).to_le_bytes());
        out.extend_from_slice(&block_header(skippable.len() as u32, 0, false));
        out.extend_from_slice(&skippable);
        for _ in 0..BLOCKS {
            out.extend_from_slice(&block_header(BLOCK, 1, false));
            out.push(0);
        }
    }
    assert!(tail.len() < BLOCK as usize);
    out.extend_from_slice(&block_header(tail.len() as u32, 0, true));
    out.extend_from_slice(tail);
    out
}

/// Issue 34: a lease left by a run on another machine (a deleted pod) cannot be judged
/// from here: the refusal says until when it holds and how to free it; `lease list` shows
/// it; `lease release` refuses without `--force` and frees it with it; the target then
/// verifies.
#[test]
fn a_lease_of_a_gone_pod_is_listed_and_released() {
    let lab = Lab::new();
    lab.put("quick.sql", &plain("create table t (id int);\n"));
    let config = lab.config("", "");
    let c = config.display().to_string();
    let run = |args: &[&str]| {
        let mut all = vec!["--config", &c];
        all.extend_from_slice(args);
        drcheck_e2e::drcheck(&all, &[], Duration::from_secs(120)).0
    };
    // The history exists once drcheck has opened it.
    let first = run(&["verify", "--target", "t", "--backup", "quick.sql", "--json"]);
    assert_eq!(first.status.code(), Some(0), "{}", drcheck_e2e::stderr(&first));
    let holder = "drcheck verify pid 4242 (0badf00d) [machine 00000000-4026531836 start 12345]";
    let db = lab.root.path().join("history.db");
    let out = std::process::Command::new("python3")
        .args(["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); \
             c.execute(\"insert into leases (target, holder, expires_at) values ('t', ?, '2099-01-01T00:00:00.000Z')\", \
             (sys.argv[2],)); c.commit()"])
        .arg(&db)
        .arg(holder)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // drcheck may run as another user (the unprivileged pass): its history stays its own.
    let (uid, gid) = drcheck_user();
    for suffix in ["", "-wal", "-shm"] {
        let f = lab.root.path().join(format!("history.db{suffix}"));
        if f.exists() {
            std::os::unix::fs::chown(&f, Some(uid), Some(gid)).unwrap();
        }
    }
    let held = run(&["verify", "--target", "t", "--backup", "quick.sql", "--json"]);
    let err = drcheck_e2e::stderr(&held);
    assert_eq!(held.status.code(), Some(3), "{err}");
    assert!(err.contains(holder) && err.contains("until 2099-01-01T00:00:00.000Z"), "{err}");
    assert!(err.contains("drcheck lease release --target t"), "{err}");
    let listed = run(&["lease", "list"]);
    let v: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let lease = &v["leases"][0];
    assert_eq!(lease["target"], "t", "{v}");
    assert_eq!(lease["holder"], holder, "{v}");
    assert_eq!(lease["live"], true, "{v}");
    assert!(lease["holder_running"].is_null(), "another machine's holder cannot be judged here: {v}");
    let refused = run(&["lease", "release", "--target", "t"]);
    assert_eq!(refused.status.code(), Some(2), "{}", drcheck_e2e::stderr(&refused));
    assert!(drcheck_e2e::stderr(&refused).contains("--force"), "{}", drcheck_e2e::stderr(&refused));
    let released = run(&["lease", "release", "--target", "t", "--force"]);
    assert_eq!(released.status.code(), Some(0), "{}", drcheck_e2e::stderr(&released));
    assert!(drcheck_e2e::stdout(&released).contains("t: lease released"));
    let again = run(&["verify", "--target", "t", "--backup", "quick.sql", "--json"]);
    assert_eq!(again.status.code(), Some(0), "{}", drcheck_e2e::stderr(&again));

    // Issue 34: a configured scratch_dir that does not exist yet is made.
    let fresh = lab.root.path().join("not-yet").join("scratch");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&lab.scratch.display().to_string(), &fresh.display().to_string());
    std::fs::write(&config, text).unwrap();
    let made = run(&["verify", "--target", "t", "--backup", "quick.sql", "--json"]);
    assert_eq!(made.status.code(), Some(0), "{}", drcheck_e2e::stderr(&made));
    assert!(fresh.is_dir());
}
