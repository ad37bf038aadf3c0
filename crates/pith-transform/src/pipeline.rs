//! Ordered stages that fail open.
//!
//! Each stage sees the body the stages before it left. A stage that errors, panics, or whose
//! edit does not leave JSON is reported as [`StageResult::Failed`] and the request goes on as
//! it was before that stage; [`PipelineResult`] holds one [`StageReport`] per stage, in
//! pipeline order, which the ledger stores. The JSON check parses only the value the edit says
//! its splices lie in (`Edit::within`) when it says one: a whole-body parse of a 1.3 MB
//! conversation was a fifth of a request's CPU; such a value parsed once is remembered
//! ([`crate::checked`]).

use std::panic::{AssertUnwindSafe, catch_unwind};

use http::HeaderMap;

use crate::checked::{Checked, parses};
use crate::splice::apply_splices;
use crate::stage::{Fact, HeaderEdit, Outcome, Request, Stage};

/// A stage that changed the request, with its facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The stage's name.
    pub stage: &'static str,
    /// Its facts, in header order.
    pub facts: Vec<Fact>,
}

impl Applied {
    /// `stage;k=v;k=v`, one entry of the `pith-transforms` header.
    pub fn render(&self) -> String {
        let mut s = self.stage.to_owned();
        for fact in &self.facts {
            s.push_str(&format!(";{}={}", fact.name, fact.value));
        }
        s
    }
}

/// What one stage did to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageResult {
    /// It changed the request; its facts.
    Applied(Vec<Fact>),
    /// It chose not to change the request, for this named reason.
    Unchanged(&'static str),
    /// It errored, panicked or produced an unusable edit; its edit was dropped.
    Failed(String),
}

/// One stage's entry in a [`PipelineResult`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageReport {
    /// The stage's name ([`Stage::name`]).
    pub stage: &'static str,
    /// What it did.
    pub result: StageResult,
}

/// Why a stage left a request unchanged when the provider refused an earlier request of the
/// session as the stage changed it: the stage stays off for the rest of the session.
pub const REFUSED_BY_PROVIDER: &str = "refused_by_provider";

/// What the pipeline did to one request.
#[derive(Debug, Default)]
pub struct PipelineResult {
    /// The rewritten body, or `None` when no stage changed it (forward the original bytes).
    pub body: Option<Vec<u8>>,
    /// Header edits of the stages that changed the request, in pipeline order.
    pub header_edits: Vec<HeaderEdit>,
    /// Every stage that ran, in pipeline order.
    pub reports: Vec<StageReport>,
}

impl PipelineResult {
    /// The stages that changed the request, with their facts.
    pub fn applied(&self) -> impl Iterator<Item = Applied> + '_ {
        self.reports.iter().filter_map(|r| match &r.result {
            StageResult::Applied(facts) => Some(Applied {
                stage: r.stage,
                facts: facts.clone(),
            }),
            _ => None,
        })
    }

    /// `(stage, error)` of the stages that failed.
    pub fn failures(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        self.reports.iter().filter_map(|r| match &r.result {
            StageResult::Failed(e) => Some((r.stage, e.as_str())),
            _ => None,
        })
    }

    /// A result that only reports `stage` failing with `error` (the request goes on unchanged).
    pub fn failed(stage: &'static str, error: String) -> PipelineResult {
        PipelineResult {
            reports: vec![StageReport {
                stage,
                result: StageResult::Failed(error),
            }],
            ..PipelineResult::default()
        }
    }

    /// Value of the `pith-transforms` response header, `None` when nothing changed.
    pub fn transforms_header(&self) -> Option<String> {
        let entries: Vec<String> = self.applied().map(|a| a.render()).collect();
        (!entries.is_empty()).then(|| entries.join(", "))
    }
}

/// Stages in the order they run. Each stage sees the body as the previous stages left it and the
/// client's original headers.
#[derive(Default)]
pub struct Pipeline {
    stages: Vec<Box<dyn Stage>>,
    may_block: bool,
    /// The share of conversations held out from every stage ([`crate::holdout`]).
    holdout: f64,
    /// The edited values that were JSON lately.
    checked: Checked,
}

impl Pipeline {
    /// A pipeline without stages: every request passes unchanged.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `stage` to run after the stages already added.
    pub fn with_stage(mut self, stage: Box<dyn Stage>) -> Self {
        self.stages.push(stage);
        self
    }

    /// Hold out `share` of conversations (0 to 1): their requests pass with no stage run,
    /// reported as held out.
    pub fn with_holdout(mut self, share: f64) -> Self {
        self.holdout = share;
        self
    }

    /// Declare that a stage may block on I/O (e.g. a ranker's first call to a local model), so
    /// that an async caller runs the pipeline off its event loop.
    pub fn blocking(mut self) -> Self {
        self.may_block = true;
        self
    }

    /// Whether [`Pipeline::blocking`] was declared.
    pub fn may_block(&self) -> bool {
        self.may_block
    }

    /// Whether it has no stages (then there is nothing to run).
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The stages' names, in the order they run.
    pub fn stage_names(&self) -> Vec<&'static str> {
        self.stages.iter().map(|s| s.name()).collect()
    }

    /// Run every stage on `request`. Never fails: a stage's failure is recorded in
    /// [`PipelineResult::failed`] and its edit is dropped.
    pub fn run(&self, request: &Request<'_>) -> PipelineResult {
        self.run_except(request, &[])
    }

    /// [`Pipeline::run`] with the stages named in `off` left out, each reported unchanged for
    /// [`REFUSED_BY_PROVIDER`] (the provider refused a request of this session as the stage
    /// changed it).
    pub fn run_except(&self, request: &Request<'_>, off: &[&str]) -> PipelineResult {
        let mut result = PipelineResult::default();
        if self.stages.is_empty() {
            return result;
        }
        if crate::holdout::held_out(request.wire, request.body, self.holdout) {
            result.reports.push(StageReport {
                stage: crate::holdout::NAME,
                result: StageResult::Unchanged(crate::holdout::reason::HELD_OUT),
            });
            return result;
        }
        for stage in &self.stages {
            let name = stage.name();
            if off.contains(&name) {
                result.reports.push(StageReport {
                    stage: name,
                    result: StageResult::Unchanged(REFUSED_BY_PROVIDER),
                });
                continue;
            }
            let current = Request {
                body: result.body.as_deref().unwrap_or(request.body),
                ..*request
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| stage.apply(&current)));
            let report = |result| StageReport {
                stage: name,
                result,
            };
            let edit = match outcome {
                Ok(Ok(Outcome::Unchanged(reason))) => {
                    result.reports.push(report(StageResult::Unchanged(reason)));
                    continue;
                }
                Ok(Ok(Outcome::Edited(edit))) => edit,
                Ok(Err(e)) => {
                    result
                        .reports
                        .push(report(StageResult::Failed(e.to_string())));
                    continue;
                }
                Err(panic) => {
                    let error = format!("panicked: {}", panic_message(&panic));
                    result.reports.push(report(StageResult::Failed(error)));
                    continue;
                }
            };
            let new_body = if edit.splices.is_empty() {
                None
            } else {
                match apply_splices(current.body, &edit.splices) {
                    Ok(b) => Some(b),
                    Err(e) => {
                        result
                            .reports
                            .push(report(StageResult::Failed(format!("splice: {e}"))));
                        continue;
                    }
                }
            };
            if let Some(b) = &new_body {
                // A stage only edits what it parsed, so an unparseable result is the stage's bug.
                if !self.still_json(name, b, &edit) {
                    let error = "edit produced invalid JSON".to_owned();
                    result.reports.push(report(StageResult::Failed(error)));
                    continue;
                }
            }
            if let Some(b) = new_body {
                result.body = Some(b);
            }
            result.header_edits.extend(edit.headers);
            result
                .reports
                .push(report(StageResult::Applied(edit.facts)));
        }
        result
    }

    /// Apply the header edits of `result` to `headers`.
    pub fn apply_header_edits(result: &PipelineResult, headers: &mut HeaderMap) {
        for edit in &result.header_edits {
            edit.apply(headers);
        }
    }
}

impl Pipeline {
    /// Whether `edited` (the body after `edit`'s splices by `stage`) is JSON: the value the
    /// edit says it stays inside ([`Edit::within`], the stage's word that the span was one
    /// whole value of the body it parsed) is still one value, or, without one, the whole body
    /// parses.
    fn still_json(&self, stage: &'static str, edited: &[u8], edit: &crate::stage::Edit) -> bool {
        let Some(within) = &edit.within else {
            return parses(edited);
        };
        if !edit
            .splices
            .iter()
            .all(|s| s.range.start >= within.start && s.range.end <= within.end)
        {
            return parses(edited);
        }
        let grown: isize = edit
            .splices
            .iter()
            .map(|s| s.replacement.len() as isize - s.range.len() as isize)
            .sum();
        let end = within.end.checked_add_signed(grown);
        match end.and_then(|end| edited.get(within.start..end)) {
            Some(value) => self.checked.is_json(stage, value),
            None => false,
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::{Edit, Fact, Splice, StageError};
    use pith_wire::Wire;

    struct Replace(&'static str);
    impl Stage for Replace {
        fn name(&self) -> &'static str {
            "replace"
        }
        fn apply(&self, r: &Request<'_>) -> Result<Outcome, StageError> {
            let body = std::str::from_utf8(r.body).map_err(|e| StageError(e.to_string()))?;
            let Some(at) = body.find("\"old\"") else {
                return Ok(Outcome::Unchanged("no_match"));
            };
            Ok(Outcome::Edited(Edit {
                splices: vec![Splice {
                    range: at..at + 5,
                    replacement: self.0.to_owned(),
                }],
                headers: vec![],
                facts: vec![Fact::count("n", 1)],
                within: None,
            }))
        }
    }

    struct Panics;
    impl Stage for Panics {
        fn name(&self) -> &'static str {
            "panics"
        }
        fn apply(&self, _: &Request<'_>) -> Result<Outcome, StageError> {
            panic!("boom")
        }
    }

    struct Errors;
    impl Stage for Errors {
        fn name(&self) -> &'static str {
            "errors"
        }
        fn apply(&self, _: &Request<'_>) -> Result<Outcome, StageError> {
            Err(StageError("nope".into()))
        }
    }

    fn request<'a>(body: &'a [u8], headers: &'a HeaderMap) -> Request<'a> {
        Request {
            wire: Wire::AnthropicMessages,
            path: "/v1/messages",
            headers,
            body,
        }
    }

    #[test]
    fn failing_stages_leave_the_body_and_are_counted() {
        let headers = HeaderMap::new();
        let body = br#"{"x": "old"}"#;
        let pipeline = Pipeline::new()
            .with_stage(Box::new(Panics))
            .with_stage(Box::new(Errors))
            .with_stage(Box::new(Replace("not json")));
        let result = pipeline.run(&request(body, &headers));
        assert!(result.body.is_none());
        assert_eq!(result.applied().count(), 0);
        assert_eq!(result.transforms_header(), None);
        let failed: Vec<_> = result.failures().collect();
        assert_eq!(
            failed.iter().map(|f| f.0).collect::<Vec<_>>(),
            ["panics", "errors", "replace"]
        );
        assert!(failed[0].1.contains("boom"));
    }

    #[test]
    fn a_good_stage_after_a_failing_one_still_applies() {
        let headers = HeaderMap::new();
        let body = br#"{"x": "old"}"#;
        let pipeline = Pipeline::new()
            .with_stage(Box::new(Panics))
            .with_stage(Box::new(Replace("\"new\"")));
        let result = pipeline.run(&request(body, &headers));
        assert_eq!(result.body.as_deref(), Some(&br#"{"x": "new"}"#[..]));
        assert_eq!(result.transforms_header().as_deref(), Some("replace;n=1"));
        assert_eq!(result.failures().count(), 1);
    }

    /// Replaces `"old"` inside the array `"a"` and says so ([`Edit::within`] the array), or
    /// claims a span that does not hold its splice.
    struct ReplaceInArray {
        with: &'static str,
        claim_elsewhere: bool,
    }
    impl Stage for ReplaceInArray {
        fn name(&self) -> &'static str {
            "in_array"
        }
        fn apply(&self, r: &Request<'_>) -> Result<Outcome, StageError> {
            let body = std::str::from_utf8(r.body).map_err(|e| StageError(e.to_string()))?;
            let at = body.find("\"old\"").ok_or(StageError("no old".into()))?;
            let open = body.find('[').ok_or(StageError("no array".into()))?;
            let close = body.find(']').ok_or(StageError("no array".into()))? + 1;
            let within = match self.claim_elsewhere {
                true => 0..1,
                false => open..close,
            };
            Ok(Outcome::Edited(Edit {
                splices: vec![Splice {
                    range: at..at + 5,
                    replacement: self.with.to_owned(),
                }],
                within: Some(within),
                ..Edit::default()
            }))
        }
    }

    #[test]
    fn an_edit_within_a_value_is_checked_there_and_a_broken_one_still_fails() {
        let headers = HeaderMap::new();
        let body = br#"{"x": 1, "a": ["old", 2], "y": "tail"}"#;
        let run = |with, claim_elsewhere| {
            Pipeline::new()
                .with_stage(Box::new(ReplaceInArray {
                    with,
                    claim_elsewhere,
                }))
                .run(&request(body, &headers))
        };
        let good = run("{\"new\": [3]}", false);
        assert_eq!(
            good.body.as_deref(),
            Some(&br#"{"x": 1, "a": [{"new": [3]}, 2], "y": "tail"}"#[..])
        );
        // Invalid inside the value: caught by the value's check.
        assert_eq!(run("\"unclosed", false).failures().count(), 1);
        assert_eq!(run("1, 2]", false).failures().count(), 1);
        // A span that does not hold the splice is not trusted: the whole body is checked.
        assert_eq!(run("\"unclosed", true).failures().count(), 1);
        assert!(run("\"fine\"", true).body.is_some());
    }
}
