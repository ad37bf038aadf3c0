//! Tool output excerpts (issue 48) on a corpus of real tool outputs.

mod corpus;
