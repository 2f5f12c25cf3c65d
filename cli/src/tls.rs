//! TLS to the server, as libpq's `sslmode` and `sslrootcert` say (in the connection string,
//! else `PGSSLMODE` and `PGSSLROOTCERT`): `disable`; `allow` and `prefer` (the default) use TLS
//! when the server offers it; `require` insists on it; none of these verify the server's
//! certificate unless a root certificate is given (then, as libpq, its chain is checked);
//! `verify-ca` checks the chain, `verify-full` the chain and the host name, against the root
//! certificate given or the system's. A client certificate, for servers that ask for one
//! (`cert` in pg_hba.conf), as libpq finds it: `sslcert` and `sslkey` (else `PGSSLCERT` and
//! `PGSSLKEY`, else `~/.postgresql/postgresql.crt` and `.key` when they exist), its key
//! refused when others may read it.

use anyhow::{bail, Context, Result};
use native_tls::{Certificate, Identity, TlsConnector};
use postgres_native_tls::MakeTlsConnector;
use std::env;
use tokio_postgres::config::SslMode;
use tokio_postgres::Config;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verify {
    Nothing,
    Chain,
    ChainAndHost,
}

/// The connection string without what the driver does not read (`sslrootcert`, `sslcert`,
/// `sslkey`, and the verify modes, which it knows as `require`), and what they asked for.
#[derive(Default)]
pub struct Settings {
    pub dsn: Option<String>,
    mode: Option<String>,
    root: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

/// Takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey` out of a connection string, a URL's
/// query or key=value pairs alike (values without spaces).
pub fn split(dsn: Option<String>) -> Settings {
    let Some(dsn) = dsn else {
        return Settings::default();
    };
    let mut taken = Settings::default();
    let mut kept = String::with_capacity(dsn.len());
    let mut rest = dsn.as_str();
    while !rest.is_empty() {
        // The next parameter starts after a space, '?' or '&', or at the start.
        let end = rest.find([' ', '&']).map(|i| i + 1).unwrap_or(rest.len());
        let (part, after) = rest.split_at(end);
        let (head, param) = match part.rfind('?') {
            Some(q) => part.split_at(q + 1),
            None => ("", part),
        };
        let bare = param.trim_end_matches([' ', '&']);
        let slot = match bare.split_once('=') {
            Some(("sslrootcert", v)) => Some((&mut taken.root, v)),
            Some(("sslmode", v)) => Some((&mut taken.mode, v)),
            Some(("sslcert", v)) => Some((&mut taken.cert, v)),
            Some(("sslkey", v)) => Some((&mut taken.key, v)),
            _ => None,
        };
        match slot {
            Some((slot, v)) => {
                *slot = Some(v.to_string());
                kept.push_str(head);
            }
            None => kept.push_str(part),
        }
        rest = after;
    }
    taken.dsn = Some(kept.trim_end_matches([' ', '&', '?']).to_string());
    taken
}

/// The client certificate and key, if one is given or in libpq's default place.
fn identity(s: &Settings) -> Result<Option<Identity>> {
    use std::os::unix::fs::PermissionsExt;
    let var = |name: &str| env::var(name).ok().filter(|v| !v.is_empty());
    let home = env::var("HOME")
        .ok()
        .map(|h| format!("{h}/.postgresql/postgresql"));
    let cert = s.cert.clone().or_else(|| var("PGSSLCERT"));
    let key = s.key.clone().or_else(|| var("PGSSLKEY"));
    let (cert, key) = match (cert, key, home) {
        (Some(c), k, h) => (c, k.or(h.map(|h| format!("{h}.key")))),
        // libpq's default: used when the certificate is there.
        (None, k, Some(h)) if std::path::Path::new(&format!("{h}.crt")).exists() => {
            (format!("{h}.crt"), k.or(Some(format!("{h}.key"))))
        }
        _ => return Ok(None),
    };
    let Some(key) = key else {
        bail!("sslcert {cert}: no sslkey given\n  fix: pass sslkey=PATH or set PGSSLKEY");
    };
    let pem = std::fs::read(&cert).with_context(|| format!("sslcert {cert}: cannot read it"))?;
    let meta = std::fs::metadata(&key).with_context(|| format!("sslkey {key}: cannot read it"))?;
    if meta.permissions().mode() & 0o077 != 0 {
        bail!("sslkey {key}: others may read it\n  fix: chmod 0600 {key}");
    }
    let key_pem = std::fs::read(&key).with_context(|| format!("sslkey {key}: cannot read it"))?;
    Identity::from_pkcs8(&pem, &key_pem)
        .map(Some)
        .with_context(|| format!("sslcert {cert}, sslkey {key}: not a PEM certificate and its key"))
}

/// Applies the mode to the driver's settings and makes the connector that checks what it asks.
pub fn connector(config: &mut Config, s: &Settings) -> Result<MakeTlsConnector> {
    let var = |name: &str| env::var(name).ok().filter(|v| !v.is_empty());
    let mode = s
        .mode
        .clone()
        .or_else(|| var("PGSSLMODE"))
        .unwrap_or_else(|| "prefer".into());
    let root = s.root.clone().or_else(|| var("PGSSLROOTCERT"));
    let (driver_mode, mut verify) = match mode.as_str() {
        "disable" => (SslMode::Disable, Verify::Nothing),
        "allow" | "prefer" => (SslMode::Prefer, Verify::Nothing),
        "require" => (SslMode::Require, Verify::Nothing),
        "verify-ca" => (SslMode::Require, Verify::Chain),
        "verify-full" => (SslMode::Require, Verify::ChainAndHost),
        other => bail!(
            "sslmode {other:?}: one of disable, allow, prefer, require, verify-ca, verify-full"
        ),
    };
    config.ssl_mode(driver_mode);
    let mut builder = TlsConnector::builder();
    if driver_mode != SslMode::Disable {
        if let Some(identity) = identity(s)? {
            builder.identity(identity);
        }
    }
    if let Some(path) = &root {
        let pem =
            std::fs::read(path).with_context(|| format!("sslrootcert {path}: cannot read it"))?;
        builder.add_root_certificate(
            Certificate::from_pem(&pem)
                .with_context(|| format!("sslrootcert {path}: not a PEM certificate"))?,
        );
        if verify == Verify::Nothing {
            verify = Verify::Chain; // libpq: a root certificate given is checked
        }
    }
    match verify {
        Verify::Nothing => {
            builder
                .danger_accept_invalid_certs(true)
                .danger_accept_invalid_hostnames(true);
        }
        Verify::Chain => {
            builder.danger_accept_invalid_hostnames(true);
        }
        Verify::ChainAndHost => {}
    }
    Ok(MakeTlsConnector::new(
        builder.build().context("cannot set up TLS")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn ssl_settings_come_out_of_urls_and_key_value_pairs() {
        let s = split(Some(
            "host=h sslmode=verify-full dbname=d sslrootcert=/c.pem".into(),
        ));
        assert_eq!(
            (s.dsn.as_deref(), s.mode.as_deref(), s.root.as_deref()),
            (Some("host=h dbname=d"), Some("verify-full"), Some("/c.pem"))
        );
        let s = split(Some(
            "postgres://u@h/d?sslmode=require&sslrootcert=/c.pem&application_name=x".into(),
        ));
        assert_eq!(
            (s.dsn.as_deref(), s.mode.as_deref(), s.root.as_deref()),
            (
                Some("postgres://u@h/d?application_name=x"),
                Some("require"),
                Some("/c.pem")
            )
        );
        let s = split(Some("postgres://u@h/d?sslmode=disable".into()));
        assert_eq!(
            (s.dsn.as_deref(), s.mode.as_deref()),
            (Some("postgres://u@h/d"), Some("disable"))
        );
        assert_eq!(split(Some("host=h".into())).dsn.as_deref(), Some("host=h"));
        let s = split(Some("host=h sslcert=/c.crt sslkey=/c.key user=u".into()));
        assert_eq!(
            (s.dsn.as_deref(), s.cert.as_deref(), s.key.as_deref()),
            (Some("host=h user=u"), Some("/c.crt"), Some("/c.key"))
        );
    }
}
