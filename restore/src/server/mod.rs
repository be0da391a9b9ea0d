//! The server layer: the throwaway PostgreSQL a backup becomes — its directory and
//! server ([`sandbox`]), the containment of every process that reads backup bytes
//! ([`contain`]), the binaries of each major ([`pgbin`]), recovery of a physical backup
//! to a target ([`recovery`]), how far archived WAL replays ([`reach`]), the client tools run
//! against it ([`tools`]), what a crash left behind ([`leftovers`]), and reading what those processes print without
//! trusting its size ([`capture`]). Knows nothing of stores or backup tools.

pub(crate) mod capture;
pub mod contain;
pub(crate) mod leftovers;
pub(crate) mod pgbin;
pub(crate) mod reach;
pub(crate) mod recovery;
pub(crate) mod sandbox;
pub(crate) mod tools;
