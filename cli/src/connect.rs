//! Connecting as libpq would: `--dsn`, else `DATABASE_URL`, else the `PG*` variables, and the
//! variables fill in what a connection string leaves out (host, port, user, database,
//! password), as they do for psql; a password still missing comes from the password file, and
//! TLS follows `sslmode` (src/tls.rs).

use anyhow::{Context, Result};
use postgres_native_tls::MakeTlsConnector;
use std::env;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;
use tokio_postgres::{Client, Config};

/// The connection settings: the string given (or `DATABASE_URL`), completed from `PG*`, and
/// the TLS connector its `sslmode` asks for.
pub fn config(dsn: Option<&str>) -> Result<(Config, MakeTlsConnector)> {
    let given = dsn
        .map(str::to_owned)
        .or_else(|| env::var("DATABASE_URL").ok());
    let tls = crate::tls::split(given);
    let mut config = match &tls.dsn {
        Some(s) => Config::from_str(s)
            .context("the connection string does not parse (a URL or key=value pairs)")?,
        None => Config::new(),
    };
    let var = |name: &str| env::var(name).ok().filter(|v| !v.is_empty());
    if config.get_hosts().is_empty() {
        match var("PGHOST") {
            Some(host) => {
                config.host(&host);
            }
            // libpq's default on Debian: the socket directory, else the loopback address.
            None if Path::new("/var/run/postgresql").is_dir() => {
                config.host_path("/var/run/postgresql");
            }
            None => {
                config.host("localhost");
            }
        }
    }
    if config.get_ports().is_empty() {
        let port = match var("PGPORT") {
            Some(p) => p
                .parse()
                .with_context(|| format!("PGPORT={p} is not a port number"))?,
            None => 5432,
        };
        config.port(port);
    }
    if config.get_user().is_none() {
        let user = var("PGUSER")
            .or_else(|| var("USER"))
            .context("no user: set PGUSER or put user= in the connection string")?;
        config.user(&user);
    }
    if config.get_dbname().is_none() {
        if let Some(db) = var("PGDATABASE") {
            config.dbname(&db);
        }
    }
    if config.get_password().is_none() {
        if let Some(pw) = var("PGPASSWORD") {
            config.password(pw);
        }
    }
    if config.get_password().is_none() {
        if let Some(pw) = password_file(&config) {
            config.password(pw);
        }
    }
    if config.get_application_name().is_none() {
        config.application_name("pgjobs");
    }
    if config.get_connect_timeout().is_none() {
        let secs = var("PGCONNECT_TIMEOUT")
            .and_then(|s| s.parse().ok())
            .unwrap_or(10);
        config.connect_timeout(Duration::from_secs(secs));
    }
    let connector = crate::tls::connector(&mut config, &tls)?;
    Ok((config, connector))
}

/// A connection, its driver running on the runtime.
pub async fn connect(dsn: Option<&str>) -> Result<Client> {
    let (config, tls) = config(dsn)?;
    let (client, connection) = config.connect(tls).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot connect: {}\n  fix: pass --dsn, or set DATABASE_URL or PGHOST/PGPORT/PGUSER/PGDATABASE",
            crate::output::describe(&e)
        )
    })?;
    tokio::spawn(drive(connection));
    // Short index walks: a JIT compile would cost more than it saves.
    client
        .batch_execute("set jit = off")
        .await
        .map_err(|e| crate::output::db_error(&e))?;
    crate::owner::check(&client).await?;
    crate::role::learn(&client).await;
    Ok(client)
}

/// Runs a connection until it ends, printing the server's notices and warnings on standard
/// error as psql does (each line made visible: they may quote anyone's data).
pub async fn drive<S, T>(mut connection: tokio_postgres::Connection<S, T>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use futures_util::StreamExt;
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(tokio_postgres::AsyncMessage::Notice(n)) => {
                let lines: Vec<String> = n.message().lines().map(crate::output::visible).collect();
                eprintln!("{}:  {}", n.severity(), lines.join("\n"));
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("pgjobs: the connection ended: {e}");
                break;
            }
        }
    }
}

/// The password for this connection's first host, port, database and user from the password
/// file, as libpq reads it: `host:port:database:user:password` lines, `*` matching anything,
/// `\:` and `\\` escaped; the file ignored (with a warning) when others may read it.
fn password_file(config: &Config) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = env::var("PGPASSFILE")
        .ok()
        .or_else(|| env::var("HOME").ok().map(|h| format!("{h}/.pgpass")))?;
    let meta = std::fs::metadata(&path).ok()?;
    if meta.permissions().mode() & 0o077 != 0 {
        eprintln!("pgjobs: warning: password file {path} has group or world access; it is ignored (chmod 0600 it)");
        return None;
    }
    let host = match config.get_hosts().first()? {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        _ => "localhost".to_string(), // libpq's name for the default socket
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user()?.to_string();
    let db = config
        .get_dbname()
        .map(str::to_owned)
        .unwrap_or_else(|| user.clone());
    let text = std::fs::read_to_string(&path).ok()?;
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|line| {
            let fields = split_fields(line);
            if fields.len() < 5 {
                return None;
            }
            let wanted = [&host, &port, &db, &user];
            let matches = fields[..4]
                .iter()
                .zip(wanted)
                .all(|(f, w)| f == "*" || f == w);
            matches.then(|| fields[4].clone())
        })
}

/// A password file line's fields: split at unescaped colons, `\` escapes removed.
fn split_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    fields.last_mut().expect("one field").push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::split_fields;

    #[test]
    fn password_file_fields_split_at_unescaped_colons() {
        assert_eq!(split_fields("h:5432:db:u:p"), ["h", "5432", "db", "u", "p"]);
        assert_eq!(
            split_fields(r"h\:x:*:db:u:pa:ss\\"),
            ["h:x", "*", "db", "u", r"pa:ss\"]
        );
        assert_eq!(split_fields("h:1"), ["h", "1"]);
    }
}
