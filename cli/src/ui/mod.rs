//! `pgjobs ui`: the dashboard. Server-rendered HTML (every value escaped by maud), one small
//! script of its own for live updates (server-sent events), every asset served by the binary.
//!
//! Security: it listens on the loopback address unless told otherwise, and then only with a
//! token or a user name and password (HTTP basic authentication); `--read-only` renders no
//! action and refuses every POST; every action is a POST that carries this process's CSRF
//! token and, when the browser sends one, an Origin of this dashboard. It answers only requests
//! addressed to it (a `Host` it listens on, or one named with `--allowed-host`; 421 otherwise),
//! so a page of another site whose name was rebound to 127.0.0.1 reads and does nothing.
//! It reaches the database as the role it connects as, through the `jobs` functions and
//! views: what that role may not do, the page says, with the grant that would allow it.

mod history;
mod live;
mod pages;
mod render;

use anyhow::{bail, Context, Result};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use postgres_native_tls::MakeTlsConnector;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::{broadcast, Mutex};
use tokio_postgres::{Client, Config};

pub struct Options {
    pub listen: String,
    pub read_only: bool,
    pub token: Option<String>,
    pub basic_auth: Option<BasicAuth>,
    /// Host names (a reverse proxy's) requests may be addressed to, beside the listen address.
    pub allowed_hosts: Vec<String>,
}

/// A user name and password every request must present (`Authorization: Basic`), as the
/// `user:password` a browser encodes.
pub struct BasicAuth {
    expected: String,
}

impl BasicAuth {
    pub fn new(user: &str, password: Option<String>) -> Result<BasicAuth> {
        let Some(password) = password.filter(|p| !p.is_empty()) else {
            bail!(
                "--basic-auth {user}: no password\n  fix: set PGJOBS_UI_PASSWORD (not an argument: \
                 other users can read a process's arguments)"
            );
        };
        if user.is_empty() || user.contains(':') {
            bail!("--basic-auth: a user name, without ':'");
        }
        if password.len() < 12 {
            bail!("PGJOBS_UI_PASSWORD: at least 12 characters");
        }
        Ok(BasicAuth {
            expected: format!("{user}:{password}"),
        })
    }

    fn presented(&self, headers: &HeaderMap) -> bool {
        use base64::Engine;
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| {
                base64::engine::general_purpose::STANDARD
                    .decode(b.trim())
                    .ok()
            })
            .and_then(|raw| String::from_utf8(raw).ok())
            .is_some_and(|given| same(&given, &self.expected))
    }
}

/// What every request shares.
pub struct App {
    config: Config,
    tls: MakeTlsConnector,
    db: Mutex<Option<Arc<Client>>>,
    read_only: bool,
    token: Option<String>,
    basic_auth: Option<BasicAuth>,
    hosts: Hosts,
    /// Forms carry it; a POST without it is refused (another site cannot read it).
    csrf: String,
    history: std::sync::Mutex<history::History>,
    /// The overview's charts per hour as last drawn, and when, by their hours (pages::hours).
    hours: std::sync::Mutex<std::collections::HashMap<u32, (std::time::Instant, String)>>,
    /// The overview's live part as last rendered, and when (pages::live_part).
    live: Mutex<Option<(std::time::Instant, String)>>,
    /// Each queue's finished counts and when they were read (pages::finished_counts).
    finished: std::sync::Mutex<
        Option<(
            std::time::Instant,
            std::collections::HashMap<String, crate::output::Row>,
        )>,
    >,
    /// The payloads of `pg_jobs_dead` notifications, for the live overview.
    deaths: broadcast::Sender<String>,
}

impl App {
    /// The shared connection, made again when it was lost.
    async fn db(&self) -> Result<Arc<Client>> {
        let mut held = self.db.lock().await;
        if let Some(c) = held.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let (client, connection) = self
            .config
            .connect(self.tls.clone())
            .await
            .map_err(|e| crate::output::db_error_in("cannot connect", &e))?;
        tokio::spawn(crate::connect::drive(connection));
        // A page never waits long: not on a lock another role's statement queued on a view
        // (docs/SECURITY.md), nor on a search that reads too much; it says so and the next
        // refresh tries again. No JIT: it compiled for 50-100 ms per page to save less. Index
        // walks, as the engine's own functions take them: with a million finished rows the
        // planner chose to read the whole table for a count the index answers.
        client
            .batch_execute(
                "set lock_timeout = '2s'; set statement_timeout = '15s'; set jit = off; set enable_seqscan = off",
            )
            .await
            .map_err(|e| crate::output::db_error(&e))?;
        crate::owner::check(&client).await?;
        crate::role::learn(&client).await;
        let client = Arc::new(client);
        *held = Some(client.clone());
        Ok(client)
    }
}

/// The hosts a request may be addressed to: the listen address by any loopback name when it is
/// a loopback one (127.0.0.1, localhost, [::1]), an IP address that is the listen address (any,
/// for 0.0.0.0 or [::]: no name is rebound to a literal address), and the names given with
/// `--allowed-host`, each with the listen port (or the one the name gives).
struct Hosts {
    listen: SocketAddr,
    names: Vec<String>,
}

impl Hosts {
    /// Whether `host` (a `Host` header, or an Origin's host) names this dashboard.
    fn allows(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let (name, port) = match host
            .rsplit_once(':')
            .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        {
            Some((name, port)) => (name.to_owned(), port.parse::<u16>().ok()),
            None => (host.clone(), None),
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        if self.names.iter().any(|n| *n == host || *n == name) {
            return true;
        }
        if port.unwrap_or(80) != self.listen.port() {
            return false;
        }
        let ip = self.listen.ip();
        match name.parse::<std::net::IpAddr>() {
            Ok(given) => {
                given == ip || ip.is_unspecified() || (ip.is_loopback() && given.is_loopback())
            }
            Err(_) => name == "localhost" && (ip.is_loopback() || ip.is_unspecified()),
        }
    }
}

fn random_hex(bytes: usize) -> Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Equal in time whatever the contents (a token compared byte by byte would tell how much of
/// a guess was right).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

pub async fn serve(dsn: Option<&str>, opts: Options) -> Result<()> {
    let addr: SocketAddr = opts.listen.parse().with_context(|| {
        format!(
            "--listen {}: not an address and port, e.g. 127.0.0.1:8080",
            opts.listen
        )
    })?;
    if !addr.ip().is_loopback() && opts.token.is_none() && opts.basic_auth.is_none() {
        bail!(
            "refusing to listen on {addr} without --token or --basic-auth: anyone who can reach it could act on your jobs\n  \
             fix: pass --token (at least 16 letters, digits, - or _), or --basic-auth USER with \
             PGJOBS_UI_PASSWORD set, or listen on 127.0.0.1"
        );
    }
    if let Some(t) = &opts.token {
        if t.len() < 16
            || !t
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            bail!("--token must be at least 16 letters, digits, - or _");
        }
    }
    let (config, tls) = crate::connect::config(dsn)?;
    let (deaths, _) = broadcast::channel(64);
    let app = Arc::new(App {
        config,
        tls,
        db: Mutex::new(None),
        read_only: opts.read_only,
        token: opts.token,
        basic_auth: opts.basic_auth,
        hosts: Hosts {
            listen: addr,
            names: opts
                .allowed_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
        },
        csrf: random_hex(32)?,
        history: std::sync::Mutex::new(history::History::default()),
        finished: std::sync::Mutex::new(None),
        hours: std::sync::Mutex::new(std::collections::HashMap::new()),
        live: Mutex::new(None),
        deaths,
    });
    app.db().await?; // fail at the start, not at the first page, when the database is unreachable
    tokio::spawn(live::sample(app.clone()));
    tokio::spawn(live::listen(app.clone()));
    let router = Router::new()
        .route("/", get(pages::overview))
        .route("/live", get(live::events))
        .route("/jobs", get(pages::jobs))
        .route("/jobs/{id}", get(pages::job))
        .route("/jobs/{id}/{what}", get(pages::job_value))
        .route("/jobs/{id}/steps/{step}", get(pages::job_step))
        .route("/dead", get(pages::dead))
        .route("/schedules", get(pages::schedules))
        .route("/workers", get(pages::workers))
        .route("/types", get(pages::types).post(pages::type_op))
        .route("/act", post(pages::act))
        .route("/queues/{queue}/{op}", post(pages::queue_op))
        .route("/schedules/{name}/{op}", post(pages::schedule_op))
        .route(
            "/static/app.css",
            get(|| async { asset("text/css", include_str!("assets/app.css")) }),
        )
        .route(
            "/static/app.js",
            get(|| async { asset("text/javascript", include_str!("assets/app.js")) }),
        )
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    eprintln!("pgjobs ui: listening on http://{addr}/");
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// Every request: the token when one is set (a `?token=` link sets a cookie and is redirected
/// to the page without it), a POST's origin and the read-only mode; every response: headers
/// that keep the pages out of frames and allow no script, style or connection but its own.
async fn guard(State(app): State<Arc<App>>, request: Request<Body>, next: Next) -> Response {
    let mut response = match check(&app, &request) {
        Err(refused) => refused,
        Ok(Some(redirect)) => redirect,
        Ok(None) => next.run(request).await,
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"), // (no-referrer makes a browser send Origin: null)
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

#[allow(clippy::result_large_err)]
fn check(app: &App, request: &Request<Body>) -> std::result::Result<Option<Response>, Response> {
    // Addressed to this dashboard (HTTP/1.1 always names the host): a page of another site
    // whose name now resolves to this address (DNS rebinding) names its own.
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if !host.is_some_and(|h| app.hosts.allows(h)) {
        return Err(refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "this dashboard answers requests addressed to the address it listens on, or to a host named \
             with --allowed-host (behind a reverse proxy: --allowed-host the name it serves)",
        ));
    }
    // A user name and password, when set, will do in place of the token.
    let by_password = app
        .basic_auth
        .as_ref()
        .is_some_and(|b| b.presented(request.headers()));
    if let (Some(_), None) = (&app.basic_auth, &app.token) {
        if !by_password {
            let mut r = refuse(
                StatusCode::UNAUTHORIZED,
                "this dashboard needs its user name and password",
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"pgjobs\", charset=\"UTF-8\""),
            );
            return Err(r);
        }
    }
    if let Some(token) = app.token.as_ref().filter(|_| !by_password) {
        let query_token = request.uri().query().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "token")
                .map(|(_, v)| v.into_owned())
        });
        if let Some(given) = query_token {
            if !same(&given, token) {
                return Err(refuse(StatusCode::UNAUTHORIZED, "wrong token"));
            }
            let cookie = format!("pgjobs_token={token}; HttpOnly; SameSite=Strict; Path=/");
            // To a page of this dashboard only: a path of "//another.site" is another site's.
            let path = request.uri().path();
            let path = if path.starts_with('/') && !path.starts_with("//") && !path.contains('\\') {
                path
            } else {
                "/"
            };
            let mut r = Redirect::to(path).into_response();
            r.headers_mut().insert(
                header::SET_COOKIE,
                HeaderValue::from_str(&cookie).expect("a token of safe characters"),
            );
            return Ok(Some(r));
        }
        if !presented(request.headers(), token) {
            return Err(refuse(
                StatusCode::UNAUTHORIZED,
                "this dashboard needs its token: open the link pgjobs ui printed (…/?token=…), or send Authorization: Bearer",
            ));
        }
    }
    if request.method() == Method::POST {
        if app.read_only {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                "read-only: this dashboard was started with --read-only",
            ));
        }
        // The Origin a browser sends names the page the form was on: one of this dashboard's.
        if let Some(origin) = request
            .headers()
            .get(header::ORIGIN)
            .and_then(|o| o.to_str().ok())
        {
            let from_here = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|h| app.hosts.allows(h));
            if !from_here {
                return Err(refuse(
                    StatusCode::FORBIDDEN,
                    "refused: the request came from another site",
                ));
            }
        }
    }
    Ok(None)
}

fn presented(headers: &HeaderMap, token: &str) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| same(t, token));
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix("pgjobs_token="))
        .any(|t| same(t, token));
    bearer || cookie
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (status, render::message_page("Refused", why)).into_response()
}
