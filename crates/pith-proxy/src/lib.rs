//! The proxy: an HTTP/1.1 server that forwards coding-agent traffic to its provider, runs the
//! transform pipeline on the three wires it understands, streams answers back chunk by chunk,
//! and records every request in the ledger without delaying it.
//!
//! Invariants:
//! - A body no stage changed is forwarded as the exact bytes the client sent.
//! - Without a response rewriter, response bytes are never altered or held back: each upstream
//!   chunk is handed to the client as it arrives; accounting keeps cheap reference-counted
//!   copies and parses them later, on a ledger writer thread. The one rewriter pith installs
//!   (the tool search round trip, [`rewrite`]) takes out only the blocks pith's own search
//!   caused, and hands each event on as soon as it is whole.
//! - Ledger writes never block a request: the record is appended to a spool file (`pith_ledger`);
//!   what the spool cannot take is counted, never dropped silently.
//! - Credentials (`authorization`, `x-api-key`) are forwarded, never stored or logged; pith's
//!   own (the access token, an account key) are neither forwarded, stored nor logged.

pub mod accounts;
mod config;
mod fault;
mod gather;
mod last_check;
mod own_headers;
pub mod own_pages;
pub mod provider_count;
mod request;
pub mod rewrite;
pub mod search_trip;
mod server;
mod state;
mod target;
mod tee;
pub mod upstream;
mod websocket;
pub mod words;

pub use accounts::{AccountKeys, Accounts, KeyError};
pub use config::{DEFAULT_MAX_BODY, MAX_SOCKETS, ProxyConfig, Timeouts, max_sockets};
pub use own_headers::{ACCOUNT_KEY_HEADER, AGENT_TYPE_HEADER, TOKEN_HEADER};
pub use request::TRANSFORMS_HEADER;
pub use server::{Proxy, ProxyError};
pub use state::Activity;
pub use upstream::{UpstreamError, UpstreamUrl};
