//! What the commands print: tables for people, JSON (`--json`) for scripts, and database
//! errors with PostgreSQL's message, hint and code.

use anyhow::Result;
use comfy_table::{presets::UTF8_BORDERS_ONLY, ContentArrangement, Table};
use serde_json::{Map, Value};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

pub type Row = Map<String, Value>;

/// A database error as a person should read it: the message, then the hint and the code.
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = db.message().to_string();
            if let Some(detail) = db.detail() {
                s.push_str(&format!("\n  detail: {detail}"));
            }
            match (db.code().code(), db.hint()) {
                // A role bound to tenants may do only what its tenants' jobs need.
                ("42501", _) if crate::role::tenants().is_some() => s.push_str(
                    "\n  fix: this role is bound to tenants: as a tenant admin (jobs.grant_admin(ROLE, \
                     TENANT)) it reads its tenants' jobs and cancels, requeues and promotes them; \
                     an admin of every tenant does the rest",
                ),
                // The role is missing a grant: which one a superuser gives it.
                ("42501", _) => s.push_str(
                    "\n  fix: a superuser runs select jobs.grant_monitor('ROLE') for reading, \
                     or select jobs.grant_admin('ROLE') for actions",
                ),
                (_, Some(hint)) => s.push_str(&format!("\n  fix: {hint}")),
                _ => {}
            }
            s.push_str(&format!(" [{}]", db.code().code()));
            s
        }
        // The driver's own errors keep their cause in the source ("invalid configuration":
        // which setting).
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

/// A database error as `describe` words it, with its SQLSTATE kept to match on (a page's
/// status, a fallback for a role without a grant), never read back out of the words.
#[derive(Debug)]
pub struct DbError {
    pub code: SqlState,
    text: String,
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for DbError {}

/// A database error for `?`: a `DbError` when the server sent a SQLSTATE, else its words.
pub fn db_error(e: &tokio_postgres::Error) -> anyhow::Error {
    wrap(describe(e), e)
}

/// The same, its words after `what: `.
pub fn db_error_in(what: &str, e: &tokio_postgres::Error) -> anyhow::Error {
    wrap(format!("{what}: {}", describe(e)), e)
}

fn wrap(text: String, e: &tokio_postgres::Error) -> anyhow::Error {
    match e.code() {
        Some(code) => anyhow::Error::new(DbError {
            code: code.clone(),
            text,
        }),
        None => anyhow::anyhow!(text),
    }
}

/// The SQLSTATE of an error, when the database raised it.
pub fn sqlstate(e: &anyhow::Error) -> Option<&SqlState> {
    e.downcast_ref::<DbError>().map(|d| &d.code)
}

/// Runs a query whose rows are one `json` column each (`select row_to_json(x) from (...) x`),
/// keeping the columns' order.
pub async fn rows(client: &Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
    let found = client
        .query(crate::role::for_role(sql).as_ref(), params)
        .await
        .map_err(|e| db_error(&e))?;
    Ok(found
        .iter()
        .filter_map(|r| match r.get::<_, Value>(0) {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .collect())
}

/// A cell: strings as they are, NULL empty, anything else as compact JSON, cut to `width`.
pub fn cell(v: &Value, width: usize) -> String {
    let s = match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let s = visible(&s);
    if s.chars().count() > width {
        let cut: String = s.chars().take(width.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        s
    }
}

/// Rows as a table with their columns in order (or "none" when there are no rows).
pub fn table(rows: &[Row], width: usize) -> String {
    let Some(first) = rows.first() else {
        return "(none)".to_string();
    };
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Disabled);
    t.set_header(first.keys().cloned().collect::<Vec<_>>());
    for r in rows {
        t.add_row(r.values().map(|v| cell(v, width)).collect::<Vec<_>>());
    }
    t.to_string()
}

/// A column of a narrow table: the row's key and its header. An `Id` shows its last 8
/// characters (a UUIDv7's first ones are its time, the same on every row of a minute); a
/// `Time`, the first of its keys that is set, relative to now.
pub enum Column<'a> {
    Text(&'a str, &'a str),
    Id(&'a str, &'a str),
    Time(&'a [&'a str], &'a str),
}

/// Rows as a terminal of 120 columns shows them: only the columns named, each under its header.
/// `--wide` shows the rows whole instead.
pub fn narrow(rows: &[Row], columns: &[Column]) -> Vec<Row> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    rows.iter()
        .map(|r| {
            let mut n = Row::new();
            for c in columns {
                let (header, value) = match c {
                    Column::Text(k, h) => (*h, r.get(*k).cloned().unwrap_or(Value::Null)),
                    Column::Id(k, h) => {
                        let id = r.get(*k).and_then(Value::as_str).unwrap_or_default();
                        let short = id.get(id.len().saturating_sub(8)..).unwrap_or(id);
                        (*h, Value::String(short.to_string()))
                    }
                    Column::Time(keys, h) => (
                        *h,
                        keys.iter()
                            .filter_map(|k| r.get(*k).and_then(Value::as_str))
                            .find(|t| !t.is_empty())
                            .and_then(epoch)
                            .map_or(Value::Null, |t| Value::String(ago(now - t))),
                    ),
                };
                n.insert(header.to_string(), value);
            }
            n
        })
        .collect()
}

/// A table of the rows: with `wide`, every column whole (cut at 60 characters); else only
/// `columns`, each cell cut at `width` characters.
pub fn listing(rows: &[Row], wide: bool, columns: &[Column], width: usize) -> String {
    if wide {
        table(rows, 60)
    } else {
        table(&narrow(rows, columns), width)
    }
}

/// Seconds since 1970 of a time as row_to_json writes a timestamptz
/// (`2026-12-06T04:31:18.123+00:00`, the offset the session's); None for other text.
pub fn epoch(t: &str) -> Option<i64> {
    let num = |s: &str| s.parse::<i64>().ok();
    let (date, rest) = t.split_once('T')?;
    let mut d = date.splitn(3, '-').map(num);
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let split = rest.rfind(['+', '-'])?;
    let (clock, offset) = rest.split_at(split);
    let mut c = clock.splitn(3, ':');
    let (h, mi) = (num(c.next()?)?, num(c.next()?)?);
    let s = num(c.next()?.split('.').next()?)?;
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let mut o = offset[1..].splitn(2, ':').map(num);
    let off = sign * (o.next()?? * 3600 + o.next().flatten().unwrap_or(0) * 60);
    // Days from 1970-01-01 to the date (proleptic Gregorian calendar).
    let (yy, mm) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mm + 2) / 5 + day - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + s - off)
}

/// A span of seconds as a person reads it: "3 min ago", "in 2 h", "now".
pub fn ago(seconds: i64) -> String {
    let n = seconds.abs();
    if n < 5 {
        return "now".into();
    }
    let (v, unit) = match n {
        0..=59 => (n, "s"),
        60..=3599 => (n / 60, "min"),
        3600..=86_399 => (n / 3600, "h"),
        _ => (n / 86_400, "d"),
    };
    if seconds >= 0 {
        format!("{v} {unit} ago")
    } else {
        format!("in {v} {unit}")
    }
}

/// One row as `key: value` lines.
pub fn fields(row: &Row) -> String {
    let w = row.keys().map(|k| k.len()).max().unwrap_or(0);
    row.iter()
        .map(|(k, v)| format!("{k:>w$}: {}", cell(v, 2000)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Text from the database as a terminal may show it: payloads, errors and names are anyone's
/// data, and a control character (an escape sequence retitling the window or rewriting the
/// screen) must not reach the operator's terminal. Line breaks and tabs become spaces, other
/// control characters `\u{..}`.
pub fn visible(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() || is_bidi(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// JSON for `--json`, one document. serde_json escapes C0 controls; DEL and the C1 controls,
/// which a terminal may also act on, are escaped here.
pub fn json(v: &Value) -> String {
    escape_c1(&serde_json::to_string_pretty(v).unwrap_or_default())
}

/// Rows as one JSON array.
pub fn json_rows(rows: Vec<Row>) -> String {
    json(&Value::Array(rows.into_iter().map(Value::Object).collect()))
}

/// A line of JSON (while watching).
pub fn json_line(v: &Value) -> String {
    escape_c1(&v.to_string())
}

/// The characters that reorder the text around them (bidirectional overrides, embeddings,
/// isolates and marks): a value holding one could make what is shown read as something else.
pub fn is_bidi(c: char) -> bool {
    matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// JSON text with DEL, the C1 controls and the bidirectional controls escaped (they can only
/// stand in its strings, where `\uXXXX` means the same).
pub fn escape_c1(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if ('\u{7f}'..='\u{9f}').contains(&c) || is_bidi(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{ago, epoch};

    #[test]
    fn epoch_reads_row_to_json_times_with_their_offset() {
        assert_eq!(epoch("1970-01-01T00:00:00+00:00"), Some(0));
        assert_eq!(epoch("2026-12-06T04:31:18+00:00"), Some(1_796_531_478));
        assert_eq!(epoch("2000-02-29T23:59:59.5-05:30"), Some(951_888_599));
        assert_eq!(epoch("yesterday"), None);
    }

    #[test]
    fn ago_says_how_long_ago_or_in_how_long() {
        assert_eq!(ago(2), "now");
        assert_eq!(ago(42), "42 s ago");
        assert_eq!(ago(3 * 60 + 5), "3 min ago");
        assert_eq!(ago(-2 * 3600), "in 2 h");
        assert_eq!(ago(9 * 86_400), "9 d ago");
    }
}
