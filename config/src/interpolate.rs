//! `${ENV_VAR}` interpolation in string values. `$$` stands for a literal `$`.

/// Replaces every `${NAME}` in `s` with `lookup(NAME)`. The error names the variable.
pub fn interpolate(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    interpolate_with(s, lookup, &|name| format!("environment variable {name} is not set"))
}

/// [`interpolate`] with the message for an unknown name chosen by the caller (runbooks
/// look up their own variables before the environment).
pub fn interpolate_with(
    s: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    missing: &dyn Fn(&str) -> String,
) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let end = tail.find('}').ok_or_else(|| "unterminated `${`: expected `${NAME}`".to_string())?;
            let name = &tail[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("`${{{name}}}` is not a valid variable name"));
            }
            let value = lookup(name).ok_or_else(|| missing(name))?;
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
        assert!(interpolate("${NOPE}", &env).unwrap_err().contains("NOPE is not set"));
        assert!(interpolate("${PW", &env).unwrap_err().contains("unterminated"));
    }
}
