//! Local-model ranking of search candidates through Ollama; strict parse, fails open.
