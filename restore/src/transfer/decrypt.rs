//! Encrypted backups: age and OpenPGP layers, recognised by their first bytes like every
//! other layer and opened with the keys `[target.decrypt]` keeps.
//!
//! - **age** is decrypted in drcheck's process by the `age` crate (memory-safe Rust,
//!   like the decompressors): X25519 identities and passphrases (scrypt), binary or
//!   armoured. The payload is authenticated chunk by chunk (64 KiB): a flipped byte or a
//!   cut-off end fails the read that reaches it.
//! - **OpenPGP** is decrypted by Debian's `gpg` — the program that wrote these backups —
//!   run like every tool that reads backup content: contained (the sandbox user,
//!   Landlock, seccomp, private namespaces), in a clean environment, with a home of its
//!   own beside the run's directory (never inside it: the restore server may read
//!   everything there, and this home holds the key). Passphrases reach it on its stdin
//!   ahead of the ciphertext, never on a command line or in a file. Its verdict is read
//!   from `--status-fd` (its documented machine interface) when its output ends: the
//!   plaintext stream ends only after `DECRYPTION_OKAY` without `BADMDC`.
//!
//! A backup that needs a key no one configured is a configuration error (exit 2) naming
//! what it needs and the key to set; a configured key that does not open it is a failed
//! verification (exit 1): in a disaster it could not be restored with the keys kept.

use crate::error::{RestoreError, Stage, StoreError};
use crate::events::{Events, RestoreEvent};
use crate::server::sandbox::Sandbox;
use crate::store::BackupReader;
use crate::transfer::envelope::{
    SIGNED_ONLY, age_stanzas, dearmor_openpgp, is_openpgp_signed_only, session_keys, trim_ascii_start,
};
use crate::transfer::format::BackupFormat;
use drcheck_config::DecryptConfig;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio_util::compat::{FuturesAsyncReadCompatExt, TokioAsyncReadCompatExt};

/// The largest scrypt work factor an `age -p` backup may ask for: 2^20 (1 GiB of memory,
/// a few seconds). `age -p` calibrates to about one second (2^18 on most machines); a
/// backup asking for more could make a verification take hours and all the memory.
pub(crate) const MAX_SCRYPT_LOG_N: u8 = 20;

pub(crate) use crate::events::Decryption;

fn config_error(message: String) -> RestoreError {
    RestoreError::Config { stage: Stage::Fetch, message }
}

fn wrong_key(message: String) -> RestoreError {
    RestoreError::bad(Stage::Fetch, message)
}

/// "2 X25519 recipients", "a passphrase (scrypt)", "an ssh-ed25519 recipient".
fn describe_stanzas(stanzas: &[String]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for s in stanzas {
        match counts.iter_mut().find(|(k, _)| k == s) {
            Some((_, n)) => *n += 1,
            None => counts.push((s.clone(), 1)),
        }
    }
    if counts.is_empty() {
        return "no recipient it names".into();
    }
    counts
        .iter()
        .map(|(k, n)| match (k.as_str(), n) {
            ("scrypt", _) => "a passphrase (scrypt)".to_string(),
            (k, 1) => format!("1 {k} recipient"),
            (k, n) => format!("{n} {k} recipients"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A secret that is a key's text or a file's path: the text (the file read when it is
/// a path). `what` names the config key for errors.
fn key_text(value: &str, inline: bool, what: &str) -> Result<String, RestoreError> {
    if inline {
        return Ok(value.to_string());
    }
    let path = Path::new(value.trim());
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| config_error(format!("{what}: cannot read {}: {e}", path.display())))
}

/// The age identities `decrypt.age_identity` holds (an identity, an identity file's
/// text, or its path), with their public recipients for messages.
fn age_identities(value: &str) -> Result<Vec<age::x25519::Identity>, RestoreError> {
    const KEY: &str = "decrypt.age_identity";
    let inline = value.contains("AGE-SECRET-KEY-1");
    let text = key_text(value, inline, KEY)?;
    let mut ids = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match age::x25519::Identity::from_str(line) {
            Ok(id) => ids.push(id),
            Err(_) if line.starts_with("AGE-PLUGIN-") => {
                return Err(config_error(format!(
                    "{KEY}: line {} is a plugin identity; drcheck opens X25519 identities (AGE-SECRET-KEY-1…) and passphrases",
                    n + 1
                )));
            }
            // The line is never echoed: it may be a mistyped key.
            Err(_) => {
                return Err(config_error(format!(
                    "{KEY}: line {} is not an age identity (expected AGE-SECRET-KEY-1…)",
                    n + 1
                )));
            }
        }
    }
    if ids.is_empty() {
        return Err(config_error(format!("{KEY}: holds no age identity (expected AGE-SECRET-KEY-1…)")));
    }
    Ok(ids)
}

/// Opens an encrypted layer. `head` is the first bytes read from `rest`'s source.
/// Returns the plaintext stream; `events` hears the encryption as soon as it is known
/// (a failed run still reports it), then the key that opened it.
pub(crate) async fn open(
    format: BackupFormat,
    head: Vec<u8>,
    rest: BackupReader,
    keys: &DecryptConfig,
    sandbox: &Sandbox,
    events: &Events,
) -> Result<BackupReader, RestoreError> {
    let binary = if trim_ascii_start(&head).starts_with(b"-----BEGIN PGP MESSAGE-----") {
        dearmor_openpgp(&head)
    } else {
        head.clone()
    };
    let signed_only = format != BackupFormat::Age && session_keys(&binary).is_none() && is_openpgp_signed_only(&head);
    let encryption = match format {
        BackupFormat::Age => "age",
        _ if signed_only => "openpgp-signed",
        _ => "openpgp",
    };
    events.send(RestoreEvent::Decryption(Decryption { encryption: encryption.into(), decrypted_by: None }));
    let (reader, by) = match format {
        BackupFormat::Age => open_age(head, rest, keys).await?,
        _ => open_openpgp(head, rest, keys, sandbox).await?,
    };
    events.send(RestoreEvent::Decryption(Decryption { encryption: encryption.into(), decrypted_by: Some(by) }));
    Ok(reader)
}

enum AgeKey {
    X25519(Box<age::x25519::Identity>),
    Scrypt(Box<age::scrypt::Identity>),
}

async fn open_age(
    head: Vec<u8>,
    rest: BackupReader,
    keys: &DecryptConfig,
) -> Result<(BackupReader, String), RestoreError> {
    let stanzas = age_stanzas(&head);
    let needs = describe_stanzas(&stanzas);
    let scrypt = stanzas.iter().any(|s| s == "scrypt");
    let x25519 = stanzas.iter().any(|s| s == "X25519");
    let (tried, held): (Vec<AgeKey>, Vec<String>) = if scrypt {
        let Some(pass) = &keys.age_passphrase else {
            return Err(config_error(
                "the backup is encrypted with age to a passphrase (age -p); set decrypt.age_passphrase for this target (e.g. \"${AGE_PASSPHRASE}\") to verify it".to_string(),
            ));
        };
        let mut id = age::scrypt::Identity::new(pass.expose().to_string().into());
        id.set_max_work_factor(MAX_SCRYPT_LOG_N);
        (vec![AgeKey::Scrypt(Box::new(id))], vec!["the passphrase in decrypt.age_passphrase".to_string()])
    } else if x25519 {
        let Some(value) = &keys.age_identity else {
            return Err(config_error(format!(
                "the backup is encrypted with age to {needs} (age records no recipient names); set decrypt.age_identity for this target to the identity (AGE-SECRET-KEY-1…, or its file) whose recipient (age1…) the backup was encrypted to"
            )));
        };
        // Every identity held is tried (cheap: one X25519 exchange per stanza).
        let ids = age_identities(value.expose())?;
        let held = ids.iter().map(|i| i.to_public().to_string()).collect();
        (ids.into_iter().map(|i| AgeKey::X25519(Box::new(i))).collect(), held)
    } else {
        return Err(RestoreError::unsupported(
            Stage::Fetch,
            format!(
                "the backup is encrypted with age to {needs}: drcheck opens age X25519 identities (decrypt.age_identity) and passphrases (decrypt.age_passphrase)"
            ),
        ));
    };
    open_age_with(head, rest, tried, &needs, &held).await
}

async fn open_age_with(
    head: Vec<u8>,
    rest: BackupReader,
    keys: Vec<AgeKey>,
    needs: &str,
    held: &[String],
) -> Result<(BackupReader, String), RestoreError> {
    let src: BackupReader = Box::pin(std::io::Cursor::new(head).chain(rest));
    let mut armored = age::armor::ArmoredReader::from_async_reader(src.compat());
    // The header is read here, bounded, before age parses it (age re-reads a growing
    // header line by line: a header of many thousand stanzas is minutes of CPU).
    let header = bounded_age_header(&mut armored).await?;
    let src = futures::AsyncReadExt::chain(futures::io::Cursor::new(header), armored);
    let decryptor = age::Decryptor::new_async_buffered(src).await.map_err(|e| age_header_error(&e))?;
    let needs = needs.to_string();
    let held_list = held.to_vec();
    // Unwrapping the file key is CPU work (a second of scrypt for passphrases): not on
    // an async worker.
    let result = tokio::task::spawn_blocking(move || {
        let ids: Vec<&dyn age::Identity> = keys
            .iter()
            .map(|k| match k {
                AgeKey::X25519(i) => i.as_ref() as &dyn age::Identity,
                AgeKey::Scrypt(i) => i.as_ref() as &dyn age::Identity,
            })
            .collect();
        let opened = decryptor.decrypt_async(ids.iter().copied());
        (opened, keys.iter().any(|k| matches!(k, AgeKey::Scrypt(_))))
    })
    .await
    .map_err(|e| RestoreError::infra(Stage::Fetch, format!("age decryption stopped: {e}")))?;
    match result {
        (Ok(stream), scrypt) => {
            let by = if scrypt {
                "age passphrase (decrypt.age_passphrase)".to_string()
            } else if held_list.len() == 1 {
                format!("age identity of recipient {}", held_list[0])
            } else {
                format!("age identity (one of recipients {})", held_list.join(", "))
            };
            Ok((Box::pin(AuthErrors(stream.compat())), by))
        }
        (Err(age::DecryptError::NoMatchingKeys), _) => Err(wrong_key(format!(
            "the backup is encrypted with age to {needs} (age records no recipient names), and the identity held (recipient {}) is not one of them: with the keys kept, this backup could not be restored",
            held_list.join(", ")
        ))),
        (Err(age::DecryptError::DecryptionFailed), true) => Err(wrong_key(
            "the backup is encrypted with age to a passphrase, and the one held (decrypt.age_passphrase) does not open it: with the keys kept, this backup could not be restored".into(),
        )),
        (Err(age::DecryptError::ExcessiveWork { required, .. }), _) => Err(wrong_key(format!(
            "the backup's age passphrase asks for scrypt work 2^{required}; drcheck accepts at most 2^{MAX_SCRYPT_LOG_N} (age -p uses about 2^18)"
        ))),
        (Err(e), _) => Err(age_header_error(&e)),
    }
}

/// The most of an age header drcheck reads: age writes about a hundred bytes per
/// recipient, so this is hundreds of recipients.
pub(crate) const MAX_AGE_HEADER: usize = 64 * 1024;

/// The most recipient stanzas an age header may have.
pub(crate) const MAX_AGE_STANZAS: usize = 256;

/// Where an age header ends: after its MAC line (`--- …\n`).
fn age_header_end(b: &[u8]) -> Option<usize> {
    let at = b.windows(5).position(|w| w == b"\n--- ")?;
    b[at + 5..].iter().position(|c| *c == b'\n').map(|nl| at + 5 + nl + 1)
}

/// The start of an age stream (its binary form), read until its header ends — or the
/// backup's fault once it passes [`MAX_AGE_HEADER`] bytes or [`MAX_AGE_STANZAS`] stanzas.
/// What it read (perhaps some payload too) goes back in front of the rest.
async fn bounded_age_header<R: futures::AsyncRead + Unpin>(r: &mut R) -> Result<Vec<u8>, RestoreError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let end = age_header_end(&buf);
        let header = &buf[..end.unwrap_or(buf.len()).min(buf.len())];
        let stanzas = header.split(|c| *c == b'\n').filter(|l| l.starts_with(b"-> ")).count();
        if stanzas > MAX_AGE_STANZAS {
            return Err(RestoreError::bad(
                Stage::Fetch,
                format!(
                    "the backup's age header has more than {MAX_AGE_STANZAS} recipient stanzas: not a header age \
                     writes for a backup"
                ),
            ));
        }
        if end.is_some() {
            return Ok(buf);
        }
        if buf.len() > MAX_AGE_HEADER {
            return Err(RestoreError::bad(
                Stage::Fetch,
                format!(
                    "the backup's age header runs past {MAX_AGE_HEADER} bytes ({stanzas} stanzas): not a header age writes"
                ),
            ));
        }
        let n = futures::AsyncReadExt::read(r, &mut chunk)
            .await
            .map_err(|e| age_header_error(&age::DecryptError::Io(e)))?;
        if n == 0 {
            // Cut short: age says so, in its words.
            return Ok(buf);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn age_header_error(e: &age::DecryptError) -> RestoreError {
    match e {
        age::DecryptError::Io(io) if io.get_ref().is_some_and(|i| i.is::<StoreError>()) => {
            crate::transfer::stream::read_error("", io::Error::new(io.kind(), io.to_string()))
        }
        age::DecryptError::InvalidMac => {
            RestoreError::bad(Stage::Fetch, "the backup's age header fails its MAC: the header was altered")
        }
        age::DecryptError::UnknownFormat => {
            RestoreError::unsupported(Stage::Fetch, "the backup is an age file of a version drcheck does not know")
        }
        other => RestoreError::bad(Stage::Fetch, format!("the backup's age header is unreadable: {other}")),
    }
}

/// age's payload errors (a chunk that fails authentication, a stream cut short) are the
/// backup's: named as such. The store's own errors pass through.
struct AuthErrors<R>(R);

impl<R: AsyncRead + Unpin> AsyncRead for AuthErrors<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.0).poll_read(cx, buf) {
            Poll::Ready(Err(e)) if e.get_ref().is_some_and(|i| i.is::<StoreError>()) => Poll::Ready(Err(e)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("its age payload fails authentication (altered or truncated): {e}"),
            ))),
            other => other,
        }
    }
}

// ---------------------------------------------------------------------------------------
// OpenPGP, through gpg

/// The directory gpg works in for one run: beside the sandbox's root, never inside.
/// Removing it ends the gpg-agent that watches it.
struct GpgHome {
    path: PathBuf,
}

impl Drop for GpgHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The gpg and gpg-agent programs.
fn gpg_program(name: &str) -> Result<PathBuf, RestoreError> {
    for dir in ["/usr/bin", "/bin", "/usr/local/bin"] {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return std::fs::canonicalize(&p)
                .map_err(|e| RestoreError::infra(Stage::Fetch, format!("{}: {e}", p.display())));
        }
    }
    Err(RestoreError::infra(
        Stage::Fetch,
        format!("the backup is OpenPGP-encrypted and {name} is not installed: install GnuPG (apt-get install gnupg)"),
    ))
}

/// A contained gpg (or gpg-agent) working in `home` only.
fn gpg_command(sandbox: &Sandbox, program: &Path, home: &Path) -> tokio::process::Command {
    let mut policy = sandbox.policy(&[program.to_path_buf()]);
    policy.read_write = vec![home.to_path_buf()];
    if policy.syscalls != crate::server::contain::Syscalls::Unfiltered {
        // gpg talks to its agent over the home's unix socket.
        policy.syscalls = crate::server::contain::Syscalls::Client;
    }
    let mut cmd = tokio::process::Command::from(crate::server::contain::command(program, &policy));
    cmd.current_dir(home)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .env("LC_ALL", "C.UTF-8")
        .arg("--homedir")
        .arg(home)
        .kill_on_drop(true);
    cmd
}

/// Runs a short gpg command to completion; returns its stdout and stderr.
async fn gpg_run(
    mut cmd: tokio::process::Command,
    input: &[u8],
    what: &str,
) -> Result<(String, String, bool), RestoreError> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child =
        cmd.spawn().map_err(|e| RestoreError::infra(Stage::Fetch, format!("cannot start gpg ({what}): {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.to_vec();
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&input).await;
    });
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .map_err(|_| RestoreError::infra(Stage::Fetch, format!("gpg ({what}) did not finish within 60 s")))?
        .map_err(|e| RestoreError::infra(Stage::Fetch, format!("gpg ({what}): {e}")))?;
    let _ = writer.await;
    Ok((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    ))
}

/// The last few lines gpg wrote that are not status lines (its own words, for a report).
fn gpg_words(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("[GNUPG:]") && !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(3);
    lines[start..].join("; ")
}

async fn open_openpgp(
    head: Vec<u8>,
    rest: BackupReader,
    keys: &DecryptConfig,
    sandbox: &Sandbox,
) -> Result<(BackupReader, String), RestoreError> {
    let armored = trim_ascii_start(&head).starts_with(b"-----BEGIN PGP MESSAGE-----");
    let binary = if armored { dearmor_openpgp(&head) } else { head.clone() };
    let needs = session_keys(&binary).unwrap_or_default();
    let key_ids = needs.key_ids.join(", ");
    let to_keys = if needs.key_ids.len() == 1 { format!("key {key_ids}") } else { format!("keys {key_ids}") };
    let signed_only = session_keys(&binary).is_none() && is_openpgp_signed_only(&head);
    if signed_only && keys.signed_by.is_none() {
        return Err(config_error(SIGNED_ONLY.into()));
    }
    let can_pass = needs.passphrase && keys.gpg_passphrase.is_some();
    let can_key = !needs.key_ids.is_empty() && keys.gpg_secret_key.is_some();
    if !signed_only && !can_pass && !can_key {
        let message = match (needs.passphrase, needs.key_ids.is_empty()) {
            (true, true) => "the backup is encrypted with OpenPGP to a passphrase (gpg -c); set decrypt.gpg_passphrase for this target (e.g. \"${GPG_PASSPHRASE}\") to verify it".to_string(),
            (false, false) => format!(
                "the backup is encrypted with OpenPGP to {to_keys}; set decrypt.gpg_secret_key for this target to that secret key (armoured, or its file; with decrypt.gpg_passphrase if the key is protected) to verify it"
            ),
            (true, false) => format!(
                "the backup is encrypted with OpenPGP to a passphrase and to {to_keys}; set decrypt.gpg_passphrase or decrypt.gpg_secret_key for this target to verify it"
            ),
            (false, true) => "the backup is OpenPGP-encrypted but names no session key drcheck can read; set decrypt.gpg_passphrase or decrypt.gpg_secret_key for this target".to_string(),
        };
        return Err(config_error(message));
    }
    let gpg = gpg_program("gpg")?;
    let keys_root = crate::server::leftovers::keys_dir(sandbox.root());
    let home = GpgHome { path: keys_root.join(format!("g-{:06x}", rand::random::<u32>() & 0xff_ffff)) };
    let socket_len = home.path.join("S.gpg-agent.browser").as_os_str().len();
    if can_key && socket_len > 107 {
        return Err(RestoreError::infra(
            Stage::Fetch,
            format!(
                "gpg's agent socket under sandbox.scratch_dir would be {socket_len} bytes long (a unix socket's path has at most 107): choose a shorter scratch_dir"
            ),
        ));
    }
    for dir in [&keys_root, &home.path] {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir == &keys_root => {}
            Err(e) => return Err(RestoreError::infra(Stage::Fetch, format!("cannot create {}: {e}", dir.display()))),
        }
        sandbox.give_to_server(dir)?;
    }

    let mut held: Vec<String> = Vec::new();
    let mut primary_fpr: Option<String> = None;
    if can_key {
        let secret = keys.gpg_secret_key.as_ref().expect("checked");
        let inline = secret.expose().contains("-----BEGIN PGP PRIVATE KEY BLOCK-----");
        let key = if inline {
            secret.expose().as_bytes().to_vec()
        } else {
            let path = Path::new(secret.expose().trim());
            std::fs::read(path)
                .map_err(|e| config_error(format!("decrypt.gpg_secret_key: cannot read {}: {e}", path.display())))?
        };
        start_agent(sandbox, &home.path).await?;
        let mut import = gpg_command(sandbox, &gpg, &home.path);
        import.args(["--batch", "--no-tty", "--no-autostart", "--status-fd", "1", "--import"]);
        let (status, stderr, _) = gpg_run(import, &key, "importing decrypt.gpg_secret_key").await?;
        if !status.lines().any(|l| l.starts_with("[GNUPG:] IMPORT_OK")) {
            return Err(config_error(format!(
                "decrypt.gpg_secret_key holds no OpenPGP secret key gpg can import ({})",
                gpg_words(&stderr)
            )));
        }
        let mut list = gpg_command(sandbox, &gpg, &home.path);
        list.args(["--batch", "--no-tty", "--no-autostart", "--with-colons", "--list-secret-keys"]);
        let (listing, _, _) = gpg_run(list, b"", "listing decrypt.gpg_secret_key").await?;
        for l in listing.lines() {
            let f: Vec<&str> = l.split(':').collect();
            match f.first() {
                Some(&"sec") | Some(&"ssb") if f.len() > 4 => held.push(f[4].to_string()),
                Some(&"fpr") if primary_fpr.is_none() && f.len() > 9 => primary_fpr = Some(f[9].to_string()),
                _ => {}
            }
        }
    }

    // Whose signature it must carry: the public key of decrypt.signed_by, imported here.
    let signers = match &keys.signed_by {
        None => None,
        Some(signer) => {
            let inline = signer.expose().contains("-----BEGIN PGP PUBLIC KEY BLOCK-----");
            let key = if inline {
                signer.expose().as_bytes().to_vec()
            } else {
                let path = Path::new(signer.expose().trim());
                std::fs::read(path)
                    .map_err(|e| config_error(format!("decrypt.signed_by: cannot read {}: {e}", path.display())))?
            };
            let mut import = gpg_command(sandbox, &gpg, &home.path);
            import.args(["--batch", "--no-tty", "--no-autostart", "--status-fd", "1", "--import"]);
            let (status, stderr, _) = gpg_run(import, &key, "importing decrypt.signed_by").await?;
            if !status.lines().any(|l| l.starts_with("[GNUPG:] IMPORT_OK")) {
                return Err(config_error(format!(
                    "decrypt.signed_by holds no OpenPGP public key gpg can import ({})",
                    gpg_words(&stderr)
                )));
            }
            let mut list = gpg_command(sandbox, &gpg, &home.path);
            list.args(["--batch", "--no-tty", "--no-autostart", "--with-colons", "--list-keys"]);
            let (listing, _, _) = gpg_run(list, b"", "listing decrypt.signed_by").await?;
            let fprs: Vec<String> = listing
                .lines()
                .filter_map(|l| l.strip_prefix("fpr:"))
                .filter_map(|l| l.split(':').nth(8).map(str::to_ascii_uppercase))
                .filter(|f| !f.is_empty())
                .collect();
            if fprs.is_empty() {
                return Err(config_error("decrypt.signed_by: gpg lists no key it imported".into()));
            }
            Some(fprs)
        }
    };

    let mut cmd = gpg_command(sandbox, &gpg, &home.path);
    cmd.args(["--batch", "--no-tty", "--pinentry-mode", "loopback", "--status-fd", "2", "--trust-model", "always"]);
    if !can_key {
        cmd.arg("--no-autostart");
    }
    let passphrase = keys.gpg_passphrase.as_ref().map(|p| p.expose().to_string());
    if let Some(p) = &passphrase
        && p.contains('\n')
    {
        return Err(config_error("decrypt.gpg_passphrase: holds a line break (gpg reads one line)".into()));
    }
    if passphrase.is_some() {
        // The passphrase's line comes first on stdin, then the ciphertext.
        cmd.args(["--passphrase-fd", "0"]);
    }
    cmd.arg("--decrypt").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| RestoreError::infra(Stage::Fetch, format!("cannot start gpg: {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let store_failure: Arc<Mutex<Option<io::Error>>> = Arc::default();
    let writer = {
        let failure = store_failure.clone();
        let mut src: BackupReader = Box::pin(std::io::Cursor::new(head).chain(rest));
        tokio::spawn(async move {
            if let Some(p) = passphrase {
                let mut line = p.into_bytes();
                line.push(b'\n');
                if stdin.write_all(&line).await.is_err() {
                    return;
                }
            }
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                match src.read(&mut buf).await {
                    Ok(0) => break,
                    Ok(n) => {
                        // gpg stopping early (a wrong key) closes its stdin: not ours to report.
                        if stdin.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        *failure.lock().unwrap() = Some(e);
                        return;
                    }
                }
            }
            let _ = stdin.shutdown().await;
        })
    };
    let status_text: Arc<Mutex<String>> = Arc::default();
    let status_task = {
        let text = status_text.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut t = text.lock().unwrap();
                // Bounded: gpg's words are short; a hostile backup cannot make them long.
                if t.len() < 64 * 1024 {
                    t.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        })
    };
    let by = match (&primary_fpr, can_key, &signers) {
        (_, _, Some(f)) if signed_only => {
            format!("OpenPGP signature of key {} (decrypt.signed_by), not encrypted", f[0])
        }
        (Some(fpr), true, _) => format!("OpenPGP secret key {fpr} (decrypt.gpg_secret_key)"),
        _ => "OpenPGP passphrase (decrypt.gpg_passphrase)".to_string(),
    };
    let verdict =
        GpgVerdict { needs_keys: key_ids.clone(), held: held.join(", "), passphrase: can_pass, signed_only, signers };
    let mut reader = GpgReader {
        stdout,
        finish: Some(Box::pin(finish_gpg(child, writer, status_task, status_text, store_failure, verdict.clone()))),
        finishing: None,
        _home: home,
    };
    // Read the first bytes now: a key that does not open the backup shows before any
    // plaintext, and is a verdict of its own, not a corrupt stream.
    let mut first = vec![0u8; 64 * 1024];
    let mut filled = 0;
    loop {
        match reader.read(&mut first[filled..]).await {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                if filled == first.len() {
                    break;
                }
            }
            Err(e) => {
                if let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<GpgFailure>()) {
                    return Err(inner.to_restore_error());
                }
                return Err(crate::transfer::stream::read_error("", e));
            }
        }
    }
    first.truncate(filled);
    Ok((Box::pin(std::io::Cursor::new(first).chain(reader)), by))
}

/// Starts a gpg-agent for `home` (contained like gpg) and waits for its socket. It
/// detaches; removing `home` ends it.
async fn start_agent(sandbox: &Sandbox, home: &Path) -> Result<(), RestoreError> {
    let agent = gpg_program("gpg-agent")?;
    let mut cmd = gpg_command(sandbox, &agent, home);
    let log = home.join("agent.log");
    cmd.args(["--daemon", "--allow-loopback-pinentry", "--pinentry-program", "/bin/false", "--log-file"])
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // The agent keeps whatever it inherits open: nothing to wait on.
        .stderr(Stdio::null());
    tokio::time::timeout(std::time::Duration::from_secs(30), cmd.status())
        .await
        .map_err(|_| RestoreError::infra(Stage::Fetch, "gpg-agent did not start within 30 s"))?
        .map_err(|e| RestoreError::infra(Stage::Fetch, format!("cannot start gpg-agent: {e}")))?;
    let socket = home.join("S.gpg-agent");
    for _ in 0..200 {
        if socket.exists() {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    Err(RestoreError::infra(Stage::Fetch, format!("gpg-agent did not start: {}", gpg_words(&said))))
}

#[derive(Clone)]
struct GpgVerdict {
    needs_keys: String,
    held: String,
    passphrase: bool,
    /// Signed, not encrypted: its signature is the verdict.
    signed_only: bool,
    /// The fingerprints (primary and subkeys) of decrypt.signed_by: a signature by one
    /// of them is required.
    signers: Option<Vec<String>>,
}

/// Whether gpg's `status` lines say the data is signed, validly, by one of `signers`:
/// `Ok`, or why not (for a report).
fn signature_verdict(status: &[&str], signers: &[String]) -> Result<String, Unsigned> {
    let first = |k: &str| status.iter().find(|l| l.split(' ').next() == Some(k)).map(|l| l.to_string());
    let named = signers.join(", ");
    if let Some(bad) = first("BADSIG") {
        return Err(Unsigned::Altered(bad));
    }
    if let Some(valid) = first("VALIDSIG") {
        let f: Vec<&str> = valid.split(' ').collect();
        let (signing, primary) = (f.get(1).copied().unwrap_or_default(), f.last().copied().unwrap_or_default());
        if first("GOODSIG").is_some()
            && signers.iter().any(|s| s.eq_ignore_ascii_case(signing) || s.eq_ignore_ascii_case(primary))
        {
            return Ok(primary.to_string());
        }
        return Err(Unsigned::OtherKey { key: primary.into(), signers: named });
    }
    if let Some(err) = first("ERRSIG") {
        return Err(Unsigned::Unverifiable { key: err.split(' ').nth(1).unwrap_or_default().into(), signers: named });
    }
    Err(Unsigned::NoSignature { signers: named })
}

/// Why a backup is not signed, validly, by `decrypt.signed_by` (gpg's status lines read
/// here, in one place).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Unsigned {
    /// `BADSIG`: the status line.
    #[error("its OpenPGP signature is bad — the data was altered after it was signed ({0})")]
    Altered(String),
    #[error("it is signed by key {key}, not by decrypt.signed_by ({signers})")]
    OtherKey { key: String, signers: String },
    /// `ERRSIG`: a key gpg does not hold, or a signature it cannot check.
    #[error(
        "it is signed by key {key}, which is not decrypt.signed_by ({signers}) — or its signature cannot be checked"
    )]
    Unverifiable { key: String, signers: String },
    #[error("it carries no OpenPGP signature; decrypt.signed_by ({signers}) must have signed it")]
    NoSignature { signers: String },
}

/// Why gpg did not deliver the whole plaintext.
#[derive(Debug)]
enum GpgFailure {
    /// The key or passphrase held does not open the backup.
    WrongKey(String),
    /// The ciphertext failed its integrity check, or ended early.
    Corrupt(String),
    /// Not signed (validly) by the key decrypt.signed_by holds.
    BadSignature(String),
}

impl std::fmt::Display for GpgFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpgFailure::WrongKey(m) | GpgFailure::Corrupt(m) | GpgFailure::BadSignature(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for GpgFailure {}

impl GpgFailure {
    fn to_restore_error(&self) -> RestoreError {
        match self {
            GpgFailure::WrongKey(m) => wrong_key(m.clone()),
            GpgFailure::Corrupt(m) => RestoreError::bad(Stage::Fetch, format!("the backup is corrupt: {m}")),
            GpgFailure::BadSignature(m) => {
                RestoreError::bad(Stage::Fetch, format!("the backup's signature does not hold: {m}"))
            }
        }
    }
}

/// gpg's verdict once its output ended: `Ok` only after `DECRYPTION_OKAY`, no `BADMDC`
/// and exit status 0. A store failure while feeding it is the store's.
async fn finish_gpg(
    mut child: tokio::process::Child,
    writer: tokio::task::JoinHandle<()>,
    status_task: tokio::task::JoinHandle<()>,
    status_text: Arc<Mutex<String>>,
    store_failure: Arc<Mutex<Option<io::Error>>>,
    verdict: GpgVerdict,
) -> io::Result<()> {
    let exit = child.wait().await?;
    let _ = status_task.await;
    if let Some(e) = store_failure.lock().unwrap().take() {
        writer.abort();
        return Err(e);
    }
    let _ = writer.await;
    let text = status_text.lock().unwrap().clone();
    let status: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("[GNUPG:] ")).collect();
    let has = |k: &str| status.iter().any(|l| l.split(' ').next() == Some(k));
    let words = gpg_words(&text);
    let signed = |signers: &Option<Vec<String>>| match signers {
        None => Ok(()),
        Some(s) => signature_verdict(&status, s).map(|_| ()),
    };
    if verdict.signed_only {
        // Its signature is the verdict; its end (a cut-off message) gpg reports too.
        return match signed(&verdict.signers) {
            Ok(()) if exit.success() && has("PLAINTEXT") => Ok(()),
            Ok(()) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                GpgFailure::Corrupt(format!(
                    "gpg could not read the signed message (exit {}): {words}",
                    exit.code().unwrap_or(-1)
                )),
            )),
            Err(why) => Err(io::Error::new(io::ErrorKind::InvalidData, GpgFailure::BadSignature(why.to_string()))),
        };
    }
    if exit.success() && has("DECRYPTION_OKAY") && !has("BADMDC") && !has("DECRYPTION_FAILED") {
        return signed(&verdict.signers)
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, GpgFailure::BadSignature(why.to_string())));
    }
    // No plaintext at all and no secret key, or a passphrase refused: the key held is
    // not the one; anything else that fails is the ciphertext's.
    let refused = status.iter().any(|l| l.contains("BAD_PASSPHRASE"));
    let failure = if !has("PLAINTEXT") && (has("NO_SECKEY") || refused) {
        if verdict.passphrase && verdict.needs_keys.is_empty() {
            GpgFailure::WrongKey(
                "the backup is encrypted with OpenPGP to a passphrase, and the one held (decrypt.gpg_passphrase) does not open it: with the keys kept, this backup could not be restored".into(),
            )
        } else if has("NO_SECKEY") {
            GpgFailure::WrongKey(format!(
                "the backup is encrypted with OpenPGP to key {}, and the key held (decrypt.gpg_secret_key: {}) is not it: with the keys kept, this backup could not be restored",
                verdict.needs_keys,
                if verdict.held.is_empty() { "none imported".into() } else { verdict.held.clone() }
            ))
        } else {
            GpgFailure::WrongKey(format!(
                "the passphrase held (decrypt.gpg_passphrase) does not unlock the secret key or the backup ({words})"
            ))
        }
    } else if has("BADMDC") || has("DECRYPTION_FAILED") && has("BEGIN_DECRYPTION") {
        GpgFailure::Corrupt(format!(
            "its OpenPGP encrypted data fails its integrity check (altered or truncated): {words}"
        ))
    } else {
        GpgFailure::Corrupt(format!("gpg could not decrypt it (exit {}): {words}", exit.code().unwrap_or(-1)))
    };
    Err(io::Error::new(io::ErrorKind::InvalidData, failure))
}

type Finish = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

/// gpg's plaintext, whose end waits for gpg's verdict.
struct GpgReader {
    stdout: tokio::process::ChildStdout,
    finish: Option<Finish>,
    finishing: Option<Finish>,
    _home: GpgHome,
}

impl AsyncRead for GpgReader {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.finishing.is_none() {
            let before = buf.filled().len();
            match Pin::new(&mut this.stdout).poll_read(cx, buf) {
                Poll::Ready(Ok(())) if buf.filled().len() == before => {
                    this.finishing = this.finish.take();
                }
                other => return other,
            }
        }
        match this.finishing.as_mut() {
            Some(f) => match f.as_mut().poll(cx) {
                Poll::Ready(r) => {
                    this.finishing = None;
                    Poll::Ready(r)
                }
                Poll::Pending => Poll::Pending,
            },
            None => Poll::Ready(Ok(())),
        }
    }
}

use std::os::unix::fs::DirBuilderExt;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::envelope::{SessionKeys, is_age};

    #[test]
    fn a_signature_holds_only_from_the_configured_key() {
        let signers = vec!["A274372DB99329A7EA4F9A5A0BC6C72C1262F9B5".to_string()];
        let good = [
            "NEWSIG",
            "GOODSIG 0BC6C72C1262F9B5 Ops <ops@example.com>",
            "VALIDSIG A274372DB99329A7EA4F9A5A0BC6C72C1262F9B5 2026-12-07 1796000000 0 4 0 22 10 00 A274372DB99329A7EA4F9A5A0BC6C72C1262F9B5",
        ];
        assert_eq!(signature_verdict(&good, &signers).unwrap(), signers[0]);
        let other = [
            "GOODSIG 1111111111111111 Other",
            "VALIDSIG 9999999999999999999999999999999999999999 2026-12-07 1 0 4 0 22 10 00 9999999999999999999999999999999999999999",
        ];
        assert!(signature_verdict(&other, &signers).unwrap_err().to_string().contains("not by decrypt.signed_by"));
        let bad = ["BADSIG 0BC6C72C1262F9B5 Ops"];
        assert!(signature_verdict(&bad, &signers).unwrap_err().to_string().contains("altered after it was signed"));
        let unknown = ["ERRSIG 1111111111111111 22 10 00 1796000000 9"];
        assert!(
            signature_verdict(&unknown, &signers).unwrap_err().to_string().contains("signed by key 1111111111111111")
        );
        assert!(signature_verdict(&[], &signers).unwrap_err().to_string().contains("carries no OpenPGP signature"));
    }

    #[test]
    fn session_key_packets_name_what_a_message_needs() {
        // Old-format PKESK (tag 1, one-byte length) to key 81DAA241B094B189, then SEIPD.
        let mut m = vec![0x84, 12, 3, 0x81, 0xDA, 0xA2, 0x41, 0xB0, 0x94, 0xB1, 0x89, 18, 0, 0];
        m.extend_from_slice(&[0xD2, 5, 1, 2, 3, 4, 5]);
        let s = session_keys(&m).unwrap();
        assert_eq!(s.key_ids, vec!["81DAA241B094B189"]);
        assert!(!s.passphrase);
        // New-format SKESK (tag 3): a passphrase.
        let m = [0xC3, 4, 4, 9, 3, 2, 0xD2, 1, 1];
        assert_eq!(session_keys(&m), Some(SessionKeys { passphrase: true, key_ids: vec![] }));
        // Not OpenPGP: text, a dump, a gzip stream.
        for not in [&b"PGDMP\x01"[..], b"-- SQL", &[0x1f, 0x8b, 8, 0], &[0x84, 1]] {
            assert_eq!(session_keys(not), None, "{not:?}");
        }
    }

    #[test]
    fn age_headers_name_their_recipient_types() {
        let head = b"age-encryption.org/v1\n-> X25519 abc\nAAAA\n-> X25519 def\nBBBB\n--- mac\n\x00\x01";
        assert!(is_age(head));
        assert_eq!(age_stanzas(head), vec!["X25519", "X25519"]);
        assert_eq!(describe_stanzas(&age_stanzas(head)), "2 X25519 recipients");
        assert_eq!(describe_stanzas(&["scrypt".into()]), "a passphrase (scrypt)");
    }
}
