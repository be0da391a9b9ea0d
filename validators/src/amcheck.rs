//! `amcheck`: B-tree and heap integrity of the restored copy with `pg_amcheck
//! --heapallindexed`, two jobs at once. The extension is installed only for the check,
//! into a schema of drcheck's own (so nothing the backup put in `public` collides with
//! it), and dropped again; both carry a marking comment, so the schema comparison does
//! not see them. A backup that brings its own amcheck is used only if every member is
//! amcheck's C code (the `catalog` check).

use crate::context::{Context, RestoredAccess, Validator};
use crate::finding::Said;
use crate::finding::{Finding, Status};
use async_trait::async_trait;
use drcheck_config::quote_ident;

/// 16 random hex digits, for names of drcheck's own objects in a copy.
fn uuid_like() -> String {
    use rand::Rng;
    format!("{:016x}", rand::rng().random::<u64>())
}

pub struct Amcheck;

/// A PostgreSQL client tool against the restored database, in a clean environment.
pub(crate) fn tool(access: &RestoredAccess, name: &str) -> tokio::process::Command {
    let program = access.bindir.join(name);
    let mut cmd = match &access.launcher {
        Some(launch) => tokio::process::Command::from(launch(&program)),
        None => tokio::process::Command::new(&program),
    };
    cmd.arg("-h")
        .arg(&access.socket_dir)
        .args(["-p", &access.port.to_string(), "-U", "postgres"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C.UTF-8")
        // The same pinned settings as drcheck's own sessions on the copy.
        .env("PGOPTIONS", crate::guard::restored_pgoptions())
        .kill_on_drop(true);
    if let Some(passfile) = &access.passfile {
        cmd.env("PGPASSFILE", passfile);
    }
    cmd
}

/// The N of pg_amcheck's `N/M relations` progress (what it checked), 0 if absent.
fn leading_count(progress: &str, unit: &str) -> u64 {
    progress
        .split(',')
        .find(|p| p.contains(unit))
        .and_then(|p| p.trim().split('/').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Runs pg_amcheck to its end, keeping the last [`OUTPUT_KEPT`] bytes of its stdout
/// and stderr: the copy is the backup's, and one report line per corrupt page of a
/// crafted database would be any size (`restore::server::capture` does the same for
/// the restore's tools).
async fn run_bounded(
    mut cmd: tokio::process::Command,
) -> std::io::Result<(std::process::ExitStatus, Vec<u8>, Vec<u8>)> {
    use std::process::Stdio;
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let (out, err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let (out, err, status) = tokio::join!(read_end(out), read_end(err), child.wait());
    Ok((status?, out?, err?))
}

/// How much of each of pg_amcheck's streams is kept (their ends say what was found).
const OUTPUT_KEPT: usize = 64 << 10;

async fn read_end(mut r: impl tokio::io::AsyncRead + Unpin) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let (mut kept, mut chunk) = (Vec::new(), vec![0u8; 16 << 10]);
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&chunk[..n]);
        if kept.len() > 2 * OUTPUT_KEPT {
            kept.drain(..kept.len() - OUTPUT_KEPT);
        }
    }
    Ok(kept)
}

pub(crate) fn tail(bytes: &[u8], max: usize) -> String {
    let start = bytes.len().saturating_sub(max);
    String::from_utf8_lossy(&bytes[start..]).trim().to_string()
}

#[async_trait]
impl Validator for Amcheck {
    fn needs_restore(&self) -> bool {
        true
    }
    fn catches(&self) -> &'static [&'static str] {
        &["flipped_page"]
    }
    fn reads_everything(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        "amcheck"
    }

    fn self_check(&self) -> bool {
        true
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let had: Result<bool, _> =
            sqlx::query_scalar("select exists (select 1 from pg_catalog.pg_extension where extname = 'amcheck')")
                .fetch_one(&cx.restored)
                .await;
        let Ok(had) = had else {
            return vec![Finding::new(name, Status::Error, "cannot query the restored database")];
        };
        // Installed (and later dropped) by drcheck in one transaction with a comment, so
        // `schema`, running beside this, never counts it as part of the backup.
        let schema = format!("drcheck_amcheck_{}", uuid_like());
        if !had {
            let install = async {
                let mut tx = cx.restored.begin().await?;
                let q = quote_ident(&schema);
                for sql in [
                    format!("create schema {q}"),
                    format!("comment on schema {q} is '{}'", crate::guard::DRCHECK_TEMPORARY),
                    format!("create extension amcheck schema {q}"),
                    format!("comment on extension amcheck is '{}'", crate::guard::DRCHECK_TEMPORARY),
                ] {
                    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut *tx).await?;
                }
                tx.commit().await
            };
            if let Err(e) = install.await {
                return vec![Finding::new(
                    name,
                    Status::Error,
                    format!("cannot install the amcheck extension: {}", e.said()),
                )];
            }
        }
        let mut cmd = tool(&cx.access, "pg_amcheck");
        cmd.args(["--heapallindexed", "--jobs=2", "--progress", "-d", &cx.access.database]);
        let out = run_bounded(cmd).await;
        if !had {
            let _ = sqlx::query("drop extension if exists amcheck").execute(&cx.restored).await;
            let drop = format!("drop schema if exists {}", quote_ident(&schema));
            let _ = sqlx::query(sqlx::AssertSqlSafe(drop)).execute(&cx.restored).await;
        }
        let out = match out {
            Ok(o) => o,
            Err(e) => return vec![Finding::new(name, Status::Error, format!("cannot run pg_amcheck: {e}"))],
        };
        let (status, stdout, stderr) = out;
        let (stdout, stderr) = (String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr));
        // With --progress, the last progress line says how many relations were checked.
        let progress = stderr.rsplit(['\r', '\n']).find(|l| l.contains("relations")).unwrap_or("").trim().to_string();
        match status.code() {
            Some(0) => vec![
                Finding::new(name, Status::Passed, format!("no corruption found ({progress})"))
                    .covered("relations", leading_count(&progress, "relations")),
            ],
            // pg_amcheck exits 2 when it found corruption, and says where on stdout.
            Some(2) => {
                vec![Finding::new(name, Status::Failed, format!("corruption found: {}", tail(stdout.as_bytes(), 3000)))]
            }
            _ => vec![Finding::new(
                name,
                Status::Error,
                format!("pg_amcheck failed ({status}): {}", tail(format!("{stdout}{stderr}").as_bytes(), 3000)),
            )],
        }
    }
}
