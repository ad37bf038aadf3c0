//! Pins: a rule the user chose, moved to the tail of every request.
//!
//! `@pith pin <rule>` on a line of its own, in a rules file the harness inlined (durable: the
//! **file** tier) or in a chat turn (this session only: the **session** tier). The state is
//! folded from the transcript on every request, oldest to newest: no store, no session id, so
//! rewinding the conversation rewinds the pins.
//!
//! What goes upstream: every command line is cut out (a command-only turn is dropped together
//! with pith's answer to it, never one without the other), and one pin block is added at the
//! tail, after every cache breakpoint the client set, so it never costs a cache miss. Pins are
//! moved, not copied: when the block has nowhere to land, nothing is cut either.
//!
//! A turn that is nothing but commands is answered by pith itself ([`PinsStage::answer`]); the
//! answer starts with [`REPLY_MARKER`], which is how the stage recognizes it on the way back in.

mod command;
mod fold;
mod plan;
mod rawstr;
mod render;
mod transcript;

use serde::Deserialize;

pub use command::{Command, MARKER, Target, is_command_line, parse_line};
pub use fold::{Change, Pin, Tier};

use crate::stage::{Edit, Fact, Outcome, Request, Site, Stage, StageError};

/// How pith's own answer to a command turn begins: the whole test for recognizing it when the
/// client sends it back in the history.
pub const REPLY_MARKER: &str = "@pith ";

/// Why the stage left a request as it was.
pub mod reason {
    /// The body never mentions `@pith`: the fast path (every request pays for it).
    pub const NO_COMMANDS: &str = "no_pin_commands";
    /// `@pith` appears, but no line is a command (prose mentioning it).
    pub const NO_COMMAND_LINES: &str = "no_command_lines";
    /// Not valid UTF-8 JSON of the wire's shape.
    pub const UNREADABLE: &str = "unreadable";
    /// The last message cannot take the pin block (an assistant prefill): nothing is moved.
    pub const NOWHERE_TO_LAND: &str = "nowhere_to_land";
    /// Every command is in a turn the provider answered instead of pith (history the model
    /// saw, left as it is), and there are no pins to move.
    pub const NOTHING_TO_MOVE: &str = "nothing_to_move";
    /// The tail already holds pith's pin block (a body pith rewrote; clients never see one).
    pub const ALREADY_PINNED: &str = "already_pinned";
    /// The request is only a command turn (pith answers it; here it goes up as sent, e.g.
    /// to `count_tokens`).
    pub const COMMAND_TURN: &str = "command_turn";

    /// Every reason, for the words' test.
    pub const ALL: &[&str] = &[
        NO_COMMANDS,
        NO_COMMAND_LINES,
        UNREADABLE,
        NOWHERE_TO_LAND,
        NOTHING_TO_MOVE,
        ALREADY_PINNED,
        COMMAND_TURN,
    ];
}

/// The fact of a command turn pith answered itself (the proxy reports it under this stage).
pub const ANSWERED_FACT: &str = "answered";

/// What the stage, its facts and its reasons are called for people.
pub const WORDS: crate::stage::StageWords = crate::stage::StageWords {
    stage: NAME,
    name: "pins",
    facts: &[
        ("pins", "{n} pin{s} held"),
        (
            "lines_moved",
            "moved {n} pinned line{s} to the end of the prompt",
        ),
        (
            "turns_dropped",
            "dropped {n} command turn{s} from the history",
        ),
        ("chars_out", ""),
        ("chars_in", "added {n} character{s}"),
        (ANSWERED_FACT, "answered {n} command turn{s} itself"),
    ],
    reasons: &[
        (reason::NO_COMMANDS, "no @pith command"),
        (
            reason::NO_COMMAND_LINES,
            "@pith mentioned, but on no command line",
        ),
        (reason::UNREADABLE, "the body was not the JSON it expects"),
        (
            reason::NOWHERE_TO_LAND,
            "the last message could not take the pins",
        ),
        (
            reason::NOTHING_TO_MOVE,
            "the commands were already answered by the model and no pins are held",
        ),
        (reason::ALREADY_PINNED, "the pins were already in place"),
        (
            reason::COMMAND_TURN,
            "a command turn sent on as it came (a token count, say)",
        ),
    ],
    came_back: None,
};

/// The stage's name, in the `pith-transforms` header and the ledger.
pub const NAME: &str = "pins";

/// The pins stage. Stateless: everything comes from the request.
#[derive(Debug, Default, Clone, Copy)]
pub struct PinsStage;

/// pith's own answer to a turn of pin commands, for the wire and mode the client used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalAnswer {
    /// The text of the answer; starts with [`REPLY_MARKER`].
    pub text: String,
    /// The model the client asked for, echoed in the answer.
    pub model: String,
    /// The client asked for a stream.
    pub stream: bool,
    /// Chat Completions: `stream_options.include_usage` (a final usage chunk).
    pub include_usage: bool,
    /// The pins after the turn, in listing order.
    pub pins: Vec<Pin>,
}

#[derive(Deserialize, Default)]
struct Mode<'a> {
    #[serde(borrow, default)]
    model: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

impl PinsStage {
    /// The stage.
    pub fn new() -> PinsStage {
        PinsStage
    }

    /// pith's answer when the request's final turn is nothing but pin commands (no prose, no
    /// tool result) on a path that generates a reply; `None` otherwise, and for any body the
    /// stage cannot read (a parse quirk must not cost the user a real turn).
    pub fn answer(&self, request: &Request<'_>) -> Option<LocalAnswer> {
        if request.path.ends_with("/count_tokens") || !mentions_marker(request.body) {
            return None;
        }
        let body = std::str::from_utf8(request.body).ok()?;
        let transcript = transcript::read(request.wire, body).ok()?;
        let folded = fold::fold(&transcript);
        let turn = fold::final_turn(&transcript)?;
        if !folded.command_only(&transcript, &turn) {
            return None;
        }
        let mode: Mode<'_> = serde_json::from_str(body).ok()?;
        let changes = folded.changes_in(&turn);
        Some(LocalAnswer {
            text: render::reply(&changes, &folded.pins),
            model: mode.model.map(|m| m.into_owned()).unwrap_or_default(),
            stream: mode.stream.unwrap_or(false),
            include_usage: mode
                .stream_options
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
            pins: folded.pins,
        })
    }
}

/// Whether `@pith` occurs anywhere in the body: what every request without pins pays.
fn mentions_marker(body: &[u8]) -> bool {
    memchr::memmem::find(body, MARKER.as_bytes()).is_some()
}

impl Stage for PinsStage {
    fn name(&self) -> &'static str {
        NAME
    }

    fn apply(&self, request: &Request<'_>) -> Result<Outcome, StageError> {
        if !mentions_marker(request.body) {
            return Ok(Outcome::Unchanged(reason::NO_COMMANDS));
        }
        let Ok(body) = std::str::from_utf8(request.body) else {
            return Ok(Outcome::Unchanged(reason::UNREADABLE));
        };
        let Ok(transcript) = transcript::read(request.wire, body) else {
            return Ok(Outcome::Unchanged(reason::UNREADABLE));
        };
        if transcript.ends_with_pin_block() {
            return Ok(Outcome::Unchanged(reason::ALREADY_PINNED));
        }
        let folded = fold::fold(&transcript);
        if folded.found.is_empty() {
            return Ok(Outcome::Unchanged(reason::NO_COMMAND_LINES));
        }
        if let Some(turn) = fold::final_turn(&transcript)
            && folded.command_only(&transcript, &turn)
        {
            // pith answers such a turn before the pipeline runs; one that gets here (a
            // `count_tokens` call) goes up as sent.
            return Ok(Outcome::Unchanged(reason::COMMAND_TURN));
        }
        let plan = match plan::plan(request.wire, body, &transcript, &folded) {
            Ok(plan) => plan,
            Err(plan::NowhereToLand) => return Ok(Outcome::Unchanged(reason::NOWHERE_TO_LAND)),
        };
        if plan.splices.is_empty() {
            return Ok(Outcome::Unchanged(reason::NOTHING_TO_MOVE));
        }
        let mut facts = vec![Fact::level("pins", folded.pins.len())];
        facts.push(Fact::count("lines_moved", plan.lines_cut));
        if plan.turns_dropped > 0 {
            facts.push(Fact::count("turns_dropped", plan.turns_dropped));
        }
        // The edit's net size, for the ledger's savings: command lines move into the block (not
        // kept out), dropped turns are kept out, the block's frame is added. Priced at the tail,
        // where the block lands and commands are typed (an estimate: a dropped turn may sit
        // earlier in the history).
        let removed: usize = plan.splices.iter().map(|s| s.range.len()).sum();
        let added: usize = plan.splices.iter().map(|s| s.replacement.len()).sum();
        facts.push(if removed >= added {
            Fact::chars_kept_out("chars_out", removed - added, Site::Tail)
        } else {
            Fact::chars_added("chars_in", added - removed, Site::Tail)
        });
        Ok(Outcome::Edited(Edit {
            splices: plan.splices,
            headers: Vec::new(),
            facts,
            within: None,
        }))
    }
}
