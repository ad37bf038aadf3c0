//! `[history]` settings and their `PITH_*` overrides, resolved once for the three commands
//! that use history (`proxy` records, `mcp` and `history` read and delete).

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context;
use pith_history::AgentType;
use pith_history::token::{DEFAULT_TTL_MS, TokenKey};
use pith_store::postgres::StoreUrl;

use crate::config::{Config, pith_home};
use crate::env::{self, Var};

/// Everything history needs to know from config and the environment.
pub struct HistorySettings {
    /// Record conversations passing through the proxy.
    pub record: bool,
    /// The database.
    pub path: PathBuf,
    /// The account the reading commands (`history`, `mcp`) are scoped to: `PITH_ACCOUNT` over
    /// `[account] id`, else `local`. The proxy records each turn under its request's account.
    pub account: String,
    /// Team mode: the team's database, where search, listing and deletion run (the local file
    /// is then the outbox the proxy records into and the shipper sends on).
    pub team: Option<StoreUrl>,
    /// A key from config or env; `None`: the key file.
    pub key: Option<TokenKey>,
    /// The key file made on first use.
    pub key_path: PathBuf,
    /// How long a filter token is good for.
    pub token_ttl_ms: i64,
    /// Agent type per client.
    pub agent_types: HashMap<String, AgentType>,
}

impl HistorySettings {
    pub fn resolve(full: &Config) -> anyhow::Result<HistorySettings> {
        let config = &full.history;
        let home = pith_home()?;
        let record = env::flag(Var::History)?.or(config.record).unwrap_or(true);
        let path = env::absolute_path(Var::HistoryPath)?
            .or_else(|| config.path.clone())
            .unwrap_or_else(|| home.join("history.db"));
        let key = match env::text(Var::HistoryTokenKey) {
            Some(hex) => Some(TokenKey::from_hex(hex).context("PITH_HISTORY_TOKEN_KEY")?),
            None => match &config.token_key {
                Some(hex) => Some(TokenKey::from_hex(hex).context("history.token_key")?),
                None => None,
            },
        };
        let ttl = match env::text(Var::HistoryTokenTtl) {
            Some(v) => Some(
                crate::duration::parse(v)
                    .map_err(anyhow::Error::msg)
                    .context("PITH_HISTORY_TOKEN_TTL")?,
            ),
            None => match &config.token_ttl {
                Some(v) => Some(
                    crate::duration::parse(v)
                        .map_err(anyhow::Error::msg)
                        .context("history.token_ttl")?,
                ),
                None => None,
            },
        };
        let token_ttl_ms = ttl.map_or(DEFAULT_TTL_MS, |d| {
            i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
        });
        anyhow::ensure!(token_ttl_ms > 0, "history.token_ttl must be longer than 0");
        let mut agent_types = HashMap::new();
        for (client, kind) in &config.agent_types {
            let kind: AgentType = kind
                .parse()
                .with_context(|| format!("history.agent_types.{client}"))?;
            agent_types.insert(client.clone(), kind);
        }
        Ok(HistorySettings {
            record,
            path,
            account: full.account_id()?,
            team: full.store_url()?,
            key,
            key_path: home.join("history.key"),
            token_ttl_ms,
            agent_types,
        })
    }

    /// The key tokens are signed with: config's, else the key file's (made on first use).
    pub fn token_key(&self) -> anyhow::Result<TokenKey> {
        match &self.key {
            Some(key) => Ok(key.clone()),
            None => {
                if let Some(dir) = self.key_path.parent() {
                    pith_store::sqlite::create_private_dir(dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                }
                Ok(TokenKey::load_or_create(&self.key_path)?)
            }
        }
    }

    /// What the MCP server's history tools need.
    pub fn mcp_options(&self) -> pith_mcp::history::HistoryOptions {
        pith_mcp::history::HistoryOptions {
            path: self.path.clone(),
            team: self.team.clone(),
            account: self.account.clone(),
            key: self.key.clone(),
            key_path: self.key_path.clone(),
            token_ttl_ms: self.token_ttl_ms,
        }
    }
}
