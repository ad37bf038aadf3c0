//! What the conversation history says: the task (the first real user prompt) and which tools
//! were called or surfaced by a tool search.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::view::{Block, Content, Message, Str};

/// The parts of a conversation the defer stage decides on.
#[derive(Debug, Default)]
pub(super) struct History<'a> {
    /// The first real user prompt, `None` when there is none.
    pub task: Option<String>,
    /// Names of tools the model called, in order, with repeats.
    pub called: Vec<Cow<'a, str>>,
    /// Names of tools a tool search (server or client side) made available.
    pub surfaced: Vec<Cow<'a, str>>,
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

/// Anthropic Messages `messages`, as read with the body.
pub(super) fn anthropic(messages: Vec<Message<'_>>) -> Result<History<'_>, serde_json::Error> {
    let mut history = History::default();
    for message in messages {
        let Some(content) = message.content else {
            continue;
        };
        let from_user = is(message.role.as_ref(), "user");
        let blocks = match content {
            Content::Text(text) => {
                if from_user && history.task.is_none() {
                    history.task = real_prompt(&text);
                }
                continue;
            }
            Content::Blocks(blocks) => blocks,
        };
        for block in blocks {
            match block.kind.as_ref().map(Str::as_str) {
                Some("text") if from_user && history.task.is_none() => {
                    if let Some(text) = block.text {
                        history.task =
                            real_prompt(&serde_json::from_str::<Cow<'_, str>>(text.get())?);
                    }
                }
                Some("tool_use") => {
                    if let Some(name) = block.name {
                        history.called.push(name.0);
                    }
                }
                Some("tool_search_tool_result") => {
                    if let Some(content) = block.content.filter(|c| c.get().starts_with('{')) {
                        let result: SearchResult<'_> = serde_json::from_str(content.get())?;
                        push_references(
                            &mut history.surfaced,
                            result.tool_references.unwrap_or_default(),
                        );
                    }
                }
                Some("tool_result") => {
                    // A client-side search answers with `tool_reference` blocks in a result.
                    if let Some(content) = block
                        .content
                        .filter(|c| is_array(c) && c.get().contains("\"tool_reference\""))
                    {
                        let refs: Vec<Reference<'_>> = serde_json::from_str(content.get())?;
                        push_references(&mut history.surfaced, refs);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(history)
}

fn push_references<'a>(out: &mut Vec<Cow<'a, str>>, refs: Vec<Reference<'a>>) {
    out.extend(
        refs.into_iter()
            .filter(|r| is(r.kind.as_ref(), "tool_reference"))
            .filter_map(|r| r.tool_name.map(|n| n.0)),
    );
}

/// OpenAI Responses `input`.
pub(super) fn responses(input: &RawValue) -> Result<History<'_>, serde_json::Error> {
    let mut history = History::default();
    if input.get().starts_with('"') {
        history.task = real_prompt(&serde_json::from_str::<Cow<'_, str>>(input.get())?);
        return Ok(history);
    }
    let items: Vec<Item<'_>> = serde_json::from_str(input.get())?;
    for item in items {
        match item.kind.as_ref().map(Str::as_str) {
            None | Some("message") if history.task.is_none() && is(item.role.as_ref(), "user") => {
                if let Some(content) = item.content {
                    history.task = responses_prompt(content)?;
                }
            }
            Some("function_call") => {
                if let Some(name) = item.name {
                    history.called.push(name.0);
                }
            }
            Some("tool_search_output") => {
                if let Some(tools) = item.tools {
                    let tools: Vec<Named<'_>> = serde_json::from_str(tools.get())?;
                    history
                        .surfaced
                        .extend(tools.into_iter().filter_map(|t| t.name.map(|n| n.0)));
                }
            }
            _ => {}
        }
    }
    Ok(history)
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
        let messages: Vec<Message<'_>> = serde_json::from_str(
            r#"[{"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},
                 {"type":"text","text":"list jira issues"}]},
               {"role":"assistant","content":[
                 {"type":"server_tool_use","id":"srvtoolu_1","name":"tool_search_tool_regex","input":{"pattern":"jira"}},
                 {"type":"tool_search_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"tool_search_tool_search_result","tool_references":[{"type":"tool_reference","tool_name":"jira_a"}]}},
                 {"type":"tool_use","id":"toolu_1","name":"jira_a","input":{}}]},
               {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"tool_reference","tool_name":"jira_b"}]}]}]"#,
        )
        .unwrap();
        let history = anthropic(messages).unwrap();
        assert_eq!(history.task.as_deref(), Some("list jira issues"));
        assert_eq!(history.called, ["jira_a"]);
        assert_eq!(history.surfaced, ["jira_a", "jira_b"]);
    }

    #[test]
    fn responses_history_finds_the_prompt_after_agents_md() {
        let raw: Box<RawValue> = serde_json::from_str(
            r##"[{"type":"message","role":"developer","content":[{"type":"input_text","text":"sys"}]},
               {"type":"message","role":"user","content":[{"type":"input_text","text":"# AGENTS.md instructions for /x\n"},{"type":"input_text","text":"<environment_context>e</environment_context>"}]},
               {"type":"message","role":"user","content":[{"type":"input_text","text":"fix calc"}]},
               {"type":"function_call","call_id":"c1","name":"exec","arguments":"{}"},
               {"type":"tool_search_output","tools":[{"type":"function","name":"jira_a"}]}]"##,
        )
        .unwrap();
        let history = responses(&raw).unwrap();
        assert_eq!(history.task.as_deref(), Some("fix calc"));
        assert_eq!(history.called, ["exec"]);
        assert_eq!(history.surfaced, ["jira_a"]);
    }
}
