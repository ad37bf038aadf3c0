//! The history tools' work: search, find candidates, delete with a token, restore. Each opens
//! the history file (never creating it: only the proxy and imports do), or in team mode the
//! team's database, runs on the blocking pool, and answers JSON the agent reads; refusals say
//! what to do next.

use std::path::PathBuf;

use pith_history::token::TokenKey;
use pith_history::{AgentType, Filter};
use pith_store::clock::now_ms;
use pith_store::history::{DEFAULT_CANDIDATES, History, HistoryError};
use schemars::JsonSchema;
use serde::Deserialize;

/// Where the history is and how its tokens are made.
#[derive(Debug, Clone)]
pub struct HistoryOptions {
    /// The history database.
    pub path: PathBuf,
    /// Team mode: the team's database, which the tools read and delete in instead.
    pub team: Option<pith_store::postgres::StoreUrl>,
    /// The account this server acts for (a local install: `local`).
    pub account: String,
    /// A key from config (a team's); else `key_path` is used, made on first use.
    pub key: Option<TokenKey>,
    /// The key file made on first use when config names none.
    pub key_path: PathBuf,
    /// How long a filter token is good for.
    pub token_ttl_ms: i64,
}

impl HistoryOptions {
    fn key(&self) -> Result<TokenKey, String> {
        match &self.key {
            Some(key) => Ok(key.clone()),
            None => TokenKey::load_or_create(&self.key_path)
                .map_err(|e| pith_brain::render::error_chain(&e)),
        }
    }

    /// The history (the team's in team mode), or `None` when nothing was ever recorded or
    /// imported here.
    fn open(&self) -> Result<Option<History>, String> {
        if let Some(url) = &self.team {
            return History::open_team(url).map(Some).map_err(|e| {
                format!(
                    "{}; the team history is unreachable: try again later, or ask the user to check `pith doctor`",
                    pith_brain::render::error_chain(&e)
                )
            });
        }
        if !self.path.exists() {
            return Ok(None);
        }
        History::open(&self.path)
            .map(Some)
            .map_err(|e| pith_brain::render::error_chain(&e))
    }

    fn check_account(&self, account: &str) -> Result<(), String> {
        if account == self.account {
            Ok(())
        } else {
            Err(format!(
                "this server acts for account {:?}, not {account:?}; pass accountId {:?}",
                self.account, self.account
            ))
        }
    }
}

const NOTHING_RECORDED: &str = "no conversation history yet: it is recorded as sessions pass through `pith proxy`, or imported with `pith history import`";

/// Arguments of `search_history`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SearchHistoryArgs {
    /// Words to look for.
    query: String,
    /// Default 10.
    limit: Option<u32>,
}

/// Arguments of `tool_output`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolOutputArgs {
    /// The call id a shortened output names, e.g. "toolu_01A...".
    call_id: String,
}

/// Arguments of `memory_find_candidates`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FindCandidatesArgs {
    /// The account, e.g. "local".
    account_id: String,
    /// "empty" (no messages) or "single-assistant" (one message, from the assistant).
    filter: String,
    /// "admin" or "public".
    agent_type: Option<String>,
    /// Default 50, max 500.
    limit: Option<u32>,
    /// A dry run's token never deletes.
    dry_run: Option<bool>,
}

/// Arguments of `memory_delete`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeleteArgs {
    /// The filterToken memory_find_candidates returned.
    filter_token: String,
    /// Narrow to these of the token's ids (never more); a token deletes once.
    ids: Option<Vec<String>>,
}

/// Arguments of `memory_restore`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct RestoreArgs {
    /// Conversation ids to take out of the trash.
    ids: Vec<String>,
}

fn json(value: &impl serde::Serialize) -> Result<String, String> {
    serde_json::to_string_pretty(value).map_err(|e| e.to_string())
}

fn store_error(e: &(impl std::error::Error + 'static)) -> String {
    pith_brain::render::error_chain(e)
}

pub(crate) fn search(options: &HistoryOptions, a: SearchHistoryArgs) -> Result<String, String> {
    let Some(history) = options.open()? else {
        return Ok(format!("{NOTHING_RECORDED}\n"));
    };
    let limit = a.limit.map_or(10, |l| l.clamp(1, 50) as usize);
    let hits = history
        .search(&options.account, &a.query, limit)
        .map_err(|e| store_error(&e))?;
    json(&serde_json::json!({ "query": a.query, "hits": hits }))
}

/// A tool output pith shortened, whole, by the call id its header names: kept by the proxy
/// when it shortens outputs and records history.
pub(crate) fn tool_output(options: &HistoryOptions, a: ToolOutputArgs) -> Result<String, String> {
    let missing = || {
        format!(
            "no output is kept for call {:?}: the proxy keeps an output whole only when it \
             shortens outputs and records history. Run the call again instead (for a file, ask \
             for the lines you need).",
            a.call_id
        )
    };
    let Some(history) = options.open()? else {
        return Err(missing());
    };
    history
        .tool_output(&options.account, &a.call_id)
        .map_err(|e| store_error(&e))?
        .ok_or_else(missing)
}

pub(crate) fn find_candidates(
    options: &HistoryOptions,
    a: FindCandidatesArgs,
) -> Result<String, String> {
    options.check_account(&a.account_id)?;
    let filter: Filter = a.filter.parse().map_err(|e| format!("{e}"))?;
    let agent_type = a
        .agent_type
        .as_deref()
        .map(str::parse::<AgentType>)
        .transpose()
        .map_err(|e| format!("{e}"))?;
    let Some(history) = options.open()? else {
        return Ok(format!("{NOTHING_RECORDED}\n"));
    };
    let key = options.key()?;
    let limit = a.limit.map_or(DEFAULT_CANDIDATES, |l| l as usize);
    let found = history
        .find_candidates(
            &key,
            &options.account,
            filter,
            agent_type,
            limit,
            a.dry_run.unwrap_or(false),
            now_ms(),
            options.token_ttl_ms,
        )
        .map_err(|e| store_error(&e))?;
    json(&found)
}

pub(crate) fn delete(options: &HistoryOptions, a: DeleteArgs) -> Result<String, String> {
    let Some(mut history) = options.open()? else {
        return Err(format!("nothing to delete: {NOTHING_RECORDED}"));
    };
    let key = options.key()?;
    let done = history
        .delete(
            &key,
            &options.account,
            &a.filter_token,
            a.ids.as_deref(),
            now_ms(),
        )
        .map_err(|e: HistoryError| format!("{}; nothing was deleted", store_error(&e)))?;
    json(&serde_json::json!({
        "trashed": done.changed,
        "skipped": done.skipped,
        "restore": "memory_restore with these ids",
    }))
}

pub(crate) fn restore(options: &HistoryOptions, a: RestoreArgs) -> Result<String, String> {
    let Some(mut history) = options.open()? else {
        return Err(format!("nothing to restore: {NOTHING_RECORDED}"));
    };
    let done = history
        .restore(&options.account, &a.ids)
        .map_err(|e| store_error(&e))?;
    json(&serde_json::json!({ "restored": done.changed, "skipped": done.skipped }))
}
