//! The hosts' hook payloads, as Claude Code 2.1.328 and Codex 0.169.0 send them on stdin, read
//! into the one [`Event`] recall decides on.
//!
//! What the real payloads hold (fixtures in `pith-testkit/fixtures`):
//! - Both: `session_id`, `cwd`, `hook_event_name`, `tool_name`, `tool_input`, `tool_use_id`.
//! - Claude Code: `Read`/`Edit`/`Write`/`MultiEdit` name `tool_input.file_path` (absolute),
//!   `NotebookEdit` `notebook_path`; `Bash` names `tool_input.command`. A Bash command that
//!   exits non-zero is a `PostToolUseFailure` whose `error` is `Exit code N` and the output
//!   (middle-truncated past 10,000 characters); a successful one a `PostToolUse` with an object
//!   `tool_response` (`stdout`, `stderr`, ...).
//! - Codex: shell commands are `Bash` with `tool_input.command` and `tool_response` the output
//!   as one string, without the exit status, whether the command passed or failed; `cwd` is the
//!   command's working directory. `apply_patch` carries the patch envelope in
//!   `tool_input.command` (`*** Update File: calc.py`, paths relative to `cwd`).
//!
//! Only the fields recall uses are read; the rest (a Write's whole file, a Read's content) is
//! skipped without being kept.

use std::path::PathBuf;

use pith_clients::HookTool;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::shell;

/// One tool event recall may speak to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The host's session id, which dedupe is keyed by.
    pub session: String,
    /// `hook_event_name` as the payload spells it: the answer must echo it exactly.
    pub event_name: String,
    /// Where relative paths in the event are taken from.
    pub cwd: PathBuf,
    /// What the tool did.
    pub tool: Tool,
}

/// What a tool call did, as far as recall cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tool {
    /// Showed one file (as given: absolute or relative to `cwd`).
    Read {
        /// The file.
        path: String,
    },
    /// Changed these files.
    Edit {
        /// The files, as given.
        paths: Vec<String>,
    },
    /// Ran a shell command.
    Shell {
        /// The command line.
        command: String,
        /// How it ended.
        result: ShellResult,
    },
}

/// How a shell command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellResult {
    /// It exited non-zero (Claude Code's `PostToolUseFailure`); its error text.
    Failed(String),
    /// It exited zero (Claude Code's `PostToolUse`).
    Passed,
    /// Its output, with no exit status (Codex): whether it failed is read from the output.
    Output(String),
}

#[derive(Deserialize)]
struct Raw {
    session_id: Option<String>,
    cwd: Option<String>,
    hook_event_name: Option<String>,
    tool_name: Option<String>,
    tool_input: Option<RawInput>,
    error: Option<String>,
    is_interrupt: Option<bool>,
    tool_response: Option<TextOrOther>,
}

#[derive(Deserialize)]
struct RawInput {
    file_path: Option<String>,
    notebook_path: Option<String>,
    command: Option<String>,
    run_in_background: Option<bool>,
}

/// A value kept only when it is a string; objects, arrays and the rest are skipped unread.
enum TextOrOther {
    Text(String),
    Other,
}

impl<'de> Deserialize<'de> for TextOrOther {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TextOrOther;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TextOrOther, E> {
                Ok(TextOrOther::Text(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<TextOrOther, E> {
                Ok(TextOrOther::Text(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TextOrOther, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(TextOrOther::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TextOrOther, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(TextOrOther::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<TextOrOther, E> {
                Ok(TextOrOther::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<TextOrOther, E> {
                Ok(TextOrOther::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<TextOrOther, E> {
                Ok(TextOrOther::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<TextOrOther, E> {
                Ok(TextOrOther::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<TextOrOther, E> {
                Ok(TextOrOther::Other)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// The event in a hook payload, or `None` for anything recall does not speak to: malformed
/// JSON, a missing field, another hook event, a tool it does not know, an interrupted or
/// background command.
pub fn parse(input: &[u8]) -> Option<Event> {
    let raw: Raw = serde_json::from_slice(input).ok()?;
    let event_name = raw.hook_event_name?;
    let failure = match event_name.as_str() {
        "PostToolUse" => false,
        "PostToolUseFailure" => true,
        _ => return None,
    };
    let session = raw.session_id.filter(|s| !s.trim().is_empty())?;
    let cwd = PathBuf::from(raw.cwd.filter(|c| !c.is_empty())?);
    let input = raw.tool_input?;
    // Which tools are hooked, and what each one's payload holds, is each client's fact.
    let tool = match pith_clients::hook_tool(raw.tool_name?.as_str())? {
        _ if failure && raw.is_interrupt == Some(true) => return None,
        HookTool::Read if !failure => Tool::Read {
            path: input.file_path?,
        },
        HookTool::Edit if !failure => Tool::Edit {
            paths: vec![input.file_path?],
        },
        HookTool::NotebookEdit if !failure => Tool::Edit {
            paths: vec![input.notebook_path?],
        },
        HookTool::Patch if !failure => Tool::Edit {
            paths: patch_paths(&input.command?),
        },
        HookTool::Shell => {
            if input.run_in_background == Some(true) {
                return None;
            }
            let command = input.command?;
            let result = match (failure, raw.tool_response) {
                (true, _) => ShellResult::Failed(raw.error?),
                (false, Some(TextOrOther::Text(output))) => ShellResult::Output(output),
                (false, _) => ShellResult::Passed,
            };
            match (&result, shell::file_shown(&command)) {
                (ShellResult::Passed | ShellResult::Output(_), Some(path)) => Tool::Read { path },
                _ => Tool::Shell { command, result },
            }
        }
        _ => return None,
    };
    Some(Event {
        session,
        event_name,
        cwd,
        tool,
    })
}

/// The most files of one `apply_patch` recall looks at: an envelope touching more is a bulk
/// change (a rename across the tree, generated files), where a note about one of them is noise,
/// and looking at each would cost the hook its time budget.
pub const MAX_PATCH_FILES: usize = 256;

/// The files an `apply_patch` envelope adds, updates or moves to (a deleted file is gone),
/// each once, the first [`MAX_PATCH_FILES`] of them.
fn patch_paths(patch: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut paths: Vec<String> = Vec::new();
    for line in patch.lines() {
        let path = ["*** Update File: ", "*** Add File: ", "*** Move to: "]
            .iter()
            .find_map(|marker| line.strip_prefix(marker));
        if let Some(path) = path.map(str::trim).filter(|p| !p.is_empty())
            && seen.insert(path)
        {
            paths.push(path.to_owned());
            if paths.len() == MAX_PATCH_FILES {
                break;
            }
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_fields_recall_uses_and_nothing_else() {
        let read = br#"{"session_id":"s","cwd":"/w","hook_event_name":"PostToolUse",
            "tool_name":"Read","tool_input":{"file_path":"/w/a.py","offset":3},
            "tool_response":{"type":"text","file":{"content":"x"}}}"#;
        assert_eq!(
            parse(read),
            Some(Event {
                session: "s".into(),
                event_name: "PostToolUse".into(),
                cwd: "/w".into(),
                tool: Tool::Read {
                    path: "/w/a.py".into()
                },
            })
        );
        let failed = br#"{"session_id":"s","cwd":"/w","hook_event_name":"PostToolUseFailure",
            "tool_name":"Bash","tool_input":{"command":"pytest"},"error":"Exit code 1\nboom"}"#;
        assert_eq!(
            parse(failed).map(|e| e.tool),
            Some(Tool::Shell {
                command: "pytest".into(),
                result: ShellResult::Failed("Exit code 1\nboom".into()),
            })
        );
        let codex_cat =
            br#"{"session_id":"s","turn_id":"t","cwd":"/w","hook_event_name":"PostToolUse",
            "tool_name":"Bash","tool_input":{"command":"cat calc.py"},"tool_response":"x\n"}"#;
        assert_eq!(
            parse(codex_cat).map(|e| e.tool),
            Some(Tool::Read {
                path: "calc.py".into()
            })
        );
        let patch = br#"{"session_id":"s","cwd":"/w","hook_event_name":"PostToolUse",
            "tool_name":"apply_patch","tool_input":{"command":"*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** Add File: b.py\n+z\n*** Delete File: c.py\n*** End Patch\n"},
            "tool_response":"Exit code: 0"}"#;
        assert_eq!(
            parse(patch).map(|e| e.tool),
            Some(Tool::Edit {
                paths: vec!["a.py".into(), "b.py".into()]
            })
        );
    }

    #[test]
    fn anything_else_is_none() {
        for input in [
            &b""[..],
            b"not json",
            b"[]",
            b"{}",
            br#"{"session_id":"s","cwd":"/w","hook_event_name":"SessionStart","source":"startup"}"#,
            br#"{"session_id":"s","cwd":"/w","hook_event_name":"PostToolUse","tool_name":"Grep","tool_input":{"pattern":"x"}}"#,
            br#"{"session_id":"s","cwd":"/w","hook_event_name":"PostToolUse","tool_name":"Read","tool_input":{}}"#,
            br#"{"cwd":"/w","hook_event_name":"PostToolUse","tool_name":"Read","tool_input":{"file_path":"/w/a"}}"#,
            br#"{"session_id":"s","cwd":"/w","hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_input":{"command":"pytest"},"error":"x","is_interrupt":true}"#,
            br#"{"session_id":"s","cwd":"/w","hook_event_name":"PostToolUseFailure","tool_name":"Read","tool_input":{"file_path":"/w/a"},"error":"x"}"#,
            br#"{"session_id":"s","cwd":"/w","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"pytest","run_in_background":true}}"#,
        ] {
            assert_eq!(parse(input), None, "{}", String::from_utf8_lossy(input));
        }
    }
}
