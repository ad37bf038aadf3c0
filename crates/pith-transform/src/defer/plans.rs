//! The plans the stage made, kept for the next turns of their sessions.
//!
//! A session sends the same tool list and the same task on every turn, so its plan (the tools
//! parsed, the loaded set ranked by BM25 or a model, the edit) is the same every turn: making
//! it again cost more than the rest of the request path together (44% of pith's CPU on an
//! OpenCode session, which defers nothing). What changes from turn to turn, the history and
//! where the tools sit in the body, is applied to the kept plan per request. A plan is found
//! again by comparing the tools' bytes and the task, never a hash of them, so two tool lists
//! can never share one.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use pith_wire::Wire;

use crate::stage::Edit;

/// What a tool list and task decide, whatever the rest of the request.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Planned {
    Unchanged(&'static str),
    /// The edit, its splices counted from the start of the `tools` array, and the names of the
    /// tools it defers (a history that called one joined midway).
    Defer {
        edit: Edit,
        deferred: Vec<String>,
    },
}

/// Plans kept at most (the sessions a proxy serves at once, with room; the oldest goes): each
/// holds its tool list's text, tens of kilobytes.
const KEPT: usize = 32;

/// One plan: for this wire, task and tools array.
struct Decided {
    wire: Wire,
    task: String,
    tools: String,
    plan: Planned,
}

/// Recently made plans, the most recently used first.
#[derive(Default)]
pub(super) struct Plans {
    kept: Mutex<VecDeque<Decided>>,
}

impl Plans {
    /// The plan made for `tools` (the `tools` array's text) and `task` on `wire`, or
    /// `decide`'s, which is then kept.
    pub(super) fn planned(
        &self,
        wire: Wire,
        task: &str,
        tools: &str,
        decide: impl FnOnce() -> Planned,
    ) -> Planned {
        {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(at) = kept
                .iter()
                .position(|d| d.wire == wire && d.task == task && d.tools == tools)
            {
                let found = kept.remove(at).map(|d| {
                    let plan = d.plan.clone();
                    kept.push_front(d);
                    plan
                });
                if let Some(plan) = found {
                    return plan;
                }
            }
        }
        // Decided outside the lock: a model ranker may wait on its first sight of a task.
        let plan = decide();
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.push_front(Decided {
            wire,
            task: task.to_owned(),
            tools: tools.to_owned(),
            plan: plan.clone(),
        });
        kept.truncate(KEPT);
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_is_made_once_per_tools_and_task_and_the_oldest_goes() {
        let plans = Plans::default();
        let decided = std::cell::Cell::new(0);
        let decide = |plan: Planned| {
            decided.set(decided.get() + 1);
            plan
        };
        let a = plans.planned(Wire::AnthropicMessages, "fix it", "[A]", || {
            decide(Planned::Unchanged("first"))
        });
        let again = plans.planned(Wire::AnthropicMessages, "fix it", "[A]", || {
            decide(Planned::Unchanged("second"))
        });
        assert_eq!(
            (a, again),
            (Planned::Unchanged("first"), Planned::Unchanged("first"))
        );
        // Another task, tool list or wire is another decision.
        plans.planned(Wire::AnthropicMessages, "other", "[A]", || {
            decide(Planned::Unchanged("second"))
        });
        plans.planned(Wire::AnthropicMessages, "fix it", "[B]", || {
            decide(Planned::Unchanged("second"))
        });
        plans.planned(Wire::Responses, "fix it", "[A]", || {
            decide(Planned::Unchanged("second"))
        });
        assert_eq!(decided.get(), 4);
        for n in 0..KEPT {
            plans.planned(Wire::Responses, &n.to_string(), "[A]", || {
                decide(Planned::Unchanged("filler"))
            });
        }
        let first = plans.planned(Wire::AnthropicMessages, "fix it", "[A]", || {
            decide(Planned::Unchanged("second"))
        });
        assert_eq!(
            first,
            Planned::Unchanged("second"),
            "the oldest decision was let go"
        );
    }
}
