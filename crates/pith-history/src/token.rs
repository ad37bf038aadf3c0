//! Filter tokens: what ties a deletion to a selection the server made. A token is
//! `base64url(claims JSON) "." base64url(HMAC-SHA256(key, claims JSON))`; the claims are the
//! version, account, filter, agent type, the sampled ids, issued-at, expiry and whether it is a
//! dry run. Anyone can read a token; only the key's holder can make one. The signature is
//! checked (in constant time, by `hmac`'s `verify_slice`) before the claims are even parsed.

use std::io::{Read, Write};
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::{AgentType, Filter};

/// The claims format this build writes and reads.
pub const VERSION: u32 = 1;
/// How long a token is good for unless configured otherwise: long enough to look at the
/// candidates, short enough that a selection is not acted on after the store has moved on.
pub const DEFAULT_TTL_MS: i64 = 15 * 60 * 1000;
/// Length of the key, in bytes.
pub const KEY_BYTES: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// Why a token was refused or a key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Not two base64url parts joined by a dot, or claims that are not this format.
    #[error(
        "the filter token is malformed; pass the filterToken exactly as memory_find_candidates returned it"
    )]
    Malformed,
    /// The signature does not match: the token was changed, or made with another key.
    #[error(
        "the filter token's signature does not match (it was changed or not issued here); run memory_find_candidates again"
    )]
    BadSignature,
    /// A claims version this build does not know.
    #[error(
        "the filter token has version {0}, this pith reads version {VERSION}; run memory_find_candidates again"
    )]
    Version(u32),
    /// Past its expiry.
    #[error("the filter token expired {ago_s} s ago; run memory_find_candidates again")]
    Expired {
        /// Seconds since it expired.
        ago_s: i64,
    },
    /// Issued for another account.
    #[error(
        "the filter token was issued for another account; select this account's candidates with memory_find_candidates"
    )]
    WrongAccount,
    /// The token deleted once already (a token deletes once, even within its lifetime: after a
    /// restore, the same token must not trash the conversations again).
    #[error(
        "the filter token was used to delete once already; run memory_find_candidates again for a new one"
    )]
    Used,
    /// A dry run's token: for looking at, never for deleting.
    #[error(
        "the filter token is from a dry run and never deletes; run memory_find_candidates with dryRun false"
    )]
    DryRun,
    /// The key in config is not 64 hex digits.
    #[error("the history token key must be {} hex digits ({KEY_BYTES} bytes)", KEY_BYTES * 2)]
    KeyFormat,
    /// The key file could not be read or made.
    #[error("cannot read or create the history token key {path}")]
    KeyFile {
        /// The key file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The OS gave no random bytes.
    #[error("cannot get random bytes for the history token key: {0}")]
    Random(String),
}

/// What a token says. `ids` are the conversations the selection sampled, in its order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// [`VERSION`].
    pub v: u32,
    /// The account the selection ran in.
    pub account: String,
    /// The filter that selected.
    pub filter: Filter,
    /// The agent type it was narrowed to, if any.
    #[serde(rename = "agentType")]
    pub agent_type: Option<AgentType>,
    /// The conversations selected.
    pub ids: Vec<String>,
    /// Issued at (ms since the epoch).
    pub iat: i64,
    /// Expires at (ms since the epoch).
    pub exp: i64,
    /// A dry run's token never deletes.
    #[serde(rename = "dryRun")]
    pub dry_run: bool,
}

/// The secret tokens are signed with.
#[derive(Clone)]
pub struct TokenKey([u8; KEY_BYTES]);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(<secret>)")
    }
}

impl TokenKey {
    /// A key given as 64 hex digits (a team's shared key, from config).
    pub fn from_hex(hex: &str) -> Result<TokenKey, TokenError> {
        let hex = hex.trim();
        if hex.len() != KEY_BYTES * 2 || !hex.is_ascii() {
            return Err(TokenError::KeyFormat);
        }
        let mut key = [0u8; KEY_BYTES];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16)
                .map_err(|_| TokenError::KeyFormat)?;
        }
        Ok(TokenKey(key))
    }

    /// The key in `path` (64 hex digits), made from 32 random bytes with mode 0600 when the
    /// file does not exist yet. Two processes making it at once agree on the first one's key.
    pub fn load_or_create(path: &Path) -> Result<TokenKey, TokenError> {
        let file_error = |source| TokenError::KeyFile {
            path: path.display().to_string(),
            source,
        };
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(path) {
            Ok(mut file) => {
                let mut key = [0u8; KEY_BYTES];
                getrandom::fill(&mut key).map_err(|e| TokenError::Random(e.to_string()))?;
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    file.set_permissions(std::fs::Permissions::from_mode(0o600))
                        .map_err(file_error)?;
                }
                let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
                file.write_all(hex.as_bytes()).map_err(file_error)?;
                file.sync_all().map_err(file_error)?;
                Ok(TokenKey(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // A process that is still writing it: wait for its 64 digits.
                for _ in 0..50 {
                    let mut text = String::new();
                    std::fs::File::open(path)
                        .and_then(|mut f| f.read_to_string(&mut text))
                        .map_err(file_error)?;
                    if text.trim().len() >= KEY_BYTES * 2 {
                        return TokenKey::from_hex(&text);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(TokenError::KeyFormat)
            }
            Err(e) => Err(file_error(e)),
        }
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC pads a key shorter than SHA-256's 64-byte block with zeros; padding it here
        // gives the fixed-size key `KeyInit::new` takes, so no length check can fail.
        let mut block = [0u8; 64];
        block[..KEY_BYTES].copy_from_slice(&self.0);
        <HmacSha256 as KeyInit>::new(&block.into())
    }

    /// The token for `claims`.
    pub fn sign(&self, claims: &Claims) -> String {
        let payload = serde_json::to_vec(claims).unwrap_or_default();
        let mut mac = self.mac();
        mac.update(&payload);
        let signature = mac.finalize().into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(signature)
        )
    }

    /// The claims of a token this key signed, checked for version, expiry (`now_ms`) and
    /// account, ready to delete with: a dry run's token is refused here.
    pub fn verify_for_delete(
        &self,
        token: &str,
        account: &str,
        now_ms: i64,
    ) -> Result<Claims, TokenError> {
        let claims = self.verify(token)?;
        if claims.v != VERSION {
            return Err(TokenError::Version(claims.v));
        }
        if claims.account != account {
            return Err(TokenError::WrongAccount);
        }
        if now_ms >= claims.exp {
            return Err(TokenError::Expired {
                ago_s: (now_ms - claims.exp) / 1000,
            });
        }
        if claims.dry_run {
            return Err(TokenError::DryRun);
        }
        Ok(claims)
    }

    /// The claims of a token this key signed (signature only; nothing else checked).
    pub fn verify(&self, token: &str) -> Result<Claims, TokenError> {
        let (payload, signature) = token.trim().split_once('.').ok_or(TokenError::Malformed)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Malformed)?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::Malformed)?;
        let mut mac = self.mac();
        mac.update(&payload);
        mac.verify_slice(&signature)
            .map_err(|_| TokenError::BadSignature)?;
        serde_json::from_slice(&payload).map_err(|_| TokenError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            v: VERSION,
            account: "local".into(),
            filter: Filter::Empty,
            agent_type: None,
            ids: vec!["c-1".into(), "c-2".into()],
            iat: 1_000,
            exp: 1_000 + DEFAULT_TTL_MS,
            dry_run: false,
        }
    }

    #[test]
    fn a_signed_token_verifies_and_a_changed_byte_never_does() {
        let key = TokenKey::from_hex(&"ab".repeat(32)).unwrap();
        let token = key.sign(&claims());
        assert_eq!(
            key.verify_for_delete(&token, "local", 2_000).unwrap(),
            claims()
        );
        let bytes = token.as_bytes();
        for i in 0..bytes.len() {
            for replacement in [b'A', b'_', b'.', b'z'] {
                if bytes[i] == replacement {
                    continue;
                }
                let mut changed = bytes.to_vec();
                changed[i] = replacement;
                let changed = String::from_utf8(changed).unwrap();
                assert!(key.verify(&changed).is_err(), "byte {i} -> {replacement}");
            }
        }
        let other = TokenKey::from_hex(&"cd".repeat(32)).unwrap();
        assert!(matches!(
            other.verify(&token),
            Err(TokenError::BadSignature)
        ));
    }

    #[test]
    fn expiry_account_and_dry_run_are_refused() {
        let key = TokenKey::from_hex(&"01".repeat(32)).unwrap();
        let token = key.sign(&claims());
        let expires = claims().exp;
        assert!(matches!(
            key.verify_for_delete(&token, "local", expires),
            Err(TokenError::Expired { .. })
        ));
        assert!(matches!(
            key.verify_for_delete(&token, "team-b", 2_000),
            Err(TokenError::WrongAccount)
        ));
        let dry = key.sign(&Claims {
            dry_run: true,
            ..claims()
        });
        assert!(matches!(key.verify(&dry), Ok(c) if c.dry_run));
        assert!(matches!(
            key.verify_for_delete(&dry, "local", 2_000),
            Err(TokenError::DryRun)
        ));
    }

    #[test]
    fn the_key_file_is_made_once_with_mode_0600_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.key");
        let made = TokenKey::load_or_create(&path).unwrap();
        let read = TokenKey::load_or_create(&path).unwrap();
        assert_eq!(made.0, read.0);
        assert_ne!(made.0, [0u8; KEY_BYTES]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(matches!(
            TokenKey::from_hex("12"),
            Err(TokenError::KeyFormat)
        ));
    }
}
