//! Test kit: a mock upstream speaking all three wires and a mock Ollama, on loopback.
pub mod ollama;
