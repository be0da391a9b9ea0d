//! What a restore tells its caller as it goes: requests in ([`crate::request::RestoreJob`]),
//! events out. The format as soon as it is detected, the bytes received, the first of
//! them, how long the sandbox took to start and how an encrypted backup was opened —
//! each sent when it happens, so a run that fails later still reports what was known.

use std::time::{Duration, Instant};

/// One thing a restore learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreEvent {
    /// The backup's format (`custom+gzip`, `physical`, `physical (pgbackrest full)`).
    Format(String),
    /// The first byte came from the store, at this moment.
    FirstByte(Instant),
    /// Bytes received from the store so far, in total.
    Received(u64),
    /// `initdb` and the server's start took this long (logical restores).
    SandboxReady(Duration),
    /// The backup is encrypted: with what, then (once opened) by which key.
    Decryption(Decryption),
    /// The SHA-256 of an object as it was fetched and read to its end (hex): what the
    /// backup's proof pins beside the object's ETag.
    Sha256 { key: String, hex: String },
}

/// How a backup was opened, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decryption {
    /// `age` or `openpgp`.
    pub encryption: String,
    /// Which key opened it (a recipient, key id or "passphrase"), never the secret.
    pub decrypted_by: Option<String>,
}

/// Where a restore's events go: a channel's sending end, or nowhere.
#[derive(Clone, Default)]
pub struct Events(Option<tokio::sync::mpsc::UnboundedSender<RestoreEvent>>);

impl Events {
    /// Events for a caller that reads them from the returned end.
    pub fn channel() -> (Events, tokio::sync::mpsc::UnboundedReceiver<RestoreEvent>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Events(Some(tx)), rx)
    }

    /// Events nobody reads.
    pub fn none() -> Events {
        Events(None)
    }

    /// Tells `event` (dropped when nobody listens any more).
    pub fn send(&self, event: RestoreEvent) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(event);
        }
    }
}
