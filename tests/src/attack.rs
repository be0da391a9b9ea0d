//! Fixtures for attacks a restored database makes on drcheck's verdicts and on the
//! host: a small bank whose dump an attacker tampers with (one balance changed) and
//! dresses up so the tampering hashes like the original; and an *unprotected* cluster —
//! a server run the way drcheck's sandbox used to be (the `postgres` user, no seccomp,
//! no namespaces, no catalog check) — on which every payload is first shown to work,
//! so a passing defence test is never a payload that does nothing.

use crate::hostile::Lab;
use crate::{ClusterOptions, PgPrimary, unique};
use std::path::PathBuf;

/// The row the attacker changes: `accounts` id 7, 100.00 → 999999.00.
pub const TAMPERED_FROM: &str = "\n7\t100.00\n";
pub const TAMPERED_TO: &str = "\n7\t999999.00\n";

/// A primary with `bank.accounts` (50 rows of 100.00), a verifier role, and the plain
/// dump of it.
pub struct Bank {
    pub primary: PgPrimary,
    pub password: String,
    pub plain: String,
}

impl Bank {
    /// The bank, with `extra` SQL run on the primary after the data (objects the primary
    /// really has, which its dump then carries).
    pub fn start(lab: &Lab, extra: &str) -> Bank {
        // Commit times on the primary tell what changed since the dump: a changed balance
        // the primary never wrote is the backup's (without them it would be inconclusive).
        let primary = PgPrimary::start_with(&lab.root, &[("track_commit_timestamp", "on")]);
        let password = unique("pw");
        primary.psql("postgres", &format!("create role verifier login password '{password}'"));
        primary.psql("postgres", "grant pg_read_all_data to verifier");
        primary.psql("postgres", "create database bank");
        primary.psql("bank", "create table accounts (id int primary key, balance numeric(12,2) not null)");
        primary.psql("bank", "insert into accounts select g, 100.00 from generate_series(1, 50) g");
        if !extra.is_empty() {
            primary.psql("bank", extra);
        }
        // A second before the dump's start (the header has whole seconds), with the time
        // in the script (`-- Started on`, pg_dump --verbose).
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let plain = primary.dump_plain_verbose("bank");
        assert!(plain.contains(TAMPERED_FROM), "the dump holds the row to tamper with");
        Bank { primary, password, plain }
    }

    /// The dump with one balance changed, then `payload` appended.
    pub fn tampered(&self, payload: &str) -> String {
        format!("{}\n{payload}\n", self.plain.replacen(TAMPERED_FROM, TAMPERED_TO, 1))
    }

    /// The target's lines for a config: the primary to compare with.
    pub fn target(&self) -> String {
        format!("primary = \"{}\"\n", self.primary.url("verifier", &self.password, "bank"))
    }

    /// The content hash drcheck's `checksums` computes, asked of `cluster`'s `bank`
    /// with `query` (so a test can show which form an attack forges).
    pub fn hash(cluster: &PgPrimary, query: &str) -> String {
        cluster.psql("bank", query)
    }
}

/// How drcheck hashes `accounts` now: schema-qualified, exact argument types, the record
/// hash hashed again.
pub const QUALIFIED_HASH: &str = "select pg_catalog.sum(pg_catalog.hashint8extended(\
     pg_catalog.hash_record_extended(a.*, 0::pg_catalog.int8), 1::pg_catalog.int8)) from public.accounts a";
/// How drcheck hashed it before: unqualified, an `integer` seed, the session's path.
pub const UNQUALIFIED_HASH: &str = "select sum(hash_record_extended(a.*, 0)) from accounts a";

/// A cluster run the way drcheck's sandbox used to be, with `script` restored into its
/// database `bank` by psql: where each payload is shown to work.
pub fn unprotected(lab: &Lab, script: &str) -> PgPrimary {
    let name = unique("unprotected");
    let cluster = PgPrimary::start_opts(
        &lab.root,
        &ClusterOptions { name: &name, local_auth: "trust", host_auth: "trust", open_socket: false, settings: &[] },
    );
    cluster.psql("postgres", "create database bank");
    let file = script_file(lab, script);
    let out = cluster.run_script("bank", &file);
    assert!(
        out.status.success(),
        "the attack's script does not even restore unprotected: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster
}

/// `script` in a file of the lab's.
pub fn script_file(lab: &Lab, script: &str) -> PathBuf {
    let file = lab.root.path().join(format!("{}.sql", unique("script")));
    std::fs::write(&file, script).unwrap();
    file
}
