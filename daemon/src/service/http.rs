//! The daemon's HTTP surface: the status pages `/` and `/targets/{name}` (`status.rs`),
//! `/metrics`, `/healthz`, `/readyz`, `GET /api/v1/runs`, `GET /api/v1/runs/{id}` (the
//! recorded report; 202 with `status: running` for a started run not recorded yet
//! (`queued` while a triggered one waits to start);
//! 404 otherwise), `POST /api/v1/targets/{name}/verify` (bearer token; 401 without it,
//! 404 for an unknown target, 409 while that target runs, 202 with the run id otherwise),
//! `POST /api/v1/targets/{name}/backups/forget` (`{"key", "reason", "by"}`) and
//! `POST /api/v1/targets/{name}/archive/acknowledge-gap` (`{"from", "to", "reason", "by"}`):
//! an operator's decision recorded (issue 48; 201 with it, 400 when it cannot be).
//!
//! With `[api] token` set, every route under `/api` needs it (a layer over the whole
//! `/api` tree, so a new route cannot forget it) and the status pages ask for it
//! (`status.rs`); only `/metrics`, `/healthz` and `/readyz` stay open. Without a token, `GET /api/v1/runs` is open and triggering is off.

use super::auth::bearer_matches;
use super::{Shared, run_target};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::sync::Arc;

pub(super) fn router(shared: Arc<Shared>) -> axum::Router {
    let api = axum::Router::new()
        .route("/api/v1/runs", get(runs))
        .route("/api/v1/runs/{id}", get(run_by_id))
        .route("/api/v1/targets/{name}/verify", post(trigger))
        .route("/api/v1/targets/{name}/backups/forget", post(forget))
        .route("/api/v1/targets/{name}/archive/acknowledge-gap", post(acknowledge_gap))
        .route_layer(axum::middleware::from_fn_with_state(shared.clone(), require_token));
    axum::Router::new()
        .route("/", get(super::status::index))
        .route("/targets/{name}", get(super::status::target))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .merge(api)
        .with_state(shared)
}

/// The bearer token check of every `/api` route, when a token is configured.
async fn require_token(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(token) = &s.config().api.token
        && !bearer_matches(&headers, token.expose())
    {
        return unauthorized();
    }
    next.run(request).await
}

fn unauthorized() -> Response {
    (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "missing or wrong bearer token\n")
        .into_response()
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    if let Ok(depth) = s.history.outbox_depth().await {
        s.metrics.alert_outbox_depth.set(depth);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render()).into_response()
}

async fn readyz(State(s): State<Arc<Shared>>) -> Response {
    match s.history.outbox_depth().await {
        Ok(_) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("history store unreachable: {e:#}\n")).into_response(),
    }
}

#[derive(serde::Deserialize)]
struct RunsQuery {
    target: Option<String>,
    limit: Option<u32>,
}

async fn runs(State(s): State<Arc<Shared>>, Query(q): Query<RunsQuery>) -> Response {
    match s.history.recent(q.target.as_deref(), q.limit.unwrap_or(20).min(1000)).await {
        Ok(runs) => Json(serde_json::json!({ "runs": runs })).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}\n")).into_response(),
    }
}

async fn run_by_id(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match s.history.run(&id).await {
        Ok(Some(run)) => Json(serde_json::json!(run)).into_response(),
        Ok(None) => match s.history.run_start(&id).await {
            // Started and not finished (202), or triggered and never started (200: its
            // final answer, `skipped` with the reason).
            Ok(Some(start)) => {
                let status = if start.state == crate::history::RUNNING { StatusCode::ACCEPTED } else { StatusCode::OK };
                let mut body = serde_json::json!(start);
                body["status"] = serde_json::json!(start.state);
                (status, Json(body)).into_response()
            }
            Ok(None) => match s.triggered.lock().unwrap().get(&id) {
                Some(target) => (
                    StatusCode::ACCEPTED,
                    Json(serde_json::json!({"run_id": id, "target": target, "status": "queued"})),
                )
                    .into_response(),
                None => (StatusCode::NOT_FOUND, Json(serde_json::json!({"error": format!("no run {id:?}")})))
                    .into_response(),
            },
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}\n")).into_response(),
        },
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}\n")).into_response(),
    }
}

async fn trigger(State(s): State<Arc<Shared>>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    let config = s.config();
    let Some(token) = &config.api.token else {
        return (StatusCode::UNAUTHORIZED, "the trigger API is off: set [api] token\n").into_response();
    };
    if !bearer_matches(&headers, token.expose()) {
        return unauthorized();
    }
    if config.target(&name).is_none() {
        return (StatusCode::NOT_FOUND, format!("no target {name:?}\n")).into_response();
    }
    if !s.running.lock().unwrap().insert(name.clone()) {
        return (StatusCode::CONFLICT, Json(serde_json::json!({"error": format!("{name} is already being verified")})))
            .into_response();
    }
    let run_id = crate::ids::new_run_id();
    s.triggered.lock().unwrap().insert(run_id.clone(), name.clone());
    let (sh, rid, t) = (s.clone(), run_id.clone(), name.clone());
    s.tracker.spawn(async move {
        if let Err(e) = run_target(sh.clone(), t.clone(), rid.clone()).await {
            tracing::warn!(target = %t, run_id = %rid, reason = %e, "triggered run did not start");
            // The id the API gave out keeps its answer: skipped, and why.
            if let Err(err) = sh.history.run_skipped(&rid, &t, &sh.holder, &e.to_string()).await {
                tracing::warn!(target = %t, run_id = %rid, "cannot record the skipped run: {err:#}");
            }
        }
        sh.triggered.lock().unwrap().remove(&rid);
        sh.running.lock().unwrap().remove(&t);
    });
    (StatusCode::ACCEPTED, Json(serde_json::json!({"run_id": run_id, "target": name}))).into_response()
}

/// An operator's decision through the API: what it is about, why, and who.
#[derive(serde::Deserialize)]
struct Decision {
    key: Option<String>,
    from: Option<String>,
    to: Option<String>,
    reason: String,
    /// Who decided; the API cannot tell who holds the token, so it is said.
    by: Option<String>,
}

async fn decide(s: &Shared, name: &str, kind: &str, d: Decision) -> Response {
    // Like triggering: off without a token (the layer checked it when there is one).
    if s.config().api.token.is_none() {
        return (StatusCode::UNAUTHORIZED, "decisions through the API are off: set [api] token\n").into_response();
    }
    if s.config().target(name).is_none() {
        return (StatusCode::NOT_FOUND, format!("no target {name:?}\n")).into_response();
    }
    if d.reason.trim().is_empty() {
        return (StatusCode::BAD_REQUEST, "reason: say why\n").into_response();
    }
    let by = d.by.filter(|b| !b.trim().is_empty()).unwrap_or_else(|| "the API (its token)".into());
    let (subject, to) = match (kind, d.key, d.from, d.to) {
        (crate::history::FORGOTTEN_BACKUP, Some(key), _, _) => (key, None),
        (crate::history::WAL_GAP, _, Some(from), Some(to)) => {
            if let Err(e) = crate::history::gap_bounds(&from, &to) {
                return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response();
            }
            (from, Some(to))
        }
        _ => return (StatusCode::BAD_REQUEST, "key (a backup), or from and to (WAL segments)\n").into_response(),
    };
    match s.history.acknowledge(name, kind, &subject, to.as_deref(), &d.reason, &by).await {
        Ok(ack) => (StatusCode::CREATED, Json(serde_json::json!(ack))).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e:#}\n")).into_response(),
    }
}

async fn forget(State(s): State<Arc<Shared>>, Path(name): Path<String>, Json(d): Json<Decision>) -> Response {
    decide(&s, &name, crate::history::FORGOTTEN_BACKUP, d).await
}

async fn acknowledge_gap(State(s): State<Arc<Shared>>, Path(name): Path<String>, Json(d): Json<Decision>) -> Response {
    decide(&s, &name, crate::history::WAL_GAP, d).await
}
