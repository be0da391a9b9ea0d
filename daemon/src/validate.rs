//! The validate step of a verification. The restored copy is hostile input: every
//! session on it pins its settings (`guard::restored_session`), the copy's event
//! triggers and settings are neutralized first, and the `catalog` check — always the
//! first finding — proves its built-in catalog is PostgreSQL's own against a pristine
//! cluster's (`pristine.rs`); when it is not, no other validator runs on it (their
//! answers could be the backup's). A logical dump is one database; a physical
//! backup is a whole cluster, so the validators that apply to any database run on every
//! database it holds, comparisons on every one the primary (its URL's credentials) also
//! has, and the findings are merged per validator (`drcheck_validators::databases`).
//! Validators configured with one database's tables (`freshness`, `custom`) run on the
//! target's own database: the primary URL's, or the restored dump.

use crate::run_report::PrimaryQueries;
use anyhow::Context as _;
use drcheck_config::TargetConfig;
use drcheck_restore::Sandbox;
use drcheck_validators::guard::{self, restored_session};
use drcheck_validators::primary::{self, PrimaryLimits};
use drcheck_validators::{Context, Finding, Primary, RestoredAccess, Status, databases};
use sqlx::postgres::PgPoolOptions;
use std::time::{Duration, SystemTime};

/// What validating found, and what it cost the primary.
pub(crate) struct Validated {
    pub findings: Vec<Finding>,
    pub primary_queries: Option<PrimaryQueries>,
    /// The target has a primary, but the comparisons could not reach it: why.
    pub primary_unavailable: Option<String>,
}

/// The copy to validate: a sandbox's restored database, or a follower's.
pub(crate) struct Copy<'a> {
    pub sandbox: &'a Sandbox,
    /// The restored database the target names.
    pub database: &'a str,
    /// A whole cluster (a base backup or a follower), not one dump.
    pub physical: bool,
    /// The copy's point in time: the `as_of` cut.
    pub at: Option<SystemTime>,
    pub horizon: Option<drcheck_validators::asof::CopyHorizon>,
    /// A follower paused at a commit: read only (its settings overridden, not reset).
    pub on_follower: bool,
    /// `primary_read_budget`: the slice of every table's ranges this run compares.
    pub rotation: Option<drcheck_validators::Rotation>,
    /// drcheck's journal of the primary's horizon around the copy's point.
    pub journal: drcheck_validators::asof::Journal,
}

/// The rotation of a target with a `primary_read_budget` whose databases on the
/// primary hold more than it: as many slices as the budget goes into their size, this
/// run taking the one never compared or compared longest ago. `None` when everything
/// fits (all is compared) or the primary cannot say its size (logged: all is compared).
pub(crate) async fn rotation(
    target: &TargetConfig,
    physical: bool,
    history: &crate::history::History,
) -> Option<drcheck_validators::Rotation> {
    let budget = target.primary_read_budget?;
    let url = target.primary.as_ref()?;
    let p = primary::connect(url.expose(), &limits(target)).await.ok()?;
    // A base backup is compared database by database, all of the cluster's.
    let sql = if physical {
        "select coalesce(pg_catalog.sum(pg_catalog.pg_database_size(d.oid)), 0)::pg_catalog.int8
           from pg_catalog.pg_database d where d.datallowconn and not d.datistemplate"
    } else {
        "select pg_catalog.pg_database_size(pg_catalog.current_database())::pg_catalog.int8"
    };
    let total = p.timed(sqlx::query_scalar::<_, i64>(sql).fetch_one(&p.pool)).await;
    p.close().await;
    let total = match total {
        Ok(t) => t.max(0) as u64,
        Err(e) => {
            tracing::warn!(target = %target.name, "cannot read the primary's size for primary_read_budget (comparing everything): {e}");
            return None;
        }
    };
    let slices = total.div_ceil(budget).max(1);
    if slices <= 1 {
        return None;
    }
    let slices = slices.min(u64::from(u32::MAX)) as u32;
    let (slice, oldest) = match history.next_slice(&target.name, slices).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(target = %target.name, "cannot read which slices were compared ({e:#}): slice 1");
            (0, None)
        }
    };
    // The cycle's secret seed: a backup cannot know which of its ranges this run reads.
    let seed = match history.rotation_seed(&target.name, slices).await {
        Ok((seed, _)) => seed,
        Err(e) => {
            tracing::warn!(target = %target.name, "cannot read the rotation's seed ({e:#}): a fresh one");
            rand::random::<u64>()
        }
    };
    // At the target's schedule, do the slices come round within prove_within?
    let note = target.schedule.as_ref().and_then(|s| {
        let now = chrono::Utc::now();
        let mut at = now;
        for _ in 0..slices {
            at = s.next_after(at)?;
        }
        let within = now + chrono::Duration::from_std(target.prove_within).ok()?;
        (at > within).then(|| {
            format!(
                "at its schedule the {slices} slices take until {} to come round, past prove_within ({}): raise \
                 primary_read_budget or run more often",
                at.format("%Y-%m-%d %H:%M UTC"),
                drcheck_config::format_duration(target.prove_within)
            )
        })
    });
    if let Some(n) = &note {
        tracing::warn!(target = %target.name, "{n}");
    }
    Some(drcheck_validators::Rotation {
        slice,
        slices,
        budget,
        oldest,
        share_bytes: total / u64::from(slices),
        note,
        seed,
        whole: history.focus().map(str::to_string),
    })
}

/// drcheck's journal of `target`'s primary around the copy's point `at` (read from the
/// history; empty — logged — when it cannot be read).
pub(crate) async fn journal_for(
    target: &TargetConfig,
    at: Option<SystemTime>,
    history: &crate::history::History,
) -> drcheck_validators::asof::Journal {
    let v = &target.validators;
    match history.journal(&target.name, at, v.as_of_grace, v.stats_settle).await {
        Ok(j) => j,
        Err(e) => {
            tracing::warn!(target = %target.name, "cannot read drcheck's journal of the primary ({e:#})");
            Default::default()
        }
    }
}

/// The finding that names tables no run decided in full within `prove_within`.
pub(crate) const UNPROVEN_TABLES: &str = "unproven_tables";

/// Which tables `checksums` decided in full this run (for the record stage to keep), and
/// the `unproven_tables` finding (failed) when some table of the target was not decided
/// — compared and proven, or found changed since the copy's point — by any run within
/// `prove_within`, this one included. Reads the history store, never writes it.
pub(crate) async fn tables_decided(
    target: &TargetConfig,
    findings: &[Finding],
    history: &crate::history::History,
) -> (Option<Box<[(String, bool)]>>, Option<Finding>) {
    let Some(sums) = findings.iter().find(|f| f.name == "checksums" && f.status != Status::Error) else {
        return (None, None);
    };
    let per_table = sums.per_table.clone();
    let not = match history.tables_not_proven(&target.name, target.prove_within, SystemTime::now()).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(target = %target.name, "cannot read the tables proven: {e:#}");
            return (Some(per_table), None);
        }
    };
    // This run's record (kept by the record stage) decides its own tables now.
    let decided_now: std::collections::BTreeSet<&str> =
        per_table.iter().filter(|(_, d)| *d).map(|(t, _)| t.as_str()).collect();
    // Only tables this run still saw: a table dropped since is no longer owed a proof.
    let seen: std::collections::BTreeSet<&str> = per_table.iter().map(|(t, _)| t.as_str()).collect();
    let due: Vec<String> = not
        .into_iter()
        .filter(|(t, _)| !decided_now.contains(t.as_str()))
        .filter(|(t, _)| seen.contains(t.as_str()) || target.primary_read_budget.is_some())
        .map(|(t, last)| match last {
            Some(at) => format!("{t} (last decided {at})"),
            None => format!("{t} (never decided)"),
        })
        .collect();
    let finding = (!due.is_empty()).then(|| {
        Finding::new(
            UNPROVEN_TABLES,
            Status::Failed,
            format!(
                "{} tables were not decided by any run within prove_within ({}) — compared and proven, or found \
                 changed on the primary since the copy's point: {}. What each run could not decide is in its \
                 checksums' inconclusive list, with what would prove it",
                due.len(),
                drcheck_config::format_duration(target.prove_within),
                drcheck_validators::some_of(&due, 20)
            ),
        )
    });
    (Some(per_table), finding)
}

/// This run's slice (`slices`, `slice`) when its checksums got through it: the record
/// stage keeps it as compared.
pub(crate) fn rotated(rotation: Option<&drcheck_validators::Rotation>, findings: &[Finding]) -> Option<(u32, u32)> {
    let r = rotation?;
    let passed = findings
        .iter()
        .filter(|f| f.name == "checksums" && !matches!(f.status, Status::Failed | Status::Error))
        .any(|f| f.measurements.get(drcheck_validators::checksums::SLICE_DONE) == Some(&1.0));
    passed.then_some((r.slices, r.slice))
}

/// Runs the target's validators on `main` (the restored database the target names) and,
/// for a physical backup, on every other database of the restored cluster.
pub(crate) async fn run(
    sandbox_settings: &drcheck_config::SandboxConfig,
    target: &TargetConfig,
    copy: Copy<'_>,
) -> anyhow::Result<Validated> {
    let Copy { sandbox, database: main, physical, at: backup_time, horizon, on_follower, rotation, journal } = copy;
    let point = drcheck_validators::asof::CopyPoint {
        at: backup_time,
        horizon,
        journal,
        other_cluster: target.other_cluster,
        grace: target.validators.as_of_grace,
        settle: target.validators.stats_settle,
        heartbeat: target
            .heartbeat
            .as_ref()
            .map(|h| drcheck_validators::TableName { schema: h.schema.clone(), name: h.table.clone() }),
    };
    // Every validator of every database before this: a run's budget is made of it.
    let deadline = drcheck_validators::PhaseDeadline::from_now(target.validators.phase_timeout);
    // Which transactions had committed at the copy's point: cluster-wide, read once.
    let aborted = drcheck_validators::asof::Aborted::new();
    let settings = &target.validators;
    let reference = crate::pristine::reference(sandbox_settings, sandbox.bin()).await;
    let mut names = vec![main.to_string()];
    let cluster = if physical { Some(cluster_databases(sandbox).await?) } else { None };
    if let Some(cluster) = &cluster {
        for db in cluster.databases.iter().filter(|d| d.connectable) {
            if !names.contains(&db.name) {
                names.push(db.name.clone());
            }
        }
    }
    let primary_listed = match (&target.primary, physical) {
        (Some(url), true) => primary_databases(url.expose(), target).await,
        _ => None,
    };
    let primary_dbs: Option<Vec<String>> =
        primary_listed.as_ref().map(|l| l.iter().map(|(name, _)| name.clone()).collect());
    let mut refused: Vec<(String, String)> = Vec::new();
    let mut per_database = Vec::new();
    let mut queries: Option<PrimaryQueries> = None;
    let mut primary_unavailable = None;
    for (i, db) in names.iter().enumerate() {
        let is_main = i == 0;
        // Neutralized on a session of its own; every session validators use opens after
        // it, so none carries a setting the copy applied before the reset.
        let started = std::time::Instant::now();
        // A follower is a standby: nothing can be reset on it, so its database and role
        // settings are overridden in every session instead.
        let prepared = if on_follower {
            follower_session(sandbox, db).await
        } else {
            neutralize_database(sandbox, db).await.map(|n| (n, restored_session(sandbox.connect_options(db))))
        };
        let opened = match prepared {
            Ok((neutralized, session)) => PgPoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(session)
                .await
                .map(|pool| (neutralized, pool))
                .with_context(|| format!("the restored database {db:?} does not accept connections")),
            Err(e) => Err(e),
        };
        let (neutralized, pool) = match opened {
            Ok(opened) => opened,
            // Another database of the cluster that the server lists but will not open is
            // the backup's (named in `databases`); the target's own is the run's error.
            Err(e) if !is_main => {
                refused.push((db.clone(), format!("{e:#}")));
                continue;
            }
            Err(e) => return Err(e),
        };
        let catalog = match neutralized {
            Some(refused) => refused,
            None => match reference.as_ref() {
                Ok(reference) => guard::check_catalog(&pool, reference).await,
                Err(why) => {
                    Finding::new(guard::CATALOG, Status::Error, format!("no pristine catalog to compare with: {why:#}"))
                }
            },
        }
        .with("seconds", started.elapsed().as_secs_f64());
        if catalog.status == Status::Failed {
            // Nothing the copy computes can be trusted: report the catalog alone.
            let skipped = drcheck_validators::selected(&settings.enabled)
                .into_iter()
                .filter(|v| is_main || databases::runs_everywhere(v.name()))
                .map(|v| {
                    Finding::new(
                        v.name(),
                        Status::Skipped,
                        "not run: the restored catalog is not PostgreSQL's own (see catalog)",
                    )
                })
                .collect::<Vec<_>>();
            pool.close().await;
            let mut findings = vec![catalog];
            findings.extend(skipped);
            per_database.push((db.clone(), findings));
            continue;
        }
        let primary = primary_for(target, db, is_main, physical, primary_dbs.as_deref()).await;
        if let (true, Some(_), Primary::Unavailable(why)) = (is_main, &target.primary, &primary) {
            primary_unavailable = Some(why.clone());
        }
        let (since, provenance, journal) = match &primary {
            Primary::Available(p) => {
                let e = drcheck_validators::asof::establish(&point, &pool, p, &aborted).await;
                (e.since, e.provenance.filter(|_| is_main), e.journal)
            }
            Primary::Unavailable(why) => (
                drcheck_validators::asof::Since::Unknown { why: why.clone(), commit_ts: None },
                None,
                drcheck_validators::asof::Journal::default(),
            ),
        };
        tracing::info!(target = %target.name, database = %db, how = %since.describe(), "comparing as of the copy's point");
        // drcheck's own tables on this database (any target's heartbeat, the DDL log) are
        // `as_of` tables of themselves for every target.
        let mut settings = settings.clone();
        if let Primary::Available(p) = &primary {
            match p.timed(drcheck_validators::ddl::marked(&p.pool)).await {
                Ok(m) => {
                    for t in m.tables {
                        if !settings.as_of.iter().any(|(s, n, _)| *s == t.schema && *n == t.name) {
                            settings.as_of.push((t.schema, t.name, "at".into()));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(target = %target.name, database = %db, "cannot list drcheck's tables on the primary: {e}")
                }
            }
        }
        let cx = Context {
            restored: pool,
            access: access(sandbox, db),
            primary,
            backup_time,
            rpo: target.rpo,
            row_count_tolerance: target.row_count_tolerance,
            settings,
            physical,
            heartbeat: target.heartbeat.clone(),
            target_time: match &target.recovery_target {
                drcheck_config::RecoveryTarget::Time(t) if physical => humantime::parse_rfc3339_weak(t).ok(),
                _ => None,
            },
            since,
            journal,
            rotation: rotation.clone(),
            on_follower,
        };
        let validators: Vec<_> = drcheck_validators::selected(&cx.settings.enabled)
            .into_iter()
            .filter(|v| is_main || databases::runs_everywhere(v.name()))
            .collect();
        let mut findings = vec![drcheck_validators::enforce_coverage(catalog)];
        // A physical copy that is not of this primary's history: the backup's defect.
        findings.extend(provenance);
        findings.extend(drcheck_validators::run_all(&validators, &cx, cx.settings.timeout, deadline).await);
        cx.restored.close().await;
        if let Primary::Available(p) = &cx.primary {
            let s = p.stats();
            let q = queries.get_or_insert(PrimaryQueries { count: 0, longest_seconds: 0.0 });
            q.count += s.count;
            q.longest_seconds = q.longest_seconds.max(crate::run_report::secs(s.longest));
            p.close().await;
        }
        per_database.push((db.clone(), findings));
    }
    let mut findings = databases::merge(per_database);
    if let Some(cluster) = &cluster {
        let validated: Vec<String> = names.iter().filter(|n| !refused.iter().any(|(r, _)| r == *n)).cloned().collect();
        let at = catalog_at(&findings);
        findings.insert(at, databases::coverage(cluster, primary_listed.as_deref(), &validated, &refused));
    }
    Ok(Validated { findings, primary_queries: queries, primary_unavailable })
}

/// Where the `databases` finding goes: right after `catalog`.
fn catalog_at(findings: &[Finding]) -> usize {
    findings.iter().position(|f| f.name == guard::CATALOG).map_or(0, |i| i + 1)
}

/// Neutralizes database `db` of the copy on a session of its own, closed before any
/// validator connects. The catalog state that would defeat the reset (a rule or trigger
/// on a system catalog, …: [`guard::structure`]) is refused first: `Some` is then the
/// `catalog` finding, failed or in error.
async fn neutralize_database(sandbox: &Sandbox, db: &str) -> anyhow::Result<Option<Finding>> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(restored_session(sandbox.connect_options(db)))
        .await
        .with_context(|| format!("the restored database {db:?} does not accept connections"))?;
    let finding = match guard::structure(&pool).await {
        Err(e) => Some(Finding::new(guard::CATALOG, Status::Error, format!("cannot read the restored catalog: {e}"))),
        Ok(found) if !found.is_empty() => Some(guard::structure_finding(&found)),
        Ok(_) => match guard::neutralize(&pool).await {
            Ok(done) => {
                if !done.is_empty() {
                    tracing::info!(database = db, changes = %done.join("; "), "restored copy neutralized");
                }
                None
            }
            Err(e) => {
                Some(Finding::new(guard::CATALOG, Status::Error, format!("cannot neutralize the restored copy: {e}")))
            }
        },
    };
    pool.close().await;
    Ok(finding)
}

/// A follower's session on `db`: the catalog state that would defeat the pinned
/// settings refused first ([`guard::structure`]: `Some` is then the `catalog` finding),
/// and every database or role setting the copy holds — it cannot be deleted on a standby
/// — overridden with the server's built-in value (what the `catalog` check then proves
/// is PostgreSQL's own `pg_settings`).
async fn follower_session(
    sandbox: &Sandbox,
    db: &str,
) -> anyhow::Result<(Option<Finding>, sqlx::postgres::PgConnectOptions)> {
    let session = restored_session(sandbox.connect_options(db));
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(session.clone())
        .await
        .with_context(|| format!("the follower's database {db:?} does not accept connections"))?;
    let found = match guard::structure(&pool).await {
        Err(e) => Some(Finding::new(guard::CATALOG, Status::Error, format!("cannot read the follower's catalog: {e}"))),
        Ok(found) if !found.is_empty() => Some(guard::structure_finding(&found)),
        Ok(_) => None,
    };
    let overrides: Result<Vec<(String, String)>, sqlx::Error> = sqlx::query_as(
        "select s.name::text, coalesce(s.boot_val, '')::text from pg_catalog.pg_settings s
          where s.name in (select pg_catalog.split_part(c, '=', 1)
                             from pg_catalog.pg_db_role_setting r, pg_catalog.unnest(r.setconfig) c)
            and s.context in ('user', 'superuser')",
    )
    .fetch_all(&pool)
    .await;
    pool.close().await;
    let overrides = overrides.context("reading the follower's database and role settings")?;
    let pinned: Vec<&str> = guard::RESTORED_SETTINGS.iter().map(|(k, _)| *k).collect();
    let extra: Vec<(String, String)> =
        overrides.into_iter().filter(|(k, _)| !pinned.contains(&k.as_str()) && k != "search_path").collect();
    if !extra.is_empty() {
        let names: Vec<&str> = extra.iter().map(|(k, _)| k.as_str()).collect();
        tracing::info!(database = db, settings = %names.join(", "), "the follower's own settings overridden in its sessions");
    }
    let session = session.options(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    Ok((found, session))
}

/// Every database a restored cluster holds but its templates, whether it takes
/// connections or not, and the OID the copy would give next (what was made before its
/// point has a smaller one).
async fn cluster_databases(sandbox: &Sandbox) -> anyhow::Result<databases::Cluster> {
    use sqlx::Connection;
    let mut conn = sqlx::postgres::PgConnection::connect_with(&restored_session(sandbox.connect_options("postgres")))
        .await
        .context("the restored cluster does not accept connections")?;
    let dbs: Vec<(String, bool)> = sqlx::query_as(
        "select datname::text, datallowconn and datconnlimit <> -2 from pg_catalog.pg_database
          where not datistemplate order by 1",
    )
    .fetch_all(&mut conn)
    .await
    .context("listing the restored cluster's databases")?;
    let next_oid: Option<i64> = sqlx::query_scalar("select next_oid::int8 from pg_catalog.pg_control_checkpoint()")
        .fetch_optional(&mut conn)
        .await
        .context("reading the restored cluster's control data")?;
    let _ = conn.close().await;
    Ok(databases::Cluster {
        databases: dbs.into_iter().map(|(name, connectable)| databases::ClusterDb { name, connectable }).collect(),
        next_oid,
    })
}

/// The databases on the primary that take connections, with their OIDs, as its URL's
/// user sees them; `None` if it cannot say.
async fn primary_databases(url: &str, target: &TargetConfig) -> Option<Vec<(String, i64)>> {
    let p = primary::connect(url, &limits(target)).await.ok()?;
    let dbs = p
        .timed(
            sqlx::query_as::<_, (String, i64)>(
                "select datname::text, oid::int8 from pg_catalog.pg_database where datallowconn and not datistemplate",
            )
            .fetch_all(&p.pool),
        )
        .await
        .ok();
    p.close().await;
    dbs
}

fn limits(target: &TargetConfig) -> PrimaryLimits {
    PrimaryLimits {
        statement_timeout: target.validators.statement_timeout,
        max_concurrency: target.validators.primary_concurrency,
        ..Default::default()
    }
}

/// The primary to compare restored database `db` with: the URL's own database for the
/// target's database; for the other databases of a cluster, the same server and user
/// with the database swapped, if the primary has it.
async fn primary_for(
    target: &TargetConfig,
    db: &str,
    is_main: bool,
    physical: bool,
    on_primary: Option<&[String]>,
) -> Primary {
    let Some(url) = &target.primary else {
        return Primary::Unavailable("no primary configured for this target".into());
    };
    let url_for_db = if is_main || !physical {
        url.expose().to_string()
    } else {
        if on_primary.is_some_and(|dbs| !dbs.iter().any(|d| d == db)) {
            return Primary::Unavailable(format!("database {db:?} is not on the primary"));
        }
        match with_database(url.expose(), db) {
            Some(u) => u,
            None => return Primary::Unavailable("the primary URL names no database to swap".into()),
        }
    };
    match primary::connect(&url_for_db, &limits(target)).await {
        Ok(p) => Primary::Available(p),
        Err(why) => {
            // The primary's database, as the URL names it (the restored copy's may differ).
            let on_primary = url::Url::parse(&url_for_db)
                .ok()
                .map(|u| u.path().trim_start_matches('/').to_string())
                .unwrap_or_else(|| db.to_string());
            let hint = primary_hint(why.refusal);
            tracing::warn!(target = %target.name, database = %on_primary, reason = %why, "primary unreachable: comparisons skipped{hint}");
            Primary::Unavailable(format!("cannot connect to {} (database {on_primary:?}): {why}{hint}", url.redacted()))
        }
    }
}

/// What to do about a failed connection to the primary, from why it failed.
fn primary_hint(why: drcheck_validators::primary::Refusal) -> &'static str {
    use drcheck_validators::primary::Refusal;
    match why {
        Refusal::BadPassword => " — check the user and password in the target's primary URL (and the ${VAR} it reads)",
        Refusal::NoDatabase => " — the URL names a database the primary does not have",
        Refusal::ConnectionRefused | Refusal::NoAnswer => {
            " — is the primary's host and port right, and does it accept connections from here?"
        }
        Refusal::NotAdmitted => " — the primary's pg_hba.conf (or the role) does not admit drcheck's host/user",
        Refusal::Other => "",
    }
}

/// `url` with its database (the path) replaced by `db`.
fn with_database(url: &str, db: &str) -> Option<String> {
    let mut u = url::Url::parse(url).ok()?;
    u.path_segments_mut().ok()?.clear().push(db);
    Some(u.to_string())
}

fn access(sandbox: &Sandbox, db: &str) -> RestoredAccess {
    RestoredAccess {
        socket_dir: sandbox.socket_dir().to_path_buf(),
        port: sandbox.port(),
        database: db.to_string(),
        bindir: sandbox.bin().dir.clone(),
        passfile: Some(sandbox.passfile()),
        launcher: Some({
            // pg_amcheck and pg_dump read restored data: contained like the restore.
            let mut policy = sandbox.policy(&[sandbox.bin().dir.clone()]);
            if policy.syscalls != drcheck_restore::contain::Syscalls::Unfiltered {
                policy.syscalls = drcheck_restore::contain::Syscalls::Client;
            }
            std::sync::Arc::new(move |program: &std::path::Path| drcheck_restore::contain::command(program, &policy))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 49: deciding which tables are owed a proof reads the history store and
    /// writes nothing; the run's own decisions count (the record stage keeps them).
    #[tokio::test]
    async fn unproven_tables_count_this_runs_decisions_without_writing_them() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("h.db").display());
        let h = crate::history::History::open(&drcheck_config::Secret::new(url)).await.unwrap();
        let config = drcheck_config::parse(
            "[storage.s]\nkind = \"filesystem\"\npath = \"/tmp\"\n[[target]]\nname = \"orders\"\nstorage = \"s\"\nprefix = \"p/\"\nrto = \"1h\"\nrpo = \"1d\"\nprove_within = \"30d\"\n",
            std::path::Path::new("c.toml"),
        )
        .unwrap();
        let t = &config.targets[0];
        let day = std::time::Duration::from_secs(86_400);
        let long_ago = SystemTime::now() - day * 40;
        h.record_tables("orders", &[("public.a".into(), false), ("public.b".into(), false)], long_ago).await.unwrap();
        let mut sums = Finding::new("checksums", Status::Passed, "x");
        sums.per_table = vec![("public.a".to_string(), true), ("public.b".to_string(), false)].into_boxed_slice();
        let (decided, unproven) = tables_decided(t, &[sums], &h).await;
        let unproven = unproven.expect("public.b is owed a proof");
        assert!(unproven.detail.contains("public.b") && !unproven.detail.contains("public.a"), "{}", unproven.detail);
        assert_eq!(decided.unwrap().len(), 2);
        // Nothing was written: public.a is still undecided in the store.
        let not = h.tables_not_proven("orders", t.prove_within, SystemTime::now()).await.unwrap();
        assert!(not.iter().any(|(n, _)| n == "public.a"), "{not:?}");
    }

    #[test]
    fn the_database_of_a_url_is_swapped() {
        assert_eq!(
            super::with_database("postgres://v:pw@db:5432/orders?sslmode=disable", "billing").unwrap(),
            "postgres://v:pw@db:5432/billing?sslmode=disable"
        );
    }
}
