//! Names and places of runs: run ids, and the sandbox (or the sandbox directory, for a
//! backup tool reading its repository) each part of a run gets. A leaf: it depends on
//! the configuration and the restore crate only.

use drcheck_config::{Config, SandboxConfig, StorageConfig, TargetConfig};
use drcheck_restore::{SandboxOptions, StoreError};

/// What the work on one target needs of the configuration: the sandbox's settings and
/// the target's store — never the whole `Config` (the other targets, the alerts, the
/// daemon's listeners are none of a run's business).
#[derive(Clone, Copy)]
pub(crate) struct Settings<'a> {
    pub sandbox: &'a SandboxConfig,
    pub storage: &'a StorageConfig,
}

impl<'a> Settings<'a> {
    /// The settings of `target`'s work (`config` validated it: its storage exists).
    pub(crate) fn of(config: &'a Config, target: &TargetConfig) -> Self {
        Settings { sandbox: &config.sandbox, storage: &config.storage[&target.storage] }
    }
}

/// A fresh run id.
pub(crate) fn new_run_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// How the sandbox of run `run_id` is made, from `[sandbox]`.
pub(crate) fn sandbox_options(sandbox: &SandboxConfig, run_id: String) -> SandboxOptions {
    SandboxOptions {
        scratch_dir: sandbox.scratch_dir.clone(),
        run_id,
        profile: sandbox.profile,
        require_containment: sandbox.require_containment,
        user: sandbox.user.clone(),
        memory_limit: Some(sandbox.memory_limit),
        keep_at: None,
        tool_limit: None,
    }
}

/// The longest one call of a backup tool may take while a run selects its backup
/// (listing the catalog, reading the archive's reach): the restore's own deadline
/// (`rto × abort_factor`), at most [`SELECT_TOOL_LIMIT`].
pub(crate) fn select_tool_limit(target: &TargetConfig) -> drcheck_restore::ToolLimit {
    drcheck_restore::ToolLimit {
        within: target.rto.mul_f64(target.abort_factor).min(SELECT_TOOL_LIMIT),
        whose: format!(
            "the select phase's limit: rto × abort_factor, at most {}",
            drcheck_config::format_duration(SELECT_TOOL_LIMIT)
        ),
    }
}

/// The select phase's share of a run's ten minutes beyond restore and validation.
pub(crate) const SELECT_TOOL_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// A sandbox directory (no server) for a backup tool reading its repository: listing
/// the catalog, reading the archive's reach, checking integrity.
///
/// Each `purpose` of a run gets a directory of its own: a sandbox is torn down on a
/// thread of its own after the run is done with it, so the next one of the same run
/// must never need the same name (it would find the last one still being removed).
pub(crate) fn catalog_sandbox(
    settings: Settings<'_>,
    target: &TargetConfig,
    store: &str,
    run_id: &str,
    purpose: Purpose,
) -> Result<drcheck_restore::Sandbox, StoreError> {
    // Every call of the tool there ends by its phase's limit.
    let tool_limit = Some(match purpose {
        Purpose::Catalog | Purpose::Reach => select_tool_limit(target),
        Purpose::Integrity => drcheck_restore::ToolLimit {
            within: target.validators.phase_timeout,
            whose: "the validate phase's limit: validators.phase_timeout".into(),
        },
    });
    let opts = SandboxOptions { tool_limit, ..sandbox_options(settings.sandbox, purpose.sandbox_name(run_id)) };
    drcheck_restore::Sandbox::create(&opts).map_err(|e| StoreError {
        store: store.to_string(),
        message: e.to_string(),
        unreachable: false,
        changed: false,
    })
}

/// What a run reads a backup tool's repository for, each in a sandbox of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Listing the catalog (`tool_catalog`).
    Catalog,
    /// Reading the newest transaction the archive holds (`draw_point`).
    Reach,
    /// The `repository` validator (`check_repository`).
    Integrity,
}

impl Purpose {
    #[cfg(test)]
    pub(crate) const ALL: [Purpose; 3] = [Purpose::Catalog, Purpose::Reach, Purpose::Integrity];

    pub(crate) fn sandbox_name(self, run_id: &str) -> String {
        let purpose = match self {
            Purpose::Catalog => "catalog",
            Purpose::Reach => "reach",
            Purpose::Integrity => "integrity",
        };
        format!("{run_id}-{purpose}")
    }
}

/// How a target's backups are downloaded.
pub(crate) fn fetch_options(storage: &StorageConfig) -> drcheck_restore::FetchOptions {
    match storage {
        StorageConfig::S3(s3) => drcheck_restore::FetchOptions {
            part_size: s3.part_size,
            concurrency: s3.concurrency,
            window: s3.part_size.max(drcheck_restore::FETCH_WINDOW),
            backoff: drcheck_restore::retry::Backoff::within(s3.retry_window),
        },
        StorageConfig::Filesystem { .. } => drcheck_restore::FetchOptions::default(),
    }
}
