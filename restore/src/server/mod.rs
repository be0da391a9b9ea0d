//! The server layer: the throwaway PostgreSQL a backup becomes — its directory and
//! server ([`sandbox`]), the containment of every process that reads backup bytes
//! ([`contain`]), the binaries of each major ([`pgbin`]), recovery of a physical backup
//! to a target ([`recovery`]), how far archived WAL replays ([`reach`]), the client tools run
//! against it ([`tools`]), what a crash left behind ([`leftovers`]), and reading what those processes print without
//! trusting its size ([`capture`]). Knows nothing of stores or backup tools.

pub mod capture;
pub mod contain;
pub mod leftovers;
pub mod pgbin;
pub mod reach;
pub mod recovery;
pub mod sandbox;
pub mod tools;
