//! A lab for adversarial tests: a directory store that crafted backups are put into,
//! a scratch directory, drcheck's config for them, and builders of hostile archives.
//! Each attack is built from scratch by the test that uses it.

use crate::{TempRoot, drcheck, drcheck_bin, make_world_enterable, only_run, stderr, stdout};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

pub const LIMIT: Duration = Duration::from_secs(180);

pub struct Lab {
    pub root: TempRoot,
    pub store: PathBuf,
    pub scratch: PathBuf,
    /// A directory outside everything drcheck may touch, writable by anyone: where
    /// an escaped write would land (so a failed containment shows, whoever runs it).
    pub outside: PathBuf,
}

impl Lab {
    pub fn new() -> Lab {
        let root = TempRoot::new();
        let store = root.path().join("store");
        let scratch = root.path().join("scratch");
        let outside = root.path().join("outside");
        for d in [&store, &scratch, &outside] {
            std::fs::create_dir_all(d).unwrap();
        }
        make_world_enterable(&scratch);
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o777)).unwrap();
        // drcheck may run as another, unprivileged user (see `drcheck_user`): it writes
        // its history and reports here.
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        Lab { root, store, scratch, outside }
    }

    /// drcheck's private directory in the scratch directory (named after its uid).
    pub fn private_dir(&self) -> PathBuf {
        self.scratch.join(format!("drcheck-{}", drcheck_user().0))
    }

    /// Puts a backup object at `key` in the store.
    pub fn put(&self, key: &str, bytes: &[u8]) {
        let path = self.store.join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// A config for one target `t` over the store, with `extra` lines in the target.
    pub fn config(&self, sandbox_extra: &str, target_extra: &str) -> PathBuf {
        let text = format!(
            "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{scratch}\"\n{sandbox_extra}\n\
             [storage.local]\nkind = \"filesystem\"\npath = \"{store}\"\n\
             [[target]]\nname = \"t\"\nstorage = \"local\"\nrto = \"10m\"\nrpo = \"3650d\"\n{target_extra}\n",
            root = self.root.path().display(),
            scratch = self.scratch.display(),
            store = self.store.display(),
        );
        let path = self.root.path().join(format!("{}.toml", crate::unique("c")));
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        path
    }

    /// `drcheck verify --backup KEY --json`: the exit code, the run, and all output.
    pub fn verify(&self, config: &Path, key: &str) -> (Option<i32>, serde_json::Value, String) {
        let c = config.display().to_string();
        let (out, _) = drcheck(&["--config", &c, "verify", "--target", "t", "--backup", key, "--json"], &[], LIMIT);
        let all = format!("{}\n{}", stdout(&out), stderr(&out));
        (out.status.code(), only_run(&out), all)
    }

    /// `drcheck verify --target t --json` (the target's own choice of backup), and the
    /// most memory drcheck itself held meanwhile, in MiB (see [`peak_memory_of`]).
    pub fn verify_measured(&self, config: &Path) -> (Option<i32>, serde_json::Value, String, u64) {
        let mut cmd = std::process::Command::new(drcheck_bin());
        cmd.args(["--config", &config.display().to_string(), "verify", "--target", "t", "--json"])
            .env_remove("RUST_LOG")
            .env_remove("DRCHECK_CONFIG");
        let (out, peak) = peak_memory_of(cmd, LIMIT);
        let all = format!("{}\n{}", stdout(&out), stderr(&out));
        (out.status.code(), only_run(&out), all, peak)
    }

    /// `drcheck verify --backup KEY --json` started in the background (output piped).
    pub fn spawn_verify(&self, config: &Path, key: &str) -> std::process::Child {
        std::process::Command::new(drcheck_bin())
            .args(["--config", &config.display().to_string(), "verify", "--target", "t", "--backup", key, "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Files in the outside directory (anything there got out of a sandbox).
    pub fn escaped(&self) -> Vec<String> {
        std::fs::read_dir(&self.outside)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// What is left in drcheck's private directory after a run.
    pub fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(self.private_dir())
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    }
}

impl Default for Lab {
    fn default() -> Self {
        Self::new()
    }
}

/// The uid and gid drcheck runs as: `$DRCHECK_TEST_USER` (a user name; the CI runs
/// the adversarial tests a second time with drcheck unprivileged), else this process's.
pub fn drcheck_user() -> (u32, u32) {
    match std::env::var("DRCHECK_TEST_USER") {
        Ok(name) => {
            let u = nix::unistd::User::from_name(&name).unwrap().expect("DRCHECK_TEST_USER names no user");
            (u.uid.as_raw(), u.gid.as_raw())
        }
        Err(_) => (nix::unistd::Uid::effective().as_raw(), nix::unistd::Gid::effective().as_raw()),
    }
}

/// The user a sandbox server runs as: `drcheck-sandbox` when drcheck is root (a user
/// that owns nothing else), else drcheck's.
pub fn sandbox_user() -> (u32, u32) {
    let (uid, gid) = drcheck_user();
    if uid != 0 {
        return (uid, gid);
    }
    let u =
        nix::unistd::User::from_name("drcheck-sandbox").unwrap().expect("the drcheck-sandbox user (scripts/setup.sh)");
    (u.uid.as_raw(), u.gid.as_raw())
}

/// Asserts the run ended with exit `want_code` and a JSON report (a crash is not a
/// contained attack).
pub fn assert_ran(run: &serde_json::Value, code: Option<i32>, want_code: i32, all: &str) {
    assert_eq!(code, Some(want_code), "{run}\n{all}");
}

/// Asserts the report says the restore ran under Landlock. Tests call it after their
/// attack-specific checks, so that without the containment they fail on the attack.
pub fn assert_contained(run: &serde_json::Value) {
    assert!(run["restore"]["containment"].as_str().is_some_and(|c| c.starts_with("landlock")), "{run}");
}

/// A tar archive, entry by entry, written the way a crafted backup would be: raw
/// names (even `..`), any mode, links anywhere.
#[derive(Default)]
pub struct TarBuilder {
    b: Option<tar::Builder<Vec<u8>>>,
}

impl TarBuilder {
    pub fn new() -> Self {
        Self { b: Some(tar::Builder::new(Vec::new())) }
    }

    fn header(kind: tar::EntryType, path: &str, size: u64, mode: u32) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        h.set_mtime(1_700_000_000);
        let name = &mut h.as_old_mut().name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        h
    }

    fn add(&mut self, mut h: tar::Header, data: &[u8]) -> &mut Self {
        h.set_cksum();
        self.b.as_mut().unwrap().append(&h, data).unwrap();
        self
    }

    pub fn dir(&mut self, path: &str) -> &mut Self {
        self.add(Self::header(tar::EntryType::Directory, path, 0, 0o755), &[])
    }

    pub fn file(&mut self, path: &str, data: &[u8], mode: u32) -> &mut Self {
        self.add(Self::header(tar::EntryType::Regular, path, data.len() as u64, mode), data)
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        let mut h = Self::header(tar::EntryType::Symlink, path, 0, 0o777);
        h.set_link_name(target).unwrap();
        self.add(h, &[])
    }

    pub fn hardlink(&mut self, path: &str, target: &str) -> &mut Self {
        let mut h = Self::header(tar::EntryType::Link, path, 0, 0o644);
        h.set_link_name(target).unwrap();
        self.add(h, &[])
    }

    pub fn device(&mut self, path: &str) -> &mut Self {
        let mut h = Self::header(tar::EntryType::Char, path, 0, 0o666);
        h.set_device_major(1).unwrap();
        h.set_device_minor(3).unwrap();
        self.add(h, &[])
    }

    /// Every entry of an existing tar archive, except those `skip` names.
    pub fn copy_from(&mut self, tar_bytes: &[u8], skip: &[&str]) -> &mut Self {
        let mut a = tar::Archive::new(tar_bytes);
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            if skip.contains(&path.trim_start_matches("./")) {
                continue;
            }
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            let h = e.header().clone();
            self.b.as_mut().unwrap().append(&h, &data[..]).unwrap();
        }
        self
    }

    pub fn finish(&mut self) -> Vec<u8> {
        self.b.take().unwrap().into_inner().unwrap()
    }
}

/// Runs a shell command, failing the test if it fails.
pub fn sh(cmd: &str) -> String {
    let out = std::process::Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `program args` as another run's contained process would: through drcheck's
/// containment helper, confined to `own_dir`, as the sandbox user.
pub fn as_other_run(own_dir: &Path, program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    // The attacker's confinement is this build's helper, whichever drcheck is tested.
    let helper = std::env::var("DRCHECK_HELPER_BIN").map(PathBuf::from).unwrap_or_else(|_| {
        let exe = std::env::current_exe().unwrap();
        exe.parent().and_then(Path::parent).unwrap().join("drcheck")
    });
    let mut cmd = std::process::Command::new(helper);
    cmd.arg("__drcheck-contain").arg("--rw").arg(own_dir);
    for p in ["/usr/lib", "/usr/share", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/passwd", "/etc/group"] {
        cmd.args(["--ro", p]);
    }
    cmd.args(["--exec", crate::PG_BIN]);
    for l in ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"] {
        if Path::new(l).exists() {
            cmd.args(["--exec", l]);
        }
    }
    if nix::unistd::Uid::effective().is_root() {
        let (uid, gid) = sandbox_user();
        cmd.arg("--user").arg(format!("{uid}:{gid}"));
    }
    cmd.args(["--abi", "7", "--", program]).args(args).env_clear().envs(env.iter().copied());
    cmd.output().unwrap()
}

/// Writes `bytes` to a new file in `dir`, returning its path.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(bytes).unwrap();
    p
}

/// Runs `cmd` to its end (failing the test past `limit`), sampling the process's own
/// peak resident memory (`VmHWM` in `/proc`) every 20 ms; returns its output and the
/// largest peak seen, in MiB. Unlike `getrusage(RUSAGE_CHILDREN)`, this counts neither
/// its children nor what a forked child briefly shares with the test process.
pub fn peak_memory_of(mut cmd: std::process::Command, limit: Duration) -> (Output, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let mut child = cmd.spawn().unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let deadline = std::time::Instant::now() + limit;
    let mut peak_kib = 0u64;
    let status = loop {
        let hwm = std::fs::read_to_string(&status_file).ok().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        });
        peak_kib = peak_kib.max(hwm.unwrap_or(0));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} ran over {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = Output { status, stdout: std::fs::read(&out_path).unwrap(), stderr: std::fs::read(&err_path).unwrap() };
    (out, peak_kib / 1024)
}

/// A WAL segment (16 MiB, 8 KiB pages) with every `marker` in the records that hold it
/// replaced by `forged` (the same length), each such record's CRC made good again: WAL
/// that replays cleanly to data the primary never wrote. `pg_waldump` (of `bindir`)
/// finds the records.
pub fn forge_wal(segment: &Path, bindir: &str, marker: &[u8], forged: &[u8]) -> Vec<u8> {
    assert_eq!(marker.len(), forged.len(), "a forgery keeps the length");
    const PAGE: usize = 8192;
    let mut bytes = std::fs::read(segment).unwrap();
    let dump = std::process::Command::new(format!("{bindir}/pg_waldump")).arg(segment).output().unwrap();
    let listing = String::from_utf8_lossy(&dump.stdout);
    let hits: Vec<usize> =
        bytes.windows(marker.len()).enumerate().filter(|(_, w)| *w == marker).map(|(i, _)| i).collect();
    assert!(!hits.is_empty(), "{} does not hold the marker", segment.display());
    // Each record: its offset in the segment and its length, from pg_waldump.
    let records: Vec<(usize, usize)> = listing
        .lines()
        .filter_map(|l| {
            let tot = l.split("len (rec/tot):").nth(1)?.split(',').next()?.split('/').nth(1)?.trim().parse().ok()?;
            let lsn = l.split("lsn: ").nth(1)?.split(',').next()?;
            let low = u64::from_str_radix(lsn.split('/').nth(1)?, 16).ok()?;
            Some(((low % (16 << 20)) as usize, tot))
        })
        .collect();
    // A record's bytes as replay reads them: page headers skipped (the segment's first
    // page has a long one, 40 bytes; the others 24).
    let logical = |start: usize, len: usize| -> Vec<usize> {
        let mut at = start;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            if at.is_multiple_of(PAGE) {
                at += if at == 0 { 40 } else { 24 };
            }
            out.push(at);
            at += 1;
        }
        out
    };
    let mut touched = Vec::new();
    for (start, len) in &records {
        let places = logical(*start, *len);
        let (first, last) = (places[0], *places.last().unwrap());
        if hits.iter().any(|h| *h >= first && *h <= last) {
            touched.push(places);
        }
    }
    assert!(!touched.is_empty(), "no record holds the marker:\n{listing}");
    for h in &hits {
        bytes[*h..*h + marker.len()].copy_from_slice(forged);
    }
    for places in touched {
        let record: Vec<u8> = places.iter().map(|p| bytes[*p]).collect();
        let mut crc = crc32c(0xFFFF_FFFF, &record[24..]);
        crc = crc32c(crc, &record[..20]);
        let crc = (crc ^ 0xFFFF_FFFF).to_le_bytes();
        for (i, b) in crc.iter().enumerate() {
            bytes[places[20 + i]] = *b;
        }
    }
    bytes
}

/// CRC-32C (Castagnoli) continued from `crc`, without the final inversion: what
/// PostgreSQL's `COMP_CRC32C` computes.
fn crc32c(mut crc: u32, data: &[u8]) -> u32 {
    for b in data {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    crc
}
