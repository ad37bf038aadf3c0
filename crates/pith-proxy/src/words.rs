//! The words for every stage a request's row can name: pith-transform's stages and the
//! proxy's own (the tool search's hiding and fetching halves), and the reasons given for every
//! stage at once. What `pith stats` and the dashboard show for the ledger's codes.

use pith_transform::words::StageWords;

/// Every stage's words: the transforms', then the proxy's own.
pub fn stages() -> impl Iterator<Item = &'static StageWords> + Clone {
    pith_transform::words::STAGES.iter().chain([
        &crate::search_trip::HIDE_WORDS,
        &crate::search_trip::FETCH_WORDS,
    ])
}

/// Reasons given for every stage of a request at once (the pipeline's, a socket's).
pub fn any_stage() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    pith_transform::words::ANY_STAGE
        .iter()
        .chain(crate::websocket::REASON_WORDS)
}

/// The report's words for every stage and reason above, with the rates' and the outcomes'.
pub fn report_words() -> pith_ledger::report::Words {
    pith_ledger::report::Words::new(stages(), any_stage())
}
