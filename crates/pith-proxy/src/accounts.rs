//! Which account a request belongs to. A proxy of one developer is one account (its
//! `[account] id`); a gateway shared by a team maps each request to an account by the key the
//! client sends in the [`crate::ACCOUNT_KEY_HEADER`] header (`[account.keys]` in config).
//!
//! Only SHA-256 digests are kept: a key given as `sha256:<hex>` never exists in the proxy at
//! all, and a plain key is hashed once at start. A presented key is hashed and compared with
//! every configured digest in constant time, all of them every time, so neither the time a
//! refusal takes nor which entry matched says anything about the keys. Keys are never logged
//! and never forwarded (the header is pith's own, stripped like the access token).

use sha2::{Digest, Sha256};

use crate::own_headers::constant_time_eq;

/// The shortest key accepted, in characters: 16 random hex digits are 64 bits.
pub const MIN_KEY_CHARS: usize = 16;

/// The prefix of a key given by its digest: `sha256:` and 64 hex digits.
pub const DIGEST_PREFIX: &str = "sha256:";

/// Why a configured key was refused. The key itself is never part of the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A plain key shorter than [`MIN_KEY_CHARS`].
    #[error(
        "the key is {chars} characters long; a key needs at least {MIN_KEY_CHARS} (e.g. the output of `openssl rand -hex 24`)"
    )]
    TooShort {
        /// Its length.
        chars: usize,
    },
    /// `sha256:` not followed by 64 hex digits.
    #[error(
        "a key given as {DIGEST_PREFIX}<hex> needs the 64 hex digits of the key's SHA-256 (e.g. `printf %s KEY | sha256sum`)"
    )]
    BadDigest,
    /// The same key (or its digest) is already another account's.
    #[error("the key is also account {other:?}'s: each account needs a key of its own")]
    Duplicate {
        /// The account that has it.
        other: String,
    },
}

/// The accounts a gateway knows, by the digest of each one's key.
#[derive(Clone, Default)]
pub struct AccountKeys {
    entries: Vec<(String, [u8; 32])>,
}

impl std::fmt::Debug for AccountKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The accounts only: digests are not secrets, but nothing key-shaped goes to a log.
        f.debug_list()
            .entries(self.entries.iter().map(|(a, _)| a))
            .finish()
    }
}

impl AccountKeys {
    /// No keys: every request is the proxy's own account.
    pub fn new() -> AccountKeys {
        AccountKeys::default()
    }

    /// Add `account`'s key: a plain key of at least [`MIN_KEY_CHARS`] characters, or
    /// `sha256:` and the 64 hex digits of its SHA-256. Surrounding blanks are not part of a
    /// key (nor of a presented one).
    pub fn add(&mut self, account: &str, key: &str) -> Result<(), KeyError> {
        let key = key.trim_ascii();
        let digest = match key.strip_prefix(DIGEST_PREFIX) {
            Some(hex) => parse_digest(hex).ok_or(KeyError::BadDigest)?,
            None => {
                let chars = key.chars().count();
                if chars < MIN_KEY_CHARS {
                    return Err(KeyError::TooShort { chars });
                }
                digest(key.as_bytes())
            }
        };
        if let Some((other, _)) = self.entries.iter().find(|(_, d)| *d == digest) {
            return Err(KeyError::Duplicate {
                other: other.clone(),
            });
        }
        self.entries.push((account.to_owned(), digest));
        Ok(())
    }

    /// Whether no key is configured (the proxy's own account for every request).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many keys are configured.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The account whose key `presented` is (surrounding blanks ignored), if any. Every
    /// configured digest is compared, in constant time, whatever matches.
    pub fn account_for(&self, presented: &[u8]) -> Option<&str> {
        let presented = digest(presented.trim_ascii());
        let mut found = None;
        for (account, d) in &self.entries {
            if constant_time_eq(d, &presented) {
                found = Some(account.as_str());
            }
        }
        found
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let high = char::from(pair[0]).to_digit(16)?;
        let low = char::from(pair[1]).to_digit(16)?;
        *byte = u8::try_from(high * 16 + low).ok()?;
    }
    Some(out)
}

/// The accounts of one proxy: its own, and the keys that map a request to another.
#[derive(Debug, Clone)]
pub struct Accounts {
    /// The proxy's own account (`[account] id`): every request's when no key is configured.
    pub own: String,
    /// With keys, every forwarded request must carry one of them.
    pub keys: AccountKeys,
}

impl Accounts {
    /// Every request is `own`'s.
    pub fn single(own: impl Into<String>) -> Accounts {
        Accounts {
            own: own.into(),
            keys: AccountKeys::new(),
        }
    }
}

impl Default for Accounts {
    fn default() -> Self {
        Accounts::single(pith_history::LOCAL_ACCOUNT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str = "alice-key-0123456789abcdef";
    const BOB: &str = "bob-key-fedcba9876543210";

    fn sha256_hex(key: &str) -> String {
        digest(key.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn a_key_maps_to_its_account_plain_or_by_digest() {
        let mut keys = AccountKeys::new();
        keys.add("alice", &format!(" {ALICE}\n")).unwrap();
        keys.add("bob", &format!("sha256:{}", sha256_hex(BOB).to_uppercase()))
            .unwrap();
        assert_eq!(keys.account_for(ALICE.as_bytes()), Some("alice"));
        assert_eq!(keys.account_for(BOB.as_bytes()), Some("bob"));
        assert_eq!(
            keys.account_for(format!("  {BOB}\t").as_bytes()),
            Some("bob")
        );
        for other in [
            "",
            "alice",
            &ALICE[..ALICE.len() - 1],
            &format!("{ALICE}x"),
            &ALICE.to_uppercase(),
            // The digest is not the key.
            &format!("sha256:{}", sha256_hex(BOB)),
            &sha256_hex(BOB),
        ] {
            assert_eq!(keys.account_for(other.as_bytes()), None, "{other:?}");
        }
        assert_eq!(format!("{keys:?}"), r#"["alice", "bob"]"#);
    }

    #[test]
    fn bad_keys_are_refused_without_showing_them() {
        let mut keys = AccountKeys::new();
        let short = keys.add("alice", "tooshort-key").unwrap_err();
        assert_eq!(short, KeyError::TooShort { chars: 12 });
        assert!(!short.to_string().contains("tooshort"), "{short}");
        for bad in [
            "sha256:",
            "sha256:abc",
            &format!("sha256:{}", "g".repeat(64)),
        ] {
            assert_eq!(keys.add("alice", bad), Err(KeyError::BadDigest), "{bad}");
        }
        keys.add("alice", ALICE).unwrap();
        // The same key again, plain or as its digest, is refused naming the account with it.
        for again in [ALICE.to_owned(), format!("sha256:{}", sha256_hex(ALICE))] {
            let err = keys.add("bob", &again).unwrap_err();
            assert_eq!(
                err,
                KeyError::Duplicate {
                    other: "alice".into()
                }
            );
            assert!(!err.to_string().contains(ALICE), "{err}");
        }
        assert_eq!(keys.len(), 1);
    }

    #[test]
    fn every_byte_of_a_digest_takes_part_in_the_comparison() {
        // Equal only when every byte is (the comparison reads both whole, with no early exit).
        let a = digest(ALICE.as_bytes());
        for i in 0..32 {
            let mut b = a;
            b[i] ^= 1;
            assert!(!constant_time_eq(&a, &b), "byte {i}");
        }
        assert!(constant_time_eq(&a, &a));
    }
}
