use std::path::PathBuf;

/// Everything that can be wrong with a config file. Every variant names the file; the
/// ones about a key name the key and, when known, its line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("{}{}: key `{key}`: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid { path: PathBuf, line: Option<usize>, key: String, message: String },
}
