//! Undoing a backup's layers, outermost first — gzip, zstd, lz4 ([`decompress`]), age
//! and OpenPGP ([`crate::transfer::decrypt`]) — each bounded like the backup itself.

use crate::error::{RestoreError, Stage};
use crate::server::sandbox::Sandbox;
use crate::store::BackupReader;
use crate::transfer::format::{self, BackupFormat};
use crate::transfer::stream::{Bounded, CHUNK, read_head, rejoin};
use async_compression::tokio::bufread::{GzipDecoder, Lz4Decoder, ZstdDecoder};
use tokio::io::BufReader;

/// Undoes gzip, zstd or lz4 around a backup (`.sql.gz`, `base.tar.zst`, …).
pub(crate) fn decompress(outer: BackupFormat, head: Vec<u8>, rest: BackupReader) -> BackupReader {
    let src = BufReader::with_capacity(CHUNK, rejoin(head, rest));
    match outer {
        BackupFormat::Gzip => {
            let mut d = GzipDecoder::new(src);
            d.multiple_members(true);
            Box::pin(d)
        }
        BackupFormat::Zstd => {
            let mut d = ZstdDecoder::new(src);
            d.multiple_members(true);
            Box::pin(d)
        }
        BackupFormat::Lz4 => Box::pin(Lz4Decoder::new(src)),
        _ => Box::pin(src),
    }
}

/// How many layers (compression, encryption) may wrap a backup: more is hostile.
const MAX_LAYERS: usize = 4;

/// What undoing a backup's layers needs: the keys, where to tell which opened it, and the
/// most each layer may expand to.
pub struct Peel<'a> {
    pub decrypt: &'a drcheck_config::DecryptConfig,
    pub events: &'a crate::events::Events,
    pub expansion_ceiling: u64,
}

/// Undoes every layer around a backup, outermost first — gzip, zstd, lz4, age, OpenPGP,
/// in any order (`pg_dump | gzip | age`, `pg_dump -Fc | gpg -c`). Returns the inner
/// stream, its first bytes and the layers, outermost first. OpenPGP is opened by gpg in
/// `sandbox`; the decompressors and age run here (memory-safe Rust, bounded).
pub async fn peel(
    job: &Peel<'_>,
    sandbox: &Sandbox,
    mut head: Vec<u8>,
    mut reader: BackupReader,
    store: &str,
) -> Result<(BackupReader, Vec<u8>, Vec<BackupFormat>), RestoreError> {
    let mut layers = Vec::new();
    loop {
        let layer = format::detect(&head);
        if !layer.is_layer() {
            return Ok((reader, head, layers));
        }
        if layers.len() == MAX_LAYERS {
            return Err(RestoreError::bad(
                Stage::Fetch,
                format!("the backup is wrapped in more than {MAX_LAYERS} layers of compression or encryption"),
            ));
        }
        let inner = if layer.is_encryption() {
            crate::transfer::decrypt::open(layer, head, reader, job.decrypt, sandbox, job.events).await?
        } else {
            decompress(layer, head, reader)
        };
        // Every layer's output counts against the bound, not only the innermost's: a
        // layer can expand into what the next one skips (zstd's skippable frames).
        let mut inner: BackupReader = Box::pin(Bounded::new(inner, job.expansion_ceiling));
        head = read_head(&mut inner, store).await?;
        reader = inner;
        layers.push(layer);
    }
}

/// How layers read in a format name: innermost first (`custom+gzip+age`).
pub(crate) fn layer_suffix(layers: &[BackupFormat]) -> String {
    layers.iter().rev().map(|l| format!("+{l}")).collect()
}
