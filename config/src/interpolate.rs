//! `${ENV_VAR}` interpolation in string values. `$$` stands for a literal `$`.

/// Replaces every `${NAME}` in `s` with `lookup(NAME)`. The error names the variable.
pub fn interpolate(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, InterpolateError> {
    interpolate_with(s, lookup, &|name| format!("environment variable {name} is not set"))
}

/// [`interpolate`] with the message for an unknown name chosen by the caller (runbooks
/// look up their own variables before the environment).
pub fn interpolate_with(
    s: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    missing: &dyn Fn(&str) -> String,
) -> Result<String, InterpolateError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let end = tail.find('}').ok_or(InterpolateError::Unterminated)?;
            let name = &tail[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(InterpolateError::BadName(name.into()));
            }
            let value =
                lookup(name).ok_or_else(|| InterpolateError::Unset { name: name.into(), said: missing(name) })?;
            out.push_str(&value);
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Why a `${NAME}` could not be replaced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterpolateError {
    #[error("unterminated `${{`: expected `${{NAME}}`")]
    Unterminated,
    #[error("`${{{0}}}` is not a valid variable name")]
    BadName(String),
    /// No value for `name`; `said` is how the caller says so.
    #[error("{said}")]
    Unset { name: String, said: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "PW").then(|| "s3cr$t".to_string())
    }

    #[test]
    fn replaces_escapes_and_reports_missing() {
        assert_eq!(interpolate("a:${PW}@b", &env).unwrap(), "a:s3cr$t@b");
        assert_eq!(interpolate("cost $$5 $x", &env).unwrap(), "cost $5 $x");
        assert!(interpolate("${NOPE}", &env).unwrap_err().to_string().contains("NOPE is not set"));
        assert_eq!(interpolate("${PW", &env).unwrap_err(), InterpolateError::Unterminated);
        assert!(interpolate("${P W}", &env).unwrap_err().to_string().contains("`${P W}` is not a valid"));
    }
}
