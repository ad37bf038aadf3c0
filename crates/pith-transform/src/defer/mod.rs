//! Tool deferral: keep tool definitions the model is not using out of its context.
//!
//! On Anthropic Messages and OpenAI Responses, every tool that is not in the loaded set gets
//! `"defer_loading": true` spliced into its definition and the provider's tool search tool is
//! added, so the model sees a few definitions plus a search tool and loads the rest on demand.
//! The loaded set is the tools at or below `small_tool_chars`, the `keep_relevant` tools most
//! relevant to the task (the first real user prompt of the conversation), and every tool a
//! loaded tool's definition names: a description that tells the model to use another tool
//! ("use Read before Edit") needs that tool in sight. The tools pith may defer and the first
//! prompt are the same on every turn of a session, so the rewritten `tools` section (the start
//! of the cached prefix) is byte-identical on every turn.
//!
//! A client that defers some of its own tools behind a search of its own (Claude Code's
//! `ToolSearch`, with a `defer_loading` placeholder) keeps those as it sent them, never ranked
//! nor read (it adds more mid-session), and that search tool stays loaded (the only way to the
//! tools it names); pith plans among the rest and adds the provider's search tool. A client
//! that sends a provider search tool decides deferral itself and is left alone.
//!
//! Whenever deferral could be wrong the request is left unchanged, with a [`reason`].
//!
//! Why pith's search sits beside Claude Code's own (read from its shipped code, Anthropic's
//! documentation and the real client against the mock): Claude Code 2.1.328 sends its
//! built-ins loaded on every request, beside its `ToolSearch`; the tools it defers are not sent
//! until loaded, and `ToolSearch` matches only its own list of them, which a system message it
//! rebuilds from its own state names. Writing pith's deferred built-ins into that list would
//! edit the client's message inside the cached prefix. So pith appends the provider's server
//! search tool after the last tool (Claude Code sets no breakpoint in `tools`, so no cached
//! prefix moves), which searches every tool sent with `defer_loading`, and keeps `ToolSearch`
//! loaded. A definition is never removed, only marked: a `tool_reference` to a tool missing
//! from `tools` is a 400. The search's blocks are taken out of the answer and put back later
//! for Claude Code as for OpenCode ([`crate::search_trip`]): what pith adds, pith removes, and
//! one path serves every client.

mod conversations;
pub(crate) mod history;
mod plans;
mod rank;
mod view;

use std::borrow::Cow;
use std::sync::Arc;

use http::HeaderName;
use pith_wire::{Wire, skim};
use serde_json::value::RawValue;

use crate::splice::span_of;
use crate::stage::{Edit, Fact, HeaderEdit, Outcome, Request, Site, Splice, Stage, StageError};

pub use rank::{ToolRanker, ToolText, bm25_scores};

use history::History;
use plans::Planned;
use view::{Str, Tool, ToolProbe, TypeOnly, member_removal};

/// The `anthropic-beta` value that enables the tool search tool and `defer_loading`.
pub const ANTHROPIC_BETA: &str = "advanced-tool-use-2025-11-20";

/// The provider's limit on deferred tools in one request.
pub const MAX_DEFERRED: usize = 10_000;

/// Why the stage left a request unchanged (recorded in the ledger as the skip reason).
pub mod reason {
    /// Chat Completions has no server-side tool search.
    pub const NOT_APPLICABLE: &str = "not_applicable";
    /// The body (or a part the stage must read) is not the JSON shape it expects.
    pub const UNPARSEABLE: &str = "unparseable";
    /// The request has no tools (`tools` absent, `null` or empty).
    pub const NO_TOOLS: &str = "no_tools";
    /// The request has one tool: too few to defer any.
    pub const SINGLE_TOOL: &str = "single_tool";
    /// A tool search tool is present: the client (or pith, on an earlier pass) decides
    /// deferral itself.
    pub const ALREADY_DEFERRING: &str = "already_deferring";
    /// `tool_choice` forces a tool (Anthropic `any`/`tool`, Responses `required` or a named
    /// tool) or is something the stage does not know.
    pub const TOOL_CHOICE_FORCED: &str = "tool_choice_forced";
    /// Every tool that could be deferred is in the loaded set.
    pub const NOTHING_TO_DEFER: &str = "nothing_to_defer";
    /// Deferral would leave none of the client's tools loaded.
    pub const NO_TOOL_LEFT_LOADED: &str = "no_tool_left_loaded";
    /// The deferred definitions add up to fewer than `min_deferred_chars` characters.
    pub const TOO_LITTLE_TO_DEFER: &str = "too_little_to_defer";
    /// More deferred tools than the provider accepts.
    pub const TOO_MANY_TOOLS: &str = "too_many_tools";
    /// The history calls a tool that would be deferred and no tool search surfaced it: pith
    /// joined a session midway, and how the API treats such history is undocumented.
    pub const MID_SESSION_JOIN: &str = "mid_session_join";

    /// Every reason, for the words' test.
    pub const ALL: &[&str] = &[
        NOT_APPLICABLE,
        UNPARSEABLE,
        NO_TOOLS,
        SINGLE_TOOL,
        ALREADY_DEFERRING,
        TOOL_CHOICE_FORCED,
        NOTHING_TO_DEFER,
        NO_TOOL_LEFT_LOADED,
        TOO_LITTLE_TO_DEFER,
        TOO_MANY_TOOLS,
        MID_SESSION_JOIN,
    ];
}

/// What the stage, its facts and its reasons are called for people.
pub const WORDS: crate::stage::StageWords = crate::stage::StageWords {
    stage: NAME,
    name: "tool deferral",
    facts: &[
        ("tools", "kept {n} tool definition{s} out of the prompt"),
        ("chars", ""),
        ("added", "added {n} character{s} for the tool search tool"),
    ],
    came_back: Some(crate::stage::CameBack {
        stage: crate::search_trip::hide::NAME,
        fact: crate::search_trip::hide::SEARCHES,
        of: None,
        times: "the model searched for a deferred tool {n} time{s}",
        of_words: "in {n} request{s} with tools deferred",
    }),
    reasons: &[
        (
            reason::NOT_APPLICABLE,
            "Chat Completions has no server-side tool search",
        ),
        (reason::UNPARSEABLE, "the body was not the JSON it expects"),
        (reason::NO_TOOLS, "no tools were sent"),
        (reason::SINGLE_TOOL, "only one tool was sent"),
        (
            reason::ALREADY_DEFERRING,
            "the client already defers its tools",
        ),
        (
            reason::TOOL_CHOICE_FORCED,
            "the client forced a tool choice",
        ),
        (
            reason::NOTHING_TO_DEFER,
            "every tool was one the task needs loaded",
        ),
        (
            reason::NO_TOOL_LEFT_LOADED,
            "deferring would have left no tool loaded",
        ),
        (
            reason::TOO_LITTLE_TO_DEFER,
            "too few tool definitions to be worth a search",
        ),
        (
            reason::TOO_MANY_TOOLS,
            "more tools than the provider lets a request defer",
        ),
        (
            reason::MID_SESSION_JOIN,
            "pith joined the session midway, after tools it would defer were used",
        ),
    ],
};

/// Below this many characters of deferrable definitions (about 4k tokens) a request is left
/// unchanged. Measured (BENCHMARKS.md): deferring OpenCode's 10 built-in tools (6 KB) made a
/// session cost 14-30% more, because each search the model then needs costs more than the few
/// kilobytes saved; with a 40-tool MCP server (42 KB) it cost 61-64% less, and Claude Code's
/// five specialised built-ins (19.6 KB) make its sessions more than a quarter cheaper. A search
/// costs a few thousand tokens; 4k tokens kept out of every turn pays for it within a session.
pub const DEFAULT_MIN_DEFERRED_CHARS: usize = 16_000;

/// Which Anthropic tool search tool to add (`[transforms] tool_search`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchVariant {
    /// `tool_search_tool_regex_20251119`: the model searches with a regular expression.
    #[default]
    Regex,
    /// `tool_search_tool_bm25_20251119`: the model searches with natural language.
    Bm25,
}

impl SearchVariant {
    /// `"regex"` or `"bm25"` (the config values).
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "regex" => Some(SearchVariant::Regex),
            "bm25" => Some(SearchVariant::Bm25),
            _ => None,
        }
    }

    fn anthropic_type_and_name(self) -> (&'static str, &'static str) {
        match self {
            SearchVariant::Regex => ("tool_search_tool_regex_20251119", "tool_search_tool_regex"),
            SearchVariant::Bm25 => ("tool_search_tool_bm25_20251119", "tool_search_tool_bm25"),
        }
    }
}

/// The stage's name, in the `pith-transforms` header and the ledger.
pub const NAME: &str = "defer";

/// Options of the defer stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeferOptions {
    /// Tools kept loaded because they are the most relevant to the task (default 5).
    pub keep_relevant: usize,
    /// Definitions of at most this many characters stay loaded (default 0: a published A/B
    /// found that exempting small definitions cost more than it saved).
    pub small_tool_chars: usize,
    /// Which Anthropic tool search tool to add (default regex).
    pub search: SearchVariant,
    /// Defer only when the deferred definitions add up to at least this many characters
    /// (default [`DEFAULT_MIN_DEFERRED_CHARS`]). Every search the model then needs costs its
    /// results at full price, so deferring a few kilobytes can cost more than it saves.
    pub min_deferred_chars: usize,
}

impl Default for DeferOptions {
    fn default() -> Self {
        Self {
            keep_relevant: 5,
            small_tool_chars: 0,
            search: SearchVariant::Regex,
            min_deferred_chars: DEFAULT_MIN_DEFERRED_CHARS,
        }
    }
}

/// The `defer` stage. Facts on success: `tools` (deferred count), `chars` (characters of
/// their definitions, kept out) and `added` (characters of the search tool put in their
/// place), e.g. `defer;tools=41;chars=31200;added=49`.
pub struct DeferStage {
    options: DeferOptions,
    ranker: Option<Arc<dyn ToolRanker>>,
    /// Loaded sets decided on earlier turns.
    plans: plans::Plans,
    /// Histories read on earlier turns.
    conversations: conversations::Conversations,
}

impl DeferStage {
    /// The stage with `options`, ranking by BM25.
    pub fn new(options: DeferOptions) -> Self {
        Self {
            options,
            ranker: None,
            plans: plans::Plans::default(),
            conversations: conversations::Conversations::default(),
        }
    }

    /// Rank by `ranker` instead of BM25 (BM25 still answers when the ranker returns `None`).
    pub fn with_ranker(mut self, ranker: Arc<dyn ToolRanker>) -> Self {
        self.ranker = Some(ranker);
        self
    }

    /// The options it runs with.
    pub fn options(&self) -> &DeferOptions {
        &self.options
    }
}

impl Stage for DeferStage {
    fn name(&self) -> &'static str {
        NAME
    }

    fn apply(&self, request: &Request<'_>) -> Result<Outcome, StageError> {
        if request.wire == Wire::ChatCompletions {
            return Ok(Outcome::Unchanged(reason::NOT_APPLICABLE));
        }
        if already_defers(request.wire, request.body) {
            return Ok(Outcome::Unchanged(reason::ALREADY_DEFERRING));
        }
        let Ok(body) = std::str::from_utf8(request.body) else {
            return Ok(Outcome::Unchanged(reason::UNPARSEABLE));
        };
        match self.plan(request.wire, body) {
            Ok(Decision::Unchanged(why)) => Ok(Outcome::Unchanged(why)),
            Ok(Decision::Defer(edit)) => Ok(Outcome::Edited(edit)),
            Err(Unparseable) => Ok(Outcome::Unchanged(reason::UNPARSEABLE)),
        }
    }
}

enum Decision {
    Unchanged(&'static str),
    Defer(Edit),
}

/// The body is not the shape the stage understands; the request passes unchanged.
struct Unparseable;

impl From<serde_json::Error> for Unparseable {
    fn from(_: serde_json::Error) -> Self {
        Unparseable
    }
}

/// One entry of the client's `tools` array.
struct Entry<'a> {
    raw: &'a RawValue,
    tool: Tool<'a>,
    /// Custom (Anthropic) or function (Responses) tool with a name, not a client's own search
    /// tool, whose deferral the client left open (no `defer_loading` of its own): pith ranks
    /// it and may defer it.
    deferrable: bool,
    /// The client sent it with `"defer_loading": true`: out of context until searched for,
    /// whatever pith does. Never ranked nor read for names: Claude Code adds such tools
    /// mid-session (those its ToolSearch found), and they must move nothing pith decides.
    client_deferred: bool,
    /// The client's own tool search (Claude Code's `ToolSearch`): always loaded, and its
    /// examples (`select:Read,Edit,Grep`) are not instructions to use those tools.
    own_search: bool,
}

impl<'a> Entry<'a> {
    /// The tool `raw` and what pith may do with it; `None` when it is a provider tool search
    /// tool (the client decides deferral itself).
    fn read(wire: Wire, raw: &'a RawValue) -> Result<Option<Self>, Unparseable> {
        if !raw.get().starts_with('{') {
            return Err(Unparseable);
        }
        let tool: Tool<'_> = serde_json::from_str(raw.get())?;
        let kind = tool.kind.as_ref().map(Str::as_str);
        if is_search_tool(wire, kind) {
            return Ok(None);
        }
        let client_deferred = tool.defer_loading.is_some_and(|d| d.get() == "true");
        let own_search = tool
            .name
            .as_ref()
            .is_some_and(|n| pith_clients::Client::is_own_tool_search(n.as_str()));
        let deferrable = tool.name.is_some()
            && !own_search
            && tool.defer_loading.is_none()
            && match wire {
                Wire::AnthropicMessages => matches!(kind, None | Some("custom")),
                Wire::Responses | Wire::ChatCompletions => kind == Some("function"),
            };
        Ok(Some(Entry {
            raw,
            tool,
            deferrable,
            client_deferred,
            own_search,
        }))
    }
}

impl DeferStage {
    /// One request: its history read (from where this conversation's last turn left off,
    /// [`conversations`]), then the plan for its tool list and task (made once per session,
    /// [`plans`]), checked against the history and placed where the tools are.
    fn plan(&self, wire: Wire, body: &str) -> Result<Decision, Unparseable> {
        let read = self.conversations.read(wire, body).ok_or(Unparseable)?;
        let Some(tools_array) = read.tools.filter(|t| &body[t.clone()] != "null") else {
            return Ok(Decision::Unchanged(reason::NO_TOOLS));
        };
        let tools = &body[tools_array.clone()];
        let task = read.history.task.as_deref().unwrap_or("");
        let planned = self.plans.planned(wire, task, tools, || {
            self.plan_tools(wire, tools, task)
                .unwrap_or(Planned::Unchanged(reason::UNPARSEABLE))
        });
        let (edit, deferred) = match planned {
            // What the tools say before tool_choice is read, as when they were parsed first.
            Planned::Unchanged(why @ (reason::ALREADY_DEFERRING | reason::UNPARSEABLE)) => {
                return Ok(Decision::Unchanged(why));
            }
            _ if read
                .tool_choice
                .map(|choice| forces_a_tool(wire, &body[choice]))
                .transpose()?
                .unwrap_or(false) =>
            {
                return Ok(Decision::Unchanged(reason::TOOL_CHOICE_FORCED));
            }
            Planned::Unchanged(why) => return Ok(Decision::Unchanged(why)),
            Planned::Defer { edit, deferred } => (edit, deferred),
        };
        if joined_midway(&deferred, &read.history) {
            return Ok(Decision::Unchanged(reason::MID_SESSION_JOIN));
        }
        Ok(Decision::Defer(edit.moved_to(tools_array.start)))
    }

    /// The plan for one tool list (`tools`, the `tools` array's text) and task: what the tools
    /// alone decide, the loaded set, and the edit, its splices counted from the array's start.
    fn plan_tools(&self, wire: Wire, tools: &str, task: &str) -> Result<Planned, Unparseable> {
        if !tools.starts_with('[') {
            return Err(Unparseable);
        }
        let raws: Vec<&RawValue> = serde_json::from_str(tools)?;
        match raws.len() {
            0 => return Ok(Planned::Unchanged(reason::NO_TOOLS)),
            1 => return Ok(Planned::Unchanged(reason::SINGLE_TOOL)),
            _ => {}
        }
        let mut entries = Vec::with_capacity(raws.len());
        for raw in raws {
            let Some(entry) = Entry::read(wire, raw)? else {
                return Ok(Planned::Unchanged(reason::ALREADY_DEFERRING));
            };
            entries.push(entry);
        }
        if let Some(why) = self.nothing_to_do(&entries) {
            return Ok(Planned::Unchanged(why));
        }
        let loaded = self.loaded_set(&entries, task);
        let deferred: Vec<usize> = (0..entries.len())
            .filter(|&i| entries[i].deferrable && !loaded[i])
            .collect();
        if deferred.is_empty() {
            return Ok(Planned::Unchanged(reason::NOTHING_TO_DEFER));
        }
        let client_deferred = entries.iter().filter(|e| e.client_deferred).count();
        if deferred.len() + client_deferred == entries.len() {
            return Ok(Planned::Unchanged(reason::NO_TOOL_LEFT_LOADED));
        }
        if deferred.len() + client_deferred > MAX_DEFERRED {
            return Ok(Planned::Unchanged(reason::TOO_MANY_TOOLS));
        }
        if self.options.min_deferred_chars > 0 {
            // What is out of context, whoever marked it: a tool pith deferred that the client
            // then defers itself (Claude Code after `ToolSearch select:X`) still counts, so the
            // decision, and the other tools' bytes, do not change with it. (So do tools the
            // client deferred from the start; a session that begins below the threshold can
            // cross it as Claude Code adds the tools its search found.)
            let chars: usize = (0..entries.len())
                .filter(|&i| deferred.contains(&i) || entries[i].client_deferred)
                .map(|i| entries[i].raw.get().chars().count())
                .sum();
            if chars < self.options.min_deferred_chars {
                return Ok(Planned::Unchanged(reason::TOO_LITTLE_TO_DEFER));
            }
        }
        let names = deferred
            .iter()
            .filter_map(|&i| entries[i].tool.name.as_ref())
            .map(|n| n.as_str().to_owned())
            .collect();
        let edit = self.edit(wire, tools, &entries, &deferred)?;
        Ok(Planned::Defer {
            edit,
            deferred: names,
        })
    }

    /// The reason to leave the request unchanged when the tools alone decide it, before the
    /// history is read and the tools ranked (what costs): every tool pith may defer stays
    /// loaded by the options, or all the stage could keep out of context is below
    /// `min_deferred_chars` (a character is at least a byte, so bytes bound it).
    fn nothing_to_do(&self, entries: &[Entry<'_>]) -> Option<&'static str> {
        let deferrable = entries.iter().filter(|e| e.deferrable);
        let keep = self.options.keep_relevant;
        if deferrable.clone().count() <= keep
            || deferrable.clone().all(|e| self.is_small(e.raw.get()))
        {
            return Some(reason::NOTHING_TO_DEFER);
        }
        let at_most: usize = entries
            .iter()
            .filter(|e| e.client_deferred || (e.deferrable && !self.is_small(e.raw.get())))
            .map(|e| e.raw.get().len())
            .sum();
        (at_most < self.options.min_deferred_chars).then_some(reason::TOO_LITTLE_TO_DEFER)
    }

    /// `loaded[i]` for every tool in context: not deferrable (server tools, the client's own
    /// search, tools the client said to load), small, among the most relevant, or named by a
    /// loaded tool's definition. A tool the client deferred itself is never loaded.
    fn loaded_set(&self, entries: &[Entry<'_>], task: &str) -> Vec<bool> {
        let mut loaded: Vec<bool> = entries
            .iter()
            .map(|e| !e.client_deferred && (!e.deferrable || self.is_small(e.raw.get())))
            .collect();
        let candidates: Vec<usize> = (0..entries.len())
            .filter(|&i| entries[i].deferrable)
            .collect();
        // Ranked or read for names: never a tool the client deferred itself (Claude Code sends
        // more of those as a session goes on).
        let arguments: Vec<String> = entries
            .iter()
            .map(|e| match e.client_deferred {
                true => String::new(),
                false => view::argument_text(e.tool.input_schema.or(e.tool.parameters)),
            })
            .collect();
        let keep = self.options.keep_relevant;
        if keep == 0 || keep >= candidates.len() {
            // Nothing to rank: none or all of the candidates stay.
            for &i in candidates.iter().take(keep) {
                loaded[i] = true;
            }
        } else {
            self.keep_most_relevant(entries, &candidates, &arguments, task, &mut loaded);
        }
        keep_named(entries, &arguments, &mut loaded);
        loaded
    }

    /// Marks the `keep_relevant` candidates most relevant to `task` loaded. Only the tools pith
    /// may defer are ranked (the corpus BM25 weighs words by): a tool Claude Code adds deferred
    /// mid-session (one its ToolSearch found) then moves nothing.
    fn keep_most_relevant(
        &self,
        entries: &[Entry<'_>],
        candidates: &[usize],
        arguments: &[String],
        task: &str,
        loaded: &mut [bool],
    ) {
        let keep = self.options.keep_relevant;
        let texts: Vec<ToolText<'_>> = candidates
            .iter()
            .map(|&i| ToolText {
                name: entries[i].tool.name.as_ref().map_or("", Str::as_str),
                description: entries[i].tool.description.as_ref().map_or("", Str::as_str),
                arguments: &arguments[i],
                definition: entries[i].raw.get(),
            })
            .collect();
        let scores = self
            .ranker
            .as_ref()
            .and_then(|r| r.scores(task, &texts))
            .filter(|s| s.len() == texts.len())
            .unwrap_or_else(|| bm25_scores(task, &texts));
        for at in rank::by_relevance(&scores).into_iter().take(keep) {
            loaded[candidates[at]] = true;
        }
    }

    /// At or below `small_tool_chars` characters. A character is 1 to 4 bytes, so the byte
    /// length decides most definitions without counting.
    fn is_small(&self, definition: &str) -> bool {
        let limit = self.options.small_tool_chars;
        let bytes = definition.len();
        bytes <= limit || (bytes <= limit.saturating_mul(4) && definition.chars().count() <= limit)
    }

    fn edit(
        &self,
        wire: Wire,
        body: &str,
        entries: &[Entry<'_>],
        deferred: &[usize],
    ) -> Result<Edit, Unparseable> {
        let mut splices = Vec::with_capacity(deferred.len() * 2 + 1);
        let mut moved_breakpoint: Option<&str> = None;
        let mut chars = 0usize;
        for &i in deferred {
            let entry = &entries[i];
            let span = span_of(body, entry.raw).ok_or(Unparseable)?;
            if !body[span.clone()].ends_with('}') {
                return Err(Unparseable);
            }
            chars += entry.raw.get().chars().count();
            if let Some(cache_control) = entry.tool.cache_control {
                let value = span_of(body, cache_control).ok_or(Unparseable)?;
                let range = member_removal(body, value, "cache_control").ok_or(Unparseable)?;
                splices.push(Splice {
                    range,
                    replacement: String::new(),
                });
                if cache_control.get() != "null" {
                    moved_breakpoint = Some(cache_control.get());
                }
            }
            let close = span.end - 1;
            splices.push(Splice {
                range: close..close,
                replacement: ",\"defer_loading\":true".to_owned(),
            });
        }
        let last = entries.last().ok_or(Unparseable)?;
        let after_last = span_of(body, last.raw).ok_or(Unparseable)?.end;
        let mut headers = Vec::new();
        let search_tool = match wire {
            Wire::AnthropicMessages => {
                let (kind, name) = self.options.search.anthropic_type_and_name();
                headers.push(HeaderEdit::AppendListValue {
                    name: HeaderName::from_static("anthropic-beta"),
                    value: ANTHROPIC_BETA.to_owned(),
                });
                // The breakpoint lands on the search tool: it is the last loaded tool, so
                // the cached prefix still ends where the tools section ends.
                match moved_breakpoint {
                    Some(cc) => {
                        format!(
                            ",{{\"type\":\"{kind}\",\"name\":\"{name}\",\"cache_control\":{cc}}}"
                        )
                    }
                    None => format!(",{{\"type\":\"{kind}\",\"name\":\"{name}\"}}"),
                }
            }
            Wire::Responses | Wire::ChatCompletions => ",{\"type\":\"tool_search\"}".to_owned(),
        };
        let added = search_tool.len();
        splices.push(Splice {
            range: after_last..after_last,
            replacement: search_tool,
        });
        Ok(Edit {
            splices,
            headers,
            facts: vec![
                Fact::count("tools", deferred.len()),
                Fact::chars_kept_out("chars", chars, Site::Tools),
                Fact::chars_added("added", added, Site::Tools),
            ],
            within: Some(0..body.len()),
        })
    }
}

/// The fast answer for clients that send a tool search tool of their own (Codex sends ~15 KB
/// of tools after a history that grows to megabytes, on every request): skim the body from
/// its end to the `tools` array and parse only the definitions that mention `tool_search`.
/// `true` only when one of them really is a search tool and there are at least two tools;
/// `false` means "plan in full". Where the full plan would find the body unparseable, this may
/// say "already deferring" instead: both leave the request unchanged. A skim never justifies
/// an edit (see `pith_wire::skim`).
fn already_defers(wire: Wire, body: &[u8]) -> bool {
    // From the end: clients send `tools` after the history, so this never reads the history.
    let mut members = skim::members_rev(body);
    let Some(member) = members.find(|m| &body[m.key.clone()] == b"tools") else {
        return false;
    };
    let Some(elements) = members.elements_of_last(&member) else {
        return false;
    };
    if elements.len() < 2 {
        return false;
    }
    // Where the word occurs (as offsets into the body), in order; most tool lists have none.
    let tools = &body[member.value.clone()];
    let mut probed = usize::MAX;
    memchr::memmem::find_iter(tools, b"tool_search")
        .map(|at| member.value.start + at)
        .any(|hit| {
            // Probe each definition that holds a hit, once.
            let Some(at) = elements.iter().position(|span| span.contains(&hit)) else {
                return false;
            };
            if at == probed {
                return false;
            }
            probed = at;
            std::str::from_utf8(&body[elements[at].clone()])
                .ok()
                .and_then(|text| serde_json::from_str::<ToolProbe<'_>>(text).ok())
                .is_some_and(|probe| is_search_tool(wire, probe.kind.as_ref().map(Str::as_str)))
        })
}

fn is_search_tool(wire: Wire, kind: Option<&str>) -> bool {
    let Some(kind) = kind else {
        return false;
    };
    match wire {
        Wire::AnthropicMessages => kind.starts_with("tool_search_tool_"),
        Wire::Responses | Wire::ChatCompletions => kind == "tool_search",
    }
}

/// Whether `tool_choice` makes the model call a particular tool (or is not understood).
fn forces_a_tool(wire: Wire, text: &str) -> Result<bool, Unparseable> {
    if text == "null" {
        return Ok(false);
    }
    match wire {
        Wire::AnthropicMessages => {
            let choice: TypeOnly<'_> = serde_json::from_str(text)?;
            Ok(!matches!(
                choice.kind.as_ref().map(Str::as_str),
                Some("auto" | "none")
            ))
        }
        Wire::Responses | Wire::ChatCompletions => {
            if text.starts_with('"') {
                let choice: Cow<'_, str> = serde_json::from_str(text)?;
                Ok(!matches!(choice.as_ref(), "auto" | "none"))
            } else {
                // Any object names a tool or restricts the set: leave it to the client.
                Ok(true)
            }
        }
    }
}

/// Marks loaded every deferrable tool a loaded tool's description or arguments name, until
/// no more are: Claude Code's Edit says to Read first, OpenCode's read to use "the glob tool";
/// a tool the model is told to use must be one it can see. A name matches exactly (case and
/// all) as a whole word of the unescaped text; a name that is a plain lowercase word (`task`,
/// `read`) only when followed by " tool", since the prose uses such words for themselves.
fn keep_named(entries: &[Entry<'_>], arguments: &[String], loaded: &mut [bool]) {
    let names: std::collections::HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .filter(|(i, e)| e.deferrable && !loaded[*i])
        .filter_map(|(i, e)| Some((e.tool.name.as_ref()?.as_str(), i)))
        .collect();
    if names.is_empty() {
        return;
    }
    // Most words cannot be a name: its first byte and length rule them out before a lookup.
    let mut first_bytes = [false; 256];
    let (mut shortest, mut longest) = (usize::MAX, 0);
    for name in names.keys() {
        if let Some(&b) = name.as_bytes().first() {
            first_bytes[usize::from(b)] = true;
        }
        shortest = shortest.min(name.len());
        longest = longest.max(name.len());
    }
    let mut read = vec![false; entries.len()];
    let mut to_read: Vec<usize> = (0..entries.len())
        .filter(|&i| loaded[i] && !entries[i].own_search)
        .collect();
    while let Some(i) = to_read.pop() {
        if std::mem::replace(&mut read[i], true) {
            continue;
        }
        let description = entries[i].tool.description.as_ref().map_or("", Str::as_str);
        for text in [description, arguments[i].as_str()] {
            for word in words(text) {
                let word_text = &text[word.clone()];
                if !first_bytes[usize::from(text.as_bytes()[word.start])]
                    || !(shortest..=longest).contains(&word_text.len())
                {
                    continue;
                }
                let Some(&named) = names.get(word_text) else {
                    continue;
                };
                let plain = word_text.bytes().all(|b| b.is_ascii_lowercase());
                if named != i && !loaded[named] && (!plain || text[word.end..].starts_with(" tool"))
                {
                    loaded[named] = true;
                    to_read.push(named);
                }
            }
        }
    }
}

/// The byte ranges of the words of `text` that could be tool names: runs of letters, digits,
/// `_` and `-` (Unicode punctuation such as `“` or `—` ends a word), without a trailing `-`.
fn words(text: &str) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let in_word = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        let start = loop {
            let (at, c) = chars.next()?;
            if in_word(c) {
                break at;
            }
        };
        let mut end = text.len();
        while let Some(&(at, c)) = chars.peek() {
            if !in_word(c) {
                end = at;
                break;
            }
            chars.next();
        }
        Some(start..start + text[start..end].trim_end_matches('-').len())
    })
    .filter(|word| !word.is_empty())
}

/// The history called a tool that would be deferred and that no tool search surfaced.
fn joined_midway(deferred: &[String], history: &History) -> bool {
    deferred
        .iter()
        .any(|name| history.called.contains(name) && !history.surfaced.contains(name))
}
