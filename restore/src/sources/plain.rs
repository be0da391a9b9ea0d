//! Plain SQL scripts (`pg_dump -Fp`, a `pg_dumpall --globals-only` file) made safe for
//! psql, and restorable without the source's roles, as they stream.
//!
//! - **Safe for psql**: `\restrict KEY` (a random key, per run) goes first, so psql runs
//!   none of the script's meta-commands — `\c` to another server, `\!`, `\o`, `\copy`,
//!   `\i` — and the script's own `\restrict` and `\unrestrict` lines (pg_dump 15.14+
//!   brackets its output with them) are left out: nothing in the script may lift
//!   drcheck's restriction.
//! - **Idempotent where pg_dump is not**: PostgreSQL 15's `pg_dump -n public` writes
//!   `CREATE SCHEMA public;` though every database has that schema; it becomes `CREATE
//!   SCHEMA IF NOT EXISTS public;`.
//! - **Without the source's roles** (no `globals_key`): ownership and privilege
//!   statements — `ALTER … OWNER TO`, `GRANT`, `REVOKE`, `ALTER DEFAULT PRIVILEGES`,
//!   `SET`/`RESET SESSION AUTHORIZATION` — name roles the sandbox does not have and would
//!   stop the script (`role "appuser" does not exist`). They are left out and counted,
//!   as `pg_restore --no-owner --no-privileges` leaves them out of an archive's restore.
//!
//! Statements are told from data and from the inside of strings, comments and function
//! bodies by a small lexer that follows quoting (`'…'`, `E'…'`, `"…"`, `$tag$…$tag$`,
//! `--`, nested `/* */`) and `COPY … FROM stdin` blocks: only a whole line that is one
//! whole statement, starting where a statement starts, is ever left out or rewritten.
//! Every other error still stops the restore.

use crate::store::BackupReader;
use crate::transfer::stream::rejoin;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// What to do with ownership and privilege statements.
#[derive(Debug, Clone)]
pub(crate) enum Privileges {
    /// The roles exist (a globals file was applied first): run them.
    Keep,
    /// Leave them out, counting each in the counter.
    Skip(Arc<AtomicU64>),
}

/// A psql script from a backup, made safe for psql (see the module's documentation).
/// Returns the new head and the rest of the stream.
pub(crate) fn restricted(head: Vec<u8>, reader: BackupReader, privileges: Privileges) -> (Vec<u8>, BackupReader) {
    use rand::Rng;
    let key: String = rand::rng().sample_iter(rand::distr::Alphanumeric).take(32).map(char::from).collect();
    let filtered = RestrictLines::new(rejoin(head, reader), privileges);
    (format!("\\restrict {key}\n").into_bytes(), Box::pin(filtered))
}

/// The statement PostgreSQL 15's `pg_dump -n public` writes for a schema every database has.
const CREATE_PUBLIC: &[u8] = b"CREATE SCHEMA public;";
const CREATE_PUBLIC_IF_NOT_EXISTS: &[u8] = b"CREATE SCHEMA IF NOT EXISTS public;";
/// A line is held whole up to this length; past it, it is passed on as it streams (and
/// is never one the filter leaves out or rewrites).
const HELD_MAX: usize = 64 * 1024;
/// What of an overlong SQL line stays held after the rest is passed on: enough for a
/// dollar-quote tag split by the cut to be read whole.
const CARRY: usize = 80;

/// A line without its line ending (`\n` or `\r\n`).
fn body(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Bytes that may continue an identifier (and so may not precede a dollar quote).
fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Bytes of a dollar quote's tag.
fn is_tag(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// Where the lexer is: in plain SQL, or inside something whose text is not SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Quote {
    None,
    /// `'…'`; `E'…'` also takes backslash escapes.
    Single {
        backslashes: bool,
    },
    /// `"…"`.
    Double,
    /// `$tag$…$tag$`: the closer, and how much of it was just seen.
    Dollar {
        closer: Vec<u8>,
        matched: usize,
    },
    /// `-- …` to the end of the line.
    Line,
    /// `/* … */`, nested.
    Block(u32),
}

/// Follows a SQL script byte by byte far enough to say where statements start.
#[derive(Debug, Clone)]
struct Lexer {
    quote: Quote,
    /// Only whitespace and comments since the last `;` (or the start).
    statement_start: bool,
    /// The previous byte and the one before it.
    prev: [u8; 2],
    /// A `$` in plain SQL that may open a dollar quote: its tag so far.
    tag: Option<Vec<u8>>,
    /// A `-` or `/` that may open a comment.
    pending: Option<u8>,
    /// In an `E'…'` string, the last byte was an unescaped backslash.
    escaped: bool,
}

impl Lexer {
    fn new() -> Self {
        Lexer { quote: Quote::None, statement_start: true, prev: [0, 0], tag: None, pending: None, escaped: false }
    }

    /// Whether the next byte starts a statement (plain SQL, nothing since the last `;`).
    fn at_statement_start(&self) -> bool {
        self.quote == Quote::None && self.statement_start && self.tag.is_none() && self.pending.is_none()
    }

    fn plain(&self) -> bool {
        self.quote == Quote::None
    }

    fn step(&mut self, b: u8) {
        match &mut self.quote {
            Quote::None => return self.normal(b),
            Quote::Single { backslashes } => {
                if self.escaped {
                    self.escaped = false;
                } else if *backslashes && b == b'\\' {
                    self.escaped = true;
                } else if b == b'\'' {
                    // `''` closes and reopens: the same as an escaped quote.
                    self.quote = Quote::None;
                }
            }
            Quote::Double => {
                if b == b'"' {
                    self.quote = Quote::None;
                }
            }
            Quote::Dollar { closer, matched } => {
                if b == closer[*matched] {
                    *matched += 1;
                    if *matched == closer.len() {
                        self.quote = Quote::None;
                    }
                } else {
                    // A tag holds no `$`, so a mismatch restarts only at a `$`.
                    *matched = usize::from(b == b'$');
                }
            }
            Quote::Line => {
                if b == b'\n' {
                    self.quote = Quote::None;
                }
            }
            Quote::Block(depth) => {
                if self.prev[0] == b'/' && b == b'*' {
                    *depth += 1;
                    self.prev = [0, 0];
                    return;
                }
                if self.prev[0] == b'*' && b == b'/' {
                    *depth -= 1;
                    if *depth == 0 {
                        self.quote = Quote::None;
                    }
                    self.prev = [0, 0];
                    return;
                }
            }
        }
        self.prev = [b, self.prev[0]];
    }

    /// A byte of plain SQL.
    fn normal(&mut self, b: u8) {
        if let Some(mut tag) = self.tag.take() {
            if b == b'$' {
                let mut closer = vec![b'$'];
                closer.extend_from_slice(&tag);
                closer.push(b'$');
                self.quote = Quote::Dollar { closer, matched: 0 };
                self.prev = [b, self.prev[0]];
                return;
            }
            if is_tag(b) && !(tag.is_empty() && b.is_ascii_digit()) && tag.len() < 63 {
                tag.push(b);
                self.tag = Some(tag);
                self.prev = [b, self.prev[0]];
                return;
            }
            // `$1`, or a `$` inside a word: not a quote; the byte is read as usual.
        }
        if let Some(p) = self.pending.take() {
            if p == b'-' && b == b'-' {
                self.quote = Quote::Line;
                self.prev = [b, self.prev[0]];
                return;
            }
            if p == b'/' && b == b'*' {
                self.quote = Quote::Block(1);
                self.prev = [0, 0];
                return;
            }
            // It was an operator.
            self.statement_start = false;
        }
        match b {
            b'-' | b'/' => self.pending = Some(b),
            b'\'' => {
                let backslashes = matches!(self.prev[0], b'E' | b'e') && !is_ident(self.prev[1]);
                self.quote = Quote::Single { backslashes };
                self.escaped = false;
                self.statement_start = false;
            }
            b'"' => {
                self.quote = Quote::Double;
                self.statement_start = false;
            }
            b'$' if !is_ident(self.prev[0]) => {
                self.tag = Some(Vec::new());
                self.statement_start = false;
            }
            b';' => self.statement_start = true,
            b' ' | b'\t' | b'\n' | b'\r' | 0x0c => {}
            _ => self.statement_start = false,
        }
        self.prev = [b, self.prev[0]];
    }
}

/// Whether `text` (one line, without its ending) is exactly one whole statement that sets
/// ownership or privileges. `text` starts where a statement starts.
fn is_privilege_statement(text: &[u8]) -> bool {
    let upper = text.to_ascii_uppercase();
    let starts = |k: &[u8]| upper.starts_with(k);
    let kind = starts(b"GRANT ")
        || starts(b"REVOKE ")
        || starts(b"ALTER DEFAULT PRIVILEGES ")
        || starts(b"SET SESSION AUTHORIZATION ")
        || starts(b"RESET SESSION AUTHORIZATION")
        || starts(b"ALTER ");
    if !kind {
        return false;
    }
    // One statement: it ends with the line, at its first `;` outside quotes.
    let mut lx = Lexer::new();
    let mut plain = Vec::with_capacity(text.len());
    let mut end = None;
    for (i, &b) in text.iter().enumerate() {
        plain.push(lx.plain() && lx.tag.is_none());
        lx.step(b);
        if b == b';' && lx.at_statement_start() && end.is_none() {
            end = Some(i);
        }
    }
    let Some(end) = end else { return false };
    if !text[end + 1..].iter().all(u8::is_ascii_whitespace) || !lx.plain() {
        return false;
    }
    if !starts(b"ALTER ") || starts(b"ALTER DEFAULT PRIVILEGES ") {
        return true;
    }
    // `ALTER <object> … OWNER TO <role>;`, the words outside any quote.
    const OWNER_TO: &[u8] = b" OWNER TO ";
    upper
        .windows(OWNER_TO.len())
        .enumerate()
        .any(|(i, w)| w == OWNER_TO && plain[i..i + OWNER_TO.len()].iter().all(|p| *p))
}

/// Filters a plain script as it streams (see the module's documentation).
pub(crate) struct RestrictLines {
    inner: BackupReader,
    /// Bytes ready to hand out, and how many were handed out.
    out: Vec<u8>,
    taken: usize,
    /// The line being read (or, past [`HELD_MAX`], its unsent end).
    held: Vec<u8>,
    /// `held` starts at the start of a line.
    held_at_line_start: bool,
    /// The rest of this line goes out as it comes (`COPY` data that cannot matter).
    passing: bool,
    /// Inside a `COPY … FROM stdin;` block's data (until `\.`).
    in_copy: bool,
    /// The lexer, as of the start of `held`.
    lexer: Lexer,
    privileges: Privileges,
    done: bool,
}

impl RestrictLines {
    pub(crate) fn new(inner: BackupReader, privileges: Privileges) -> Self {
        Self {
            inner,
            out: Vec::new(),
            taken: 0,
            held: Vec::new(),
            held_at_line_start: true,
            passing: false,
            in_copy: false,
            lexer: Lexer::new(),
            privileges,
            done: false,
        }
    }

    /// Whether `line` (so far) can still be, or is, a `\restrict` / `\unrestrict` line.
    fn may_be_restrict(line: &[u8], complete: bool) -> bool {
        for cmd in [&b"\\restrict "[..], &b"\\unrestrict "[..]] {
            if line.len() <= cmd.len() {
                if cmd.starts_with(line) && !complete {
                    return true;
                }
                continue;
            }
            if !line.starts_with(cmd) {
                continue;
            }
            let mut key = &line[cmd.len()..];
            if complete {
                key = body(key);
                return !key.is_empty() && key.iter().all(u8::is_ascii_alphanumeric);
            }
            return key.len() <= 256 && key.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'\r');
        }
        false
    }

    /// A complete line (or the end of the script): dropped, rewritten or passed on — and
    /// the state it leaves.
    fn finish_line(&mut self) {
        let line = std::mem::take(&mut self.held);
        let at_line_start = std::mem::replace(&mut self.held_at_line_start, true);
        if at_line_start && Self::may_be_restrict(&line, true) {
            return;
        }
        let text = body(&line);
        if self.in_copy {
            if at_line_start && text == b"\\." {
                self.in_copy = false;
                self.lexer = Lexer::new();
            }
            self.out.extend_from_slice(&line);
            return;
        }
        let statement_start = at_line_start && self.lexer.at_statement_start();
        if statement_start {
            if text.starts_with(b"\\") {
                // A psql meta-command line (refused under `\restrict`): not SQL.
                self.out.extend_from_slice(&line);
                return;
            }
            if text == CREATE_PUBLIC {
                self.out.extend_from_slice(CREATE_PUBLIC_IF_NOT_EXISTS);
                self.out.extend_from_slice(&line[text.len()..]);
                return;
            }
            if let Privileges::Skip(count) = &self.privileges
                && is_privilege_statement(text)
            {
                count.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        for &b in &line {
            self.lexer.step(b);
        }
        if statement_start
            && text.len() > 5
            && text[..5].eq_ignore_ascii_case(b"COPY ")
            && text.ends_with(b" FROM stdin;")
            && self.lexer.at_statement_start()
        {
            self.in_copy = true;
        }
        self.out.extend_from_slice(&line);
    }

    /// An overlong line: pass on what cannot matter, keeping the lexer in step.
    fn overflow(&mut self) {
        if self.in_copy {
            self.out.append(&mut self.held);
            self.passing = true;
        } else {
            let keep = self.held.len() - CARRY;
            for &b in &self.held[..keep] {
                self.lexer.step(b);
            }
            self.out.extend_from_slice(&self.held[..keep]);
            self.held.drain(..keep);
        }
        self.held_at_line_start = false;
    }

    fn feed(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.passing {
                // Straight through to the end of the line.
                match rest.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        self.out.extend_from_slice(&rest[..=i]);
                        rest = &rest[i + 1..];
                        self.passing = false;
                        self.held_at_line_start = true;
                    }
                    None => {
                        self.out.extend_from_slice(rest);
                        return;
                    }
                }
                continue;
            }
            // COPY data goes straight out unless its line may be `\.` or a restrict line.
            if self.in_copy && self.held.is_empty() && self.held_at_line_start && rest[0] != b'\\' {
                self.passing = true;
                continue;
            }
            let b = rest[0];
            rest = &rest[1..];
            self.held.push(b);
            if b == b'\n' {
                self.finish_line();
            } else if self.held.len() > HELD_MAX {
                self.overflow();
            }
        }
    }
}

impl AsyncRead for RestrictLines {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.taken < this.out.len() {
                let n = (this.out.len() - this.taken).min(buf.remaining());
                buf.put_slice(&this.out[this.taken..this.taken + n]);
                this.taken += n;
                if this.taken == this.out.len() {
                    this.out.clear();
                    this.taken = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.done {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = vec![0u8; 64 * 1024];
            let mut rb = ReadBuf::new(&mut chunk);
            match this.inner.as_mut().poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                    // The last line, without a newline.
                    if !this.held.is_empty() {
                        this.finish_line();
                    }
                    this.done = true;
                }
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    this.feed(&chunk[..n]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn through_with(input: &[u8], chunk: usize, privileges: Privileges) -> Vec<u8> {
        // Deliver the input in small pieces: lines split across reads.
        let pieces: Vec<Vec<u8>> = input.chunks(chunk.max(1)).map(<[u8]>::to_vec).collect();
        let stream = futures::stream::iter(pieces.into_iter().map(|p| Ok::<_, io::Error>(bytes::Bytes::from(p))));
        let reader: BackupReader = Box::pin(tokio_util::io::StreamReader::new(stream));
        let (head, mut rest) = restricted(Vec::new(), reader, privileges);
        assert!(head.starts_with(b"\\restrict ") && head.ends_with(b"\n") && head.len() == 10 + 32 + 1, "{head:?}");
        let mut out = Vec::new();
        rest.read_to_end(&mut out).await.unwrap();
        out
    }

    async fn through(input: &[u8], chunk: usize) -> Vec<u8> {
        through_with(input, chunk, Privileges::Keep).await
    }

    #[tokio::test]
    async fn the_scripts_own_restrict_lines_go_and_everything_else_stays() {
        let script = b"--\n-- PostgreSQL database dump\n--\n\\restrict Ab12cD\nSET x = 1;\n\\connect other\n\
copy t from stdin;\n\\\\restrict kept\n\\.\nselect '\\restrict inline';\n\\unrestrict Ab12cD\r\n\\restrictX y\n\\unrestrict Zz";
        let want = b"--\n-- PostgreSQL database dump\n--\nSET x = 1;\n\\connect other\n\
copy t from stdin;\n\\\\restrict kept\n\\.\nselect '\\restrict inline';\n\\restrictX y\n";
        for chunk in [1, 2, 3, 7, 64, 100_000] {
            assert_eq!(
                String::from_utf8_lossy(&through(script, chunk).await),
                String::from_utf8_lossy(want),
                "chunk {chunk}"
            );
        }
    }

    /// `pg_dump -n public`'s `CREATE SCHEMA public;` is made idempotent; the same text as
    /// `COPY` data, or in any other form, is left alone.
    #[tokio::test]
    async fn create_schema_public_is_made_idempotent_outside_copy_data() {
        let script = b"CREATE SCHEMA public;\nCREATE SCHEMA public2;\n CREATE SCHEMA public;\n\
COPY public.t (a) FROM stdin;\nCREATE SCHEMA public;\nCOPY x\n\\.\nCREATE SCHEMA public;\r\nCREATE SCHEMA public;";
        let want = b"CREATE SCHEMA IF NOT EXISTS public;\nCREATE SCHEMA public2;\n CREATE SCHEMA public;\n\
COPY public.t (a) FROM stdin;\nCREATE SCHEMA public;\nCOPY x\n\\.\nCREATE SCHEMA IF NOT EXISTS public;\r\nCREATE SCHEMA IF NOT EXISTS public;";
        for chunk in [1, 2, 5, 64, 100_000] {
            assert_eq!(
                String::from_utf8_lossy(&through(script, chunk).await),
                String::from_utf8_lossy(want),
                "chunk {chunk}"
            );
        }
    }

    /// Issue 32: a plain dump of a database that grants to an application role stopped at
    /// `role "appuser" does not exist`. Ownership and privilege statements are left out
    /// and counted — and only they: the same words in a function body, a string, a
    /// comment or `COPY` data stay, and so does every other statement.
    #[tokio::test]
    async fn ownership_and_privileges_are_left_out_only_where_they_are_statements() {
        let script = "SET statement_timeout = 0;\n\
ALTER TABLE public.t OWNER TO appuser;\n\
ALTER SCHEMA public OWNER TO pg_database_owner;\n\
CREATE FUNCTION public.f() RETURNS void\n    LANGUAGE sql\n    AS $_$\n\
GRANT SELECT ON public.t TO appuser;\nALTER TABLE public.t OWNER TO appuser;\n$_$;\n\
ALTER FUNCTION public.f() OWNER TO appuser;\n\
CREATE FUNCTION public.g() RETURNS text LANGUAGE sql AS $$ select 'x' $$;\n\
ALTER TABLE ONLY public.t ALTER COLUMN c SET DEFAULT ' OWNER TO nobody;';\n\
COMMENT ON TABLE public.t IS 'GRANT\n\
GRANT ALL ON t TO x;';\n\
/* a comment\n\
GRANT ALL ON t TO y;\n\
*/\n\
-- GRANT ALL ON t TO z;\n\
COPY public.t (c) FROM stdin;\n\
GRANT SELECT ON public.t TO appuser;\n\
\\.\n\
GRANT SELECT ON TABLE public.t TO appuser;\n\
REVOKE ALL ON SCHEMA public FROM PUBLIC;\n\
grant usage on schema public to appuser;\n\
ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT ON TABLES TO appuser;\n\
SET SESSION AUTHORIZATION appuser;\n\
RESET SESSION AUTHORIZATION;\n\
GRANT SELECT ON public.t TO a; SELECT 1;\n\
GRANT SELECT\n    ON public.t TO b;\n\
ALTER LARGE OBJECT 16397 OWNER TO appuser;\n\
SELECT E'it\\'s';\n\
GRANT SELECT ON public.u TO appuser;\n";
        let want = "SET statement_timeout = 0;\n\
CREATE FUNCTION public.f() RETURNS void\n    LANGUAGE sql\n    AS $_$\n\
GRANT SELECT ON public.t TO appuser;\nALTER TABLE public.t OWNER TO appuser;\n$_$;\n\
CREATE FUNCTION public.g() RETURNS text LANGUAGE sql AS $$ select 'x' $$;\n\
ALTER TABLE ONLY public.t ALTER COLUMN c SET DEFAULT ' OWNER TO nobody;';\n\
COMMENT ON TABLE public.t IS 'GRANT\n\
GRANT ALL ON t TO x;';\n\
/* a comment\n\
GRANT ALL ON t TO y;\n\
*/\n\
-- GRANT ALL ON t TO z;\n\
COPY public.t (c) FROM stdin;\n\
GRANT SELECT ON public.t TO appuser;\n\
\\.\n\
GRANT SELECT ON public.t TO a; SELECT 1;\n\
GRANT SELECT\n    ON public.t TO b;\n\
SELECT E'it\\'s';\n";
        for chunk in [1, 3, 64, 100_000] {
            let count = Arc::new(AtomicU64::new(0));
            let out = through_with(script.as_bytes(), chunk, Privileges::Skip(count.clone())).await;
            assert_eq!(String::from_utf8_lossy(&out), want, "chunk {chunk}");
            assert_eq!(count.load(Ordering::Relaxed), 11, "chunk {chunk}");
        }
        // With the roles restored first (globals_key), everything runs.
        let out = through(script.as_bytes(), 7).await;
        assert_eq!(String::from_utf8_lossy(&out), script);
    }

    /// A line longer than what is held passes through whole, and the lexer keeps its
    /// place across the cut (a dollar quote opened in it is still open after it).
    #[tokio::test]
    async fn overlong_lines_pass_whole_and_keep_the_quoting() {
        let long = "x".repeat(HELD_MAX + 100);
        let script = format!(
            "SELECT '{long}';\nCREATE FUNCTION f() RETURNS void AS $body$ {long}\nGRANT ALL ON t TO a;\n$body$ LANGUAGE sql;\nGRANT ALL ON t TO b;\n"
        );
        let want = format!(
            "SELECT '{long}';\nCREATE FUNCTION f() RETURNS void AS $body$ {long}\nGRANT ALL ON t TO a;\n$body$ LANGUAGE sql;\n"
        );
        for chunk in [5, 4096, 1 << 20] {
            let count = Arc::new(AtomicU64::new(0));
            let out = through_with(script.as_bytes(), chunk, Privileges::Skip(count.clone())).await;
            assert!(out == want.as_bytes(), "chunk {chunk}: {} bytes", out.len());
            assert_eq!(count.load(Ordering::Relaxed), 1);
        }
    }
}
