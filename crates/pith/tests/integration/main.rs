//! The one integration-test binary: drives the real `pith` executable (`CARGO_BIN_EXE_pith`)
//! against `pith-testkit`'s mock upstream, the official Python SDKs (`tests/python/`) against
//! the real process, and the real coding-agent CLIs through the proxy: `clients.rs` runs each
//! one with nothing of the developer's setup and a trap for any traffic leaving loopback;
//! `claude_code.rs` and `opencode.rs` are sessions with tool deferral; `hook.rs` runs
//! `pith hook` as the hosts do, then the real Claude Code and Codex with the hook `pith setup`
//! configured, checking that each note reaches the model and no hook error is recorded.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test harness: a panic is the failure report"
)]

mod accounts;
mod browser;
mod chatgpt;
mod claude_code;
mod cli;
mod clients;
mod dashboard;
mod defer;
mod doctor;
mod faults;
mod gateway;
mod hardening;
mod history;
mod holdout;
mod hook;
mod hostile_bodies;
mod hostile_peers;
mod ledger;
mod long_sessions;
mod mcp;
mod memory;
mod model;
#[cfg(unix)]
mod model_hostile;
#[cfg(unix)]
mod modes;
mod opencode;
mod outputs;
mod pins;
mod provider_counts;
mod proxy;
mod run;
mod search_trip;
mod service;
mod setup;
mod stats;
mod stranger_input;
mod support;
mod team;
mod untrusted_project;
mod websocket;
mod websocket_turns;
