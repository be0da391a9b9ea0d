//! Secrets that must never reach logs, reports, metrics or error messages.

use std::fmt;

/// A string that is only ever shown redacted. Call [`Secret::expose`] at the one place
/// that needs the real value (opening a connection).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The value with any URL password replaced by `***`, safe to print.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({:?})", self.redacted())
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Replaces the password of a URL (and any `password=` query parameter) with `***`.
/// A string that does not parse as a URL is redacted whole, since it may be anything.
pub fn redact_url(s: &str) -> String {
    let Ok(mut url) = url::Url::parse(s) else {
        return "***".to_string();
    };
    if url.password().is_some() {
        // Setting a password only fails for URLs that cannot have one, which had none.
        let _ = url.set_password(Some("***"));
    }
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| {
            let secretive = k.eq_ignore_ascii_case("password") || k.eq_ignore_ascii_case("sslpassword");
            (k.into_owned(), if secretive { "***".to_string() } else { v.into_owned() })
        })
        .collect();
    if !pairs.is_empty() {
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

/// A URL with its userinfo (user name and password) replaced by `***`: endpoint and
/// gateway URLs may carry credentials there. Unparseable text is redacted whole.
pub fn redact_userinfo(s: &str) -> String {
    let Ok(mut url) = url::Url::parse(s) else {
        return "***".to_string();
    };
    if !url.username().is_empty() || url.password().is_some() {
        let _ = url.set_username("***");
        let _ = url.set_password(None);
    }
    redact_url(url.as_str())
}

/// Only the scheme, host and port of a URL, for URLs whose path or query may carry a
/// token (Slack and other webhooks): `https://hooks.example.com/***`.
pub fn origin_only(s: &str) -> String {
    match url::Url::parse(s) {
        Ok(u) => {
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            let rest = if u.path().len() > 1 || u.query().is_some() { "/***" } else { "" };
            format!("{}://{}{port}{rest}", u.scheme(), u.host_str().unwrap_or(""))
        }
        Err(_) => "***".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_redacted_everywhere() {
        let s = Secret::new("postgres://verifier:hunter2@db.internal:5432/orders?password=hunter2");
        for shown in [format!("{s}"), format!("{s:?}"), s.redacted()] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("verifier"), "{shown}");
            assert!(shown.contains("db.internal"), "{shown}");
        }
        assert_eq!(s.expose(), "postgres://verifier:hunter2@db.internal:5432/orders?password=hunter2");
    }

    #[test]
    fn webhook_tokens_in_paths_are_hidden() {
        assert_eq!(origin_only("https://hooks.slack.com/services/T0/B0/XYZ"), "https://hooks.slack.com/***");
        assert_eq!(origin_only("http://127.0.0.1:9093"), "http://127.0.0.1:9093");
    }

    #[test]
    fn userinfo_is_redacted_whole() {
        let shown = redact_userinfo("http://AKIAKEY:s3cr3t@127.0.0.1:9000/");
        assert!(!shown.contains("AKIAKEY") && !shown.contains("s3cr3t"), "{shown}");
        assert_eq!(shown, "http://***@127.0.0.1:9000/");
        assert_eq!(redact_userinfo("http://127.0.0.1:9000"), "http://127.0.0.1:9000/");
    }

    #[test]
    fn unparseable_is_fully_redacted() {
        assert_eq!(redact_url("host=db password=hunter2"), "***");
    }
}
