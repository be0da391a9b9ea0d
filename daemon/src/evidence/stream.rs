//! Evidence for a whole fleet, written as a stream: one target's runs at a time are
//! read from the history, drawn into the document, serialized canonically into a
//! temporary file while being hashed, and dropped. What stays in memory is one
//! target's runs, every target's summary, and the seal's digests (a few dozen bytes a
//! run) — never the whole window. The document is byte for byte what
//! [`super::render::document`] draws from the same content (the tests compare them).

use super::render::{self, Format};
use super::sign::{self, SealedItem, SignatureBlock, TRAILER_START};
use super::{DrillEvidence, Evidence, TargetEvidence, canonical_json};
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::SigningKey;
use sha2::{Digest, Sha256};
use std::io::{BufWriter, Write};

/// Loads one target's evidence (its runs in the window, summarised).
pub(crate) type LoadTarget<'a> =
    dyn FnMut(&str) -> futures::future::BoxFuture<'a, anyhow::Result<TargetEvidence>> + Send + 'a;

/// The report's header content: everything but the targets' runs.
pub(crate) struct Frame {
    pub format_version: u32,
    pub generated_at: String,
    pub from: String,
    pub to: String,
    /// Each target with its summary, no runs: the head of the document.
    pub heads: Vec<TargetEvidence>,
    pub drills: Vec<DrillEvidence>,
    pub controls: Vec<super::controls::ControlsEvidence>,
}

impl Frame {
    /// An [`Evidence`] of the frame, with `targets` as given.
    fn evidence(&self, targets: Vec<TargetEvidence>) -> Evidence {
        Evidence {
            format_version: self.format_version,
            generated_at: self.generated_at.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            targets,
            drills: self.drills.clone(),
            controls: self.controls.clone(),
        }
    }
}

/// Canonical bytes written to a temporary file and hashed on the way.
struct Canon {
    file: BufWriter<std::fs::File>,
    hash: Sha256,
}

impl Canon {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.hash.update(bytes);
        self.file.write_all(bytes)
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// Writes the document of `format` to `out`: `frame`'s targets, each loaded by `load`
/// in turn, signed with `key` when given.
pub(crate) async fn write(
    format: Format,
    frame: &Frame,
    load: &mut LoadTarget<'_>,
    key: Option<&SigningKey>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let shell = frame.evidence(frame.heads.clone());
    let temp = tempfile::tempfile()?;
    let mut canon = Canon { file: BufWriter::new(temp), hash: Sha256::new() };
    // The canonical content, keys sorted: controls (only when there are any), drills,
    // format_version, from, generated_at, targets, to.
    let controls = if frame.controls.is_empty() {
        String::new()
    } else {
        format!("\"controls\":{},", String::from_utf8(canonical_json(&frame.controls))?)
    };
    canon.write(
        format!(
            "{{{controls}\"drills\":{},\"format_version\":{},\"from\":{},\"generated_at\":{},\"targets\":[",
            String::from_utf8(canonical_json(&frame.drills))?,
            frame.format_version,
            json_str(&frame.from),
            json_str(&frame.generated_at)
        )
        .as_bytes(),
    )?;
    let mut items = Items::new()?;
    match format {
        Format::Json => {
            let (before, _) = json_shell(&shell, None);
            out.write_all(before.as_bytes())?;
        }
        _ => out.write_all(render::head(format, &shell).as_bytes())?,
    }
    for (i, head) in frame.heads.iter().enumerate() {
        let t = load(&head.name).await?;
        if i > 0 {
            canon.write(b",")?;
        }
        canonical_target(&t, &mut |b| canon.write(b))?;
        for item in sign::target_items(&t) {
            items.push(&item)?;
        }
        match format {
            Format::Json => {
                // Written as it serializes: a target of many runs is never one string.
                out.write_all(if i > 0 { b",\n" } else { b"\n" })?;
                serde_json::to_writer_pretty(Indented::new(&mut *out, 6), &t)?;
            }
            _ => render::section_to(format, &shell, &t, &mut |piece| out.write_all(piece.as_bytes()))?,
        }
    }
    canon.write(format!("],\"to\":{}}}", json_str(&frame.to)).as_bytes())?;
    for d in &frame.drills {
        items.push(&sign::drill_item(d))?;
    }
    let evidence_sha256 = hex::encode(std::mem::take(&mut canon.hash).finalize());
    // The seal, canonical, signed: its items come from the file they were written to.
    let sealed = match key {
        Some(k) => Some(items.seal(k, evidence_sha256)?),
        None => None,
    };
    match format {
        Format::Json => {
            // The shell's signature without its items; the items go where `"items": []`
            // stands, pretty, one at a time.
            let block = sealed.as_ref().map(|s| s.block_without_items());
            let (_, after) = json_shell(&shell, block.as_ref());
            let after = format!("{}{after}", if frame.heads.is_empty() { "" } else { "\n    " });
            match (&sealed, after.find(EMPTY_ITEMS)) {
                (Some(_), Some(at)) => {
                    out.write_all(&after.as_bytes()[..at])?;
                    items.write_pretty(&mut *out)?;
                    out.write_all(&after.as_bytes()[at + EMPTY_ITEMS.len()..])?;
                }
                _ => out.write_all(after.as_bytes())?,
            }
        }
        _ => {
            out.write_all(render::tail(format, &shell).as_bytes())?;
            // The trailer: base64 of the canonical `{"evidence":…,"signature":…}`.
            out.write_all(format!("{TRAILER_START}\n").as_bytes())?;
            let mut lines = LineWrap { inner: &mut *out, column: 0 };
            {
                let mut enc = base64::write::EncoderWriter::new(&mut lines, &B64);
                enc.write_all(b"{\"evidence\":")?;
                let mut file = canon.file.into_inner().map_err(|e| e.into_error())?;
                use std::io::Seek;
                file.seek(std::io::SeekFrom::Start(0))?;
                std::io::copy(&mut file, &mut enc)?;
                enc.write_all(b",\"signature\":")?;
                match &sealed {
                    // `{"seal":…,"signature":…}`: the canonical signature block.
                    Some(s) => {
                        enc.write_all(b"{\"seal\":")?;
                        enc.write_all(&s.canonical)?;
                        enc.write_all(format!(",\"signature\":{}}}", json_str(&s.signature)).as_bytes())?;
                    }
                    None => enc.write_all(b"null")?,
                }
                enc.write_all(b"}")?;
                enc.finish()?;
            }
            if lines.column > 0 {
                lines.inner.write_all(b"\n")?;
            }
            out.write_all(b"-->\n")?;
        }
    }
    out.flush()?;
    Ok(())
}

/// Where the items go in the pretty signature block (8 spaces deep in the document).
pub(crate) const EMPTY_ITEMS: &str = "\"items\": []";

/// The seal's items, written to a temporary file as they come (canonical JSON, one a
/// line) instead of held: a fleet's window has hundreds of thousands.
struct Items {
    file: BufWriter<std::fs::File>,
    count: usize,
}

/// A signed seal: its canonical bytes (what was signed) and the signature.
struct Sealed {
    canonical: Vec<u8>,
    signature: String,
    algorithm: String,
    key_fingerprint: String,
    evidence_sha256: String,
}

impl Sealed {
    fn block_without_items(&self) -> SignatureBlock {
        SignatureBlock {
            seal: sign::Seal {
                algorithm: self.algorithm.clone(),
                key_fingerprint: self.key_fingerprint.clone(),
                evidence_sha256: self.evidence_sha256.clone(),
                items: Vec::new(),
            },
            signature: self.signature.clone(),
        }
    }
}

impl Items {
    fn new() -> std::io::Result<Self> {
        Ok(Items { file: BufWriter::new(tempfile::tempfile()?), count: 0 })
    }

    fn push(&mut self, item: &SealedItem) -> std::io::Result<()> {
        self.file.write_all(&canonical_json(item))?;
        self.file.write_all(b"\n")?;
        self.count += 1;
        Ok(())
    }

    /// Each item, in order, from the file.
    fn each(&mut self, mut f: impl FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> {
        use std::io::{BufRead, Seek};
        self.file.flush()?;
        let file = self.file.get_mut();
        file.seek(std::io::SeekFrom::Start(0))?;
        let mut r = std::io::BufReader::new(&*file);
        let mut line = Vec::new();
        loop {
            line.clear();
            if r.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            f(line.strip_suffix(b"\n").unwrap_or(&line))?;
        }
        self.file.get_mut().seek(std::io::SeekFrom::End(0))?;
        Ok(())
    }

    /// The canonical seal (keys sorted: algorithm, evidence_sha256, items,
    /// key_fingerprint — exactly `canonical(&Seal)`), signed with `key`.
    fn seal(&mut self, key: &SigningKey, evidence_sha256: String) -> std::io::Result<Sealed> {
        let key_fingerprint = sign::fingerprint(&key.verifying_key());
        let mut canonical =
            format!("{{\"algorithm\":\"ed25519\",\"evidence_sha256\":{},\"items\":[", json_str(&evidence_sha256))
                .into_bytes();
        let mut first = true;
        self.each(|item| {
            if !first {
                canonical.push(b',');
            }
            first = false;
            canonical.extend_from_slice(item);
            Ok(())
        })?;
        canonical.extend_from_slice(format!("],\"key_fingerprint\":{}}}", json_str(&key_fingerprint)).as_bytes());
        use ed25519_dalek::Signer;
        let signature = base64::Engine::encode(&B64, key.sign(&canonical).to_bytes());
        Ok(Sealed { canonical, signature, algorithm: "ed25519".into(), key_fingerprint, evidence_sha256 })
    }

    /// `"items": [ … ]` as serde_json's pretty printer writes it at that depth.
    fn write_pretty(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.count == 0 {
            return out.write_all(EMPTY_ITEMS.as_bytes());
        }
        out.write_all(b"\"items\": [")?;
        let mut first = true;
        self.each(|line| {
            let item: SealedItem = serde_json::from_slice(line)?;
            let pretty = indent(&serde_json::to_string_pretty(&item)?, 8);
            out.write_all(if first { b"\n" } else { b",\n" })?;
            first = false;
            out.write_all(pretty.as_bytes())
        })?;
        out.write_all(b"\n      ]")
    }
}

/// Inserts a newline after every 76 characters (the trailer's base64 lines).
struct LineWrap<'a> {
    inner: &'a mut dyn Write,
    column: usize,
}

impl Write for LineWrap<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while !rest.is_empty() {
            let n = rest.len().min(76 - self.column);
            self.inner.write_all(&rest[..n])?;
            self.column += n;
            rest = &rest[n..];
            if self.column == 76 {
                self.inner.write_all(b"\n")?;
                self.column = 0;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// `text` with every line indented by `n` spaces (pretty JSON nested that deep: no line
/// of it is inside a string, where JSON escapes newlines).
/// `t`'s canonical JSON (what [`canonical_json`] makes of it) handed to `out` piece by
/// piece: its runs one at a time, never the whole target as one value or string.
pub(crate) fn canonical_target(
    t: &TargetEvidence,
    out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let head = TargetEvidence {
        name: t.name.clone(),
        rto_target_seconds: t.rto_target_seconds,
        rpo_target_seconds: t.rpo_target_seconds,
        summary: t.summary.clone(),
        coverage: t.coverage.clone(),
        immutability: t.immutability.clone(),
        pinned: t.pinned.clone(),
        acknowledgements: t.acknowledgements.clone(),
        runs: Vec::new(),
    };
    let serde_json::Value::Object(mut fields) = serde_json::to_value(&head)? else {
        anyhow::bail!("a target serializes to an object")
    };
    fields.remove("runs");
    // serde_json's map keeps keys sorted: "runs" goes where it sorts.
    let mut runs_written = false;
    let mut first = true;
    out(b"{")?;
    let runs = |out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>, first: bool| -> anyhow::Result<()> {
        out(if first { b"\"runs\":[" } else { b",\"runs\":[" })?;
        for (n, r) in t.runs.iter().enumerate() {
            if n > 0 {
                out(b",")?;
            }
            out(&canonical_json(r))?;
        }
        out(b"]")?;
        Ok(())
    };
    for (k, v) in &fields {
        if !runs_written && k.as_str() > "runs" {
            runs(out, first)?;
            runs_written = true;
            first = false;
        }
        out(if first { b"" } else { b"," })?;
        out(serde_json::to_string(k)?.as_bytes())?;
        out(b":")?;
        out(&serde_json::to_vec(v)?)?;
        first = false;
    }
    if !runs_written {
        runs(out, first)?;
    }
    out(b"}")?;
    Ok(())
}

/// A writer that indents every line by `n` spaces — what [`indent`] does to a whole
/// text, done as it streams.
pub(crate) struct Indented<'a> {
    inner: &'a mut dyn Write,
    pad: Vec<u8>,
    at_line_start: bool,
}

impl<'a> Indented<'a> {
    pub(crate) fn new(inner: &'a mut dyn Write, n: usize) -> Self {
        Indented { inner, pad: vec![b' '; n], at_line_start: true }
    }
}

impl Write for Indented<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for line in buf.split_inclusive(|b| *b == b'\n') {
            if self.at_line_start && !line.is_empty() && line != b"\n" {
                self.inner.write_all(&self.pad)?;
            }
            self.inner.write_all(line)?;
            self.at_line_start = line.ends_with(b"\n");
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

pub(crate) fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines().map(|l| format!("{pad}{l}")).collect::<Vec<_>>().join("\n")
}

/// The pretty JSON document of `shell` (no runs in its targets) split where its targets
/// go: what comes before the first target, and what follows the last (up to the end),
/// so the targets can be written between them one at a time.
pub(crate) fn json_shell(shell: &Evidence, signature: Option<&SignatureBlock>) -> (String, String) {
    let empty = Evidence { targets: vec![], ..shell.clone() };
    let embedded = sign::Embedded { evidence: empty, signature: signature.cloned() };
    let mut doc = serde_json::to_string_pretty(&embedded).expect("evidence serializes");
    doc.push('\n');
    let at = doc.find("\"targets\": []").expect("the shell has its targets field");
    let before = format!("{}\"targets\": [", &doc[..at]);
    let after_targets = &doc[at + "\"targets\": [".len()..];
    // `]` and what follows (`,\n    "drills": …`).
    (before, after_targets.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::sign::Embedded;

    fn evidence() -> Evidence {
        crate::evidence::sign::tests_support::sample()
    }

    /// `e` written by [`write`], as the report command does (one target loaded at a time).
    pub(super) async fn streamed(format: Format, e: &Evidence, key: Option<&SigningKey>) -> String {
        let frame = Frame {
            format_version: e.format_version,
            generated_at: e.generated_at.clone(),
            from: e.from.clone(),
            to: e.to.clone(),
            heads: e.targets.iter().map(|t| TargetEvidence { runs: vec![], ..t.clone() }).collect(),
            drills: e.drills.clone(),
            controls: e.controls.clone(),
        };
        let targets = e.targets.clone();
        let mut load = move |name: &str| {
            let t = targets.iter().find(|t| t.name == name).cloned().unwrap();
            Box::pin(async move { Ok(t) }) as futures::future::BoxFuture<'static, anyhow::Result<TargetEvidence>>
        };
        let mut out = Vec::new();
        write(format, &frame, &mut load, key, &mut out).await.unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The streamed document is exactly the one drawn whole: same bytes, every format,
    /// signed or not, with several targets or none.
    #[tokio::test]
    async fn streaming_draws_the_same_bytes_as_the_whole_document() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let mut two = evidence();
        let mut second = two.targets[0].clone();
        second.name = "billing".into();
        two.targets.push(second);
        let mut none = evidence();
        none.targets.clear();
        for e in [evidence(), two, none] {
            for format in [Format::Html, Format::Markdown, Format::Junit, Format::Json] {
                for k in [None, Some(&key)] {
                    let signature = k.map(|k| sign::sign(&e, k));
                    let whole = render::document(format, &Embedded { evidence: e.clone(), signature });
                    let got = streamed(format, &e, k).await;
                    assert_eq!(got, whole, "{format:?}, signed: {}, targets: {}", k.is_some(), e.targets.len());
                }
            }
        }
    }

    /// The canonical target written run by run is the canonical target written whole.
    #[test]
    fn a_target_is_canonical_piece_by_piece() {
        let mut e = evidence();
        for t in [e.targets[0].clone(), {
            let mut t = e.targets[0].clone();
            t.coverage = Some(crate::evidence::TargetCoverage {
                restorable: 2,
                proven: 1,
                prove_within_seconds: 0.1 + 0.2,
                backups: vec![],
                points_in_time: vec![],
            });
            t.runs.clear();
            t
        }] {
            let mut got = Vec::new();
            canonical_target(&t, &mut |b| {
                got.extend_from_slice(b);
                Ok(())
            })
            .unwrap();
            assert_eq!(String::from_utf8(got).unwrap(), String::from_utf8(canonical_json(&t)).unwrap());
        }
        e.targets.clear();
    }

    /// What the stream writes, the streaming verifier accepts as it is — every format,
    /// several targets or none — and one changed byte of the visible text is named.
    #[tokio::test]
    async fn the_verifier_accepts_what_the_stream_wrote_and_nothing_else() {
        let key = SigningKey::from_bytes(&[5; 32]);
        let mut two = evidence();
        let mut second = two.targets[0].clone();
        second.name = "billing".into();
        two.targets.push(second);
        let mut none = evidence();
        none.targets.clear();
        for r in &mut two.targets[1].runs {
            r.run_id = format!("{}-2", r.run_id);
        }
        let dir = tempfile::tempdir().unwrap();
        for (n, e) in [evidence(), two, none].into_iter().enumerate() {
            for format in [Format::Html, Format::Markdown, Format::Junit, Format::Json] {
                let text = streamed(format, &e, Some(&key)).await;
                let path = dir.path().join(format!("r{n}-{format:?}"));
                std::fs::write(&path, &text).unwrap();
                let v = crate::evidence::check::check_file(&path, &key.verifying_key()).unwrap();
                assert!(v.problems.is_empty(), "{format:?}, {} targets: {:?}", e.targets.len(), v.problems);
                if format != Format::Json {
                    // One visible character changed: the body is not the signed one.
                    let at = text.find("</h1>").or_else(|| text.find("\n")).unwrap() - 1;
                    let mut bytes = text.clone().into_bytes();
                    bytes[at] = if bytes[at] == b'x' { b'y' } else { b'x' };
                    std::fs::write(&path, &bytes).unwrap();
                    let v = crate::evidence::check::check_file(&path, &key.verifying_key()).unwrap();
                    assert!(v.problems.iter().any(|p| p.contains("visible text")), "{format:?}: {:?}", v.problems);
                }
            }
        }
    }
}

/// Issue 32: a pass rate of 10/11 (`0.9090909090909091`) made a report fail its own
/// `report verify` in every format. Random histories — run counts, results and measured
/// numbers of every kind — are rendered in every format, signed, and verified.
#[cfg(test)]
mod property_tests {
    use super::*;
    use crate::evidence::{RunEvidence, Summary, ValidatorEvidence};
    use proptest::prelude::*;

    fn run(i: usize, passed: bool, rto: f64, age: f64, covered: f64) -> RunEvidence {
        RunEvidence {
            run_id: format!("run-{i}"),
            started_at: format!("2026-11-01T{:02}:{:02}:00.000Z", (i / 60) % 24, i % 60),
            finished_at: format!("2026-11-01T{:02}:{:02}:30.000Z", (i / 60) % 24, i % 60),
            result: if passed { "passed" } else { "failed" }.parse().unwrap(),
            backup_key: Some(format!("orders/{i}.dump")),
            backup_created_at: None,
            rto_target_seconds: 600.0,
            rto_measured_seconds: Some(rto),
            rto_met: Some(rto <= 600.0),
            rpo_target_seconds: 86400.0,
            rpo_age_seconds: Some(age),
            rpo_met: Some(true),
            validators: vec![ValidatorEvidence {
                name: "checksums".into(),
                status: if passed { "passed" } else { "failed" }.parse().unwrap(),
                detail: format!("{covered} rows"),
                covered: [("rows".to_string(), covered)].into(),
                inconclusive: if i.is_multiple_of(3) {
                    vec![format!("public.t{i}: \"why\" — what would prove it")]
                } else {
                    vec![]
                },
            }],
            reasons: vec![],
            content_proven_percent: None,
            coverage: None,
            recovery_target: None,
            recovered_to: None,
            containment: None,
        }
    }

    fn history(results: Vec<(bool, f64, f64, f64)>) -> Evidence {
        let runs: Vec<RunEvidence> =
            results.iter().enumerate().map(|(i, (p, rto, age, cov))| run(i, *p, *rto, *age, *cov)).collect();
        let from = crate::evidence::epoch("2026-11-01T00:00:00.000Z").unwrap();
        let to = crate::evidence::epoch("2026-12-01T00:00:00.000Z").unwrap();
        let summary: Summary = crate::evidence::summarise(&runs, from, to);
        let mut e = crate::evidence::sign::tests_support::sample();
        e.targets[0].summary = summary;
        e.targets[0].runs = runs;
        e
    }

    fn verified(e: &Evidence, format: Format) -> Vec<String> {
        let key = SigningKey::from_bytes(&[11; 32]);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let out = rt.block_on(super::tests::streamed(format, e, Some(&key)));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report");
        std::fs::write(&path, &out).unwrap();
        crate::evidence::check::check_file(&path, &key.verifying_key()).unwrap().problems
    }

    /// The rates the issue named, in every format.
    #[test]
    fn pass_rates_that_do_not_end_verify() {
        for (passed, total) in [(10, 11), (2, 3), (1, 7), (0, 1), (1, 1)] {
            let e = history((0..total).map(|i| (i < passed, 42.5, 3600.0, 1.0)).collect());
            for format in [Format::Html, Format::Markdown, Format::Junit, Format::Json] {
                let p = verified(&e, format);
                assert!(p.is_empty(), "{passed}/{total}, {format:?}: {p:?}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn random_histories_render_and_verify(
            results in proptest::collection::vec(
                (any::<bool>(), 0.0f64..1e6, 0.0f64..1e9, proptest::num::f64::POSITIVE | proptest::num::f64::ZERO),
                1..40,
            ),
            format in 0usize..4,
        ) {
            let e = history(results);
            let format = [Format::Html, Format::Markdown, Format::Junit, Format::Json][format];
            let p = verified(&e, format);
            prop_assert!(p.is_empty(), "{:?}: {:?}", format, p);
        }
    }

    /// Issue 38: the controls section, met and missed obligations, verifies in every
    /// format; a verdict edited in it does not.
    #[test]
    fn a_controls_section_is_signed_with_the_report() {
        let mut e = history(vec![(true, 42.5, 3600.0, 1.0), (false, 900.0, 3600.0, 1.0)]);
        let mapping = drcheck_config::controls::parse(drcheck_config::controls::DEFAULT, "built-in").unwrap();
        let facts: Vec<_> = e.targets.iter().map(|t| crate::evidence::controls::facts(t, 86_400.0)).collect();
        e.controls = crate::evidence::controls::section(
            &mapping,
            &["soc2".to_string(), "dora".to_string()],
            &facts,
            &e.drills,
            &[],
        );
        let verdicts: Vec<&str> =
            e.controls.iter().flat_map(|f| f.controls.iter().map(|c| c.verdict.as_str())).collect();
        assert!(verdicts.contains(&"missed"), "{verdicts:?}");
        for format in [Format::Html, Format::Markdown, Format::Junit, Format::Json] {
            let p = verified(&e, format);
            assert!(p.is_empty(), "{format:?}: {p:?}");
        }
        // One control's verdict changed after signing: the report no longer verifies.
        let key = SigningKey::from_bytes(&[11; 32]);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for format in [Format::Html, Format::Json] {
            let out = rt.block_on(super::tests::streamed(format, &e, Some(&key)));
            // JSON: the signed content itself; HTML: the visible table (its signed
            // content travels base64-encoded at the end).
            let (was, now) = match format {
                Format::Json => ("\"verdict\": \"missed\"", "\"verdict\": \"met\""),
                _ => ("data-verdict=\"missed\"", "data-verdict=\"met\""),
            };
            assert!(out.contains(was), "{format:?}: the section is in the document");
            let edited = out.replacen(was, now, 1);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("report");
            std::fs::write(&path, &edited).unwrap();
            let p = crate::evidence::check::check_file(&path, &key.verifying_key()).unwrap().problems;
            assert!(!p.is_empty(), "{format:?}: an edited controls verdict verified");
        }
    }
}
