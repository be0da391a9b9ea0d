//! drcheck's configuration: the TOML schema, loading, and the one step that turns raw,
//! user-written config into a validated [`Config`].
//!
//! This crate owns everything a user can get wrong in `drcheck.toml` — unknown keys,
//! missing keys, bad durations, unknown storage names, unset `${ENV}` variables — and
//! reports each with the file, the key and (where the TOML parser knows it) the line.
//! It does no network or database I/O. Secrets such as the primary's password are held
//! in [`Secret`], whose `Debug` and `Display` never show them.

pub mod controls;
mod duration;
mod effective;
mod error;
mod ident;
mod interpolate;
mod layers;
mod model;
mod raw;
pub mod schedule;
mod secret;
mod validated;

pub use duration::{format_duration, parse_duration};
pub use error::{ConfigError, UnknownWord, ValueError};
pub use ident::quote_ident;
pub use interpolate::{InterpolateError, interpolate, interpolate_with};
pub use model::{
    ALL_VALIDATORS, AlertConfig, AlertKind, ApiConfig, Comparisons, Config, CustomCheck, DEFAULT_STATE_URL,
    DaemonConfig, DecryptConfig, EvidenceConfig, FollowConfig, FormatSetting, HeartbeatConfig, KubernetesConfig,
    LockMode, MetricsConfig, Profile, RecoveryTarget, S3Storage, SandboxConfig, Selection, SourceConfig, StateConfig,
    StorageConfig, TargetConfig, Toleration, ValidatorsConfig, is_quantity,
};
pub use schedule::Schedule;
pub use secret::{Secret, redact_url, redact_userinfo};

use std::path::Path;

/// Reads, parses and validates the config file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read { path: path.to_path_buf(), error })?;
    parse(&text, path)
}

/// [`load`] for commands that read only the config's shape (its targets, whether each
/// has a primary) for somewhere else — `drill check`, `deploy kubernetes`: a `${VAR}`
/// that is unset here (a password only the pod's Secret holds) stands in as
/// `unset-VAR`, and files the config names (a CA, a signing key) are not looked for
/// here. When even that does not validate (a whole URL from a variable), the real error
/// is returned. Never for a run: nothing it loads may connect anywhere.
pub fn load_shape(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read { path: path.to_path_buf(), error })?;
    match parse(&text, path) {
        Ok(c) => Ok(c),
        Err(real) => {
            let Ok(raw) = toml::from_str::<raw::RawConfig>(&text) else { return Err(real) };
            validated::validate(
                raw,
                &text,
                path,
                &|name| Some(std::env::var(name).unwrap_or_else(|_| format!("unset-{name}"))),
                false,
            )
            .map_err(|_| real)
        }
    }
}

/// `config check`'s output: the file validated, its defaults filled in, in its own
/// shape (it loads back as a config that means the same); `${VAR}` references printed as
/// written, secrets written literally as `***`.
pub fn effective(path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read { path: path.to_path_buf(), error })?;
    let config = parse(&text, path)?;
    effective::render(&text, path, &config)
}

/// [`effective`] of `text`, its `${VAR}`s read from `env`.
pub fn effective_with(text: &str, path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    let raw: raw::RawConfig = toml::from_str(text)
        .map_err(|e| ConfigError::Parse { path: path.to_path_buf(), message: e.to_string().trim_end().to_string() })?;
    let config = validated::validate(raw, text, path, env, true)?;
    effective::render(text, path, &config)
}

/// Parses and validates config text; `path` is only used in error messages.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let raw: raw::RawConfig = toml::from_str(text)
        .map_err(|e| ConfigError::Parse { path: path.to_path_buf(), message: e.to_string().trim_end().to_string() })?;
    validated::validate(raw, text, path, &|name| std::env::var(name).ok(), true)
}
