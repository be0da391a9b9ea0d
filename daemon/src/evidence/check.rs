//! `report verify` over a report of any size, in memory bounded by one target's runs
//! and the seal's digests: the embedded content is read twice as a stream (first its
//! frame — window, summaries, drills, signature — then one target at a time), the
//! document is drawn again piece by piece and compared with the file byte for byte, and
//! the runs are matched against the seal through a keyed index (linear time).

use super::render::{self, Format};
use super::sign::{self, SealedItem, SignatureBlock, TRAILER_START};
use super::{DrillEvidence, Evidence, TargetEvidence, canonical_json};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::VerifyingKey;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// What verifying found: every problem (none: verified), and what the report covers.
pub(crate) struct Verdict {
    pub problems: Vec<String>,
    pub what: String,
}

/// The report's content without its runs: what the first pass reads.
#[derive(Default)]
struct Frame {
    format_version: u32,
    generated_at: String,
    from: String,
    to: String,
    heads: Vec<TargetEvidence>,
    drills: Vec<DrillEvidence>,
    controls: Vec<super::controls::ControlsEvidence>,
    signature: Option<SignatureBlock>,
    /// Pass 2 reads past the signature (pass 1 kept it).
    skip_signature: bool,
    /// Fields the content holds that no drcheck writes: nobody signed them.
    unknown: Vec<String>,
    runs: usize,
}

impl Frame {
    fn evidence(&self) -> Evidence {
        Evidence {
            format_version: self.format_version,
            generated_at: self.generated_at.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            targets: self.heads.clone(),
            drills: self.drills.clone(),
            controls: self.controls.clone(),
        }
    }
}

/// Verifies the report at `path` against `key`.
pub(crate) fn check_file(path: &Path, key: &VerifyingKey) -> anyhow::Result<Verdict> {
    let mut file = std::fs::File::open(path)?;
    let mut head = vec![0u8; 64 << 10];
    let n = read_up_to(&mut file, &mut head)?;
    head.truncate(n);
    let head_text = String::from_utf8_lossy(&head);
    let json = head_text.trim_start().starts_with('{');
    let (format, content, body_len, content_sha, mut problems) = if json {
        (Format::Json, std::fs::File::open(path)?, None, None, Vec::new())
    } else {
        let format = render::detect(&head_text);
        match extract_trailer(path)? {
            Ok((content, body_len, sha, problems)) => (format, content, Some(body_len), Some(sha), problems),
            Err(p) => return Ok(Verdict { problems: vec![p.to_string()], what: String::new() }),
        }
    };
    // Pass 1: the frame.
    let mut frame = Frame::default();
    let mut reader = BufReader::new(content);
    if let Err(e) = read_content(&mut reader, &mut frame, &mut |_| Ok(())) {
        return Ok(Verdict { problems: vec![unreadable(json, &e)], what: String::new() });
    }
    problems.extend(frame.unknown.iter().map(|f| format!("field {f} is not part of the signed report")));
    let Some(block) = frame.signature.take() else {
        problems.insert(0, "the report is not signed (no [evidence] signing_key when it was made)".into());
        return Ok(Verdict { what: what(&frame), problems });
    };
    let seal_bytes = sign::canonical_seal(&block.seal);
    problems.splice(0..0, sign::verify_seal_bytes(&block, &seal_bytes, key));
    // Pass 2: one target at a time — digests, the seal's items, the drawn document.
    reader.seek(SeekFrom::Start(0))?;
    let shell = frame.evidence();
    let mut doc = Compare::new(BufReader::new(std::fs::File::open(path)?), body_len);
    // The evidence's canonical digest (sealed), and the whole trailer's (it must be the
    // canonical `{"evidence":…,"signature":…}`, byte for byte).
    let mut canon = Both(Sha256::new(), Sha256::new());
    canon.1.update(b"{\"evidence\":");
    // Sorted keys: "controls" (only when there are any) before "drills".
    let controls = if frame.controls.is_empty() {
        String::new()
    } else {
        format!("\"controls\":{},", String::from_utf8(canonical_json(&frame.controls))?)
    };
    canon.update(
        format!(
            "{{{controls}\"drills\":{},\"format_version\":{},\"from\":{},\"generated_at\":{},\"targets\":[",
            String::from_utf8(canonical_json(&frame.drills))?,
            frame.format_version,
            serde_json::to_string(&frame.from)?,
            serde_json::to_string(&frame.generated_at)?
        )
        .as_bytes(),
    );
    let mut items = Items::new(&block.seal.items);
    // The JSON document's shell, its signature drawn without the items (they are
    // compared one by one where `"items": []` stands).
    let (json_before, json_after) = match format {
        Format::Json => {
            // Not a clone of the seal: its items are the report's every run.
            let bare = SignatureBlock {
                seal: sign::Seal {
                    algorithm: block.seal.algorithm.clone(),
                    key_fingerprint: block.seal.key_fingerprint.clone(),
                    evidence_sha256: block.seal.evidence_sha256.clone(),
                    items: Vec::new(),
                },
                signature: block.signature.clone(),
            };
            super::stream::json_shell(&shell, Some(&bare))
        }
        _ => (String::new(), String::new()),
    };
    match format {
        Format::Json => doc.expect(&json_before, None),
        _ => doc.expect(&render::head(format, &shell), None),
    }
    let mut index = 0usize;
    let mut pass2 = Frame { skip_signature: true, ..Frame::default() };
    let r = read_content(&mut reader, &mut pass2, &mut |t: TargetEvidence| {
        if index > 0 {
            canon.update(b",");
        }
        super::stream::canonical_target(&t, &mut |b| {
            canon.update(b);
            Ok(())
        })?;
        let target_items = sign::target_items(&t);
        for i in &target_items {
            items.see(i);
        }
        match format {
            // Drawn and compared in pieces: a target of 25,000 runs is never one string.
            Format::Json => {
                doc.expect(if index > 0 { ",\n" } else { "\n" }, None);
                let mut w = Expecting { doc: &mut doc, runs: &target_items, buf: Vec::new() };
                serde_json::to_writer_pretty(super::stream::Indented::new(&mut w, 6), &t)?;
                w.finish();
            }
            _ => render::section_to(format, &shell, &t, &mut |piece| {
                doc.expect(piece, Some(&target_items));
                Ok(())
            })?,
        }
        index += 1;
        Ok(())
    });
    if let Err(e) = r {
        problems.push(unreadable(json, &e));
        return Ok(Verdict { what: what(&frame), problems });
    }
    canon.update(format!("],\"to\":{}}}", serde_json::to_string(&frame.to)?).as_bytes());
    let Both(evidence_hash, mut trailer_hash) = canon;
    trailer_hash.update(b",\"signature\":{\"seal\":");
    trailer_hash.update(&seal_bytes);
    trailer_hash.update(format!(",\"signature\":{}}}}}", serde_json::to_string(&block.signature)?).as_bytes());
    drop(seal_bytes);
    let trailer_digest: [u8; 32] = trailer_hash.finalize().into();
    if content_sha.is_some_and(|sha| sha != trailer_digest) && !problems.iter().any(|p| p.contains("trailer")) {
        problems.push("the evidence trailer is not the one drcheck writes for its content".into());
    }
    for d in &frame.drills {
        items.see(&sign::drill_item(d));
    }
    match format {
        Format::Json => {
            let after = format!("{}{json_after}", if frame.heads.is_empty() { "" } else { "\n    " });
            match after.find(super::stream::EMPTY_ITEMS) {
                Some(at) if !block.seal.items.is_empty() => {
                    doc.expect(&after[..at], None);
                    doc.expect("\"items\": [", None);
                    for (n, item) in block.seal.items.iter().enumerate() {
                        let pretty = super::stream::indent(&serde_json::to_string_pretty(item)?, 8);
                        doc.expect(&format!("{}{pretty}", if n > 0 { ",\n" } else { "\n" }), None);
                    }
                    doc.expect("\n      ]", None);
                    doc.expect(&after[at + super::stream::EMPTY_ITEMS.len()..], None);
                }
                _ => doc.expect(&after, None),
            }
        }
        _ => doc.expect(&render::tail(format, &shell), None),
    }
    let item_problems = items.finish();
    let body_problem = doc.finish();
    let digest_differs = hex::encode(evidence_hash.finalize()) != block.seal.evidence_sha256;
    let had_problems = !problems.is_empty() || !item_problems.is_empty();
    problems.extend(item_problems);
    if digest_differs && !had_problems {
        problems
            .push("the report's header or summaries changed (window, targets, objectives or summary figures)".into());
    }
    problems.extend(body_problem);
    Ok(Verdict { what: what(&frame), problems })
}

/// Two digests fed the same bytes.
struct Both(Sha256, Sha256);

impl Both {
    fn update(&mut self, bytes: impl AsRef<[u8]>) {
        self.0.update(bytes.as_ref());
        self.1.update(bytes.as_ref());
    }
}

fn unreadable(json: bool, e: &anyhow::Error) -> String {
    if json {
        format!("the JSON report does not parse: {e}")
    } else {
        format!("the evidence comment is unreadable: {e}")
    }
}

fn what(f: &Frame) -> String {
    format!("{} runs of {} targets and {} drills from {} to {}", f.runs, f.heads.len(), f.drills.len(), f.from, f.to)
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Why a rendered report carries no evidence to check.
#[derive(Debug, thiserror::Error)]
enum NoEvidence {
    #[error("no drcheck evidence in this file (expected a `{TRAILER_START}` comment)")]
    NoTrailer,
    #[error("the evidence comment is not base64: {0}")]
    NotBase64(String),
    #[error("the evidence comment is not closed")]
    Unclosed,
}

/// Finds the trailer of an HTML, Markdown or JUnit report, decodes its base64 into a
/// temporary file (the canonical content), and checks it is written as drcheck writes
/// it: lines of 76 characters, and nothing after it but whitespace. Returns the
/// content, the length of the visible body, and what was wrong with the trailer — or
/// why there is no evidence at all.
#[allow(clippy::type_complexity)]
fn extract_trailer(path: &Path) -> anyhow::Result<Result<(std::fs::File, u64, [u8; 32], Vec<String>), NoEvidence>> {
    let marker = format!("\n{TRAILER_START}\n");
    let mut r = BufReader::new(std::fs::File::open(path)?);
    // The first line that is the marker: the body ends just before it.
    let mut offset = 0u64;
    let mut prev_newline = true;
    let mut line = Vec::new();
    let body_len = loop {
        line.clear();
        let n = r.read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(Err(NoEvidence::NoTrailer));
        }
        if prev_newline && line == marker.as_bytes()[1..] && offset > 0 {
            break offset;
        }
        prev_newline = line.ends_with(b"\n");
        offset += n as u64;
    };
    let mut problems = Vec::new();
    let mut content = tempfile::tempfile()?;
    let mut hashed = Hashed { file: &mut content, hash: Sha256::new() };
    {
        let mut decoder = Base64Lines { pending: Vec::new(), out: &mut hashed };
        let mut short_line_seen = false;
        let mut closed = false;
        loop {
            line.clear();
            if r.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            if text == b"-->" {
                closed = true;
                break;
            }
            if short_line_seen || text.len() > 76 || text.iter().any(|b| b.is_ascii_whitespace()) {
                problems.push("the evidence trailer is not the one drcheck writes for its content".to_string());
            }
            short_line_seen |= text.len() < 76;
            if let Err(e) = decoder.push(text) {
                return Ok(Err(NoEvidence::NotBase64(e.to_string())));
            }
        }
        if !closed {
            return Ok(Err(NoEvidence::Unclosed));
        }
        if let Err(e) = decoder.finish() {
            return Ok(Err(NoEvidence::NotBase64(e.to_string())));
        }
    }
    // After the trailer: whitespace only.
    let mut rest = Vec::new();
    r.take(1 << 20).read_to_end(&mut rest)?;
    let extra = String::from_utf8_lossy(&rest);
    let extra = extra.trim();
    if extra.contains(TRAILER_START) {
        problems.push("a second evidence trailer follows the signed one: only one report is signed".into());
    } else if !extra.is_empty() {
        problems.push(format!(
            "{} bytes follow the signed evidence trailer: they are not part of the signed report ({:?}…)",
            extra.len(),
            extra.chars().take(60).collect::<String>()
        ));
    }
    problems.dedup();
    let sha: [u8; 32] = hashed.hash.finalize().into();
    content.seek(SeekFrom::Start(0))?;
    Ok(Ok((content, body_len, sha, problems)))
}

/// Base64 text decoded as it comes, in whole quanta of four characters.
struct Base64Lines<'a, W: Write> {
    pending: Vec<u8>,
    out: &'a mut W,
}

impl<W: Write> Base64Lines<'_, W> {
    fn push(&mut self, text: &[u8]) -> anyhow::Result<()> {
        self.pending.extend_from_slice(text);
        if self.pending.len() >= 1 << 16 {
            let whole = self.pending.len() / 4 * 4;
            let bytes = B64.decode(&self.pending[..whole])?;
            self.out.write_all(&bytes)?;
            self.pending.drain(..whole);
        }
        Ok(())
    }

    fn finish(mut self) -> anyhow::Result<()> {
        let bytes = B64.decode(std::mem::take(&mut self.pending))?;
        self.out.write_all(&bytes)?;
        Ok(())
    }
}

/// A file written to and hashed on the way.
struct Hashed<'a> {
    file: &'a mut std::fs::File,
    hash: Sha256,
}

impl Write for Hashed<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The seal's items, looked up by kind and id; what was seen, changed or added.
struct Items<'a> {
    index: HashMap<(&'a str, &'a str), usize>,
    sealed: &'a [SealedItem],
    seen: Vec<bool>,
    changed: Vec<String>,
    added: Vec<String>,
}

fn describe(i: &SealedItem) -> String {
    format!("{} {} of {} (started {})", i.kind, i.id, i.of, i.started_at)
}

impl<'a> Items<'a> {
    fn new(sealed: &'a [SealedItem]) -> Self {
        let index = sealed.iter().enumerate().map(|(n, i)| ((i.kind.as_str(), i.id.as_str()), n)).collect();
        Items { index, sealed, seen: vec![false; sealed.len()], changed: Vec::new(), added: Vec::new() }
    }

    fn see(&mut self, i: &SealedItem) {
        match self.index.get(&(i.kind.as_str(), i.id.as_str())) {
            None => self.added.push(format!("{} was added", describe(i))),
            Some(&n) => {
                self.seen[n] = true;
                let s = &self.sealed[n];
                if i.sha256 != s.sha256 || i.of != s.of || i.started_at != s.started_at {
                    self.changed.push(format!("{} changed", describe(s)));
                }
            }
        }
    }

    fn finish(self) -> Vec<String> {
        let mut out: Vec<String> = self
            .sealed
            .iter()
            .zip(&self.seen)
            .filter(|(_, seen)| !**seen)
            .map(|(s, _)| format!("{} was removed", describe(s)))
            .collect();
        out.extend(self.changed);
        out.extend(self.added);
        out
    }
}

/// Bytes written to it compared with the document in pieces of about 64 KiB, each
/// ending a line.
struct Expecting<'a, R: Read> {
    doc: &'a mut Compare<R>,
    runs: &'a [SealedItem],
    buf: Vec<u8>,
}

impl<R: Read> Expecting<'_, R> {
    fn finish(self) {
        if !self.buf.is_empty() {
            self.doc.expect_bytes(&self.buf, Some(self.runs));
        }
    }
}

impl<R: Read> Write for Expecting<'_, R> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= 64 << 10
            && let Some(end) = self.buf.iter().rposition(|b| *b == b'\n')
        {
            let rest = self.buf.split_off(end + 1);
            self.doc.expect_bytes(&self.buf, Some(self.runs));
            self.buf = rest;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The document drawn again, compared with the file piece by piece; the first
/// difference is named (its line, and its run when the line holds one).
struct Compare<R: Read> {
    file: R,
    /// The visible body's length (HTML, Markdown, JUnit); the whole file for JSON.
    limit: Option<u64>,
    read: u64,
    lines: usize,
    difference: Option<String>,
}

impl<R: Read> Compare<R> {
    fn new(file: R, limit: Option<u64>) -> Self {
        Compare { file, limit, read: 0, lines: 0, difference: None }
    }

    fn expect(&mut self, piece: &str, runs: Option<&[SealedItem]>) {
        self.expect_bytes(piece.as_bytes(), runs)
    }

    fn expect_bytes(&mut self, want: &[u8], runs: Option<&[SealedItem]>) {
        let piece = String::from_utf8_lossy(want);
        if self.difference.is_some() {
            return;
        }
        let room = self.limit.map_or(want.len() as u64, |l| l.saturating_sub(self.read)).min(want.len() as u64);
        let mut got = vec![0u8; room as usize];
        let n = read_up_to(&mut self.file, &mut got).unwrap_or(0);
        got.truncate(n);
        self.read += n as u64;
        if got == want {
            self.lines += piece.matches('\n').count();
            return;
        }
        let got_text = String::from_utf8_lossy(&got);
        let (exp, have): (Vec<&str>, Vec<&str>) = (piece.lines().collect(), got_text.lines().collect());
        let i = exp.iter().zip(have.iter()).position(|(a, b)| a != b).unwrap_or(exp.len().min(have.len()));
        let line = exp.get(i).copied().unwrap_or("");
        let at = self.lines + i + 1;
        let run = runs.and_then(|rs| rs.iter().find(|r| line.contains(&r.id)));
        self.difference = Some(match run {
            Some(r) => format!(
                "the visible text of {} {} of {} (started {}) differs from the signed content (line {at})",
                r.kind, r.id, r.of, r.started_at
            ),
            None => format!(
                "the visible text differs from the signed content at line {at}: {:?}",
                have.get(i).copied().unwrap_or("(missing)")
            ),
        });
    }

    /// The first difference; for a body without a limit (JSON), anything but
    /// whitespace after the end is one too.
    fn finish(mut self) -> Option<String> {
        if self.difference.is_none() && self.limit.is_none() {
            let mut rest = Vec::new();
            let _ = (&mut self.file).take(1 << 20).read_to_end(&mut rest);
            let rest = String::from_utf8_lossy(&rest);
            if !rest.trim().is_empty() {
                self.difference = Some(format!(
                    "{} bytes follow the signed report: they are not part of it ({:?}…)",
                    rest.trim().len(),
                    rest.trim().chars().take(60).collect::<String>()
                ));
            }
        }
        if self.difference.is_none()
            && let Some(limit) = self.limit
            && self.read < limit
        {
            self.difference =
                Some(format!("the visible text differs from the signed content at line {}", self.lines + 1));
        }
        self.difference
    }
}

type OnTarget<'a> = dyn FnMut(TargetEvidence) -> anyhow::Result<()> + 'a;

/// Reads the embedded content (`{"evidence": …, "signature": …}`, canonical or pretty)
/// as a stream: the frame into `frame`, each target (with its runs) to `on_target`.
fn read_content(r: &mut impl Read, frame: &mut Frame, on_target: &mut OnTarget<'_>) -> anyhow::Result<()> {
    let mut de = serde_json::Deserializer::from_reader(r);
    let failure = std::cell::RefCell::new(None);
    EmbeddedSeed { frame, on_target, failure: &failure }.deserialize(&mut de).map_err(|e| match failure.take() {
        Some(inner) => inner,
        None => anyhow::anyhow!("{e}"),
    })?;
    de.end().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

struct EmbeddedSeed<'a, 'b> {
    frame: &'a mut Frame,
    on_target: &'a mut OnTarget<'b>,
    failure: &'a std::cell::RefCell<Option<anyhow::Error>>,
}

impl<'de> DeserializeSeed<'de> for EmbeddedSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EmbeddedSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a drcheck evidence document")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let EmbeddedSeed { frame, on_target, failure } = self;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "evidence" => {
                    map.next_value_seed(EvidenceSeed { frame: &mut *frame, on_target: &mut *on_target, failure })?
                }
                "signature" if frame.skip_signature => {
                    map.next_value::<IgnoredAny>()?;
                }
                "signature" => frame.signature = map.next_value()?,
                other => {
                    frame.unknown.push(format!("/{other}"));
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

struct EvidenceSeed<'a, 'b> {
    frame: &'a mut Frame,
    on_target: &'a mut OnTarget<'b>,
    failure: &'a std::cell::RefCell<Option<anyhow::Error>>,
}

impl<'de> DeserializeSeed<'de> for EvidenceSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EvidenceSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("the evidence")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let EvidenceSeed { frame, on_target, failure } = self;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "format_version" => frame.format_version = map.next_value()?,
                "generated_at" => frame.generated_at = map.next_value()?,
                "from" => frame.from = map.next_value()?,
                "to" => frame.to = map.next_value()?,
                "drills" => frame.drills = map.next_value()?,
                "controls" => frame.controls = map.next_value()?,
                "targets" => {
                    map.next_value_seed(TargetsSeed { frame: &mut *frame, on_target: &mut *on_target, failure })?
                }
                other => {
                    frame.unknown.push(format!("/evidence/{other}"));
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

struct TargetsSeed<'a, 'b> {
    frame: &'a mut Frame,
    on_target: &'a mut OnTarget<'b>,
    failure: &'a std::cell::RefCell<Option<anyhow::Error>>,
}

impl<'de> DeserializeSeed<'de> for TargetsSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TargetsSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("the targets")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let TargetsSeed { frame, on_target, failure } = self;
        while let Some(mut t) = seq.next_element::<TargetEvidence>()? {
            frame.runs += t.runs.len();
            // The head without cloning the runs (a target's 25,000 runs twice over).
            let runs = std::mem::take(&mut t.runs);
            frame.heads.push(t.clone());
            t.runs = runs;
            if let Err(e) = on_target(t) {
                *failure.borrow_mut() = Some(e);
                return Err(de::Error::custom("stopped"));
            }
        }
        Ok(())
    }
}
