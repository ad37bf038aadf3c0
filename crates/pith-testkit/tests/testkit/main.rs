//! Tests of the test kit itself: the mock upstream must record exactly, reply as scripted,
//! stream like the real APIs, and its fixtures must be what the official SDKs parse.

// clippy.toml allows these inside #[test] functions only; the shared helpers here are test
// code too, where a failed setup step should fail the test loudly.
#![expect(clippy::unwrap_used, reason = "test helpers")]

mod client;
mod fixtures;
mod postgres;
mod sdk;
mod sse;
mod upstream;
