//! Host recall: what the brain says when the agent's host (Claude Code, Codex) reports one of
//! its own tool calls through a hook, at the three moments a memory is worth the most:
//!
//! 1. a file is read that memories cite: their ids and titles, the rule `read_workspace_file`
//!    follows ([`Brain::pointers`] and [`render::pointer_line`]);
//! 2. a file is edited that a `failed` memory depends on: a warning naming it;
//! 3. a verdict command (tests, build, lint) fails with an error a `fix` memory was recorded
//!    for: BM25 nominates fixes from the error's headline, and the overlap of the two
//!    headlines decides ([`headline::SAME_FAILURE`]).
//!
//! Silence is the default: no match, a weak match, or a note already said in this host session
//! ([`session`]) gives `None`. A note is one line with ids and titles, never a body, and moves
//! no hit counter. Nothing here returns an error: every failure (a payload it cannot read, no
//! brain, a locked or corrupt store, an unwritable `.pith/`) is silence.
//!
//! The caller opens the brain as [`Access`] asks: the three moments only read; with
//! [`Settings::capture_fixes`] on, a verdict command that passes after failing earlier in the
//! session (with edits between) saves a `fix` memory, the one time recall writes, through a
//! writer of the brain that already exists.

pub mod headline;
pub mod payload;
pub mod session;
pub mod shell;

use std::path::Path;

use crate::render::{self, Hints};
use crate::{Brain, EvidenceSpec, Kind, MemoryRef, NewMemory, Workspace};
use payload::{Event, ShellResult, Tool};
use session::{Failure, Session};

/// The commands whose failure is a verdict worth a recorded fix, as leading words (runners such
/// as `python -m`, `uv run` and `npx` are looked through). `[hook] verdict_commands` replaces it.
pub const DEFAULT_VERDICT_COMMANDS: &[&str] = &[
    "pytest",
    "cargo test",
    "cargo build",
    "cargo clippy",
    "cargo check",
    "cargo nextest",
    "npm test",
    "npm run test",
    "pnpm test",
    "pnpm run test",
    "yarn test",
    "yarn run test",
    "bun test",
    "go test",
    "go build",
    "go vet",
    "make",
    "tsc",
    "eslint",
    "ruff",
    "mypy",
    "jest",
    "vitest",
    "node --test",
    "deno test",
    "gcc",
    "g++",
    "cc",
    "clang",
    "clang++",
];

/// Fix memories BM25 nominates for one failure; the overlap rule then decides.
const NOMINATED: usize = 10;
/// Memories one note names at most.
const NAMED: usize = 3;

/// How recall is configured.
#[derive(Debug, Clone)]
pub struct Settings {
    verdicts: Vec<Vec<String>>,
    /// Record a fix when a verdict command that failed passes after edits (`[hook]
    /// capture_fixes`, off by default).
    pub capture_fixes: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings::new(DEFAULT_VERDICT_COMMANDS.iter().copied(), false)
    }
}

impl Settings {
    /// Verdict commands as leading words (`"cargo test"`), and whether to capture fixes.
    pub fn new<'a>(verdicts: impl IntoIterator<Item = &'a str>, capture_fixes: bool) -> Settings {
        Settings {
            verdicts: verdicts
                .into_iter()
                .map(|v| v.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
                .filter(|v| !v.is_empty())
                .collect(),
            capture_fixes,
        }
    }

    /// Whether `command` runs a verdict command anywhere in it.
    pub fn is_verdict(&self, command: &str) -> bool {
        shell::segments(command)
            .is_some_and(|segments| segments.iter().any(|s| shell::runs_any(s, &self.verdicts)))
    }
}

/// How a brain is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// To read: creates and changes nothing.
    Read,
    /// To save a captured fix (the brain exists already).
    Write,
}

/// What recall says, and to which hook event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The payload's `hook_event_name`, which the answer must echo exactly.
    pub event_name: String,
    /// One line.
    pub text: String,
}

impl Note {
    /// The host's answer: the only form both hosts hand to the model (Claude Code as a system
    /// message after the tool result, Codex as a developer message before it).
    pub fn host_answer(&self) -> String {
        serde_json::json!({
            "hookSpecificOutput": {
                "hookEventName": self.event_name,
                "additionalContext": self.text,
            }
        })
        .to_string()
    }
}

/// How a recall note names the next step.
const HINTS: Hints = Hints {
    get: "get_memory or `pith memory show <id>`",
    more: "",
    accept: "",
    forget: "",
    restore: "",
};

/// The note for one hook payload, or `None` (silence). `open` opens the workspace's brain the
/// way `Access` asks, or gives `None` (no brain, or one that cannot be opened).
pub fn recall(
    input: &[u8],
    settings: &Settings,
    open: &mut dyn FnMut(&Workspace, Access) -> Option<Brain>,
) -> Option<Note> {
    let event = payload::parse(input)?;
    let ws = Workspace::discover(&event.cwd).ok()?;
    // The cheap test first: no brain file, nothing to say (and nothing is created).
    if !Brain::db_path(ws.root()).is_file() {
        return None;
    }
    let text = match &event.tool {
        Tool::Read { path } => read_note(&ws, &event, path, open),
        Tool::Edit { paths } => edit_note(&ws, &event, paths, settings, open),
        Tool::Shell { command, result } => {
            if !settings.is_verdict(command) {
                return None;
            }
            let failure = match result {
                ShellResult::Failed(text) => Some(headline::extract(text)?),
                // Codex gives no exit status: a failure is output that holds an error headline.
                ShellResult::Output(text) => headline::extract(text),
                ShellResult::Passed => None,
            };
            match failure {
                Some(headline) => failure_note(&ws, &event, command, &headline, settings, open),
                None if settings.capture_fixes => passed_note(&ws, &event, command, open),
                None => None,
            }
        }
    }?;
    Some(Note {
        event_name: event.event_name,
        text,
    })
}

/// `path` (absolute, or relative to the event's directory) as a workspace-relative path, when
/// it names a file inside the workspace.
fn relative(ws: &Workspace, event: &Event, path: &str) -> Option<String> {
    let given = Path::new(path);
    let abs = if given.is_absolute() {
        given.to_path_buf()
    } else {
        event.cwd.join(given)
    };
    ws.resolve(abs.to_str()?).ok().map(|p| p.rel)
}

fn read_note(
    ws: &Workspace,
    event: &Event,
    path: &str,
    open: &mut dyn FnMut(&Workspace, Access) -> Option<Brain>,
) -> Option<String> {
    let rel = relative(ws, event, path)?;
    let mut brain = open(ws, Access::Read)?;
    let refs = brain.pointers(&rel).ok()?;
    if refs.is_empty() {
        return None;
    }
    // One hook process per file and set of memories answers (several reading the file at once
    // say one note); then each memory is said once per session, at whichever moment first
    // names it (a memory saved on the file later in the session is said when it is read again).
    let session = Session::open(ws.root(), &event.session)?;
    let mut claims = session.claims()?;
    let ids: Vec<&str> = refs.iter().map(|r| r.id.as_str()).collect();
    if !claims.claim(&format!("read\0{rel}\0{}", ids.join(","))) {
        return None;
    }
    let unsaid: Vec<MemoryRef> = refs
        .into_iter()
        .filter(|r| claims.claim_memory(&r.id))
        .collect();
    if !claims.commit() {
        return None;
    }
    render::pointer_line(&unsaid, &HINTS).map(|note| render::from_origin(note, brain.origin()))
}

fn edit_note(
    ws: &Workspace,
    event: &Event,
    paths: &[String],
    settings: &Settings,
    open: &mut dyn FnMut(&Workspace, Access) -> Option<Brain>,
) -> Option<String> {
    let rels: Vec<String> = paths
        .iter()
        .filter_map(|p| relative(ws, event, p))
        .collect();
    if rels.is_empty() {
        return None;
    }
    if settings.capture_fixes
        && let Some(session) = Session::open(ws.root(), &event.session)
    {
        session.with_capture(|state| {
            for failure in &mut state.failures {
                for rel in &rels {
                    if !failure.edited.contains(rel) {
                        failure.edited.push(rel.clone());
                    }
                }
            }
        });
    }
    let mut brain = open(ws, Access::Read)?;
    let mut failed: Vec<(String, MemoryRef)> = Vec::new();
    for rel in &rels {
        for r in brain.pointers(rel).ok()? {
            if r.kind == Kind::Failed && !failed.iter().any(|(_, f)| f.id == r.id) {
                failed.push((rel.clone(), r));
            }
        }
    }
    if failed.is_empty() {
        return None;
    }
    let session = Session::open(ws.root(), &event.session)?;
    let mut claims = session.claims()?;
    failed.retain(|(_, r)| claims.claim_memory(&r.id));
    if failed.is_empty() || !claims.commit() {
        return None;
    }
    let n = failed.len();
    let mut items: Vec<String> = failed
        .iter()
        .take(NAMED)
        .map(|(rel, r)| {
            format!(
                "{} ({}): {}",
                r.id,
                render::one_line(rel, 120),
                render::one_line(&r.title, 80)
            )
        })
        .collect();
    if n > NAMED {
        items.push(format!("{} more", n - NAMED));
    }
    let note = format!(
        "pith: {} on record for the file just edited: {}; {} before repeating it",
        if n == 1 {
            "a failed attempt"
        } else {
            "failed attempts"
        },
        items.join("; "),
        HINTS.get
    );
    Some(render::from_origin(note, brain.origin()))
}

fn failure_note(
    ws: &Workspace,
    event: &Event,
    command: &str,
    headline: &str,
    settings: &Settings,
    open: &mut dyn FnMut(&Workspace, Access) -> Option<Brain>,
) -> Option<String> {
    if settings.capture_fixes
        && let Some(session) = Session::open(ws.root(), &event.session)
    {
        let command = collapse(command);
        session.with_capture(|state| {
            state.failures.retain(|f| f.command != command);
            state.failures.push(Failure {
                command,
                headline: headline.to_owned(),
                edited: Vec::new(),
            });
        });
    }
    let mut brain = open(ws, Access::Read)?;
    let fixes = same_failure(&mut brain, headline)?;
    let session = Session::open(ws.root(), &event.session)?;
    let mut claims = session.claims()?;
    let unsaid: Vec<crate::Memory> = fixes
        .into_iter()
        .filter(|m| claims.claim_memory(&m.id))
        .take(NAMED)
        .collect();
    if unsaid.is_empty() || !claims.commit() {
        return None;
    }
    let unsaid: Vec<String> = unsaid
        .into_iter()
        .map(|m| render::headline_line(&brain.checked(m)))
        .collect();
    let note = format!(
        "pith: {} this failure: {}; {} for details",
        if unsaid.len() == 1 {
            "a recorded fix matches"
        } else {
            "recorded fixes match"
        },
        unsaid.join("; "),
        HINTS.get
    );
    Some(render::from_origin(note, brain.origin()))
}

/// Fix memories whose headline names the same failure as `headline`, best overlap first.
fn same_failure(brain: &mut Brain, headline: &str) -> Option<Vec<crate::Memory>> {
    let terms = headline::terms(headline);
    let nominated = brain.nominate(&terms, Kind::Fix, NOMINATED).ok()?;
    let mut same: Vec<(f64, crate::Memory)> = nominated
        .into_iter()
        .filter_map(|m| Some((headline::same_failure(headline, m.headline.as_deref()?)?, m)))
        .collect();
    if same.is_empty() {
        return None;
    }
    same.sort_by(|a, b| b.0.total_cmp(&a.0));
    Some(same.into_iter().map(|(_, m)| m).collect())
}

/// A verdict command passed: with fix capture on, a failure of the same command earlier in the
/// session, followed by edits, becomes a `fix` memory.
fn passed_note(
    ws: &Workspace,
    event: &Event,
    command: &str,
    open: &mut dyn FnMut(&Workspace, Access) -> Option<Brain>,
) -> Option<String> {
    let session = Session::open(ws.root(), &event.session)?;
    let command = collapse(command);
    let failure = session
        .with_capture(|state| {
            let at = state.failures.iter().position(|f| f.command == command)?;
            Some(state.failures.remove(at))
        })
        .flatten()?;
    if failure.edited.is_empty() {
        return None;
    }
    let mut brain = open(ws, Access::Write)?;
    // A fix already on record for this failure is not recorded twice.
    if same_failure(&mut brain, &failure.headline).is_some() {
        return None;
    }
    let files = failure.edited.join(", ");
    let saved = brain
        .save(NewMemory {
            kind: Kind::Fix,
            title: render::one_line(&format!("Fix for: {}", failure.headline), 200),
            body: format!(
                "Captured by `pith hook`: `{command}` failed with this error, then passed after \
                 editing {files}. Not reviewed yet: check those edits, then keep, edit or forget \
                 this memory."
            ),
            tags: vec!["captured".to_owned(), "unverified".to_owned()],
            headline: Some(failure.headline.clone()),
            evidence: failure
                .edited
                .iter()
                .map(|path| EvidenceSpec {
                    path: path.clone(),
                    lines: None,
                })
                .collect(),
        })
        .ok()?;
    let id = &saved.memory.id;
    // The capture itself is said once per session, like every other note (it is saved: the
    // note is said even if the claim cannot be written).
    if let Some(mut claims) = session.claims() {
        claims.claim_memory(id);
        claims.commit();
    }
    Some(format!(
        "pith: recorded fix {id} (captured, unverified): `{}` passes after editing {}; `pith memory \
         show {id}` to review it",
        render::one_line(&command, 200),
        render::one_line(&files, 200)
    ))
}

fn collapse(command: &str) -> String {
    command.split_whitespace().collect::<Vec<_>>().join(" ")
}
