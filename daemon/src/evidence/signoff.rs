//! A reviewer's sign-off of a report (issue 38): who, in what role, when, and which
//! report — by the SHA-256 of the report file's bytes — signed with the reviewer's own
//! Ed25519 key, in a file of its own beside the report (`REPORT.signoff.json`).
//! `drcheck report verify REPORT --sign-off FILE --reviewer-key PUB` checks it with the
//! report: a sign-off of any other bytes (another report, an edited one) does not verify.

use super::sign::{canonical, fingerprint};
use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The one statement a sign-off makes.
pub(crate) const STATEMENT: &str = "I reviewed this restore-test evidence and attest to it in my role.";

/// What the reviewer signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Attestation {
    pub format_version: u32,
    /// The report's file name when signed (for people; the digest is what binds).
    pub report: String,
    /// SHA-256 of the report file's bytes, hex.
    pub report_sha256: String,
    pub by: String,
    pub role: String,
    /// RFC 3339, UTC.
    pub at: String,
    pub statement: String,
    /// SHA-256 of the reviewer's raw public key, hex: which key signed.
    pub key_fingerprint: String,
}

/// A sign-off file: the attestation and the reviewer's signature over its canonical JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignOff {
    pub attestation: Attestation,
    /// Ed25519, base64.
    pub signature: String,
}

/// Where a sign-off of `report` goes unless told.
pub(crate) fn default_path(report: &Path) -> PathBuf {
    let mut name = report.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".signoff.json");
    report.with_file_name(name)
}

/// SHA-256 of a file's bytes, hex, streamed.
pub(crate) fn file_sha256(path: &Path) -> anyhow::Result<String> {
    let mut file = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut file, &mut h).with_context(|| format!("reading {}", path.display()))?;
    Ok(hex::encode(h.finalize()))
}

/// Signs off `report` as `by` in `role`, at `at` (RFC 3339).
pub(crate) fn sign_off(report: &Path, by: &str, role: &str, at: &str, key: &SigningKey) -> anyhow::Result<SignOff> {
    for (what, v) in [("--by", by), ("--role", role)] {
        if v.trim().is_empty() || v.chars().any(char::is_control) {
            anyhow::bail!("{what} must be a name on one line, got {v:?}");
        }
    }
    let attestation = Attestation {
        format_version: 1,
        report: report.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        report_sha256: file_sha256(report)?,
        by: by.trim().to_string(),
        role: role.trim().to_string(),
        at: at.to_string(),
        statement: STATEMENT.to_string(),
        key_fingerprint: fingerprint(&key.verifying_key()),
    };
    let signature = B64.encode(key.sign(&canonical(&attestation)).to_bytes());
    Ok(SignOff { attestation, signature })
}

/// Everything wrong with `signoff` as a sign-off of `report` by the holder of `key`;
/// empty when it verifies.
pub(crate) fn check(report: &Path, signoff: &SignOff, key: &VerifyingKey) -> anyhow::Result<Vec<String>> {
    let a = &signoff.attestation;
    let mut problems = Vec::new();
    if a.key_fingerprint != fingerprint(key) {
        problems.push(format!(
            "the sign-off was made with key sha256:{}, not the reviewer key given (sha256:{})",
            short(&a.key_fingerprint),
            short(&fingerprint(key))
        ));
    }
    let signature = B64.decode(&signoff.signature).ok().and_then(|b| Signature::from_slice(&b).ok());
    match signature {
        Some(s) if key.verify(&canonical(a), &s).is_ok() => {}
        Some(_) if problems.is_empty() => {
            problems.push("the sign-off's signature does not match what it says (edited after signing)".into())
        }
        Some(_) => {}
        None => problems.push("the sign-off's signature is not an Ed25519 signature".into()),
    }
    let now = file_sha256(report)?;
    if now != a.report_sha256 {
        problems.push(format!(
            "the sign-off is of another report (sha256:{}), not of {} (sha256:{})",
            short(&a.report_sha256),
            report.display(),
            short(&now)
        ));
    }
    Ok(problems)
}

fn short(hex: &str) -> &str {
    &hex[..hex.len().min(16)]
}

/// Reads a sign-off file, naming what is wrong with it.
pub(crate) fn read(path: &Path) -> anyhow::Result<SignOff> {
    let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("{} is not a drcheck sign-off", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    #[test]
    fn a_sign_off_binds_the_reviewer_to_the_reports_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (report, other) = (dir.path().join("r.html"), dir.path().join("o.html"));
        std::fs::write(&report, "<html>the report</html>").unwrap();
        std::fs::write(&other, "<html>another report</html>").unwrap();
        let s = sign_off(&report, "Ada Auditor", "CISO", "2026-12-06T12:00:00Z", &key(1)).unwrap();
        assert_eq!(default_path(&report), dir.path().join("r.html.signoff.json"));
        assert!(check(&report, &s, &key(1).verifying_key()).unwrap().is_empty());
        // Another report's bytes: named.
        let p = check(&other, &s, &key(1).verifying_key()).unwrap();
        assert!(p.len() == 1 && p[0].contains("of another report"), "{p:?}");
        // The report edited after the sign-off: the same.
        std::fs::write(&report, "<html>the report, edited</html>").unwrap();
        assert!(check(&report, &s, &key(1).verifying_key()).unwrap()[0].contains("of another report"));
        std::fs::write(&report, "<html>the report</html>").unwrap();
        // Who signed, changed after signing: the signature no longer matches.
        let mut forged = s.clone();
        forged.attestation.by = "Mallory".into();
        let p = check(&report, &forged, &key(1).verifying_key()).unwrap();
        assert!(p[0].contains("edited after signing"), "{p:?}");
        // Another reviewer's key.
        let p = check(&report, &s, &key(2).verifying_key()).unwrap();
        assert!(p[0].contains("not the reviewer key given"), "{p:?}");
        // A name on two lines is refused.
        assert!(sign_off(&report, "Ada\nAuditor", "CISO", "2026-12-06T12:00:00Z", &key(1)).is_err());
        // The file round-trips; an unknown field is not part of a sign-off.
        let text = serde_json::to_string(&s).unwrap();
        let back: SignOff = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s);
        let extra = text.replacen("{\"attestation\"", "{\"approved\":true,\"attestation\"", 1);
        assert!(serde_json::from_str::<SignOff>(&extra).is_err());
    }
}
