//! Launching PostgreSQL's client tools against a sandbox: contained, in a clean
//! environment, over its private socket — `pg_restore` and `psql` for logical restores —
//! and judging how they ended.

use crate::error::{RestoreError, Stage};
use crate::server::capture;
use crate::server::sandbox::{Sandbox, tail};
use std::process::Stdio;

/// How much of a tool's stderr a report keeps (the tail, where the error is).
pub(crate) const STDERR_KEEP: usize = 4000;

/// A PostgreSQL client tool from the sandbox's bindir, contained, connected to
/// `database` over the sandbox's socket, in a clean environment.
pub(crate) fn client_command(
    sandbox: &Sandbox,
    tool: &str,
    database: &str,
) -> Result<tokio::process::Command, RestoreError> {
    sandbox.client_command(tool, database)
}

/// `pg_restore` into `database`. Without the source's roles, ownership and privileges
/// are left out; with them (a globals file applied first), they are restored too.
///
/// `--clean --if-exists`: into a fresh database every `DROP … IF EXISTS` is a no-op but
/// one — a partial archive's (`pg_dump -n public`) entry for the `public` schema, which
/// every database already has and PostgreSQL 15's pg_dump writes as `CREATE SCHEMA
/// public`: the empty schema is dropped and the archive's recreates it. Every other
/// error still stops the restore (`--exit-on-error`).
pub(crate) fn pg_restore(
    sandbox: &Sandbox,
    database: &str,
    keep_owners: bool,
    jobs: u32,
) -> Result<tokio::process::Command, RestoreError> {
    let mut cmd = client_command(sandbox, "pg_restore", database)?;
    cmd.args(["--exit-on-error", "--clean", "--if-exists"]);
    if !keep_owners {
        cmd.args(["--no-owner", "--no-privileges"]);
    }
    if jobs > 1 {
        cmd.arg(format!("--jobs={jobs}"));
    }
    Ok(cmd)
}

/// `psql` running a script from stdin, stopping at the first error.
pub(crate) fn psql_script(sandbox: &Sandbox, database: &str) -> Result<tokio::process::Command, RestoreError> {
    let mut cmd = client_command(sandbox, "psql", database)?;
    cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"]);
    Ok(cmd)
}

/// A client tool of `sandbox` that exited unsuccessfully: the backup's fault unless
/// [`Sandbox::judge_client`] says the world's, with the tool's stderr tail as the reason.
pub(crate) fn tool_failed(
    sandbox: &Sandbox,
    what: &str,
    status: &std::process::ExitStatus,
    stderr: &[u8],
) -> RestoreError {
    let (who, why) = sandbox.judge_client(status);
    let message = format!("{what} failed ({status}): {}", tail(stderr, STDERR_KEEP));
    who.error(Stage::Restore, crate::error::with_reason(message, why))
}

/// Runs `cmd` (a client of `sandbox`) to completion; a non-zero exit is the backup's
/// fault unless [`Sandbox::judge_client`] says the world's, with the tool's stderr tail
/// as the reason.
pub(crate) async fn run_tool(
    sandbox: &Sandbox,
    mut cmd: tokio::process::Command,
    what: &str,
) -> Result<(), RestoreError> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("cannot run {what}: {e}")))?;
    // The backup decides how much the tool complains: only the end is kept.
    let (status, stderr) = capture::wait_keeping_stderr(&mut child, STDERR_KEEP)
        .await
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("running {what}: {e}")))?;
    if !status.success() {
        return Err(tool_failed(sandbox, what, &status, &stderr));
    }
    Ok(())
}
