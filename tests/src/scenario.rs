//! The common scene of the verification tests: a primary holding an `orders` database,
//! a bucket in moto with a `pg_dump -Fc` backup of it uploaded by the `aws` CLI, and a
//! config file pointing drcheck at both.

use crate::{PgPrimary, S3Server, TempRoot, unique};
use std::path::PathBuf;

/// Sample data with a foreign key, a mixed-case schema and table, and a table
/// without a primary key. Its orders were placed a minute before the dump: a dump's
/// own time has whole seconds, so rows of the same second would be past it.
pub const SAMPLE_SQL: &str = r#"
create table customers (id bigint primary key, name text not null);
create table orders (id bigserial primary key, customer_id bigint not null references customers (id),
                     placed_at timestamptz not null default now(), total numeric(12,2) not null);
create schema "Sales";
create table "Sales"."Invoices" (id int, amount numeric, note text);
insert into customers select g, 'customer ' || g from generate_series(1, 500) g;
insert into orders (customer_id, total, placed_at)
  select 1 + g % 500, (g % 1000) / 7.0, now() - interval '1 minute' from generate_series(1, 5000) g;
insert into "Sales"."Invoices" select g, g * 1.5, md5(g::text) from generate_series(1, 1000) g;
"#;

pub struct Scene {
    pub root: TempRoot,
    pub primary: PgPrimary,
    pub s3: S3Server,
    pub bucket: String,
    /// The verifier role's password on the primary.
    pub password: String,
    pub dump: PathBuf,
    pub scratch: PathBuf,
}

/// What to write into the config file; defaults make a passing verification.
pub struct ConfigSpec {
    pub endpoint: String,
    pub primary: String,
    pub rto: String,
    pub rpo: String,
    pub extra_target: String,
}

impl Scene {
    /// Starts the primary and moto, loads the sample data, dumps and uploads it as
    /// `orders/orders-1.dump`.
    pub fn start() -> Scene {
        Self::start_with(&[])
    }

    /// [`Scene::start`] with a primary that tracks commit timestamps: what changed on it
    /// since a dump can be told (`track_commit_timestamp = on`).
    pub fn start_tracking() -> Scene {
        Self::start_with(&[("track_commit_timestamp", "on")])
    }

    fn start_with(settings: &[(&str, &str)]) -> Scene {
        let root = TempRoot::new();
        let primary = PgPrimary::start_with(&root, settings);
        let s3 = S3Server::start(&root);
        let password = unique("pw");
        primary.psql("postgres", "create database orders");
        primary.psql("postgres", &format!("create role verifier login password '{password}'"));
        primary.psql("postgres", "grant pg_read_all_data to verifier");
        primary.psql("orders", SAMPLE_SQL);
        if !settings.is_empty() {
            // Committed a second before the dump's start (its header has whole seconds):
            // commit times then tell them from what the primary writes after it.
            std::thread::sleep(std::time::Duration::from_millis(1100));
        }
        let dump = root.path().join("orders.dump");
        primary.dump("orders", &dump, &[]);
        let bucket = unique("bk");
        s3.make_bucket(&bucket);
        s3.upload(&dump, &bucket, "orders/orders-1.dump");
        let scratch = root.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        crate::make_world_enterable(&scratch);
        Scene { root, primary, s3, bucket, password, dump, scratch }
    }

    pub fn spec(&self) -> ConfigSpec {
        ConfigSpec {
            endpoint: self.s3.endpoint(),
            primary: self.primary.url("verifier", "${ORDERS_PW}", "orders"),
            rto: "10m".into(),
            rpo: "26h".into(),
            extra_target: String::new(),
        }
    }

    /// Writes a config file from `spec` and returns its path.
    pub fn config(&self, spec: &ConfigSpec) -> PathBuf {
        let text = format!(
            r#"[state]
url = "sqlite://{root}/history.db"
[sandbox]
scratch_dir = "{scratch}"
[storage.backups]
kind = "s3"
bucket = "{bucket}"
endpoint = "{endpoint}"
region = "us-east-1"
path_style = true
[[target]]
name = "orders"
primary = "{primary}"
storage = "backups"
prefix = "orders/"
rto = "{rto}"
rpo = "{rpo}"
{extra}
"#,
            root = self.root.path().display(),
            scratch = self.scratch.display(),
            bucket = self.bucket,
            endpoint = spec.endpoint,
            primary = spec.primary,
            rto = spec.rto,
            rpo = spec.rpo,
            extra = spec.extra_target,
        );
        let path = self.root.path().join(format!("{}.toml", unique("drcheck")));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The environment drcheck needs for the default config (the primary's password).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![("ORDERS_PW", self.password.clone())]
    }

    /// Uploads a newer, uncompressed backup of ~15 MB (behind a slow link it keeps a
    /// restore busy for a while) as `orders/orders-2.dump`.
    pub fn upload_big_backup(&self) {
        self.primary.psql(
            "orders",
            "create table filler as select g, md5(g::text) || md5((g * 7)::text) as t from generate_series(1, 200000) g",
        );
        let big = self.root.path().join("big.dump");
        self.primary.dump("orders", &big, &["-Z0"]);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        self.s3.upload(&big, &self.bucket, "orders/orders-2.dump");
    }

    /// Waits until `pg_restore` runs against a sandbox of this scene; returns that
    /// sandbox's socket directory.
    pub fn wait_for_pg_restore(&self, limit: std::time::Duration) -> Option<String> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            let found = self
                .leftover_sandboxes()
                .first()
                .and_then(|d| std::fs::read_to_string(self.private_dir().join(format!("{d}.owner"))).ok())
                .and_then(|owner| owner.lines().nth(1).map(str::to_string))
                .filter(|s| !s.is_empty());
            if let Some(sock) = found
                && crate::processes_mentioning(&sock).iter().any(|(_, cmd)| cmd.contains("pg_restore"))
            {
                return Some(sock);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }

    /// drcheck's private directory in the scratch directory, where its sandboxes live.
    pub fn private_dir(&self) -> std::path::PathBuf {
        self.scratch.join(format!("drcheck-{}", nix::unistd::Uid::effective().as_raw()))
    }

    /// Sandbox directories (and owner records) left in drcheck's private directory.
    pub fn leftover_sandboxes(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.private_dir()) else { return Vec::new() };
        entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("sandbox-") && !n.ends_with(".owner"))
            .collect()
    }
}
