//! What the conversation history says: the task (the first real user prompt) and which tools
//! were called or surfaced by a tool search. Read one message (or Responses item) at a time, so
//! a turn can go on from what an earlier turn read ([`super::conversations`]).

use std::borrow::Cow;
use std::collections::BTreeSet;

use pith_wire::Wire;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::view::{Block, Content, Message, Str};

/// The parts of a conversation the defer stage decides on, as of some message.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct History {
    /// The first real user prompt, `None` when there is none.
    pub task: Option<String>,
    /// Names of tools the model called.
    pub called: BTreeSet<String>,
    /// Names of tools a tool search (server or client side) made available.
    pub surfaced: BTreeSet<String>,
}

#[derive(Deserialize)]
struct Reference<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    tool_name: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct SearchResult<'a> {
    #[serde(borrow, default)]
    tool_references: Option<Vec<Reference<'a>>>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    role: Option<Str<'a>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
}

fn is(kind: Option<&Str<'_>>, want: &str) -> bool {
    kind.is_some_and(|k| k.as_str() == want)
}

fn is_array(raw: &RawValue) -> bool {
    raw.get().starts_with('[')
}

fn add(names: &mut BTreeSet<String>, name: &str) {
    if !names.contains(name) {
        names.insert(name.to_owned());
    }
}

impl History {
    /// Reads one element of the history array (`text`, its JSON): an Anthropic message, or an
    /// OpenAI Responses input item.
    pub fn read(&mut self, wire: Wire, text: &str) -> Result<(), serde_json::Error> {
        match wire {
            Wire::AnthropicMessages => self.read_message(serde_json::from_str(text)?),
            Wire::Responses | Wire::ChatCompletions => self.read_item(serde_json::from_str(text)?),
        }
    }

    /// A Responses `input` that is one string: the prompt itself.
    pub fn of_prompt(input: &str) -> Result<Self, serde_json::Error> {
        Ok(History {
            task: real_prompt(&serde_json::from_str::<Cow<'_, str>>(input)?),
            ..History::default()
        })
    }

    fn read_message(&mut self, message: Message<'_>) -> Result<(), serde_json::Error> {
        let Some(content) = message.content else {
            return Ok(());
        };
        let from_user = is(message.role.as_ref(), "user");
        let blocks = match content {
            Content::Text(text) => {
                if from_user && self.task.is_none() {
                    self.task = real_prompt(&text);
                }
                return Ok(());
            }
            Content::Blocks(blocks) => blocks,
        };
        for block in blocks {
            match block.kind.as_ref().map(Str::as_str) {
                Some("text") if from_user && self.task.is_none() => {
                    if let Some(text) = block.text {
                        self.task = real_prompt(&serde_json::from_str::<Cow<'_, str>>(text.get())?);
                    }
                }
                Some("tool_use") => {
                    if let Some(name) = block.name {
                        add(&mut self.called, name.as_str());
                    }
                }
                Some("tool_search_tool_result") => {
                    if let Some(content) = block.content.filter(|c| c.get().starts_with('{')) {
                        let result: SearchResult<'_> = serde_json::from_str(content.get())?;
                        self.add_references(result.tool_references.unwrap_or_default());
                    }
                }
                Some("tool_result") => {
                    // A client-side search answers with `tool_reference` blocks in a result.
                    if let Some(content) = block
                        .content
                        .filter(|c| is_array(c) && c.get().contains("\"tool_reference\""))
                    {
                        let refs: Vec<Reference<'_>> = serde_json::from_str(content.get())?;
                        self.add_references(refs);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn add_references(&mut self, refs: Vec<Reference<'_>>) {
        for reference in refs {
            if is(reference.kind.as_ref(), "tool_reference")
                && let Some(name) = reference.tool_name
            {
                add(&mut self.surfaced, name.as_str());
            }
        }
    }

    fn read_item(&mut self, item: Item<'_>) -> Result<(), serde_json::Error> {
        match item.kind.as_ref().map(Str::as_str) {
            None | Some("message") if self.task.is_none() && is(item.role.as_ref(), "user") => {
                if let Some(content) = item.content {
                    self.task = responses_prompt(content)?;
                }
            }
            Some("function_call") => {
                if let Some(name) = item.name {
                    add(&mut self.called, name.as_str());
                }
            }
            Some("tool_search_output") => {
                if let Some(tools) = item.tools {
                    let tools: Vec<Named<'_>> = serde_json::from_str(tools.get())?;
                    for name in tools.iter().filter_map(|t| t.name.as_ref()) {
                        add(&mut self.surfaced, name.as_str());
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn responses_prompt(content: &RawValue) -> Result<Option<String>, serde_json::Error> {
    if content.get().starts_with('"') {
        return Ok(real_prompt(&serde_json::from_str::<Cow<'_, str>>(
            content.get(),
        )?));
    }
    let parts: Vec<Block<'_>> = serde_json::from_str(content.get())?;
    for part in parts {
        if !is(part.kind.as_ref(), "input_text") {
            continue;
        }
        if let Some(text) = part.text
            && let Some(prompt) = real_prompt(&serde_json::from_str::<Cow<'_, str>>(text.get())?)
        {
            return Ok(Some(prompt));
        }
    }
    Ok(None)
}

/// The user's own words in a text block, or `None` when the block is something a client
/// injected: Claude Code's `<system-reminder>` context, Codex's `# AGENTS.md instructions` and
/// `<environment_context>`, any text that is one whole `<tag>...</tag>` wrapper. OpenCode's
/// `run` wraps the prompt in literal quotes; they are dropped.
pub(super) fn real_prompt(text: &str) -> Option<String> {
    let text = strip_system_reminders(text);
    let text = strip_pin_commands(&text);
    let text = text.trim();
    if text.is_empty()
        || text.starts_with(pith_clients::codex::AGENTS_MD_PREFIX)
        || pith_clients::is_one_wrapper(text)
    {
        return None;
    }
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .map_or(text, str::trim);
    (!text.is_empty()).then(|| text.to_owned())
}

/// The text without its pin command lines: a session that opens with `@pith pin ...` is still
/// ranked by its real task.
fn strip_pin_commands(text: &str) -> Cow<'_, str> {
    if !text.contains(crate::pins::MARKER) {
        return Cow::Borrowed(text);
    }
    let kept: Vec<&str> = text
        .split('\n')
        .filter(|line| !crate::pins::is_command_line(line))
        .collect();
    Cow::Owned(kept.join("\n"))
}

fn strip_system_reminders(text: &str) -> Cow<'_, str> {
    const OPEN: &str = pith_clients::SYSTEM_REMINDER_OPEN;
    const CLOSE: &str = pith_clients::SYSTEM_REMINDER_CLOSE;
    if !text.contains(OPEN) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        match rest[start..].find(CLOSE) {
            Some(end) => rest = &rest[start + end + CLOSE.len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injected_context_is_not_the_task() {
        assert_eq!(
            real_prompt("<system-reminder>\nctx\n</system-reminder>\n"),
            None
        );
        assert_eq!(
            real_prompt("<system-reminder>a</system-reminder> fix it "),
            Some("fix it".into())
        );
        assert_eq!(real_prompt("\"@pith pin be brief\""), None);
        assert_eq!(
            real_prompt("@pith pin be brief\nfix it"),
            Some("fix it".into())
        );
        assert_eq!(
            real_prompt("# AGENTS.md instructions for /x\n\n<INSTRUCTIONS>r</INSTRUCTIONS>"),
            None
        );
        assert_eq!(
            real_prompt("<environment_context>\n <cwd>/x</cwd>\n</environment_context>"),
            None
        );
        assert_eq!(
            real_prompt("\"the test fails\""),
            Some("the test fails".into())
        );
        assert_eq!(
            real_prompt("<b>bold</b> words"),
            Some("<b>bold</b> words".into())
        );
        assert_eq!(real_prompt("  "), None);
    }

    #[test]
    fn anthropic_history_skips_reminders_and_collects_calls_and_references() {
        let history = read_all(
            Wire::AnthropicMessages,
            r#"[{"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},
                 {"type":"text","text":"list jira issues"}]},
               {"role":"assistant","content":[
                 {"type":"server_tool_use","id":"srvtoolu_1","name":"tool_search_tool_regex","input":{"pattern":"jira"}},
                 {"type":"tool_search_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"tool_search_tool_search_result","tool_references":[{"type":"tool_reference","tool_name":"jira_a"}]}},
                 {"type":"tool_use","id":"toolu_1","name":"jira_a","input":{}}]},
               {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"tool_reference","tool_name":"jira_b"}]}]}]"#,
        );
        assert_eq!(history.task.as_deref(), Some("list jira issues"));
        assert_eq!(history.called, set(&["jira_a"]));
        assert_eq!(history.surfaced, set(&["jira_a", "jira_b"]));
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    /// Every element of a history array, read in order.
    fn read_all(wire: Wire, array: &str) -> History {
        let elements: Vec<&RawValue> = serde_json::from_str(array).unwrap();
        let mut history = History::default();
        for element in elements {
            history.read(wire, element.get()).unwrap();
        }
        history
    }

    #[test]
    fn responses_history_finds_the_prompt_after_agents_md() {
        let history = read_all(
            Wire::Responses,
            r##"[{"type":"message","role":"developer","content":[{"type":"input_text","text":"sys"}]},
               {"type":"message","role":"user","content":[{"type":"input_text","text":"# AGENTS.md instructions for /x\n"},{"type":"input_text","text":"<environment_context>e</environment_context>"}]},
               {"type":"message","role":"user","content":[{"type":"input_text","text":"fix calc"}]},
               {"type":"function_call","call_id":"c1","name":"exec","arguments":"{}"},
               {"type":"tool_search_output","tools":[{"type":"function","name":"jira_a"}]}]"##,
        );
        assert_eq!(history.task.as_deref(), Some("fix calc"));
        assert_eq!(history.called, set(&["exec"]));
        assert_eq!(history.surfaced, set(&["jira_a"]));
        assert_eq!(
            History::of_prompt(r#""fix calc""#).unwrap().task.as_deref(),
            Some("fix calc")
        );
    }
}
