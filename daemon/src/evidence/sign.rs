//! Tamper evidence. The report embeds its canonical content (the [`Evidence`] as JSON
//! with sorted keys) and, with `[evidence] signing_key`, a detached Ed25519 signature
//! over a *seal*: the SHA-256 of the whole content and of each run and drill in it. A
//! verifier with the public key checks the signature, then recomputes every digest: a
//! changed, added or removed run is named, not only "invalid".
//!
//! Keys are PKCS#8 / SPKI PEM, as `openssl genpkey -algorithm ed25519` writes them.

use super::Evidence;
use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
#[cfg(test)]
use ed25519_dalek::Signer;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey};
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What the signature covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Seal {
    pub algorithm: String,
    /// SHA-256 of the raw public key, hex: which key signed.
    pub key_fingerprint: String,
    /// SHA-256 of the canonical evidence, hex.
    pub evidence_sha256: String,
    pub items: Vec<SealedItem>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SealedItem {
    /// `run` or `drill`.
    pub kind: String,
    pub id: String,
    /// The target (runs) or the runbook (drills).
    pub of: String,
    pub started_at: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SignatureBlock {
    pub seal: Seal,
    /// Ed25519 over the canonical seal, base64.
    pub signature: String,
}

/// What a report carries: its content and, when signed, the signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Embedded {
    pub evidence: Evidence,
    pub signature: Option<SignatureBlock>,
}

/// JSON with sorted keys and no spaces: the bytes that are hashed and signed.
pub(crate) fn canonical<T: Serialize>(v: &T) -> Vec<u8> {
    // serde_json::Value keeps object keys in a BTreeMap: sorted.
    let value = serde_json::to_value(v).expect("evidence serializes");
    serde_json::to_vec(&value).expect("a JSON value serializes")
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The digests of every run and drill in `evidence`.
#[cfg(test)]
pub(crate) fn items(evidence: &Evidence) -> Vec<SealedItem> {
    let runs = evidence.targets.iter().flat_map(target_items);
    let drills = evidence.drills.iter().map(drill_item);
    runs.chain(drills).collect()
}

/// The digests of one target's runs.
pub(crate) fn target_items(t: &super::TargetEvidence) -> Vec<SealedItem> {
    t.runs
        .iter()
        .map(|r| SealedItem {
            kind: "run".into(),
            id: r.run_id.clone(),
            of: t.name.clone(),
            started_at: r.started_at.clone(),
            sha256: sha256_hex(&canonical(r)),
        })
        .collect()
}

/// The digest of one drill.
pub(crate) fn drill_item(d: &super::DrillEvidence) -> SealedItem {
    SealedItem {
        kind: "drill".into(),
        id: d.drill_id.clone(),
        of: d.runbook.clone(),
        started_at: d.started_at.clone(),
        sha256: sha256_hex(&canonical(d)),
    }
}

pub(crate) fn fingerprint(key: &VerifyingKey) -> String {
    sha256_hex(key.as_bytes())
}

#[cfg(test)]
pub(crate) fn sign(evidence: &Evidence, key: &SigningKey) -> SignatureBlock {
    sign_seal(key, sha256_hex(&canonical(evidence)), items(evidence))
}

/// Signs the seal of content whose canonical digest is `evidence_sha256`, with the
/// digests of its runs and drills (`items`, in the content's order).
#[cfg(test)]
pub(crate) fn sign_seal(key: &SigningKey, evidence_sha256: String, items: Vec<SealedItem>) -> SignatureBlock {
    let seal = Seal {
        algorithm: "ed25519".into(),
        key_fingerprint: fingerprint(&key.verifying_key()),
        evidence_sha256,
        items,
    };
    let signature = key.sign(&canonical(&seal));
    SignatureBlock { seal, signature: B64.encode(signature.to_bytes()) }
}

/// The signing key: PEM text (from a `${VAR}` secret) or a file holding it. Errors
/// never quote the key.
pub(crate) fn load_signing_key(value: &str) -> anyhow::Result<SigningKey> {
    load_signing_key_as("evidence.signing_key", value)
}

/// [`load_signing_key`], its errors naming `what` (the setting or flag that gave it).
pub(crate) fn load_signing_key_as(what: &str, value: &str) -> anyhow::Result<SigningKey> {
    let pem = if value.trim_start().starts_with("-----BEGIN") {
        value.to_string()
    } else {
        std::fs::read_to_string(value).with_context(|| format!("{what}: cannot read {value}"))?
    };
    SigningKey::from_pkcs8_pem(&pem).map_err(|_| {
        anyhow::anyhow!(
            "{what}: not an Ed25519 private key in PKCS#8 PEM (make one with `openssl genpkey -algorithm ed25519`)"
        )
    })
}

pub(crate) fn load_public_key(path: &std::path::Path) -> anyhow::Result<VerifyingKey> {
    let pem = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    VerifyingKey::from_public_key_pem(&pem).map_err(|_| {
        anyhow::anyhow!(
            "{}: not an Ed25519 public key in PEM (`openssl pkey -in KEY -pubout` makes one)",
            path.display()
        )
    })
}

/// Everything wrong with `embedded` under `key`; empty when it verifies.
#[cfg(test)]
pub(crate) fn verify(embedded: &Embedded, key: &VerifyingKey) -> Vec<String> {
    let Some(block) = &embedded.signature else {
        return vec!["the report is not signed (no [evidence] signing_key when it was made)".into()];
    };
    let mut problems = verify_signature(block, key);
    let now = items(&embedded.evidence);
    problems.extend(compare_items(&block.seal.items, now.iter()));
    if sha256_hex(&canonical(&embedded.evidence)) != block.seal.evidence_sha256 && problems.is_empty() {
        problems
            .push("the report's header or summaries changed (window, targets, objectives or summary figures)".into());
    }
    problems
}

/// Whether the seal is signed by `key`: empty when it is, else why not.
#[cfg(test)]
pub(crate) fn verify_signature(block: &SignatureBlock, key: &VerifyingKey) -> Vec<String> {
    verify_seal_bytes(block, &canonical_seal(&block.seal), key)
}

/// The canonical bytes of `seal` — exactly `canonical(seal)` — built item by item
/// rather than through one JSON tree of every item (hundreds of thousands in a fleet's
/// window).
pub(crate) fn canonical_seal(seal: &Seal) -> Vec<u8> {
    let js = |s: &str| serde_json::to_string(s).expect("a string serializes");
    let mut out = format!(
        "{{\"algorithm\":{},\"evidence_sha256\":{},\"items\":[",
        js(&seal.algorithm),
        js(&seal.evidence_sha256)
    )
    .into_bytes();
    for (n, item) in seal.items.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&canonical(item));
    }
    out.extend_from_slice(format!("],\"key_fingerprint\":{}}}", js(&seal.key_fingerprint)).as_bytes());
    out
}

/// [`verify_signature`] with the seal's canonical bytes already made.
pub(crate) fn verify_seal_bytes(block: &SignatureBlock, seal_bytes: &[u8], key: &VerifyingKey) -> Vec<String> {
    let signature = B64.decode(&block.signature).ok().and_then(|b| ed25519_dalek::Signature::from_slice(&b).ok());
    let signed = signature.is_some_and(|s| key.verify_strict(seal_bytes, &s).is_ok());
    if signed {
        return Vec::new();
    }
    vec![if block.seal.key_fingerprint != fingerprint(key) {
        format!(
            "the signature does not verify: it was made with key {} and this public key is {}",
            short(&block.seal.key_fingerprint),
            short(&fingerprint(key))
        )
    } else {
        "the signature does not verify with this public key: the seal (digests) was altered".into()
    }]
}

/// What differs between the sealed items and the content's: each run or drill
/// removed, changed or added. Linear: the sealed ones are looked up by a keyed index.
#[cfg(test)]
pub(crate) fn compare_items<'a>(sealed: &[SealedItem], now: impl Iterator<Item = &'a SealedItem>) -> Vec<String> {
    let describe = |i: &SealedItem| format!("{} {} of {} (started {})", i.kind, i.id, i.of, i.started_at);
    let index: std::collections::HashMap<(&str, &str), &SealedItem> =
        sealed.iter().map(|i| ((i.kind.as_str(), i.id.as_str()), i)).collect();
    let mut seen = std::collections::HashSet::new();
    let mut problems = Vec::new();
    let mut added = Vec::new();
    for i in now {
        match index.get(&(i.kind.as_str(), i.id.as_str())) {
            None => added.push(format!("{} was added", describe(i))),
            Some(s) => {
                seen.insert((s.kind.as_str(), s.id.as_str()));
                if i.sha256 != s.sha256 || i.of != s.of || i.started_at != s.started_at {
                    problems.push(format!("{} changed", describe(s)));
                }
            }
        }
    }
    let removed = sealed
        .iter()
        .filter(|s| !seen.contains(&(s.kind.as_str(), s.id.as_str())))
        .map(|s| format!("{} was removed", describe(s)));
    // Sealed order first (removed and changed as the seal lists them), then added.
    let mut ordered: Vec<String> = removed.collect();
    ordered.extend(problems);
    ordered.extend(added);
    ordered
}

fn short(fp: &str) -> String {
    format!("sha256:{}", &fp[..fp.len().min(16)])
}

/// The trailer that carries [`Embedded`] in HTML, Markdown and XML documents: a comment
/// (invisible when rendered) holding base64 JSON, so no `--` can end it early.
pub(crate) const TRAILER_START: &str = "<!-- drcheck-evidence v1";

#[cfg(test)]
pub(crate) fn trailer(embedded: &Embedded) -> String {
    let b64 = B64.encode(canonical(embedded));
    let mut out = String::from(TRAILER_START);
    out.push('\n');
    for chunk in b64.as_bytes().chunks(76) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-->\n");
    out
}

/// Splits a document into its visible body and what its trailer carries.
#[cfg(test)]
pub(crate) fn split(document: &str) -> anyhow::Result<(&str, Embedded)> {
    let at = document
        .find(&format!("\n{TRAILER_START}\n"))
        .map(|i| i + 1)
        .ok_or_else(|| anyhow::anyhow!("no drcheck evidence in this file (expected a `{TRAILER_START}` comment)"))?;
    let (body, rest) = document.split_at(at);
    let inner = rest[TRAILER_START.len()..]
        .split("-->")
        .next()
        .ok_or_else(|| anyhow::anyhow!("the evidence comment is not closed"))?;
    let b64: String = inner.chars().filter(|c| !c.is_whitespace()).collect();
    let json = B64.decode(b64).map_err(|e| anyhow::anyhow!("the evidence comment is not base64: {e}"))?;
    let embedded =
        serde_json::from_slice(&json).map_err(|e| anyhow::anyhow!("the evidence comment is unreadable: {e}"))?;
    Ok((body, embedded))
}

/// A small evidence document for tests here and in `stream.rs`.
#[cfg(test)]
pub(crate) mod tests_support {
    use crate::evidence::{DrillEvidence, Evidence, RunEvidence, Summary, TargetEvidence};

    pub(crate) fn sample() -> Evidence {
        let run = |id: &str, result: &str| RunEvidence {
            run_id: id.into(),
            started_at: format!("2026-11-0{}T03:00:00.000Z", id.len()),
            finished_at: "2026-11-01T03:01:00.000Z".into(),
            result: result.parse().unwrap(),
            backup_key: Some("orders/2026-11-01.dump".into()),
            backup_created_at: None,
            rto_target_seconds: 600.0,
            rto_measured_seconds: Some(42.5),
            rto_met: Some(true),
            rpo_target_seconds: 86400.0,
            rpo_age_seconds: Some(3600.0),
            rpo_met: Some(true),
            validators: vec![],
            reasons: vec![],
            content_proven_percent: None,
            coverage: None,
            recovery_target: None,
            recovered_to: None,
            containment: None,
        };
        let summary = Summary {
            runs: 2,
            passed: 1,
            failed: 1,
            error: 0,
            aborted: 0,
            inconclusive: 0,
            content_proven_percent: None,
            pass_rate: Some(0.5),
            worst_rto_seconds: Some(42.5),
            longest_without_pass_seconds: 10.0,
        };
        Evidence {
            format_version: 1,
            generated_at: "2026-11-30T00:00:00.000Z".into(),
            from: "2026-11-01T00:00:00.000Z".into(),
            to: "2026-11-30T00:00:00.000Z".into(),
            targets: vec![TargetEvidence {
                name: "orders".into(),
                rto_target_seconds: Some(600.0),
                rpo_target_seconds: Some(86400.0),
                summary,
                coverage: None,
                immutability: None,
                pinned: None,
                acknowledgements: Vec::new(),
                runs: vec![run("a", "passed"), run("bb", "failed")],
            }],
            drills: vec![DrillEvidence {
                drill_id: "d1".into(),
                runbook: "failover".into(),
                title: "Fail over".into(),
                started_at: "2026-11-02T10:00:00.000Z".into(),
                result: "completed".parse().unwrap(),
                duration_seconds: 120.0,
                rto_objective_seconds: Some(900.0),
                rto_measured_seconds: Some(300.0),
                rto_met: Some(true),
                reasons: vec![],
                journal: "drill.json".into(),
            }],
            controls: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence() -> Evidence {
        tests_support::sample()
    }

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    #[test]
    fn a_signed_report_verifies_and_every_change_is_named() {
        let e = evidence();
        let k = key(7);
        let signed = Embedded { signature: Some(sign(&e, &k)), evidence: e.clone() };
        assert_eq!(verify(&signed, &k.verifying_key()), Vec::<String>::new());

        let mut changed = signed.clone();
        changed.evidence.targets[0].runs[1].result = "passed".parse().unwrap();
        let p = verify(&changed, &k.verifying_key());
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("run bb of orders") && p[0].ends_with("changed"), "{p:?}");

        let mut removed = signed.clone();
        removed.evidence.drills.clear();
        assert_eq!(
            verify(&removed, &k.verifying_key()),
            vec!["drill d1 of failover (started 2026-11-02T10:00:00.000Z) was removed"]
        );

        let mut summary = signed.clone();
        summary.evidence.targets[0].summary.pass_rate = Some(1.0);
        let p = verify(&summary, &k.verifying_key());
        assert!(p[0].contains("header or summaries changed"), "{p:?}");

        // A forged seal (digests recomputed after the edit) fails the signature.
        let mut forged = changed.clone();
        forged.signature.as_mut().unwrap().seal = sign(&forged.evidence, &key(9)).seal;
        forged.signature.as_mut().unwrap().seal.key_fingerprint = fingerprint(&k.verifying_key());
        let p = verify(&forged, &k.verifying_key());
        assert!(p.iter().any(|p| p.contains("seal (digests) was altered")), "{p:?}");

        // Another key: named by fingerprint.
        let p = verify(&signed, &key(8).verifying_key());
        assert!(p[0].contains("it was made with key sha256:"), "{p:?}");

        let unsigned = Embedded { evidence: e, signature: None };
        assert!(verify(&unsigned, &k.verifying_key())[0].contains("not signed"));
    }

    #[test]
    fn the_seal_built_item_by_item_is_the_canonical_one() {
        let mut e = evidence();
        e.targets[0].runs[0].reasons = vec!["\"quoted\" \u{e9}".into()];
        let block = sign(&e, &key(3));
        assert_eq!(canonical_seal(&block.seal), canonical(&block.seal));
        let empty = Seal { items: vec![], ..block.seal.clone() };
        assert_eq!(canonical_seal(&empty), canonical(&empty));
    }

    #[test]
    fn the_trailer_round_trips_and_hides_no_comment_end() {
        let mut e = evidence();
        e.targets[0].runs[0].reasons = vec!["--> <script>alert(1)</script> --".into()];
        let embedded = Embedded { signature: Some(sign(&e, &key(1))), evidence: e };
        let doc = format!("<!DOCTYPE html>\n<p>x</p>\n{}", trailer(&embedded));
        assert_eq!(doc.matches("-->").count(), 1, "only the trailer's own end");
        let (body, back) = split(&doc).unwrap();
        assert_eq!(body, "<!DOCTYPE html>\n<p>x</p>\n");
        assert_eq!(back, embedded);
        assert!(split("<p>no evidence</p>").unwrap_err().to_string().contains("no drcheck evidence"));
    }

    #[test]
    fn keys_load_from_openssl_pem_and_bad_keys_are_named_without_their_text() {
        // `openssl genpkey -algorithm ed25519` output for a fixed key.
        let pem = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcH\n-----END PRIVATE KEY-----\n";
        let k = load_signing_key(pem).unwrap();
        assert_eq!(k.to_bytes(), [7u8; 32]);
        let bad = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n";
        let e = load_signing_key(bad).unwrap_err().to_string();
        assert!(e.contains("not an Ed25519 private key") && !e.contains("c2VjcmV0"), "{e}");
        assert!(load_signing_key("/nonexistent/key.pem").unwrap_err().to_string().contains("cannot read"));
    }
}
