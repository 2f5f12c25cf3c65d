//! The dashboard's HTML: the layout and the pieces pages share. maud escapes every value
//! interpolated; URLs are built with their parts percent-encoded.

use crate::output::{cell, Row};
use maud::{html, Markup, DOCTYPE};
use serde_json::Value;

/// `path?k=v&...`, each part percent-encoded, empty values left out.
pub fn url(path: &str, params: &[(&str, &str)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params.iter().filter(|(_, v)| !v.is_empty()) {
        s.append_pair(k, v);
    }
    let q = s.finish();
    if q.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{q}")
    }
}

/// A path segment (a queue or schedule name in a URL path), percent-encoded.
pub fn segment(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

pub fn text(r: &Row, k: &str) -> String {
    cell(r.get(k).unwrap_or(&Value::Null), 100_000)
}

/// A time of a row (`k`): `<time>` with the server's UTC text, which the page's script shows
/// as relative ("3 min ago") with the absolute time, in the browser's zone, on hover; nothing
/// for none.
pub fn time(r: &Row, k: &str) -> Markup {
    match r.get(k) {
        Some(Value::String(t)) => html! { time datetime=(t) title=(t) { (t) } },
        _ => html! {},
    }
}

/// A job id, short (its last 8 characters: a UUIDv7's first ones are its time, the same on
/// every row of a minute) as a link to its page, the whole id on hover and in a copy button.
pub fn short_id(id: &str) -> Markup {
    let short = id.get(id.len().saturating_sub(8)..).unwrap_or(id);
    html! {
        a.id href={ "/jobs/" (id) } title=(id) { (short) }
        " " button.copy type="button" data-copy=(id) aria-label={ "copy the id " (id) } { "copy" }
    }
}

pub fn page(title: &str, read_only: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · pg_jobs" }
                link rel="stylesheet" href="/static/app.css";
                script src="/static/app.js" defer {}
            }
            body {
                header {
                    a.brand href="/" { "pg_jobs" }
                    nav {
                        a href="/" { "Overview" }
                        a href="/jobs" { "Jobs" }
                        a href="/dead" { "Dead letters" }
                        a href="/schedules" { "Schedules" }
                        a href="/workers" { "Workers" }
                        a href="/types" { "Job types" }
                    }
                    form.find method="get" action="/jobs" role="search" {
                        input name="find" type="search" aria-label="find a job" placeholder="find: id, key or text";
                    }
                    @if read_only { span.badge { "read-only" } }
                    @if let Some(tenants) = crate::role::tenants() { span.badge { "tenants " (tenants) } }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

pub fn message_page(title: &str, message: &str) -> Markup {
    page(title, false, html! { p.message { (message) } })
}

/// A database refusal as a page section: the message, and the fix (for a missing grant, which
/// grant).
pub fn error(e: &anyhow::Error) -> Markup {
    let text = e.to_string();
    let mut lines = text.lines();
    html! {
        div.failure {
            p { (lines.next().unwrap_or_default()) }
            @for l in lines { p { (l.trim()) } }
        }
    }
}

/// Rows as a table; `link` makes a column's cells links (column, href prefix).
pub fn table(rows: &[Row], width: usize, link: Option<(&str, &str)>) -> Markup {
    let Some(first) = rows.first() else {
        return html! { p.none { "None." } };
    };
    html! {
        div.scroll {
            table {
                thead { tr { @for k in first.keys() { th { (k) } } } }
                tbody {
                    @for r in rows {
                        tr {
                            @for (k, v) in r {
                                td {
                                    @match link {
                                        Some((col, prefix)) if col == k && !v.is_null() => {
                                            a href={ (prefix) (segment(&cell(v, 1000))) } { (cell(v, width)) }
                                        }
                                        _ => (cell(v, width)),
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A hidden CSRF field for a form.
pub fn csrf(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}

/// JSON shown as indented text.
pub fn json(v: Option<&Value>) -> Markup {
    match v {
        None | Some(Value::Null) => html! { span.none { "—" } },
        Some(v) => {
            let text =
                crate::output::escape_c1(&serde_json::to_string_pretty(v).unwrap_or_default());
            let lines = text.lines().count();
            // More than a line: folded under its size, open (a click closes it).
            if lines > 1 {
                html! { details.json open { summary { (lines) " lines, " (text.len()) " bytes" } pre { (text) } } }
            } else {
                html! { pre { (text) } }
            }
        }
    }
}

/// Text for a server-sent event's data: no carriage return (which the protocol cannot carry).
pub fn event_data(m: Markup) -> String {
    m.into_string().replace('\r', "&#13;")
}
