//! Recognising encryption envelopes from their first bytes — age's header or armour,
//! OpenPGP's session-key packets or armour, a signed-only OpenPGP message — without
//! opening them: what format detection ([`crate::transfer::format`]) and decryption
//! ([`crate::transfer::decrypt`]) both need, below either.

use std::io;

/// Whether `head` starts an age file: the binary header or its armour.
pub(crate) fn is_age(head: &[u8]) -> bool {
    let t = trim_ascii_start(head);
    t.starts_with(b"age-encryption.org/") || t.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----")
}

/// Whether `head` starts an OpenPGP encrypted message: armoured, or binary beginning
/// with a public-key or symmetric-key encrypted session key packet.
pub(crate) fn is_openpgp(head: &[u8]) -> bool {
    trim_ascii_start(head).starts_with(b"-----BEGIN PGP MESSAGE-----") || session_keys(head).is_some()
}

/// Whether `head` is an OpenPGP message that is signed but not encrypted (`gpg -s`,
/// `gpg --clearsign`): its first packet a one-pass signature, a signature, compressed or
/// literal data — no session key. Binary or armoured.
pub(crate) fn is_openpgp_signed_only(head: &[u8]) -> bool {
    let t = trim_ascii_start(head);
    if t.starts_with(b"-----BEGIN PGP SIGNED MESSAGE-----") {
        return true;
    }
    let binary = if t.starts_with(b"-----BEGIN PGP MESSAGE-----") { dearmor_openpgp(head) } else { head.to_vec() };
    let Some(&first) = binary.first() else { return false };
    if first & 0x80 == 0 || session_keys(&binary).is_some() {
        return false;
    }
    let (tag, header) = if first & 0x40 != 0 {
        (first & 0x3f, if binary.get(1).is_some_and(|&l| l < 192) { 2 } else { 0 })
    } else {
        (first >> 2 & 0x0f, [2, 3, 5, 1][usize::from(first & 3)])
    };
    let armoured = t.starts_with(b"-----BEGIN PGP MESSAGE-----");
    match tag {
        // A signature or a one-pass signature: signed.
        2 | 4 => true,
        // Compressed data (what `gpg -s` writes first): its algorithm byte must be
        // ZIP, ZLIB or BZip2 — a weak sign alone, so only where nothing else matched.
        8 => armoured || (header > 0 && binary.get(header).is_some_and(|a| (1..=3).contains(a))),
        11 => armoured,
        _ => false,
    }
}

/// What drcheck says of a signed-only OpenPGP backup when no signer's key is set.
pub(crate) const SIGNED_ONLY: &str = "the backup is an OpenPGP message that is signed, not encrypted (gpg -s or --clearsign): \
    set decrypt.signed_by for this target to the signer's public key (armoured, or its file) — drcheck unwraps it \
    only after its signature verifies against that key";

pub(crate) fn trim_ascii_start(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| c.is_ascii_whitespace()).count();
    &b[n..]
}

/// What an OpenPGP message's leading session-key packets say it needs.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SessionKeys {
    /// A passphrase (a symmetric-key encrypted session key packet).
    pub passphrase: bool,
    /// The key ids it is encrypted to (16 hex digits; `0000000000000000` for a hidden
    /// recipient, `gpg -R`).
    pub key_ids: Vec<String>,
}

/// Reads the session-key packets at the start of a binary OpenPGP message (RFC 4880
/// §4.2, §5.1, §5.3). `None` when the bytes do not start with one.
pub(crate) fn session_keys(b: &[u8]) -> Option<SessionKeys> {
    let mut out = SessionKeys::default();
    let mut pos = 0;
    let mut any = false;
    while pos < b.len() {
        let tag_byte = b[pos];
        if tag_byte & 0x80 == 0 {
            return None;
        }
        let (tag, len, header) = if tag_byte & 0x40 != 0 {
            let tag = tag_byte & 0x3f;
            let o1 = *b.get(pos + 1)? as usize;
            match o1 {
                0..=191 => (tag, o1, 2),
                192..=223 => (tag, ((o1 - 192) << 8) + *b.get(pos + 2)? as usize + 192, 3),
                255 => {
                    let l = b.get(pos + 2..pos + 6)?;
                    (tag, u32::from_be_bytes(l.try_into().ok()?) as usize, 6)
                }
                _ => (tag, usize::MAX, 2), // partial length: not a session-key packet
            }
        } else {
            let tag = (tag_byte >> 2) & 0x0f;
            match tag_byte & 3 {
                0 => (tag, *b.get(pos + 1)? as usize, 2),
                1 => (tag, u16::from_be_bytes(b.get(pos + 1..pos + 3)?.try_into().ok()?) as usize, 3),
                2 => (tag, u32::from_be_bytes(b.get(pos + 1..pos + 5)?.try_into().ok()?) as usize, 5),
                _ => (tag, usize::MAX, 1),
            }
        };
        let body = pos + header;
        match tag {
            // Public-key encrypted session key: version 3, then the 8-byte key id.
            1 => {
                if *b.get(body)? != 3 || len < 10 {
                    return if any { Some(out) } else { None };
                }
                out.key_ids.push(hex::encode_upper(b.get(body + 1..body + 9)?));
            }
            // Symmetric-key encrypted session key: version 4 or 5, then the cipher.
            3 => {
                if !matches!(*b.get(body)?, 4..=6) || len < 4 {
                    return if any { Some(out) } else { None };
                }
                out.passphrase = true;
            }
            // The encrypted data follows the session keys.
            9 | 18 | 20 if any => return Some(out),
            _ => return None,
        }
        any = true;
        if len == usize::MAX {
            return None;
        }
        pos = body + len;
    }
    any.then_some(out)
}

/// The binary start of an armoured OpenPGP message (as much as `head` holds).
pub(crate) fn dearmor_openpgp(head: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let text = String::from_utf8_lossy(head);
    let mut lines = text.lines().skip_while(|l| !l.starts_with("-----BEGIN PGP MESSAGE-----")).skip(1);
    // Armour headers (`Version: …`, `Comment: …`) end at a blank line.
    let mut b64 = String::new();
    let mut in_headers = true;
    for l in lines.by_ref() {
        let l = l.trim();
        if in_headers {
            if l.is_empty() {
                in_headers = false;
            } else if !l.contains(':') {
                in_headers = false;
                b64.push_str(l);
            }
            continue;
        }
        if l.starts_with('=') || l.starts_with("-----") {
            break;
        }
        b64.push_str(l);
    }
    b64.truncate(b64.len() / 4 * 4);
    base64::engine::general_purpose::STANDARD.decode(b64.as_bytes()).unwrap_or_default()
}

/// The recipient stanza types of an age header (`X25519`, `scrypt`, `ssh-ed25519`, …),
/// armoured or not, as far as `head` holds it.
pub(crate) fn age_stanzas(head: &[u8]) -> Vec<String> {
    let binary: Vec<u8> = if trim_ascii_start(head).starts_with(b"-----BEGIN AGE") {
        let mut r = age::armor::ArmoredReader::new(head);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = io::Read::read(&mut r, &mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        out
    } else {
        head.to_vec()
    };
    let text = String::from_utf8_lossy(&binary);
    text.lines()
        .take_while(|l| !l.starts_with("---"))
        .filter_map(|l| l.strip_prefix("-> "))
        .filter_map(|l| l.split(' ').next().map(str::to_string))
        .collect()
}
