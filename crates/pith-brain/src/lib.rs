//! The project memory: memories with evidence, staleness, search, trash.
