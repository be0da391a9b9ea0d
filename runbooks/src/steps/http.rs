//! `http`: one request; checks the status, a substring of the body, JSON pointers.

use super::{Outcome, Raced, StepCtx, race};
use crate::format::RawHttp;
use std::time::Duration;

pub async fn run(h: &RawHttp, ctx: &StepCtx<'_>) -> Result<Outcome, Outcome> {
    let url = ctx.resolve("url", &h.url)?;
    let shown = crate::scope::redact_urls(&url);
    let method = ctx.resolve("method", h.method.as_deref().unwrap_or("GET"))?;
    let method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|_| Outcome::failed(format!("{method:?} is not an HTTP method")))?;
    let budget = ctx.deadline.saturating_duration_since(tokio::time::Instant::now());
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10).min(budget.max(Duration::from_millis(1))))
        .build()
        .map_err(|e| Outcome::failed(format!("http client: {e}")))?;
    let mut req = client.request(method.clone(), &url);
    for (k, v) in &h.headers {
        req = req.header(k, ctx.resolve(&format!("headers.{k}"), v)?);
    }
    if let Some(b) = &h.body {
        req = req.body(ctx.resolve("body", b)?);
    }
    let send = async {
        let resp = req.send().await?;
        let status = resp.status();
        let body = resp.text().await?;
        Ok::<_, reqwest::Error>((status, body))
    };
    let (status, body) = match race(ctx, send).await {
        Raced::Done(Ok(r)) => r,
        Raced::Done(Err(e)) => {
            return Err(Outcome::failed(format!("{method} {shown}: {}", ctx.scrub(&e.without_url().to_string()))));
        }
        Raced::TimedOut => return Err(super::timed_out(ctx)),
        Raced::Cancelled => return Err(super::aborted()),
    };
    let ok_status = match h.expect_status {
        Some(s) => status.as_u16() == s,
        None => status.is_success(),
    };
    let mut o = if !ok_status {
        let want = h.expect_status.map(|s| s.to_string()).unwrap_or_else(|| "2xx".into());
        Outcome::failed(format!("HTTP {}, expected {want}", status.as_u16()))
    } else if let Some(needle) = &h.body_contains
        && !body.contains(&ctx.resolve("body_contains", needle)?)
    {
        Outcome::failed(format!("HTTP {}, but the body does not contain {:?}", status.as_u16(), ctx.scrub(needle)))
    } else {
        json_checks(h, &body).unwrap_or_else(|| Outcome::passed(format!("HTTP {}", status.as_u16())))
    };
    o.output = ctx.scrub(&super::tail(&body, 2048));
    if h.capture.is_some() && o.status == super::Status::Passed {
        o.value = Some(body.trim().to_string());
    }
    Ok(o)
}

/// The first `expect_json` pointer whose value differs, as a failure.
fn json_checks(h: &RawHttp, body: &str) -> Option<Outcome> {
    if h.expect_json.is_empty() {
        return None;
    }
    let doc: serde_json::Value = match serde_json::from_str(body) {
        Ok(d) => d,
        Err(e) => return Some(Outcome::failed(format!("the body is not JSON: {e}"))),
    };
    for (pointer, want) in &h.expect_json {
        match doc.pointer(pointer) {
            Some(got) if same(got, want) => {}
            Some(got) => return Some(Outcome::failed(format!("{pointer} is {got}, expected {want}"))),
            None => return Some(Outcome::failed(format!("{pointer} is not in the body"))),
        }
    }
    None
}

/// Equal, treating a YAML scalar written as text and a JSON number or boolean alike
/// (`"/count": 3` in YAML reads as the string "3").
fn same(got: &serde_json::Value, want: &serde_json::Value) -> bool {
    got == want
        || match (got, want) {
            (g, serde_json::Value::String(w)) if !g.is_string() => {
                serde_json::from_str::<serde_json::Value>(w).ok().as_ref() == Some(g)
            }
            _ => false,
        }
}
