//! Real backup-tool repositories for the source tests: a primary that archives its WAL
//! with pgBackRest (or barman-cloud) into moto, and the TLS terminator pgBackRest 2.45
//! needs in front of moto (it speaks only HTTPS to S3).

use crate::proc::KillOnDrop;
use crate::{AWS_ENV, PgPrimary, S3Server, TempRoot, as_pg, free_port, unique};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The repository tests' TLS terminator (`tests/tools/tls_terminator.py`) with a server
/// certificate for `DNS:127.0.0.1,IP:127.0.0.1` signed by a fresh private CA (`ca`).
pub struct Tls {
    pub port: u16,
    pub ca: PathBuf,
    _proc: KillOnDrop,
}

impl Tls {
    pub fn start(root: &TempRoot, upstream: u16) -> Tls {
        let dir = root.path().join(unique("tls"));
        std::fs::create_dir_all(&dir).unwrap();
        // A private CA and a server certificate it signed, as an operator's internal PKI
        // would issue (pgBackRest checks only DNS-type SANs: both kinds are given).
        let (ca, ca_key, cert, key) =
            (dir.join("ca.pem"), dir.join("ca.key"), dir.join("cert.pem"), dir.join("key.pem"));
        let (csr, ext) = (dir.join("server.csr"), dir.join("server.ext"));
        std::fs::write(
            &ext,
            "subjectAltName=DNS:127.0.0.1,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        let steps: [Vec<std::ffi::OsString>; 3] = [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=drcheck-test-ca", "-keyout"]
                .iter()
                .map(Into::into)
                .chain([ca_key.clone().into(), "-out".into(), ca.clone().into()])
                .collect(),
            ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout"]
                .iter()
                .map(Into::into)
                .chain([key.clone().into(), "-out".into(), csr.clone().into()])
                .collect(),
            ["x509", "-req", "-days", "2", "-CAcreateserial", "-in"]
                .iter()
                .map(Into::into)
                .chain([
                    csr.into(),
                    "-CA".into(),
                    ca.clone().into(),
                    "-CAkey".into(),
                    ca_key.into(),
                    "-extfile".into(),
                    ext.into(),
                    "-out".into(),
                    cert.clone().into(),
                ])
                .collect(),
        ];
        for args in steps {
            let out = Command::new("openssl").args(&args).current_dir(&dir).output().unwrap();
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        // The certificate is public: the sandbox user reads it as the CA file.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).unwrap();
        let port = free_port();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/tls_terminator.py");
        let child = Command::new("python3")
            .arg(script)
            .args([port.to_string(), upstream.to_string()])
            .arg(&cert)
            .arg(&key)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let proc = KillOnDrop::new(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the TLS terminator did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Tls { port, ca, _proc: proc }
    }

    pub fn endpoint(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

/// Runs `cmd`, failing the test (with its output) unless it succeeds; returns stdout.
fn stdout_of(mut cmd: Command, what: &str) -> String {
    let out = cmd.output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(out.status.success(), "{what}: {}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// Switches `primary`'s WAL and waits (60 s at most) until its archiver reports the
/// switched-from segment archived; returns that segment's name.
fn archive_now(primary: &PgPrimary) -> String {
    let seg = primary.psql("postgres", "select pg_walfile_name(pg_switch_wal())");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let last = primary.psql("postgres", "select coalesce(last_archived_wal, '') from pg_stat_archiver");
        if last.as_str() >= seg.as_str() {
            return seg;
        }
        assert!(Instant::now() < deadline, "{seg} was not archived in 60 s (last: {last})");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A primary archiving into a pgBackRest repository in moto (through [`Tls`]).
pub struct PgbrScene {
    pub root: TempRoot,
    pub s3: S3Server,
    pub tls: Tls,
    pub bucket: String,
    pub stanza: String,
    pub repo_path: String,
    pub conf: PathBuf,
    pub primary: PgPrimary,
    pub scratch: PathBuf,
    pub cipher_pass: Option<String>,
}

impl PgbrScene {
    /// Starts moto, the terminator and a primary whose `archive_command` pushes to a
    /// new stanza; `cipher_pass` encrypts the repository.
    pub fn start(cipher_pass: Option<&str>) -> PgbrScene {
        let root = TempRoot::new();
        let s3 = S3Server::start(&root);
        let tls = Tls::start(&root, s3.port);
        let bucket = unique("pgbr");
        s3.make_bucket(&bucket);
        let stanza = "main".to_string();
        let repo_path = format!("/{}", unique("repo"));
        let work = root.pg_dir("pgbackrest");
        let conf = root.path().join("pgbackrest.conf");
        let cipher =
            cipher_pass.map(|p| format!("repo1-cipher-type=aes-256-cbc\nrepo1-cipher-pass={p}\n")).unwrap_or_default();
        // The primary's data directory is known only once it runs: the [stanza] section
        // is completed below.
        let global = format!(
            "[global]\nrepo1-type=s3\nrepo1-s3-bucket={bucket}\nrepo1-s3-endpoint=127.0.0.1\nrepo1-storage-port={}\n\
             repo1-s3-region=us-east-1\nrepo1-s3-uri-style=path\nrepo1-s3-key={}\nrepo1-s3-key-secret={}\n\
             repo1-storage-ca-file={}\nrepo1-path={repo_path}\nrepo1-bundle=y\nrepo1-retention-full=9\n{cipher}\
             log-path={w}\nlock-path={w}\nspool-path={w}\nlog-level-console=warn\nlog-level-file=off\nstart-fast=y\n\
             compress-type=gz\n",
            tls.port,
            AWS_ENV[0].1,
            AWS_ENV[1].1,
            tls.ca.display(),
            w = work.display()
        );
        std::fs::write(&conf, &global).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();
        let archive = format!("pgbackrest --config={} --stanza={stanza} archive-push %p", conf.display());
        let primary = PgPrimary::start_with(
            &root,
            &[
                ("archive_mode", "on"),
                ("archive_command", &archive),
                ("wal_level", "replica"),
                ("archive_timeout", "0"),
            ],
        );
        std::fs::write(
            &conf,
            format!(
                "{global}\n[{stanza}]\npg1-path={}\npg1-socket-path={}\npg1-port={}\npg1-user=postgres\n",
                primary.data.display(),
                primary.sock.display(),
                primary.port
            ),
        )
        .unwrap();
        let scratch = root.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        crate::make_world_enterable(&scratch);
        let me = PgbrScene {
            root,
            s3,
            tls,
            bucket,
            stanza,
            repo_path,
            conf,
            primary,
            scratch,
            cipher_pass: cipher_pass.map(str::to_string),
        };
        me.pgbackrest(&["stanza-create"]);
        me
    }

    /// Runs `pgbackrest ARGS` as the postgres user with the scene's config; returns stdout.
    pub fn pgbackrest(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("pgbackrest");
        as_pg(&mut cmd)
            .arg(format!("--config={}", self.conf.display()))
            .arg(format!("--stanza={}", self.stanza))
            .args(args)
            .current_dir(self.root.path());
        stdout_of(cmd, &format!("pgbackrest {args:?}"))
    }

    /// Takes a backup of `kind` (full, diff, incr).
    pub fn backup(&self, kind: &str) {
        self.pgbackrest(&["backup", &format!("--type={kind}")]);
    }

    /// Switches WAL and waits until the archive holds the switched-from segment.
    pub fn archive_now(&self) -> String {
        archive_now(&self.primary)
    }

    /// The catalog as `pgbackrest info --output=json` prints it.
    pub fn info(&self) -> serde_json::Value {
        serde_json::from_str(&self.pgbackrest(&["info", "--output=json"])).unwrap()
    }

    /// `aws s3` against moto's plain HTTP port (the same bucket pgBackRest writes through TLS).
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let out = Command::new("aws")
            .args(["--endpoint-url", &self.s3.endpoint(), "s3", "ls", "--recursive"])
            .arg(format!("s3://{}/{}", self.bucket, prefix.trim_start_matches('/')))
            .envs(AWS_ENV)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(3).map(str::to_string))
            .collect()
    }

    /// A drcheck config for target `orders` reading this repository.
    pub fn config(&self, extra: &str) -> PathBuf {
        let cipher = if self.cipher_pass.is_some() { "cipher_pass = \"${PGBR_CIPHER}\"\n" } else { "" };
        let text = format!(
            r#"[state]
url = "sqlite://{root}/history.db"
[sandbox]
scratch_dir = "{scratch}"
[storage.repo]
kind = "s3"
bucket = "{bucket}"
endpoint = "{endpoint}"
ca_file = "{ca}"
region = "us-east-1"
path_style = true
[[target]]
name = "orders"
source = "pgbackrest"
storage = "repo"
stanza = "{stanza}"
repo_path = "{repo_path}"
{cipher}rto = "10m"
rpo = "26h"
{extra}
"#,
            root = self.root.path().display(),
            scratch = self.scratch.display(),
            bucket = self.bucket,
            endpoint = self.tls.endpoint(),
            ca = self.tls.ca.display(),
            stanza = self.stanza,
            repo_path = self.repo_path,
        );
        let path = self.root.path().join(format!("{}.toml", unique("drcheck")));
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![];
        if let Some(p) = &self.cipher_pass {
            env.push(("PGBR_CIPHER", p.clone()));
        }
        env
    }
}

/// A primary archiving into a pgBackRest **posix** repository (a directory, as on an NFS
/// mount or a volume): owned by postgres, mode 0750 as pgBackRest makes it.
pub struct PgbrPosix {
    pub root: TempRoot,
    pub repo: PathBuf,
    pub stanza: String,
    pub conf: PathBuf,
    pub primary: PgPrimary,
    pub scratch: PathBuf,
}

impl PgbrPosix {
    pub fn start() -> PgbrPosix {
        let root = TempRoot::new();
        let repo = root.pg_dir("pgbr-repo");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&repo, std::fs::Permissions::from_mode(0o750)).unwrap();
        let work = root.pg_dir("pgbackrest");
        let stanza = "main".to_string();
        let conf = root.path().join("pgbackrest.conf");
        let global = format!(
            "[global]\nrepo1-type=posix\nrepo1-path={}\nrepo1-retention-full=9\nlog-path={w}\nlock-path={w}\n\
             spool-path={w}\nlog-level-console=warn\nlog-level-file=off\nstart-fast=y\ncompress-type=gz\n",
            repo.display(),
            w = work.display()
        );
        std::fs::write(&conf, &global).unwrap();
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();
        let archive = format!("pgbackrest --config={} --stanza={stanza} archive-push %p", conf.display());
        let primary = PgPrimary::start_with(
            &root,
            &[
                ("archive_mode", "on"),
                ("archive_command", &archive),
                ("wal_level", "replica"),
                ("archive_timeout", "0"),
            ],
        );
        std::fs::write(
            &conf,
            format!(
                "{global}\n[{stanza}]\npg1-path={}\npg1-socket-path={}\npg1-port={}\npg1-user=postgres\n",
                primary.data.display(),
                primary.sock.display(),
                primary.port
            ),
        )
        .unwrap();
        let scratch = root.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        crate::make_world_enterable(&scratch);
        let me = PgbrPosix { root, repo, stanza, conf, primary, scratch };
        me.pgbackrest(&["stanza-create"]);
        me
    }

    /// Runs `pgbackrest ARGS` as the postgres user with the scene's config; returns stdout.
    pub fn pgbackrest(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("pgbackrest");
        as_pg(&mut cmd)
            .arg(format!("--config={}", self.conf.display()))
            .arg(format!("--stanza={}", self.stanza))
            .args(args)
            .current_dir(self.root.path());
        stdout_of(cmd, &format!("pgbackrest {args:?}"))
    }

    pub fn archive_now(&self) -> String {
        archive_now(&self.primary)
    }

    /// A drcheck config for target `orders` reading this repository (a filesystem storage).
    pub fn config(&self, extra: &str) -> PathBuf {
        let text = format!(
            "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{scratch}\"\n\
             [storage.repo]\nkind = \"filesystem\"\npath = \"{repo}\"\n\
             [[target]]\nname = \"orders\"\nsource = \"pgbackrest\"\nstorage = \"repo\"\nstanza = \"{stanza}\"\n\
             rto = \"10m\"\nrpo = \"26h\"\n{extra}\n",
            root = self.root.path().display(),
            scratch = self.scratch.display(),
            repo = self.repo.display(),
            stanza = self.stanza,
        );
        let path = self.root.path().join(format!("{}.toml", unique("drcheck")));
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// A primary archiving its WAL with barman-cloud into moto (plain HTTP), with backups
/// taken by `barman-cloud-backup` — the layout CloudNativePG writes.
pub struct BarmanScene {
    pub root: TempRoot,
    pub s3: S3Server,
    pub bucket: String,
    pub prefix: String,
    pub server: String,
    pub primary: PgPrimary,
    pub scratch: PathBuf,
}

impl BarmanScene {
    pub fn start() -> BarmanScene {
        let root = TempRoot::new();
        let s3 = S3Server::start(&root);
        let bucket = unique("barman");
        s3.make_bucket(&bucket);
        let prefix = "clusters".to_string();
        let server = "pg".to_string();
        let archive = format!(
            "AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={} AWS_DEFAULT_REGION=us-east-1 barman-cloud-wal-archive \
             --endpoint-url {} --gzip s3://{bucket}/{prefix} {server} %p",
            AWS_ENV[0].1,
            AWS_ENV[1].1,
            s3.endpoint()
        );
        let primary = PgPrimary::start_with(
            &root,
            &[("archive_mode", "on"), ("archive_command", &archive), ("wal_level", "replica")],
        );
        let scratch = root.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        crate::make_world_enterable(&scratch);
        BarmanScene { root, s3, bucket, prefix, server, primary, scratch }
    }

    fn tool(&self, program: &str, args: &[&str]) -> String {
        let mut cmd = Command::new(program);
        cmd.arg("--endpoint-url").arg(self.s3.endpoint()).args(args).envs(AWS_ENV);
        stdout_of(cmd, &format!("{program} {args:?}"))
    }

    fn destination(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    /// `barman-cloud-backup` of the primary; returns the backup id.
    pub fn backup(&self) -> String {
        let before = self.backup_ids();
        let sock = self.primary.sock.display().to_string();
        let port = self.primary.port.to_string();
        self.tool(
            "barman-cloud-backup",
            &[
                "--gzip",
                "--immediate-checkpoint",
                "-h",
                &sock,
                "-p",
                &port,
                "-U",
                "postgres",
                &self.destination(),
                &self.server,
            ],
        );
        let after = self.backup_ids();
        after.into_iter().find(|id| !before.contains(id)).expect("a new backup id")
    }

    /// The ids `barman-cloud-backup-list` knows, oldest first.
    pub fn backup_ids(&self) -> Vec<String> {
        let json = self.tool("barman-cloud-backup-list", &["--format", "json", &self.destination(), &self.server]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let mut ids: Vec<String> = v["backups_list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["backup_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    }

    /// Switches WAL and waits until it is archived.
    pub fn archive_now(&self) -> String {
        archive_now(&self.primary)
    }

    /// The object key of `name` under the server's prefix.
    pub fn key(&self, name: &str) -> String {
        format!("{}/{}/{name}", self.prefix, self.server)
    }

    pub fn config(&self, extra: &str) -> PathBuf {
        self.config_via(&self.s3.endpoint(), "", extra)
    }

    /// A config reaching the store at `endpoint` (e.g. through [`Tls`]), with
    /// `storage_extra` in the storage section (e.g. `ca_file = "…"`).
    pub fn config_via(&self, endpoint: &str, storage_extra: &str, extra: &str) -> PathBuf {
        let text = format!(
            r#"[state]
url = "sqlite://{root}/history.db"
[sandbox]
scratch_dir = "{scratch}"
[storage.cnpg]
kind = "s3"
bucket = "{bucket}"
endpoint = "{endpoint}"
{storage_extra}
region = "us-east-1"
path_style = true
[[target]]
name = "orders"
source = "barman-cloud"
storage = "cnpg"
server_name = "{server}"
prefix = "{prefix}/"
rto = "10m"
rpo = "26h"
{extra}
"#,
            root = self.root.path().display(),
            scratch = self.scratch.display(),
            bucket = self.bucket,
            server = self.server,
            prefix = self.prefix,
        );
        let path = self.root.path().join(format!("{}.toml", unique("drcheck")));
        std::fs::write(&path, text).unwrap();
        path
    }
}
