//! Variables at run time: the runbook's `variables` (after `--var` overrides), values
//! captured by earlier steps, then the environment. `${name}` in a step's text is
//! replaced when the step starts; `$$` is a literal `$`; `$name` without braces is left
//! alone for the shell.
//!
//! Names that look like secrets (`password`, `token`, …) are shown as `***` wherever a
//! resolved text is displayed: the plan, the live output, the journal and the report.

use drcheck_config::InterpolateError;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
pub struct Scope {
    vars: BTreeMap<String, String>,
}

/// Runbook variables reach shell steps as environment variables with this prefix.
pub const SHELL_VAR_PREFIX: &str = "DRCHECK_VAR_";

const SECRET_WORDS: &[&str] = &["password", "passwd", "secret", "token", "apikey", "api_key", "credential", "private"];

/// Whether a variable's name says it holds a secret: it contains one of the words
/// above, or is a key (`key`, `*_key`, `*-key`, `*_key_*`: `ssh_key`, `aws_secret_access_key`).
pub fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| n.contains(w))
        || n == "key"
        || n.ends_with("_key")
        || n.ends_with("-key")
        || n.contains("_key_")
        || n.starts_with("key_")
}

impl Scope {
    pub fn new(vars: BTreeMap<String, String>) -> Self {
        Self { vars }
    }

    pub fn set(&mut self, name: &str, value: String) {
        self.vars.insert(name.to_string(), value);
    }

    pub fn get(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned().or_else(|| std::env::var(name).ok())
    }

    /// `text` with every `${name}` replaced; the error names the variable.
    pub fn resolve(&self, text: &str) -> Result<String, InterpolateError> {
        drcheck_config::interpolate_with(text, &|n| self.get(n), &missing)
    }

    /// `text` for `/bin/sh -c`: every `${name}` becomes a reference to an environment
    /// variable (`${DRCHECK_VAR_name}`) that carries the value, so the shell expands
    /// values as data — a value such as `$(rm -rf ~)` or `'; reboot` is never run as
    /// shell code. Returns the command and the variables to set.
    pub fn resolve_for_shell(&self, text: &str) -> Result<(String, Vec<(String, String)>), InterpolateError> {
        let found = std::cell::RefCell::new(Vec::new());
        let command = drcheck_config::interpolate_with(
            text,
            &|n| {
                let value = self.get(n)?;
                let env = format!("{SHELL_VAR_PREFIX}{n}");
                found.borrow_mut().push((env.clone(), value));
                Some(format!("${{{env}}}"))
            },
            &missing,
        )?;
        Ok((command, found.into_inner()))
    }

    /// `text` resolved for display: secret-looking variables as `***`, passwords in
    /// URLs redacted. Unresolvable names are shown as written.
    pub fn display(&self, text: &str) -> String {
        let shown = drcheck_config::interpolate_with(
            text,
            &|n| match self.get(n) {
                Some(_) if is_secret_name(n) => Some("***".into()),
                Some(v) => Some(v),
                None => Some(format!("${{{n}}}")),
            },
            &missing,
        )
        .unwrap_or_else(|_| text.to_string());
        redact_urls(&shown)
    }

    /// The variables for the journal, secrets masked.
    pub fn masked(&self) -> BTreeMap<String, String> {
        self.vars
            .iter()
            .map(|(k, v)| (k.clone(), if is_secret_name(k) { "***".into() } else { redact_urls(v) }))
            .collect()
    }

    /// Every value that must not be shown, for scrubbing command output: the
    /// secret-named variables of the runbook and of the environment (a `${DB_PASSWORD}`
    /// a step takes from there is as secret as one in `variables`).
    pub fn secret_values(&self) -> Vec<String> {
        let mut out: Vec<String> =
            self.vars.iter().filter(|(k, v)| is_secret_name(k) && v.len() >= 4).map(|(_, v)| v.clone()).collect();
        out.extend(std::env::vars().filter(|(k, v)| is_secret_name(k) && v.len() >= 4).map(|(_, v)| v));
        // Longest first, so a secret that contains another is replaced whole.
        out.sort_by_key(|v| std::cmp::Reverse(v.len()));
        out.dedup();
        out
    }
}

fn missing(name: &str) -> String {
    format!(
        "variable {name} is not defined (not in `variables`, not captured by an earlier step, not in the environment)"
    )
}

/// Redacts the password of every `scheme://user:password@host` URL inside `text`.
pub fn redact_urls(text: &str) -> String {
    // Only the password of each `scheme://user:password@host` changes: everything else —
    // quotes, `;`, spaces — stays byte for byte, so the plan shown is the command run.
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority_end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#' | '"' | '\'' | '`') || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..authority_end];
        match authority.rfind('@').and_then(|a| authority[..a].find(':').map(|c| (c, a))) {
            Some((colon, a)) => {
                out.push_str(&authority[..=colon]);
                out.push_str("***");
                out.push_str(&authority[a..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[authority_end..];
    }
    out.push_str(rest);
    out
}

/// `text` with every secret value replaced by `***`.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        out = out.replace(s.as_str(), "***");
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls_lose_their_password_and_nothing_else() {
        let cmd = r#"psql "postgres://app:s3cr:et@db:5432/orders?sslmode=require" -c "select 1; select 'a b';" && curl https://h/x%20y"#;
        let want = r#"psql "postgres://app:***@db:5432/orders?sslmode=require" -c "select 1; select 'a b';" && curl https://h/x%20y"#;
        assert_eq!(redact_urls(cmd), want);
        assert_eq!(redact_urls("no url; \"quoted\""), "no url; \"quoted\"");
        assert_eq!(redact_urls("postgres://user@h/db"), "postgres://user@h/db");
    }

    use super::*;

    fn scope() -> Scope {
        Scope::new(BTreeMap::from([
            ("port".to_string(), "5432".to_string()),
            ("db_password".to_string(), "hunter22".to_string()),
        ]))
    }

    #[test]
    fn shell_commands_get_values_through_the_environment_not_as_code() {
        let mut s = Scope::default();
        s.set("evil", "$(touch /tmp/x); echo 'hi".into());
        let (cmd, env) = s.resolve_for_shell("echo \"${evil}\" $$HOME").unwrap();
        assert_eq!(cmd, "echo \"${DRCHECK_VAR_evil}\" $HOME");
        assert_eq!(env, vec![("DRCHECK_VAR_evil".to_string(), "$(touch /tmp/x); echo 'hi".to_string())]);
        assert!(s.resolve_for_shell("${nope_not_here}").is_err());
    }

    #[test]
    fn resolves_variables_before_the_environment_and_names_the_missing_one() {
        let s = scope();
        assert_eq!(s.resolve("p=${port} $$x $HOME").unwrap(), "p=5432 $x $HOME");
        let e = s.resolve("${nope_not_here}").unwrap_err();
        assert!(matches!(&e, InterpolateError::Unset { name, .. } if name == "nope_not_here"), "{e:?}");
        assert!(e.to_string().contains("nope_not_here is not defined"), "{e}");
    }

    #[test]
    fn display_masks_secret_variables_and_url_passwords() {
        let s = scope();
        assert_eq!(s.display("pw=${db_password} port=${port}"), "pw=*** port=5432");
        let shown = s.display("psql 'postgres://app:${port}x@h/db' ok");
        assert!(!shown.contains("5432x"), "{shown}");
        assert_eq!(s.display("${later}"), "${later}");
        assert_eq!(s.masked()["db_password"], "***");
        assert_eq!(scrub("a hunter22 b", &s.secret_values()), "a *** b");
    }
}
