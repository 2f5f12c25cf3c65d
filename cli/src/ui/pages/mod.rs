//! The dashboard's pages and actions: a module per page, beside what they share (filters,
//! forms, failures, values and downloads).

use super::{history::History, render, same, App};
use crate::filter::{Filters, STATES};
use crate::jobs::{self, Action, Order, Selection, SortBy};
use crate::output::{self, Row};
use axum::extract::{Path, RawForm, RawQuery, State};
use axum::http::StatusCode;
use maud::{html, Markup};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tokio_postgres::error::SqlState;

pub type Page = (StatusCode, Markup);

mod actions;
mod dead;
mod hours;
mod job_list;
mod job_page;
mod overview;
mod schedules;
mod timeline;
mod types;
mod workers;

pub use actions::*;
pub use dead::*;
use hours::*;
pub use job_list::*;
pub use job_page::*;
pub use overview::*;
pub use schedules::*;
use timeline::*;
pub use types::*;
pub use workers::*;

const PAGE_SIZE: i64 = 50;

fn pairs(raw: Option<&str>) -> Vec<(String, String)> {
    raw.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

fn get<'a>(pairs: &'a [(String, String)], key: &str) -> &'a str {
    pairs
        .iter()
        .find(|(k, v)| k == key && !v.is_empty())
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

fn opt(pairs: &[(String, String)], key: &str) -> Option<String> {
    Some(get(pairs, key).to_string()).filter(|v| !v.is_empty())
}

/// The filters of a page's query or a form: queue, state (comma-separated or repeated),
/// name, tenant, since, error (exact), error_like, q (payload or error contains), find (the
/// search box: an id or part of it, a run id, a key or text), tag (repeated: all of them).
fn filters(pairs: &[(String, String)]) -> Result<Filters, String> {
    let mut state = Vec::new();
    for (_, v) in pairs.iter().filter(|(k, _)| k == "state") {
        for s in v.split(',').filter(|s| !s.is_empty()) {
            if !STATES.contains(&s) {
                return Err(format!("unknown state {s:?}: one of {}", STATES.join(", ")));
            }
            state.push(s.to_string());
        }
    }
    Ok(Filters {
        queue: opt(pairs, "queue"),
        state,
        name: opt(pairs, "name"),
        tenant: opt(pairs, "tenant"),
        since: opt(pairs, "since"),
        error_like: opt(pairs, "error_like"),
        text: opt(pairs, "q"),
        error: opt(pairs, "error"),
        find: opt(pairs, "find"),
        tags: pairs
            .iter()
            .filter(|(k, v)| k == "tag" && !v.is_empty())
            .map(|(_, v)| v.clone())
            .collect(),
    })
}

/// The filters as query parameters (for links and hidden fields).
fn filter_params(f: &Filters) -> Vec<(&'static str, String)> {
    let mut p = vec![("state", f.state.join(","))];
    for (k, v) in [
        ("queue", &f.queue),
        ("name", &f.name),
        ("tenant", &f.tenant),
        ("since", &f.since),
        ("error", &f.error),
        ("error_like", &f.error_like),
        ("q", &f.text),
        ("find", &f.find),
    ] {
        p.push((k, v.clone().unwrap_or_default()));
    }
    p.extend(f.tags.iter().map(|t| ("tag", t.clone())));
    p
}

fn link(path: &str, params: &[(&'static str, String)]) -> String {
    let refs: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
    render::url(path, &refs)
}

fn hidden(params: &[(&'static str, String)]) -> Markup {
    html! { @for (k, v) in params { @if !v.is_empty() { input type="hidden" name=(k) value=(v); } } }
}

/// A failure as a page: a missing grant is 403, a bad value 400, the rest 500.
fn failed(app: &App, title: &str, e: anyhow::Error) -> Page {
    let status = match output::sqlstate(&e).map(|c| c.code()) {
        Some("42501") => StatusCode::FORBIDDEN,
        // A bad value (class 22), a constraint (23), a refusal of pg_jobs (PJ).
        Some(c) if c.starts_with("22") || c.starts_with("23") || c.starts_with("PJ") => {
            StatusCode::BAD_REQUEST
        }
        Some(_) => StatusCode::INTERNAL_SERVER_ERROR,
        // Not the database's: the dashboard refused what it was sent.
        None => StatusCode::BAD_REQUEST,
    };
    (
        status,
        render::page(title, app.read_only, render::error(&e)),
    )
}

/// The rows of a query without parameters, on the shared connection.
async fn read(app: &App, sql: &str) -> anyhow::Result<Vec<Row>> {
    output::rows(&*app.db().await?, sql, &[]).await
}

fn ok(app: &App, title: &str, body: Markup) -> Page {
    (StatusCode::OK, render::page(title, app.read_only, body))
}

/// A page of rows (the query read one more when there are more): the page, and the `seq` of
/// its last row when there are more.
fn page_of(rows: &[Row]) -> (&[Row], Option<i64>) {
    let n = rows.len().min(PAGE_SIZE as usize);
    let more = (rows.len() > n)
        .then(|| rows[n - 1].get("seq").and_then(Value::as_i64))
        .flatten();
    (&rows[..n], more)
}

fn uuid_like(v: &str) -> bool {
    v.len() == 36 && v.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// A path segment: every byte but a letter, a digit, `-`, `_`, `.` and `~` as %XX.
fn urlencoding(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A JSON value of a row (`name`), or its first bytes when it was cut (`name_cut`), with its
/// size and a link that downloads it whole.
fn value(row: &Row, name: &str, download: &str) -> Markup {
    match row.get(&format!("{name}_cut")).and_then(Value::as_str) {
        Some(head) => {
            let bytes = row
                .get(&format!("{name}_bytes"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            html! {
                pre.cut { (output::escape_c1(head)) "…" }
                p { "Cut at " (head.len() / 1024) " kB of " (bytes) " bytes: "
                    a href=(download) download { "download it whole" } }
            }
        }
        None => render::json(row.get(name)),
    }
}

fn not_found() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        StatusCode::NOT_FOUND,
        render::message_page("Not found", "no such job, value or step"),
    )
        .into_response()
}

async fn download(
    app: &App,
    sql: &str,
    id: &str,
    step: Option<String>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !uuid_like(id) {
        return not_found();
    }
    let found = match app.db().await {
        Ok(db) => db
            .query_opt(crate::role::for_role(sql).as_ref(), &[&id, &step])
            .await
            .map_err(|e| output::db_error(&e)),
        Err(e) => Err(e),
    };
    match found {
        Ok(Some(row)) => (
            [
                (axum::http::header::CONTENT_TYPE, "application/json"),
                (
                    axum::http::header::CONTENT_DISPOSITION,
                    "attachment; filename=\"value.json\"",
                ),
            ],
            row.get::<_, Option<Value>>(0)
                .unwrap_or(Value::Null)
                .to_string(),
        )
            .into_response(),
        Ok(None) => not_found(),
        Err(e) => failed(app, "Job", e).into_response(),
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

/// A POST's fields, once its CSRF token is checked (a refusal page when it is missing or wrong).
#[allow(clippy::result_large_err)]
fn form(app: &App, body: &[u8]) -> Result<Vec<(String, String)>, Page> {
    let p: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    if same(get(&p, "csrf"), &app.csrf) {
        Ok(p)
    } else {
        let e = anyhow::anyhow!(
            "refused: the form's CSRF token is missing or wrong\nreload the page and try again"
        );
        Err((
            StatusCode::FORBIDDEN,
            render::page("Refused", app.read_only, render::error(&e)),
        ))
    }
}
