//! Workspace search on ripgrep's crates: .gitignore-aware, capped, paged.
