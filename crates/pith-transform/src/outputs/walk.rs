//! One request's walk over its turns: what the remembered turns decided, what this request's
//! turns add (calls, repeats, the outputs shortened), and what to remember for the next.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use twox_hash::XxHash3_128;

use super::remembered::{Decided, Pending, boundary_hash};
use super::transcript::{Call, Input};
use super::{is_pith_tool_output, reason};
use crate::stage::{Edit, Fact, Outcome, Site, Splice};

/// Unanswered calls a session's decided turns carry forward, at most.
const PENDING_MAX: usize = 256;

/// One request's walk over its turns: what the remembered turns decided, and what this
/// request's turns add.
pub(super) struct Walk<'d, 'a> {
    decided: &'d Decided,
    pub(super) body: &'a str,
    /// The history array's `[`.
    open: usize,
    /// Excerpts name pith's `tool_output`.
    pub(super) fetchable: bool,
    /// This request's calls not answered yet, and whether each repeats an earlier one.
    calls: HashMap<&'a str, (&'a Call<'a>, bool)>,
    /// The remembered pending calls answered in this request.
    answered: HashSet<&'d str>,
    seen: HashSet<u128>,
    /// Over the history's bytes from its `[` to `hashed_to`: the remembered turns' bytes.
    hasher: XxHash3_128,
    hashed_to: usize,
    /// Each output's replacement (the remembered turns' shared, not copied).
    pub(super) splices: Vec<(Range<usize>, Arc<str>)>,
    /// The cache marker moved before the last message's first long result.
    pub(super) marker: Vec<Splice>,
    pub(super) kept_out: usize,
    /// Outputs shortened for the first time in this request.
    pub(super) first: usize,
    /// Whole outputs the newest model turn asked for again.
    pub(super) asked_again: usize,
}

impl<'d, 'a> Walk<'d, 'a> {
    pub(super) fn new(
        decided: &'d Decided,
        body: &'a str,
        open: usize,
        fetchable: bool,
        hasher: XxHash3_128,
    ) -> Walk<'d, 'a> {
        Walk {
            decided,
            body,
            open,
            fetchable,
            calls: HashMap::new(),
            answered: HashSet::new(),
            seen: decided.seen.clone(),
            hasher,
            hashed_to: open + decided.covers,
            splices: decided
                .splices
                .iter()
                .map(|(range, replacement)| {
                    (
                        open + range.start..open + range.end,
                        Arc::clone(replacement),
                    )
                })
                .collect(),
            marker: Vec::new(),
            kept_out: decided.kept_out,
            first: 0,
            asked_again: 0,
        }
    }

    /// The calls of a model turn; in the request's newest, each that repeats an earlier call
    /// or asks pith's `tool_output` counts as a whole output asked for again.
    pub(super) fn register(&mut self, calls: &'a [Call<'a>], newest: bool) {
        for call in calls {
            let repeat = !self.seen.insert(call_hash(&call.name, call.input.raw()));
            if newest && (repeat || is_pith_tool_output(&call.name)) {
                self.asked_again += 1;
            }
            self.calls.insert(call.id.as_ref(), (call, repeat));
        }
    }

    /// The call `id` answers, whether it repeats an earlier one; `None` when no call has it.
    pub(super) fn call(&self, id: &str) -> Option<(Call<'d>, bool)>
    where
        'a: 'd,
    {
        if let Some((call, repeat)) = self.calls.get(id) {
            return Some((call.borrowed(), *repeat));
        }
        let decided: &'d Decided = self.decided;
        let (id, pending) = decided.pending.get_key_value(id)?;
        if self.answered.contains(id.as_str()) {
            return None;
        }
        Some((pending.call(id), pending.repeat))
    }

    /// The call `id` answers, now answered.
    pub(super) fn answer(&mut self, id: &str) -> Option<(Call<'d>, bool)>
    where
        'a: 'd,
    {
        if let Some((call, repeat)) = self.calls.remove(id) {
            return Some((call.borrowed(), repeat));
        }
        let decided: &'d Decided = self.decided;
        let (key, pending) = decided.pending.get_key_value(id)?;
        if !self.answered.insert(key.as_str()) {
            return None;
        }
        Some((pending.call(key), pending.repeat))
    }

    /// What the turns before `model_turn` (the request's last model turn, its bytes' span)
    /// decided, to remember.
    pub(super) fn decided(&self, model_turn: Range<usize>) -> Decided {
        let (start, end) = (model_turn.start, model_turn.end);
        let len = start - self.open;
        let mut pending: HashMap<String, Pending> = self
            .decided
            .pending
            .iter()
            .filter(|(id, _)| !self.answered.contains(id.as_str()))
            .map(|(id, p)| (id.clone(), p.clone()))
            .collect();
        for (id, (call, repeat)) in &self.calls {
            if pending.len() >= PENDING_MAX {
                break;
            }
            let (text, raw) = match call.input {
                Input::Text(raw) => (true, raw),
                Input::Json(raw) => (false, raw),
            };
            pending.insert(
                (*id).to_owned(),
                Pending {
                    name: call.name.to_string(),
                    input: raw.to_owned(),
                    text,
                    repeat: *repeat,
                },
            );
        }
        let mut hasher = self.hasher.clone();
        hasher.write(&self.body.as_bytes()[self.hashed_to..end]);
        Decided {
            len,
            hash: hasher.finish_128(),
            covers: end - self.open,
            boundary: boundary_hash(&self.body.as_bytes()[self.open..end]),
            splices: self
                .splices
                .iter()
                .map(|(range, replacement)| {
                    let range = range.start - self.open..range.end - self.open;
                    (range, Arc::clone(replacement))
                })
                .collect(),
            kept_out: self.kept_out,
            first: self.first,
            seen: self.seen.clone(),
            pending,
            weight: 0,
        }
    }

    /// The outcome: the splices, all inside the history array `within` (the pipeline checks
    /// that value, not the whole body), and what they did.
    pub(super) fn into_outcome(mut self, within: Range<usize>) -> Outcome {
        if self.splices.is_empty() && self.marker.is_empty() {
            return Outcome::Unchanged(reason::NONE_LONG);
        }
        let mut facts = vec![
            Fact::count("outputs", self.splices.len()),
            Fact::count("first", self.first),
        ];
        if !self.marker.is_empty() {
            facts.push(Fact::count("marker_moved", 1));
        }
        let mut splices: Vec<Splice> = self
            .splices
            .into_iter()
            .map(|(range, replacement)| Splice {
                range,
                replacement: replacement.to_string(),
            })
            .collect();
        splices.append(&mut self.marker);
        if self.asked_again > 0 {
            facts.push(Fact::count("asked_again", self.asked_again));
        }
        facts.push(Fact::chars_kept_out("chars", self.kept_out, Site::History));
        Outcome::Edited(Edit {
            splices,
            facts,
            within: Some(within),
            ..Edit::default()
        })
    }
}

/// A call's identity for repeats: its name and its input's bytes.
fn call_hash(name: &str, input: &str) -> u128 {
    let mut hasher = XxHash3_128::new();
    hasher.write(name.as_bytes());
    hasher.write(b"\0");
    hasher.write(input.as_bytes());
    hasher.finish_128()
}
