//! Test kit: a mock upstream speaking all three wires (and the Responses API's WebSocket) and a
//! mock Ollama, on loopback; the real captures; what the benchmarks share.

pub mod bench;
pub mod bombs;
pub mod cache_sim;
pub mod errors;
pub mod fixtures;
pub mod haproxy;
pub mod ollama;
pub mod postgres;
pub mod responses_socket;
pub mod rng;
mod stream_flags;
pub mod upstream;
pub mod wait;

pub use upstream::{Chunk, MockUpstream, Recorded, Reply};
