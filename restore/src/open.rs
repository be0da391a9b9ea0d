//! Opening a target's source from its configuration: the one place that maps
//! `source = …` to a [`Source`] — the binary never names a backup tool.

use crate::source::Source;
use crate::sources::barman::Catalog as BarmanCatalog;
use crate::sources::objects::{Objects, WalArchive};
use crate::sources::pgbackrest::Repo;
use crate::transfer::fetch::FetchOptions;
use drcheck_config::{SourceConfig, StorageConfig, TargetConfig};

/// The source of `target`'s backups in `storage` (described as `described`, the store's
/// own description); `fetch` is how archived WAL objects are downloaded. pgBackRest
/// reads S3 and directory (`posix`) repositories; barman-cloud S3 only (the
/// configuration refuses it elsewhere).
pub fn open_source(
    target: &TargetConfig,
    storage: &StorageConfig,
    described: String,
    fetch: FetchOptions,
) -> Box<dyn Source> {
    let objects = || -> Box<dyn Source> {
        Box::new(Objects {
            described: described.clone(),
            wal: target.wal_prefix.as_ref().map(|prefix| WalArchive { prefix: prefix.clone(), fetch }),
        })
    };
    if let (StorageConfig::Filesystem { path, .. }, SourceConfig::Pgbackrest { stanza, repo_path, cipher_pass }) =
        (storage, &target.source)
    {
        // A posix repository: the storage's directory (and `repo_path` inside it).
        let rel = repo_path.trim_matches('/');
        return Box::new(Repo {
            stanza: stanza.clone(),
            repo_path: repo_path.clone(),
            posix: Some(if rel.is_empty() { path.clone() } else { path.join(rel) }),
            bucket: String::new(),
            endpoint: None,
            region: String::new(),
            path_style: false,
            ca_file: None,
            verify_tls: true,
            cipher_pass: cipher_pass.as_ref().map(|p| p.expose().to_string()),
        });
    }
    let StorageConfig::S3(s3) = storage else { return objects() };
    match &target.source {
        SourceConfig::Objects => objects(),
        SourceConfig::Pgbackrest { stanza, repo_path, cipher_pass } => Box::new(Repo {
            stanza: stanza.clone(),
            repo_path: repo_path.clone(),
            posix: None,
            bucket: s3.bucket.clone(),
            endpoint: s3.endpoint.clone(),
            region: s3.region.clone(),
            path_style: s3.path_style,
            ca_file: s3.ca_file.clone(),
            verify_tls: s3.verify_tls,
            cipher_pass: cipher_pass.as_ref().map(|p| p.expose().to_string()),
        }),
        SourceConfig::BarmanCloud { server_name } => Box::new(BarmanCatalog {
            bucket: s3.bucket.clone(),
            prefix: target.prefix.trim_matches('/').to_string(),
            server_name: server_name.clone(),
            endpoint: s3.endpoint.clone(),
            region: s3.region.clone(),
            ca_file: s3.ca_file.clone(),
        }),
    }
}

/// Where a backup tool keeps a backup's files in the store, the one place that knows
/// each tool's layout: pgBackRest's `<repo>/backup/<stanza>/<label>/`, barman-cloud's
/// `<prefix>/<server>/base/<id>/`; `None` for a store's own backups.
pub fn tool_files_root(target: &TargetConfig) -> Option<String> {
    match &target.source {
        SourceConfig::Pgbackrest { stanza, repo_path, .. } => {
            Some(crate::sources::pgbackrest::files_root(stanza, repo_path))
        }
        SourceConfig::BarmanCloud { server_name } => {
            Some(crate::sources::barman::files_root(&target.prefix, server_name))
        }
        SourceConfig::Objects => None,
    }
}
