//! The transfer layer: bytes from a store to the restore — ranged, parallel, bounded
//! downloads ([`fetch`]), and what is peeled off on the way: format detection
//! ([`format`]), the stream pieces ([`stream`]), undoing compression and encryption ([`peel`]), decryption
//! ([`decrypt`]) and tar unpacking ([`unpack`]). Stands on `store` and `server` (gpg
//! runs contained); knows nothing of backup tools.

pub mod decrypt;
pub mod envelope;
pub mod fetch;
pub mod format;
pub mod peel;
pub mod stream;
pub mod unpack;
