//! Backups in S3 or an S3-compatible server, through aws-sdk-s3.
//!
//! The SDK's standard retry mode retries only transient failures (timeouts, resets,
//! 5xx, throttling) with exponential backoff and full jitter, capped in delay and
//! attempts; everything else (403, 404, a missing bucket) fails at once. Connect and
//! per-attempt timeouts bound every call, and a stalled body fails after `BODY_IDLE_TIMEOUT` without a byte.

use super::{BackupObject, BackupStore, ObjectLock, Protection, WriteProbe};
use crate::error::StoreError;
use crate::store::breaker::{self, Breaker};
use crate::store::retry::Backoff;
use async_trait::async_trait;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Region, RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use drcheck_config::S3Storage;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long a ranged GET's body may go without a byte before it is treated as dead.
const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) struct S3Store {
    client: aws_sdk_s3::Client,
    bucket: String,
    endpoint: String,
    /// As configured (userinfo and all): only to scrub it out of the SDK's messages.
    raw_endpoint: String,
    breaker: Arc<Breaker>,
    /// The last failure that counted against the breaker: said again while it is open.
    last_failure: std::sync::Mutex<Option<String>>,
    /// The blocks downloads are read into, reused (`pool.rs`).
    blocks: Arc<crate::store::pool::BlockPool>,
    /// Listings and stats are asked again for the storage's `retry_window`.
    backoff: Backoff,
}

/// The size of the blocks a part is handed over in.
const BLOCK: usize = 1 << 20;
/// Idle blocks kept for reuse: what a download's window holds, and a few more.
const KEEP_BLOCKS: usize = (crate::store::pool::WINDOW as usize / BLOCK) + 4;

impl S3Store {
    pub(crate) async fn new(_name: &str, cfg: &S3Storage) -> Self {
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(3))
            .operation_attempt_timeout(Duration::from_secs(60))
            .build();
        // One retry layer: drcheck's own (`retry.rs`), which logs every retry. Stacked
        // under it, the SDK's would multiply the attempts (3 × 4 GETs a part) unseen.
        let retries = RetryConfig::disabled();
        let shared = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(cfg.region.clone()))
            .timeout_config(timeouts)
            .retry_config(retries)
            .load()
            .await;
        let mut builder = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(cfg.path_style)
            // S3-compatible servers do not all understand the SDK's default checksums.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if let Some(endpoint) = &cfg.endpoint {
            builder = builder.endpoint_url(endpoint);
        }
        // A private CA (the same file the backup tools are handed): trusted besides the
        // system's roots. The config check made sure the file exists; an unreadable or
        // non-PEM file leaves the system roots, and the TLS error then says why.
        if let Some(ca) = &cfg.ca_file {
            match std::fs::read(ca) {
                Ok(pem) => {
                    use aws_smithy_http_client::tls;
                    let store = tls::TrustStore::default().with_pem_certificate(pem);
                    match tls::TlsContext::builder().with_trust_store(store).build() {
                        Ok(ctx) => {
                            let http = aws_smithy_http_client::Builder::new()
                                .tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::AwsLc))
                                .tls_context(ctx)
                                .build_https();
                            builder = builder.http_client(http);
                        }
                        Err(e) => tracing::warn!(ca = %ca.display(), "cannot use the CA file: {e}"),
                    }
                }
                Err(e) => tracing::warn!(ca = %ca.display(), "cannot read the CA file: {e}"),
            }
        }
        // Shown in errors, logs and the breaker's metric label: never its userinfo.
        let endpoint = cfg
            .endpoint
            .as_deref()
            .map(drcheck_config::redact_userinfo)
            .unwrap_or_else(|| format!("AWS {}", cfg.region));
        let raw_endpoint = cfg.endpoint.clone().unwrap_or_default();
        let breaker = breaker::for_dependency(&format!("s3 {endpoint}"));
        Self {
            client: aws_sdk_s3::Client::from_conf(builder.build()),
            bucket: cfg.bucket.clone(),
            endpoint,
            raw_endpoint,
            breaker,
            last_failure: Default::default(),
            blocks: crate::store::pool::BlockPool::new(BLOCK, KEEP_BLOCKS),
            backoff: Backoff::within(cfg.retry_window),
        }
    }

    fn error<E>(&self, what: &str, e: SdkError<E, HttpResponse>) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let changed = matches!(&e, SdkError::ServiceError(s) if s.raw().status().as_u16() == 412);
        let (message, unreachable) = match &e {
            SdkError::TimeoutError(_) => (format!("{what}: timed out"), true),
            // Asking again cannot find credentials that are not configured.
            SdkError::DispatchFailure(_) if no_credentials(&chain(&e)) => (
                format!(
                    "{what}: no AWS credentials for this store: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
                     (or AWS_PROFILE, or a web-identity/instance role) in drcheck's environment{} ({})",
                    missing_aws_files(),
                    one_line(&chain(&e))
                ),
                false,
            ),
            SdkError::DispatchFailure(_) => {
                let detail = chain(&e);
                // A certificate the client does not trust stays untrusted: asking again
                // cannot help (set ca_file), unlike a refused or reset connection.
                if detail.contains("invalid peer certificate") || detail.contains("UnknownIssuer") {
                    (format!("{what}: TLS: the endpoint's certificate is not trusted (set ca_file?): {detail}"), false)
                } else {
                    (format!("{what}: cannot reach the endpoint after retries: {detail}"), true)
                }
            }
            SdkError::ResponseError(_) => (format!("{what}: invalid response: {}", chain(&e)), true),
            SdkError::ServiceError(s) => {
                let err = s.err();
                let code = err.code().unwrap_or("unknown error");
                let msg = err.message().unwrap_or("");
                let status = s.raw().status().as_u16();
                let server_side = status >= 500 || status == 429;
                let line = format!("{what}: HTTP {status} {code} {msg}").trim_end().to_string();
                let line = match service_hint(code, status) {
                    Some(hint) => format!("{line} — {hint}"),
                    None => line,
                };
                (line, server_side)
            }
            _ => (format!("{what}: {}", chain(&e)), false),
        };
        let message = self.scrub(message);
        StoreError { store: self.describe(), message, unreachable: unreachable && !changed, changed }
    }
}

/// What to do about an S3 error a user meets first, by its code (the store's own words
/// come before it).
fn service_hint(code: &str, status: u16) -> Option<&'static str> {
    Some(match code {
        "NoSuchBucket" => "no bucket of that name at this endpoint: check the storage's `bucket` (and `endpoint`)",
        "PermanentRedirect" | "AuthorizationHeaderMalformed" | "IllegalLocationConstraintException" => {
            "the bucket is in another region: set the storage's `region` to the bucket's"
        }
        "InvalidAccessKeyId" => "the store does not know this access key: check AWS_ACCESS_KEY_ID",
        "SignatureDoesNotMatch" => "the secret key does not match the access key: check AWS_SECRET_ACCESS_KEY",
        "AccessDenied" | "AllAccessDisabled" => {
            "these credentials may not read here: grant s3:ListBucket on the bucket and s3:GetObject on the prefix"
        }
        "ExpiredToken" | "TokenRefreshRequired" => "the session token expired: refresh the credentials",
        _ if status == 301 => "the bucket is in another region: set the storage's `region` to the bucket's",
        _ if status == 403 => {
            "these credentials may not read here: grant s3:ListBucket on the bucket and s3:GetObject on the prefix"
        }
        _ => return None,
    })
}

/// Whether the SDK could not find credentials (asking again cannot help).
fn no_credentials(chain: &str) -> bool {
    chain.contains("loading credentials")
        || chain.contains("no credentials found")
        || chain.contains("credential provider")
}

/// The AWS files the environment names that do not exist (the SDK only warns of them).
fn missing_aws_files() -> String {
    let missing: Vec<String> = ["AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"]
        .iter()
        .filter_map(|k| {
            let v = std::env::var_os(k)?;
            (!std::path::Path::new(&v).exists()).then(|| format!("{k}={} does not exist", v.to_string_lossy()))
        })
        .collect();
    if missing.is_empty() { String::new() } else { format!("; {}", missing.join(", ")) }
}

/// A message of several lines (the SDK lists each provider it tried) as one.
fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ")
}

/// An error and its causes as people read them: each distinct `Display` message once,
/// joined by ": " (the SDK's `DisplayErrorContext` appends `Debug` dumps).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
}

impl S3Store {
    /// The SDK's messages may quote the endpoint URL: never with its userinfo.
    fn scrub(&self, message: String) -> String {
        let Ok(url) = url::Url::parse(&self.raw_endpoint) else { return message };
        let mut message = message.replace(&self.raw_endpoint, &self.endpoint);
        for part in [url.username(), url.password().unwrap_or("")] {
            if part.len() >= 3 {
                message = message.replace(part, "***");
            }
        }
        message
    }

    /// Runs a call through the endpoint's circuit breaker. Only failures to reach the
    /// store count against it; a 404 is the store working.
    async fn guarded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if let Err(wait) = self.breaker.admit() {
            let last = self.last_failure.lock().unwrap().clone().unwrap_or_default();
            return Err(StoreError {
                store: self.describe(),
                message: self.breaker.refusal(wait, &last),
                // Asked again while the streak is younger than the retry window: a run
                // that starts after another gave up on the store gives up at once.
                unreachable: self.breaker.failing_for().is_none_or(|d| d < self.backoff.window),
                changed: false,
            });
        }
        let r = call.await;
        match &r {
            Err(e) if e.unreachable => {
                *self.last_failure.lock().unwrap() = Some(e.message.clone());
                self.breaker.failure()
            }
            _ => self.breaker.success(),
        }
        r
    }
}

/// The store refused the request (the credentials lack the permission).
fn refused<E>(e: &SdkError<E, HttpResponse>) -> bool {
    matches!(e, SdkError::ServiceError(s) if matches!(s.raw().status().as_u16(), 401 | 403))
}

fn to_system_time(t: Option<&aws_sdk_s3::primitives::DateTime>) -> SystemTime {
    t.and_then(|t| SystemTime::try_from(*t).ok()).unwrap_or(SystemTime::UNIX_EPOCH)
}

#[async_trait]
impl BackupStore for S3Store {
    fn describe(&self) -> String {
        format!("s3://{} at {}", self.bucket, self.endpoint)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<BackupObject>, StoreError> {
        self.list_from(prefix, None).await
    }

    async fn list_after(&self, prefix: &str, start_after: &str) -> Result<Vec<BackupObject>, StoreError> {
        self.list_from(prefix, Some(start_after)).await
    }

    async fn stat(&self, key: &str) -> Result<BackupObject, StoreError> {
        let what = format!("stat {key}");
        self.backoff
            .run_counted(&what, |_| self.guarded(self.stat_unguarded(key)), |e: &StoreError| e.unreachable)
            .await
            .map_err(StoreError::after)
    }

    /// One attempt: callers retry (the fetcher per part, with its own backoff).
    async fn read_range(&self, key: &str, offset: u64, len: u64) -> Result<bytes::Bytes, StoreError> {
        let chunks = self.read_range_chunks(key, offset, len).await?;
        Ok(match chunks.len() {
            1 => chunks.into_iter().next().unwrap_or_default(),
            _ => chunks.concat().into(),
        })
    }

    async fn read_range_chunks(&self, key: &str, offset: u64, len: u64) -> Result<Vec<bytes::Bytes>, StoreError> {
        self.guarded(self.read_range_unguarded(key, None, offset, len)).await
    }

    async fn read_range_pinned(
        &self,
        key: &str,
        etag: Option<&str>,
        offset: u64,
        len: u64,
    ) -> Result<Vec<bytes::Bytes>, StoreError> {
        self.guarded(self.read_range_unguarded(key, etag, offset, len)).await
    }

    fn download_lease(&self) -> Option<crate::store::pool::Lease> {
        Some(self.blocks.lease())
    }

    async fn protection(&self) -> Result<Option<Protection>, StoreError> {
        let answer = self.client.get_bucket_versioning().bucket(&self.bucket).send().await;
        let versioning = match answer {
            Ok(v) => v.status().map(|s| s.as_str().to_string()),
            // A 200 whose body is not S3's `VersioningConfiguration` (moto answers with
            // another root element): said so, and the objects' version ids tell.
            Err(SdkError::ResponseError(_)) => Some(super::VERSIONING_UNREADABLE.to_string()),
            Err(SdkError::ServiceError(s)) if s.raw().status().is_success() => {
                Some(super::VERSIONING_UNREADABLE.to_string())
            }
            Err(e) => return Err(self.error("read the bucket's versioning", e)),
        };
        let lock = self.client.get_object_lock_configuration().bucket(&self.bucket).send().await;
        let config = match lock {
            Ok(r) => r.object_lock_configuration().cloned(),
            // A bucket made without Object Lock has no configuration: that is the answer.
            Err(SdkError::ServiceError(s)) if s.err().code() == Some("ObjectLockConfigurationNotFoundError") => None,
            Err(e) => return Err(self.error("read the bucket's Object Lock configuration", e)),
        };
        let rule = config.as_ref().and_then(|c| c.rule()).and_then(|r| r.default_retention());
        Ok(Some(Protection {
            versioning,
            lock_enabled: config
                .as_ref()
                .and_then(|c| c.object_lock_enabled())
                .is_some_and(|e| e.as_str() == "Enabled"),
            default_mode: rule.and_then(|r| r.mode()).map(|m| m.as_str().to_string()),
            default_period: rule.and_then(|r| {
                r.days().map(|d| format!("{d} days")).or_else(|| r.years().map(|y| format!("{y} years")))
            }),
        }))
    }

    async fn object_lock(&self, key: &str) -> Result<Option<ObjectLock>, StoreError> {
        let resp = self
            .guarded(async {
                self.client
                    .head_object()
                    .bucket(&self.bucket)
                    .key(key)
                    .send()
                    .await
                    .map_err(|e| self.error(&format!("head {key:?}"), e))
            })
            .await?;
        Ok(Some(ObjectLock {
            size: resp.content_length().unwrap_or(0).max(0) as u64,
            etag: resp.e_tag().map(str::to_string),
            // An unversioned bucket's objects answer with the version id "null".
            version_id: resp.version_id().filter(|v| *v != "null").map(str::to_string),
            mode: resp.object_lock_mode().map(|m| m.as_str().to_string()),
            retain_until: resp.object_lock_retain_until_date().and_then(|t| SystemTime::try_from(*t).ok()),
            legal_hold: resp.object_lock_legal_hold_status().is_some_and(|s| s.as_str() == "ON"),
        }))
    }

    async fn probe_write(&self, probe_key: &str) -> Result<Option<WriteProbe>, StoreError> {
        // A delete of a key that does not exist: nothing is lost whatever the answer (a
        // versioned bucket records a delete marker, removed again below).
        let absent = format!("{probe_key}.absent");
        let deleted = self.client.delete_object().bucket(&self.bucket).key(&absent).send().await;
        let delete_allowed = match deleted {
            Ok(r) => {
                if let (Some(true), Some(v)) = (r.delete_marker(), r.version_id()) {
                    let _ = self.client.delete_object().bucket(&self.bucket).key(&absent).version_id(v).send().await;
                }
                true
            }
            Err(e) if refused(&e) => false,
            Err(e) => return Err(self.error(&format!("probe: delete {absent:?}"), e)),
        };
        let body = aws_sdk_s3::primitives::ByteStream::from_static(b"");
        let put = self.client.put_object().bucket(&self.bucket).key(probe_key).body(body).send().await;
        let (put_allowed, version) = match put {
            Ok(r) => (true, r.version_id().map(str::to_string)),
            Err(e) if refused(&e) => (false, None),
            Err(e) => return Err(self.error(&format!("probe: put {probe_key:?}"), e)),
        };
        let mut left_behind = None;
        if put_allowed {
            let mut delete = self.client.delete_object().bucket(&self.bucket).key(probe_key);
            if let Some(v) = version.as_deref().filter(|v| *v != "null") {
                delete = delete.version_id(v);
            }
            // Under a default retention the empty object is locked like every other.
            if delete.send().await.is_err() {
                left_behind = Some(probe_key.to_string());
            }
        }
        Ok(Some(WriteProbe { delete_allowed, put_allowed, left_behind }))
    }
}

impl S3Store {
    /// Page by page, each page retried on its own: a transient failure on page 900 of
    /// a big prefix repeats one request, not the 899 before it. From `start_after` on
    /// when given (the store skips what sorts before it).
    async fn list_from(&self, prefix: &str, start_after: Option<&str>) -> Result<Vec<BackupObject>, StoreError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        let mut page = 0u64;
        loop {
            page += 1;
            let what = format!("list {prefix:?} (page {page})");
            let t = token.clone();
            let (objects, next) = self
                .backoff
                .run_counted(
                    &what,
                    |_| self.guarded(self.list_page(prefix, start_after, t.clone())),
                    |e: &StoreError| e.unreachable,
                )
                .await
                .map_err(StoreError::after)?;
            out.extend(objects);
            match next {
                Some(n) => token = Some(n),
                None => return Ok(out),
            }
        }
    }

    /// One page of a listing, and the token of the next (none after the last).
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        token: Option<String>,
    ) -> Result<(Vec<BackupObject>, Option<String>), StoreError> {
        let resp = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_start_after(start_after.map(str::to_string))
            .set_continuation_token(token)
            .send()
            .await
            .map_err(|e| self.error(&format!("list {prefix:?}"), e))?;
        let objects = resp
            .contents()
            .iter()
            .filter_map(|o| {
                Some(BackupObject {
                    key: o.key()?.to_string(),
                    size: o.size().unwrap_or(0).max(0) as u64,
                    last_modified: to_system_time(o.last_modified()),
                    etag: o.e_tag().map(str::to_string),
                })
            })
            .collect();
        let next = match resp.next_continuation_token() {
            Some(t) if resp.is_truncated() == Some(true) => Some(t.to_string()),
            _ => None,
        };
        Ok((objects, next))
    }

    async fn stat_unguarded(&self, key: &str) -> Result<BackupObject, StoreError> {
        let resp = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| self.error(&format!("head {key:?}"), e))?;
        Ok(BackupObject {
            key: key.to_string(),
            size: resp.content_length().unwrap_or(0).max(0) as u64,
            last_modified: to_system_time(resp.last_modified()),
            etag: resp.e_tag().map(str::to_string),
        })
    }

    async fn read_range_unguarded(
        &self,
        key: &str,
        etag: Option<&str>,
        offset: u64,
        len: u64,
    ) -> Result<Vec<bytes::Bytes>, StoreError> {
        let what = format!("get {key:?} bytes {offset}-{}", offset + len - 1);
        let resp = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={offset}-{}", offset + len - 1))
            .set_if_match(etag.map(str::to_string))
            .send()
            .await
            .map_err(|e| {
                let mut err = self.error(&what, e);
                // 412: the object is no longer the version listed.
                if err.changed {
                    err.message = format!(
                        "{key}: the object changed while being read (it is no longer the version listed, ETag {})",
                        etag.unwrap_or("?")
                    );
                }
                err
            })?;
        // The part in blocks of up to BLOCK bytes: the socket's chunks (often a few KiB)
        // gathered once, so the consumer handles a few large pieces per part. Handing
        // the chunks over as they came cost a quarter of the download's speed on Garage
        // (per-chunk work in the stream); one part-sized buffer held each part twice.
        let (mut body, mut got) = (Vec::new(), 0u64);
        let mut block = self.blocks.take(0);
        let mut stream = resp.body;
        loop {
            let chunk = tokio::time::timeout(BODY_IDLE_TIMEOUT, stream.next()).await.map_err(|_| StoreError {
                store: self.describe(),
                message: format!("{what}: body stalled"),
                unreachable: true,
                changed: false,
            })?;
            match chunk {
                None => break,
                Some(Ok(c)) => {
                    if block.room() < c.len() {
                        let full = std::mem::replace(&mut block, self.blocks.take(c.len()));
                        if !full.is_empty() {
                            body.push(full.freeze());
                        }
                    }
                    got += c.len() as u64;
                    block.extend(&c);
                }
                Some(Err(e)) => {
                    return Err(StoreError {
                        store: self.describe(),
                        message: format!("{what}: body interrupted: {}", chain(&e)),
                        unreachable: true,
                        changed: false,
                    });
                }
            }
        }
        if !block.is_empty() {
            body.push(block.freeze());
        }
        // An empty block (a zero-length part) goes straight back to the pool on drop.
        if got != len {
            return Err(StoreError {
                store: self.describe(),
                message: format!("{what}: got {got} of {len} bytes"),
                unreachable: true,
                changed: false,
            });
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 26: the S3 errors a user meets first say what to do.
    #[test]
    fn first_errors_name_their_fix() {
        assert!(service_hint("NoSuchBucket", 404).unwrap().contains("`bucket`"));
        assert!(service_hint("PermanentRedirect", 301).unwrap().contains("`region`"));
        assert!(service_hint("AuthorizationHeaderMalformed", 400).unwrap().contains("`region`"));
        assert!(service_hint("AccessDenied", 403).unwrap().contains("s3:GetObject"));
        assert!(service_hint("InvalidAccessKeyId", 403).unwrap().contains("AWS_ACCESS_KEY_ID"));
        assert!(service_hint("SignatureDoesNotMatch", 403).unwrap().contains("AWS_SECRET_ACCESS_KEY"));
        assert_eq!(service_hint("NoSuchKey", 404), None);
    }
}
