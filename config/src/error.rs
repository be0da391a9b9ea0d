use std::path::PathBuf;

/// A value a setting does not take — what was given, and what was expected or why it
/// is refused — for its caller to place ([`ConfigError::Invalid`] adds the file, line
/// and key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Not of the setting's form.
    #[error("expected {expected}, got {given:?}")]
    Expected { given: String, expected: String },
    /// Of the form, but not a value the setting takes.
    #[error("{given:?}: {why}")]
    Refused { given: String, why: String },
}

/// A word that names no member of a closed set — a status, a result, read back from a
/// store or a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not {what}: {word:?}")]
pub struct UnknownWord {
    /// The set, with its article: "a status".
    pub what: &'static str,
    pub word: String,
}

impl ValueError {
    pub fn expected(given: &str, expected: impl Into<String>) -> Self {
        ValueError::Expected { given: given.into(), expected: expected.into() }
    }

    pub fn refused(given: &str, why: impl Into<String>) -> Self {
        ValueError::Refused { given: given.into(), why: why.into() }
    }
}

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
