//! The transfer layer: bytes from a store to the restore — ranged, parallel, bounded
//! downloads ([`fetch`], [`pool`]) with retries ([`retry`]) behind a circuit breaker
//! ([`breaker`]), and what is peeled off on the way: format detection ([`format`]),
//! decryption ([`decrypt`]) and tar unpacking ([`unpack`]). Knows nothing of servers or
//! backup tools.

pub mod breaker;
pub mod decrypt;
pub mod fetch;
pub mod format;
pub mod pool;
pub mod retry;
pub mod unpack;
