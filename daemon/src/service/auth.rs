//! The API token, checked: a bearer token (the API) or HTTP Basic's password (people's
//! browsers on the status pages), compared in constant time.

use axum::http::{HeaderMap, header};

pub(super) fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let given =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    given.is_some_and(|g| same(g.as_bytes(), token.as_bytes()))
}

/// Constant-time comparison, so the token cannot be guessed byte by byte.
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
