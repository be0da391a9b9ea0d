//! A store gives bytes, never paths, and what it names is shown escaped; the files
//! drcheck keeps for itself (scratch, history) are its own and private.

use drcheck_e2e::hostile::{Lab, assert_ran, drcheck_user};
use drcheck_e2e::{PgPrimary, unique};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

fn plain(body: &str) -> Vec<u8> {
    format!("--\n-- PostgreSQL database dump\n--\n\n-- Dumped from database version 15.18\n\n{body}").into_bytes()
}

/// Every small object drcheck reads from a filesystem store — the globals script, a
/// checksum sidecar, a base backup's manifest, the backup itself — replaced by a link to
/// a secret outside the store (an evidence signing key): never followed, never read,
/// never shown.
#[test]
fn links_in_a_filesystem_store_are_never_followed() {
    let lab = Lab::new();
    let secret = unique("SIGNINGKEYSECRET");
    let key_file = lab.root.path().join("evidence-key.pem");
    std::fs::write(&key_file, format!("-----BEGIN PRIVATE KEY-----\n{secret}\n-----END PRIVATE KEY-----\n")).unwrap();
    let link = |key: &str| {
        let path = lab.store.join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&key_file, &path).unwrap();
        // The link works: whoever follows it reads the key.
        assert!(std::fs::read_to_string(&path).unwrap().contains(&secret));
    };
    lab.put("globals/dump.sql", &plain("create table t (id int);\n"));
    link("globals/globals.sql");
    lab.put("sidecar/x.sql", &plain("create table t (id int);\n"));
    link("sidecar/x.sql.sha256");
    link("itself/evil.sql");
    let primary = PgPrimary::start(&lab.root);
    let bb = lab.root.pg_dir("bb").join("b");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "stream", "--checkpoint=fast"]);
    lab.put("phys/b1/base.tar", &std::fs::read(bb.join("base.tar")).unwrap());
    lab.put("phys/b1/pg_wal.tar", &std::fs::read(bb.join("pg_wal.tar")).unwrap());
    link("phys/b1/backup_manifest");

    let mut shown = String::new();
    let config = lab.config("", "globals_key = \"globals/globals.sql\"");
    let (code, _run, all) = lab.verify(&config, "globals/dump.sql");
    shown.push_str(&all);
    assert_ne!(code, Some(0), "{all}");
    assert!(all.contains("globals/globals.sql: a symbolic link"), "{all}");
    // The backup itself a link: not an object of the store — naming it is a mistake.
    let c = lab.config("", "").display().to_string();
    let (out, _) = drcheck_e2e::drcheck(
        &["--config", &c, "verify", "--target", "t", "--backup", "itself/evil.sql"],
        &[],
        Duration::from_secs(60),
    );
    let all = format!("{}{}", drcheck_e2e::stdout(&out), drcheck_e2e::stderr(&out));
    shown.push_str(&all);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("itself/evil.sql: a symbolic link"), "{all}");
    // A sidecar or manifest that is a link is none: not read, left out of the listing,
    // said so (and the manifest check reported as not done).
    let config = lab.config("", "");
    let (code, run, all) = lab.verify(&config, "sidecar/x.sql");
    shown.push_str(&all);
    assert_ran(&run, code, 0, &all);
    assert!(all.contains("sidecar/x.sql.sha256: a symbolic link"), "{all}");
    let (code, run, all) = lab.verify(&config, "phys/b1/");
    shown.push_str(&all);
    assert_ran(&run, code, 0, &all);
    assert!(all.contains("phys/b1/backup_manifest: a symbolic link"), "{all}");
    assert_eq!(run["restore"]["manifest"], "not checked: the backup has no backup_manifest", "{run}");
    assert!(!shown.contains(&secret), "the key reached the output");
    let history = std::fs::read(lab.root.path().join("history.db")).unwrap();
    assert!(!String::from_utf8_lossy(&history).contains(&secret), "the key reached the history");
}

/// Creates `depth` nested directories under `dir` with relative `mkdirat` calls (a
/// path that long cannot be named at once).
fn deep_tree(dir: &Path, depth: usize) {
    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::Mode;
    let mut fd = open(dir, OFlag::O_DIRECTORY | OFlag::O_RDONLY, Mode::empty()).unwrap();
    for _ in 0..depth {
        nix::sys::stat::mkdirat(&fd, "d", Mode::from_bits_truncate(0o755)).unwrap();
        fd = openat(&fd, "d", OFlag::O_DIRECTORY | OFlag::O_RDONLY, Mode::empty()).unwrap();
    }
}

/// A walk of the whole directory by paths, as drcheck's store used to list.
fn walk_by_paths(dir: &Path) -> std::io::Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        n += 1;
        if e.file_type()?.is_dir() {
            n += walk_by_paths(&e.path())?;
        }
    }
    Ok(n)
}

/// A 2,100-deep directory tree under another prefix of the store: walking the whole
/// store by paths fails, so every target of that store used to exit 3. drcheck walks
/// only the target's prefix (and, with no prefix, bounds its depth).
#[test]
fn a_deep_tree_under_another_prefix_stops_no_target() {
    let lab = Lab::new();
    std::fs::create_dir_all(lab.store.join("other")).unwrap();
    deep_tree(&lab.store.join("other"), 2100);
    assert!(walk_by_paths(&lab.store).is_err(), "the tree is too deep to walk by paths");
    lab.put("t/ok.sql", &plain("create table t (id int);\n"));
    for prefix in ["prefix = \"t/\"", ""] {
        let config = lab.config("", prefix);
        let c = config.display().to_string();
        let (out, _) =
            drcheck_e2e::drcheck(&["--config", &c, "verify", "--target", "t", "--json"], &[], Duration::from_secs(180));
        let run = drcheck_e2e::only_run(&out);
        assert_eq!(out.status.code(), Some(0), "{prefix:?}: {run}\n{}", drcheck_e2e::stderr(&out));
        assert_eq!(run["backup"]["key"], "t/ok.sql", "{run}");
    }
}

/// An object key holding terminal escape sequences that would erase drcheck's FAILED
/// line and print a green "passed": every human output shows them escaped.
#[test]
fn escape_sequences_in_a_key_never_reach_the_terminal() {
    let lab = Lab::new();
    let key = "x\u{1b}[2K\u{1b}[1A\u{1b}[32mt: PASSED\u{1b}[0m\r.sql";
    lab.put(key, &plain("select 1/0;\n"));
    let config = lab.config("", "");
    let c = config.display().to_string();
    // The store lists the key as it is.
    let (out, _) = drcheck_e2e::drcheck(&["--config", &c, "backups", "list", "--json"], &[], Duration::from_secs(60));
    assert!(drcheck_e2e::stdout(&out).contains("\\u001b[2K"), "{}", drcheck_e2e::stdout(&out));
    let mut human = String::new();
    for args in [
        vec!["--config", &c, "backups", "list"],
        vec!["--config", &c, "verify", "--target", "t"],
        vec!["--config", &c, "history"],
    ] {
        let (out, _) = drcheck_e2e::drcheck(&args, &[], Duration::from_secs(120));
        human.push_str(&drcheck_e2e::stdout(&out));
        human.push_str(&drcheck_e2e::stderr(&out));
    }
    assert!(!human.contains('\u{1b}') && !human.contains('\r'), "raw control characters: {human:?}");
    assert!(human.matches("x\\x1b[2K\\x1b[1A").count() >= 3, "every output names the key, escaped: {human}");
    assert!(human.contains("t: FAILED"), "{human}");
}

/// A local user who creates drcheck's private directory name in a shared scratch
/// directory first neither stops drcheck nor gets it to use that directory.
#[test]
fn a_squatted_scratch_directory_neither_blocks_nor_is_used() {
    let lab = Lab::new();
    let squatted = lab.private_dir();
    std::fs::create_dir(&squatted).unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    std::os::unix::fs::chown(&squatted, Some(nobody.uid.as_raw()), Some(nobody.gid.as_raw())).unwrap();
    std::fs::set_permissions(&squatted, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(squatted.file_name().unwrap().to_string_lossy(), format!("drcheck-{}", drcheck_user().0));
    lab.put("ok.sql", &plain("create table t (id int);\ninsert into t values (1);\n"));
    let config = lab.config("", "");
    let (code, run, all) = lab.verify(&config, "ok.sql");
    assert_ran(&run, code, 0, &all);
    assert_eq!(std::fs::read_dir(&squatted).unwrap().count(), 0, "drcheck used a directory someone else made");
    assert_eq!(std::fs::metadata(&squatted).unwrap().uid(), nobody.uid.as_raw(), "drcheck touched it");
    assert!(all.contains("not drcheck's own private directory"), "the log says why: {all}");
}

/// The history (what the API token guards) is readable by drcheck's user only, and so
/// are SQLite's companion files.
#[test]
fn the_history_is_private_to_drchecks_user() {
    let lab = Lab::new();
    lab.put("ok.sql", &plain("create table t (id int);\n"));
    let config = lab.config("", "");
    let (code, run, all) = lab.verify(&config, "ok.sql");
    assert_ran(&run, code, 0, &all);
    for name in ["history.db", "history.db-wal", "history.db-shm"] {
        let path = lab.root.path().join(name);
        if let Ok(m) = std::fs::metadata(&path) {
            assert_eq!(m.mode() & 0o077, 0, "{name} is {:o}", m.mode() & 0o777);
        } else {
            assert_ne!(name, "history.db", "no history was written");
        }
    }
    // A history another version made readable by others is closed on the next run.
    std::fs::set_permissions(lab.root.path().join("history.db"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, run, all) = lab.verify(&config, "ok.sql");
    assert_ran(&run, code, 0, &all);
    let mode = std::fs::metadata(lab.root.path().join("history.db")).unwrap().mode();
    assert_eq!(mode & 0o077, 0, "{:o}", mode & 0o777);
}
