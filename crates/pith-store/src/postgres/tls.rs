//! TLS to the team database, as the URL asks for it with libpq's parameters.
//!
//! `sslmode`: absent or `disable`, plain TCP (what pith did before TLS, and what a database on
//! a trusted network or behind a tunnel needs); `require`, `verify-ca` or `verify-full`, TLS or
//! no connection; `prefer` or `allow`, TLS when the server offers it. Whenever TLS is used the
//! server's certificate is verified, chain and host name (libpq's `verify-full`), against the
//! roots the proxy trusts for providers (webpki-roots) and the CA file `sslrootcert` names:
//! pith never sends a password over a connection to a server it has not authenticated.
//! tokio-postgres knows `sslmode` as disable/prefer/require and no `sslrootcert`, so both are
//! taken out of the URL here and the driver is given what it knows.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{PgError, StoreUrl};

/// Whether and how the connection is encrypted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tls {
    /// Plain TCP.
    Off,
    /// TLS with the certificate verified; `required` refuses a server without TLS.
    Verified {
        required: bool,
        root_cert: Option<PathBuf>,
    },
}

/// `url` as the driver reads it, and its TLS settings.
pub(crate) fn split(url: &StoreUrl) -> Result<(String, Tls), PgError> {
    let text = url.secret();
    let Some((base, query)) = text.split_once('?') else {
        return Ok((text.to_owned(), Tls::Off));
    };
    let bad = |reason: String| PgError::BadTls {
        url: url.clone(),
        reason,
    };
    let mut kept = Vec::new();
    let mut mode: Option<(bool, bool)> = None; // (tls, required)
    let mut root_cert = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => {
                mode = Some(match value {
                    "disable" => (false, false),
                    "allow" | "prefer" => (true, false),
                    "require" | "verify-ca" | "verify-full" => (true, true),
                    other => {
                        return Err(bad(format!(
                            "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                        )));
                    }
                });
            }
            "sslrootcert" => root_cert = Some(PathBuf::from(percent_decoded(value))),
            "sslcert" | "sslkey" | "sslpassword" | "sslcrl" => {
                return Err(bad(format!(
                    "{key} (a client certificate) is not supported: authenticate with a password"
                )));
            }
            _ => kept.push(pair),
        }
    }
    let tls = match mode {
        Some((true, required)) => Tls::Verified {
            required,
            root_cert,
        },
        // A CA file alone says the user wants TLS.
        None if root_cert.is_some() => Tls::Verified {
            required: true,
            root_cert,
        },
        Some((false, _)) | None => Tls::Off,
    };
    match &tls {
        Tls::Off => kept.push("sslmode=disable"),
        Tls::Verified { required: true, .. } => kept.push("sslmode=require"),
        Tls::Verified {
            required: false, ..
        } => kept.push("sslmode=prefer"),
    }
    Ok((format!("{base}?{}", kept.join("&")), tls))
}

/// The rustls connector for `root_cert` (and the web's roots).
pub(crate) fn connector(
    url: &StoreUrl,
    root_cert: Option<&PathBuf>,
) -> Result<MakeRustlsConnect, PgError> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = root_cert {
        let cannot = |reason: String| PgError::RootCert {
            url: url.clone(),
            path: path.clone(),
            reason,
        };
        let mut added = 0;
        for cert in CertificateDer::pem_file_iter(path).map_err(|e| cannot(e.to_string()))? {
            let cert = cert.map_err(|e| cannot(e.to_string()))?;
            roots.add(cert).map_err(|e| cannot(e.to_string()))?;
            added += 1;
        }
        if added == 0 {
            return Err(cannot("it holds no PEM certificate".into()));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PgError::BadTls {
            url: url.clone(),
            reason: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// `%XX` escapes decoded (a path in a URL's query).
fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_of(url: &str) -> Result<(String, Tls), String> {
        split(&StoreUrl::new(url)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_urls_tls_settings_are_read_and_the_driver_gets_what_it_knows() {
        assert_eq!(
            split_of("postgres://u:p@db/pith").unwrap(),
            ("postgres://u:p@db/pith".into(), Tls::Off)
        );
        assert_eq!(
            split_of("postgres://u:p@db/pith?sslmode=verify-full&sslrootcert=/etc/ca%20x.pem")
                .unwrap(),
            (
                "postgres://u:p@db/pith?sslmode=require".into(),
                Tls::Verified {
                    required: true,
                    root_cert: Some("/etc/ca x.pem".into())
                }
            )
        );
        assert_eq!(
            split_of("postgres://db/pith?application_name=x&sslmode=prefer").unwrap(),
            (
                "postgres://db/pith?application_name=x&sslmode=prefer".into(),
                Tls::Verified {
                    required: false,
                    root_cert: None
                }
            )
        );
        assert_eq!(
            split_of("postgres://db/pith?sslrootcert=ca.pem").unwrap().1,
            Tls::Verified {
                required: true,
                root_cert: Some("ca.pem".into())
            }
        );
        assert_eq!(
            split_of("postgres://db/pith?sslmode=disable").unwrap(),
            ("postgres://db/pith?sslmode=disable".into(), Tls::Off)
        );
    }

    #[test]
    fn unknown_modes_and_client_certificates_are_refused_without_the_password() {
        let e = split_of("postgres://u:hunter2@db/pith?sslmode=verify").unwrap_err();
        assert!(e.contains("sslmode=verify is not one of"), "{e}");
        assert!(
            e.contains("postgres://u:***@db/pith") && !e.contains("hunter2"),
            "{e}"
        );
        let e = split_of("postgres://u:hunter2@db/pith?sslcert=c.pem").unwrap_err();
        assert!(e.contains("not supported"), "{e}");
    }

    #[test]
    fn a_root_certificate_file_that_is_missing_or_empty_is_named() {
        let url = StoreUrl::new("postgres://db/pith");
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = connector(&url, Some(&missing)).err().unwrap().to_string();
        assert!(e.contains("missing.pem"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = connector(&url, Some(&empty)).err().unwrap().to_string();
        assert!(e.contains("holds no PEM certificate"), "{e}");
    }
}
