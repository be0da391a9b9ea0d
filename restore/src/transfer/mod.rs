//! The transfer layer: bytes from a store to the restore — ranged, parallel, bounded
//! downloads ([`fetch`]), and what is peeled off on the way: format detection
//! ([`format`]), the stream pieces ([`stream`]), undoing compression and encryption ([`peel`]), decryption
//! ([`decrypt`]) and tar unpacking ([`unpack`]). Stands on `store` and `server` (gpg
//! runs contained); knows nothing of backup tools.

pub(crate) mod decrypt;
pub(crate) mod envelope;
pub(crate) mod fetch;
pub(crate) mod format;
pub(crate) mod peel;
pub(crate) mod stream;
pub(crate) mod unpack;
