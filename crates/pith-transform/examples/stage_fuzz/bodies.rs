//! Request bodies of the three wires, built from scratch: tool lists (custom, server and search
//! tools, `cache_control`, `defer_loading`, odd schemas), `tool_choice` variants, and histories
//! with tool calls, tool searches and injected reminders; strings with unicode and escapes,
//! numbers at the edges, random nesting and the occasional duplicate key.

use std::cell::Cell;

use pith_testkit::rng::Rng;
use pith_wire::Wire;

use crate::RngExt;
use crate::json::J;

const WORDS: &[&str] = &[
    "read",
    "file",
    "files",
    "search",
    "jira",
    "issue",
    "issues",
    "git",
    "diff",
    "log",
    "test",
    "tests",
    "fails",
    "fix",
    "deploy",
    "calendar",
    "event",
    "user",
    "login",
    "the",
    "a",
    "of",
    "HTTPServer",
    "readFile",
    "snake_case",
    "42",
    "1.5",
    "e.g.",
    "calc.py",
    "src/main.rs",
    "./run",
    "https://example.com/x?q=1",
    "naïve",
    "ÜBER",
    "İstanbul",
    "straße",
    "ﬁle",
    "日本語",
    "Σίσυφος",
    "Ωmega",
    "emoji😀",
    "𝄞clef",
    "zero\u{200b}width",
    "\u{202e}rtl",
    "\u{feff}bom",
    "\u{fffd}",
    "\u{10ffff}",
];

/// Text that stresses escaping and the stage's text rules.
const SPECIAL: &[&str] = &[
    "\"",
    "\\",
    "\n",
    "\t",
    "\r\n",
    "\u{0}",
    "\u{1f}",
    "\u{7f}",
    "\u{2028}",
    "\u{2029}",
    "</",
    "<system-reminder>",
    "</system-reminder>",
    "{",
    "}]",
    ",",
    ":",
    "\\u0041",
    "\"defer_loading\"",
    "tool_search",
    "\"tools\":[",
    "cache_control",
    "\\\"",
    "/*",
];

/// Strings serde_json's string parser treats differently from its validator: a lone
/// surrogate is accepted where a value is skipped and rejected where it is read as text.
const EDGE_STRINGS: &[&str] = &[
    r#""\uD800""#,
    r#""lone \uDBFF high""#,
    r#""\uDC00 lone low""#,
    r#""\uDE00\uD83D reversed pair""#,
    r#""\uD834\u0041 high then letter""#,
    r#""\uD83D\uDE00 pair""#,
    r#""\ud834\udd1e lower-case pair""#,
    r#""\u0000 nul""#,
    r#""\uFFFF\uFFFE""#,
    r#""\uFEFF""#,
    r#""\/\/ slashes""#,
    r#""""#,
];

/// Numbers at the edges of what a parser holds; serde_json reads them all as values.
const EDGE_NUMBERS: &[&str] = &[
    "0",
    "-0",
    "0.0",
    "-0.0e0",
    "1E+2",
    "1e-2",
    "5e-324",
    "1e-400",
    "1.7976931348623157e308",
    "9007199254740993",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "123456789012345678901234567890",
    "3.141592653589793238462643383279",
    "10000000000000000000000000000000000000000e-40",
];

/// Numbers valid by the grammar that serde_json cannot hold as a value (out of range).
const HUGE_NUMBERS: &[&str] = &["1e309", "-1e400", "1.8e308", "123e456789"];

thread_local! {
    /// How hostile the body being built is: the chance, at each place that offers one, of a
    /// choice that makes the stage refuse the body (a lone surrogate where it reads text, a
    /// non-object tool, a repeated member of a tool, nesting past serde's limit). Drawn per
    /// body, so most bodies get far enough to be edited and some are hostile throughout.
    static ODDITY: Cell<f64> = const { Cell::new(0.0) };
}

fn odd(rng: &mut Rng) -> bool {
    rng.chance(ODDITY.get())
}

fn draw_oddity(rng: &mut Rng) {
    ODDITY.set(*rng.one(&[0.0, 0.0, 0.0, 0.0, 0.001, 0.005, 0.03]));
}

const MODELS: &[&str] = &[
    "claude-sonnet-4-6",
    "claude-opus-4-5",
    "gpt-5.4",
    "gpt-5-codex",
    "",
    "模型",
];

const TOOL_NAMES: &[&str] = &[
    "read",
    "edit",
    "bash",
    "grep",
    "glob",
    "write",
    "webfetch",
    "todowrite",
    "task",
    "skill",
    "jira_search",
    "mcp__github__create_issue",
    "calendar.create_event",
    "fn-with-dash",
    "list_mcp_resources",
    "exec_command",
    "apply_patch",
    "ツール",
    "émoji_😀",
    "a",
    "",
];

pub fn text(rng: &mut Rng, max_words: usize) -> String {
    let n = rng.below(max_words + 1);
    let mut out = String::new();
    for i in 0..n {
        if i > 0 {
            out.push_str(rng.pick(&[" ", " ", " ", " ", "\n", "_", "/", ". ", "  "]));
        }
        if rng.chance(0.06) {
            out.push_str(rng.pick(SPECIAL));
        } else {
            out.push_str(rng.pick(WORDS));
        }
    }
    out
}

/// About `chars` characters of words: long descriptions push the deferred size over the
/// default threshold.
fn long_text(rng: &mut Rng, chars: usize) -> String {
    let mut out = String::with_capacity(chars + 16);
    while out.len() < chars {
        out.push_str(&text(rng, 20));
        out.push(' ');
    }
    out
}

/// A string value: plain text, now and then an edge-case literal.
fn string(rng: &mut Rng, max_words: usize) -> J {
    if odd(rng) {
        J::Raw((*rng.one(EDGE_STRINGS)).to_owned())
    } else {
        J::Str(text(rng, max_words))
    }
}

fn number(rng: &mut Rng) -> J {
    if odd(rng) {
        J::Num((*rng.one(HUGE_NUMBERS)).to_owned())
    } else if rng.chance(0.2) {
        J::Num((*rng.one(EDGE_NUMBERS)).to_owned())
    } else {
        J::n(rng.below(100_000))
    }
}

fn key(rng: &mut Rng) -> String {
    rng.one(&[
        "a",
        "b",
        "path",
        "query",
        "",
        " ",
        "tools",
        "defer_loading",
        "cache_control",
        "type",
        "name",
        "__proto__",
        "ключ",
        "😀",
        "a\"b",
        "x\\y",
    ])
    .to_string()
}

/// A random value nested up to `depth` more levels.
pub fn value(rng: &mut Rng, depth: usize) -> J {
    let leaf = depth == 0;
    match rng.below(if leaf { 4 } else { 7 }) {
        0 => J::Null,
        1 => J::Bool(rng.chance(0.5)),
        2 => number(rng),
        3 => string(rng, 6),
        4 => J::Arr((0..rng.below(5)).map(|_| value(rng, depth - 1)).collect()),
        5 if odd(rng) => deep(rng),
        _ => J::Obj(
            (0..rng.below(5))
                .map(|_| (key(rng), value(rng, depth - 1)))
                .collect(),
        ),
    }
}

/// Nesting around serde_json's recursion limit (128).
fn deep(rng: &mut Rng) -> J {
    let depth = rng.range(100, 140);
    let mut v = J::n(1);
    for i in 0..depth {
        v = if i % 2 == 0 {
            J::Arr(vec![v])
        } else {
            J::obj(vec![("a", v)])
        };
    }
    v
}

/// Fisher-Yates.
pub fn shuffle<T>(rng: &mut Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i + 1);
        items.swap(i, j);
    }
}

/// A member repeated (same key, maybe another value), now and then.
fn maybe_duplicate(rng: &mut Rng, value: &mut J, p: f64) {
    if !rng.chance(p) {
        return;
    }
    if let Some(members) = value.members_mut()
        && !members.is_empty()
    {
        let at = rng.below(members.len());
        let mut copy = members[at].clone();
        if rng.chance(0.5) {
            copy.1 = value_like(rng, &copy.1);
        }
        let to = rng.below(members.len() + 1);
        members.insert(to, copy);
    }
}

fn value_like(rng: &mut Rng, like: &J) -> J {
    match like {
        J::Str(_) => string(rng, 4),
        J::Num(_) => number(rng),
        _ => value(rng, 2),
    }
}

fn schema(rng: &mut Rng, depth: usize) -> J {
    if rng.chance(0.02) {
        // Not the shape of a schema: ranking text must fail open to nothing.
        return match rng.below(5) {
            0 => J::s("a string"),
            1 => number(rng),
            2 => J::Arr(vec![]),
            3 => J::obj(vec![("properties", J::Arr(vec![J::n(1), J::n(2)]))]),
            _ => J::obj(vec![(
                "properties",
                J::obj(vec![("a", J::obj(vec![("description", J::n(7))]))]),
            )]),
        };
    }
    let mut members = vec![("type".to_owned(), J::s("object"))];
    let names: Vec<String> = (0..rng.below(6))
        .map(|i| {
            format!(
                "{}{i}",
                rng.one(&["path", "query", "pattern", "limit", "ö", ""])
            )
        })
        .collect();
    let properties = names
        .iter()
        .map(|n| (n.clone(), property(rng, depth + 1)))
        .collect();
    members.push(("properties".to_owned(), J::Obj(properties)));
    if rng.chance(0.5) && !names.is_empty() {
        members.push((
            "required".to_owned(),
            J::Arr(names.iter().take(2).map(|n| J::s(n.clone())).collect()),
        ));
    }
    if rng.chance(0.3) {
        members.push(("additionalProperties".to_owned(), J::Bool(false)));
    }
    if rng.chance(0.1) {
        members.push((
            "$schema".to_owned(),
            J::s("http://json-schema.org/draft-07/schema#"),
        ));
    }
    J::Obj(members)
}

fn property(rng: &mut Rng, depth: usize) -> J {
    let kind = *rng.one(&["string", "integer", "number", "boolean", "array", "object"]);
    let mut members = vec![("type".to_owned(), J::s(kind))];
    if rng.chance(0.7) {
        members.push(("description".to_owned(), string(rng, 10)));
    }
    match kind {
        "string" if rng.chance(0.3) => {
            members.push((
                "enum".to_owned(),
                J::Arr((0..3).map(|_| string(rng, 2)).collect()),
            ));
        }
        "integer" | "number" => {
            members.push(("minimum".to_owned(), number(rng)));
            if rng.chance(0.5) {
                members.push(("maximum".to_owned(), number(rng)));
            }
        }
        "array" => {
            let items = if rng.chance(0.2) {
                J::Arr(vec![property(rng, depth + 1), property(rng, depth + 1)])
            } else if depth < 5 {
                property(rng, depth + 1)
            } else {
                J::obj(vec![("type", J::s("string"))])
            };
            members.push(("items".to_owned(), items));
        }
        "object" if depth < 5 => {
            let nested = schema(rng, depth + 1);
            if let Some(properties) = nested.get("properties") {
                members.push(("properties".to_owned(), properties.clone()));
            }
        }
        _ => {}
    }
    if rng.chance(0.08) {
        members.push((
            rng.one(&["anyOf", "oneOf", "allOf"]).to_string(),
            J::Arr(vec![
                property(rng, depth + 2),
                J::obj(vec![("type", J::s("null"))]),
            ]),
        ));
    }
    if rng.chance(0.05) {
        members.push(("default".to_owned(), value(rng, 2)));
    }
    J::Obj(members)
}

fn cache_control(rng: &mut Rng) -> J {
    match rng.below(6) {
        0 => J::Null,
        1 => J::obj(vec![]),
        2 => J::obj(vec![("type", J::s("ephemeral")), ("ttl", J::s("1h"))]),
        _ => J::obj(vec![("type", J::s("ephemeral"))]),
    }
}

/// How a generated tool list is sized and made.
#[derive(Clone, Copy)]
struct ToolPlan {
    count: usize,
    /// Characters of description per tool, roughly.
    description: usize,
    /// Chances per tool of `cache_control` and `defer_loading`.
    cache_control: f64,
    defer_loading: f64,
    /// Chance of a tool search tool among the tools.
    search: f64,
}

/// `ToolPlan::description` of a list so long that its tools get no schema.
const TINY: usize = usize::MAX;

fn tool_plan(rng: &mut Rng) -> ToolPlan {
    let count = match rng.below(1000) {
        0..=39 => 0,
        40..=79 => 1,
        80..=429 => rng.range(2, 10),
        430..=949 => rng.range(10, 60),
        950..=998 => rng.range(60, 300),
        // Past the provider's limit on deferred tools.
        _ => rng.range(11_500, 11_600),
    };
    let description = if count > 1000 {
        TINY
    } else {
        *rng.one(&[0, 40, 120, 400, 1500])
    };
    ToolPlan {
        count,
        description,
        cache_control: *rng.one(&[0.0, 0.0, 0.05, 0.3]),
        defer_loading: if rng.chance(0.06) { 0.1 } else { 0.0 },
        search: if rng.chance(0.04) { 1.0 } else { 0.0 },
    }
}

fn tool_name(rng: &mut Rng, i: usize) -> String {
    if rng.chance(0.03) {
        // A name another tool has too.
        return (*rng.one(TOOL_NAMES)).to_owned();
    }
    format!("{}_{i}", rng.one(TOOL_NAMES))
}

fn description(rng: &mut Rng, plan: ToolPlan) -> J {
    if plan.description == 0 || plan.description == TINY {
        return string(rng, 3);
    }
    if odd(rng) {
        return J::Raw((*rng.one(EDGE_STRINGS)).to_owned());
    }
    let chars = rng.range(plan.description / 2, plan.description * 2 + 1);
    J::Str(long_text(rng, chars))
}

/// Common to every wire's custom tools: `cache_control`, `defer_loading`, extra members,
/// member order and duplicates.
fn finish_tool(rng: &mut Rng, mut members: Vec<(String, J)>, plan: ToolPlan) -> J {
    if rng.chance(plan.cache_control) {
        members.push(("cache_control".to_owned(), cache_control(rng)));
    }
    if rng.chance(plan.defer_loading) {
        let v = rng.one(&[J::Bool(true), J::Bool(false), J::Null]).clone();
        members.push(("defer_loading".to_owned(), v));
    }
    if rng.chance(0.05) {
        let key = if odd(rng) {
            key(rng)
        } else {
            (*rng.one(&["examples", "annotations", "x-note", "input_examples"])).to_owned()
        };
        members.push((key, value(rng, 2)));
    }
    if rng.chance(0.3) {
        shuffle(rng, &mut members);
    }
    let mut tool = J::Obj(members);
    let p = ODDITY.get();
    maybe_duplicate(rng, &mut tool, p);
    tool
}

fn junk_tool(rng: &mut Rng) -> J {
    match rng.below(4) {
        0 => J::Null,
        1 => J::s("tool"),
        2 => J::n(3),
        _ => J::Arr(vec![J::obj(vec![("name", J::s("x"))])]),
    }
}

fn anthropic_tool(rng: &mut Rng, i: usize, plan: ToolPlan) -> (Option<String>, J) {
    if odd(rng) {
        return (None, junk_tool(rng));
    }
    let r = rng.unit();
    if r < 0.03 * plan.search {
        let (kind, name) = *rng.one(&[
            ("tool_search_tool_regex_20251119", "tool_search_tool_regex"),
            ("tool_search_tool_bm25_20251119", "tool_search_tool_bm25"),
            ("tool_search_tool_future", "tool_search"),
        ]);
        return (
            None,
            J::obj(vec![("type", J::s(kind)), ("name", J::s(name))]),
        );
    }
    if r < 0.12 {
        let kind = *rng.one(&[
            "web_search_20250305",
            "bash_20250124",
            "text_editor_20250728",
            "code_execution_20250825",
            "web_fetch_20250910",
        ]);
        let mut members = vec![
            ("type".to_owned(), J::s(kind)),
            (
                "name".to_owned(),
                J::s(kind.split('_').next().unwrap_or(kind)),
            ),
        ];
        if rng.chance(0.3) {
            members.push(("max_uses".to_owned(), number(rng)));
        }
        return (None, finish_tool(rng, members, plan));
    }
    let name = tool_name(rng, i);
    let mut members = Vec::new();
    if rng.chance(0.15) {
        members.push(("type".to_owned(), J::s("custom")));
    }
    match rng.below(100) {
        0 | 1 => {}
        _ if odd(rng) => members.push(("name".to_owned(), J::n(7))),
        _ => members.push(("name".to_owned(), J::s(name.clone()))),
    }
    if rng.chance(0.9) {
        members.push(("description".to_owned(), description(rng, plan)));
    }
    if plan.description != TINY && rng.chance(0.95) {
        members.push(("input_schema".to_owned(), schema(rng, 0)));
    }
    if rng.chance(0.05) {
        members.push(("strict".to_owned(), J::Bool(true)));
    }
    (Some(name), finish_tool(rng, members, plan))
}

fn responses_tool(rng: &mut Rng, i: usize, plan: ToolPlan) -> (Option<String>, J) {
    if odd(rng) {
        return (None, junk_tool(rng));
    }
    let r = rng.unit();
    if r < 0.03 * plan.search {
        return (None, J::obj(vec![("type", J::s("tool_search"))]));
    }
    if r < 0.12 {
        let tool = match rng.below(5) {
            0 => J::obj(vec![("type", J::s("web_search"))]),
            1 => J::obj(vec![
                ("type", J::s("file_search")),
                ("vector_store_ids", J::Arr(vec![J::s("vs_1")])),
            ]),
            2 => J::obj(vec![
                ("type", J::s("mcp")),
                ("server_label", J::s("jira")),
                ("server_url", J::s("https://mcp.example.com/sse")),
            ]),
            3 => J::obj(vec![("type", J::s("local_shell"))]),
            _ => J::obj(vec![
                ("type", J::s("custom")),
                ("name", J::s(tool_name(rng, i))),
                ("description", string(rng, 8)),
                (
                    "format",
                    J::obj(vec![
                        ("type", J::s("grammar")),
                        ("syntax", J::s("lark")),
                        ("definition", J::s("start: /.+/\n")),
                    ]),
                ),
            ]),
        };
        return (None, tool);
    }
    let name = tool_name(rng, i);
    let mut members = Vec::new();
    if rng.chance(0.97) {
        members.push(("type".to_owned(), J::s("function")));
    }
    match rng.below(100) {
        0 | 1 => {}
        _ if odd(rng) => members.push(("name".to_owned(), J::Null)),
        _ => members.push(("name".to_owned(), J::s(name.clone()))),
    }
    if rng.chance(0.9) {
        members.push(("description".to_owned(), description(rng, plan)));
    }
    if plan.description != TINY && rng.chance(0.95) {
        members.push(("parameters".to_owned(), schema(rng, 0)));
    }
    if rng.chance(0.5) {
        members.push(("strict".to_owned(), J::Bool(rng.chance(0.5))));
    }
    (Some(name), finish_tool(rng, members, plan))
}

fn chat_tool(rng: &mut Rng, i: usize, plan: ToolPlan) -> (Option<String>, J) {
    let name = tool_name(rng, i);
    let function = J::obj(vec![
        ("name", J::s(name.clone())),
        ("description", description(rng, plan)),
        ("parameters", schema(rng, 0)),
    ]);
    let members = vec![
        ("type".to_owned(), J::s("function")),
        ("function".to_owned(), function),
    ];
    (Some(name), finish_tool(rng, members, plan))
}

/// The tool list and the names of its named tools (for the history to call).
fn tools(rng: &mut Rng, wire: Wire) -> (J, Vec<String>) {
    let plan = tool_plan(rng);
    let mut names = Vec::new();
    let mut list = Vec::with_capacity(plan.count);
    for i in 0..plan.count {
        let (name, tool) = match wire {
            Wire::AnthropicMessages => anthropic_tool(rng, i, plan),
            Wire::Responses => responses_tool(rng, i, plan),
            Wire::ChatCompletions => chat_tool(rng, i, plan),
        };
        names.extend(name);
        list.push(tool);
    }
    let tools = match plan.count {
        0 if rng.chance(0.3) => J::Null,
        _ if rng.chance(0.005) => J::obj(vec![("0", J::obj(vec![("name", J::s("x"))]))]),
        _ => J::Arr(list),
    };
    (tools, names)
}

fn called_name(rng: &mut Rng, names: &[String]) -> String {
    if names.is_empty() || rng.chance(0.1) {
        (*rng.one(TOOL_NAMES)).to_owned()
    } else {
        rng.one(names).clone()
    }
}

/// The user's first words: a task, a quoted task, or something a client injected.
fn prompt(rng: &mut Rng) -> J {
    match rng.below(20) {
        0 => J::s(format!("\"{}\"", text(rng, 8))),
        1 => J::s("<system-reminder>\ncontext\n</system-reminder>\n"),
        2 => J::s("# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>be brief</INSTRUCTIONS>"),
        3 => J::s("<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>"),
        4 => J::s(format!("<system-reminder>unclosed {}", text(rng, 4))),
        5 => J::s(""),
        6 => string(rng, 12),
        _ => J::s(text(rng, 12)),
    }
}

fn anthropic_text_block(rng: &mut Rng, text: J) -> J {
    let mut block = J::obj(vec![("type", J::s("text")), ("text", text)]);
    if rng.chance(0.1) {
        block.set("cache_control", cache_control(rng));
    }
    block
}

fn anthropic_messages(rng: &mut Rng, names: &[String]) -> J {
    match rng.below(200) {
        0 => return J::s("not a list"),
        1 => return J::obj(vec![]),
        2..=5 => return J::Arr(vec![]),
        _ => {}
    }
    let mut messages = Vec::new();
    let first = if rng.chance(0.4) {
        prompt(rng)
    } else {
        let mut blocks = Vec::new();
        for _ in 0..rng.below(3) {
            blocks.push(anthropic_text_block(
                rng,
                J::s("<system-reminder>\nThe date is today.\n</system-reminder>"),
            ));
        }
        let p = prompt(rng);
        blocks.push(anthropic_text_block(rng, p));
        if rng.chance(0.05) {
            blocks.push(J::obj(vec![
                ("type", J::s("image")),
                (
                    "source",
                    J::obj(vec![
                        ("type", J::s("base64")),
                        ("media_type", J::s("image/png")),
                        ("data", J::s("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")),
                    ]),
                ),
            ]));
        }
        J::Arr(blocks)
    };
    messages.push(J::obj(vec![("role", J::s("user")), ("content", first)]));
    let turns = if rng.chance(0.4) { 0 } else { rng.range(1, 8) };
    for t in 0..turns {
        let mut assistant = Vec::new();
        if rng.chance(0.2) {
            assistant.push(J::obj(vec![
                ("type", J::s("thinking")),
                ("thinking", string(rng, 10)),
                ("signature", J::s("EqQBCkYIBxgCKkB")),
            ]));
        }
        if rng.chance(0.5) {
            assistant.push(J::obj(vec![
                ("type", J::s("text")),
                ("text", string(rng, 10)),
            ]));
        }
        let mut results = Vec::new();
        if rng.chance(0.1) {
            // A server-side search that surfaced a tool, then a call of it.
            let found = called_name(rng, names);
            assistant.push(J::obj(vec![
                ("type", J::s("server_tool_use")),
                ("id", J::s(format!("srvtoolu_{t}"))),
                ("name", J::s("tool_search_tool_regex")),
                ("input", J::obj(vec![("pattern", J::s(".*"))])),
            ]));
            let references = J::Arr(vec![J::obj(vec![
                ("type", J::s("tool_reference")),
                ("tool_name", J::s(found)),
            ])]);
            let content = if rng.chance(0.1) {
                J::obj(vec![("type", J::s("tool_search_tool_result_error"))])
            } else {
                J::obj(vec![
                    ("type", J::s("tool_search_tool_search_result")),
                    ("tool_references", references),
                ])
            };
            assistant.push(J::obj(vec![
                ("type", J::s("tool_search_tool_result")),
                ("tool_use_id", J::s(format!("srvtoolu_{t}"))),
                ("content", content),
            ]));
        }
        for c in 0..rng.below(3) {
            let id = format!("toolu_{t}_{c}");
            assistant.push(J::obj(vec![
                ("type", J::s("tool_use")),
                ("id", J::s(id.clone())),
                ("name", J::s(called_name(rng, names))),
                ("input", value(rng, 4)),
            ]));
            let content = match rng.below(5) {
                0 => J::Arr(vec![J::obj(vec![
                    ("type", J::s("text")),
                    ("text", string(rng, 8)),
                ])]),
                1 => J::Arr(vec![J::obj(vec![
                    ("type", J::s("tool_reference")),
                    ("tool_name", J::s(called_name(rng, names))),
                ])]),
                2 => J::Null,
                _ => string(rng, 12),
            };
            let mut result = J::obj(vec![
                ("type", J::s("tool_result")),
                ("tool_use_id", J::s(id)),
                ("content", content),
            ]);
            if rng.chance(0.1) {
                result.set("is_error", J::Bool(true));
            }
            results.push(result);
        }
        messages.push(J::obj(vec![
            ("role", J::s("assistant")),
            ("content", J::Arr(assistant)),
        ]));
        if rng.chance(0.3) {
            let more = J::Str(text(rng, 8));
            results.push(anthropic_text_block(rng, more));
        }
        let user = if results.is_empty() {
            prompt(rng)
        } else {
            J::Arr(results)
        };
        messages.push(J::obj(vec![("role", J::s("user")), ("content", user)]));
    }
    for message in &mut messages {
        if !odd(rng) {
            continue;
        }
        match rng.below(4) {
            0 => message.remove("role"),
            1 => message.set("content", J::Null),
            2 => message.set("content", J::n(5)),
            3 => message.set("role", J::s("system")),
            _ => {}
        }
    }
    J::Arr(messages)
}

fn anthropic_tool_choice(rng: &mut Rng, names: &[String]) -> Option<J> {
    if odd(rng) {
        // Not an object: the stage cannot tell what it forces.
        return Some(if rng.chance(0.5) {
            J::s("auto")
        } else {
            J::n(7)
        });
    }
    Some(match rng.below(24) {
        0..=11 => return None,
        12..=14 => J::obj(vec![("type", J::s("auto"))]),
        15 => J::obj(vec![("type", J::s("none"))]),
        16 => J::obj(vec![("type", J::s("any"))]),
        17 => J::obj(vec![
            ("type", J::s("tool")),
            ("name", J::s(called_name(rng, names))),
        ]),
        18 | 19 => J::obj(vec![
            ("type", J::s("auto")),
            ("disable_parallel_tool_use", J::Bool(true)),
        ]),
        20 | 21 => J::Null,
        22 => J::obj(vec![]),
        _ => J::obj(vec![("type", rng.one(&[J::s("AUTO"), J::Null]).clone())]),
    })
}

fn responses_tool_choice(rng: &mut Rng, names: &[String]) -> Option<J> {
    Some(match rng.below(22) {
        0..=9 => return None,
        10..=12 => J::s("auto"),
        13 => J::s("none"),
        14 => J::s("required"),
        15 => J::obj(vec![
            ("type", J::s("function")),
            ("name", J::s(called_name(rng, names))),
        ]),
        16 => J::obj(vec![
            ("type", J::s("allowed_tools")),
            ("mode", J::s("auto")),
            (
                "tools",
                J::Arr(vec![J::obj(vec![
                    ("type", J::s("function")),
                    ("name", J::s(called_name(rng, names))),
                ])]),
            ),
        ]),
        17 | 18 => J::Null,
        19 => J::s("Auto"),
        20 => J::Raw(r#""\u0061uto""#.to_owned()),
        21 if odd(rng) => J::Bool(true),
        _ => J::obj(vec![("type", J::s("auto"))]),
    })
}

fn input_text(kind: &str, text: J) -> J {
    J::obj(vec![("type", J::s(kind)), ("text", text)])
}

fn responses_message(rng: &mut Rng, role: &str, text: J) -> J {
    let kind = if role == "assistant" {
        "output_text"
    } else {
        "input_text"
    };
    let content = if rng.chance(0.3) {
        text
    } else {
        J::Arr(vec![input_text(kind, text)])
    };
    let mut message = J::obj(vec![("role", J::s(role)), ("content", content)]);
    if rng.chance(0.8)
        && let Some(members) = message.members_mut()
    {
        members.insert(0, ("type".to_owned(), J::s("message")));
    }
    message
}

fn responses_input(rng: &mut Rng, names: &[String]) -> J {
    match rng.below(100) {
        0..=14 => return prompt(rng),
        15 => return J::obj(vec![]),
        16 => return J::Arr(vec![]),
        _ => {}
    }
    let mut items = Vec::new();
    if rng.chance(0.5) {
        let developer = string(rng, 12);
        items.push(responses_message(rng, "developer", developer));
    }
    if rng.chance(0.4) {
        let agents = J::s("# AGENTS.md instructions for /repo\n\nbe brief");
        items.push(responses_message(rng, "user", agents));
    }
    let p = prompt(rng);
    items.push(responses_message(rng, "user", p));
    let turns = if rng.chance(0.4) { 0 } else { rng.range(1, 8) };
    for t in 0..turns {
        if rng.chance(0.3) {
            items.push(J::obj(vec![
                ("type", J::s("reasoning")),
                (
                    "summary",
                    J::Arr(vec![input_text("summary_text", string(rng, 8))]),
                ),
                ("encrypted_content", J::s("gAAAAABo==")),
            ]));
        }
        if rng.chance(0.1) {
            let found = called_name(rng, names);
            items.push(J::obj(vec![
                ("type", J::s("tool_search_call")),
                ("call_id", J::s(format!("ts_{t}"))),
                ("arguments", J::obj(vec![("query", J::s("jira"))])),
            ]));
            items.push(J::obj(vec![
                ("type", J::s("tool_search_output")),
                ("call_id", J::s(format!("ts_{t}"))),
                (
                    "tools",
                    J::Arr(vec![J::obj(vec![
                        ("type", J::s("function")),
                        ("name", J::s(found)),
                    ])]),
                ),
            ]));
        }
        for c in 0..rng.below(3) {
            let call_id = format!("call_{t}_{c}");
            let arguments = value(rng, 3);
            items.push(J::obj(vec![
                ("type", J::s("function_call")),
                ("call_id", J::s(call_id.clone())),
                ("name", J::s(called_name(rng, names))),
                ("arguments", J::Str(crate::json::compact(&arguments, rng))),
            ]));
            items.push(J::obj(vec![
                ("type", J::s("function_call_output")),
                ("call_id", J::s(call_id)),
                ("output", string(rng, 12)),
            ]));
        }
        if rng.chance(0.4) {
            let reply = string(rng, 10);
            items.push(responses_message(rng, "assistant", reply));
        }
        if rng.chance(0.3) {
            let more = J::Str(text(rng, 8));
            items.push(responses_message(rng, "user", more));
        }
    }
    for item in &mut items {
        if !odd(rng) {
            continue;
        }
        match rng.below(4) {
            0 => *item = J::n(1),
            1 => item.set("content", J::Null),
            2 => item.set("content", J::n(5)),
            3 => item.remove("type"),
            _ => {}
        }
    }
    J::Arr(items)
}

fn chat_messages(rng: &mut Rng, names: &[String]) -> J {
    let mut messages = vec![J::obj(vec![
        ("role", J::s("system")),
        ("content", string(rng, 12)),
    ])];
    messages.push(J::obj(vec![
        ("role", J::s("user")),
        ("content", prompt(rng)),
    ]));
    for t in 0..rng.below(6) {
        let calls: Vec<J> = (0..rng.below(3))
            .map(|c| {
                let arguments = value(rng, 3);
                J::obj(vec![
                    ("id", J::s(format!("call_{t}_{c}"))),
                    ("type", J::s("function")),
                    (
                        "function",
                        J::obj(vec![
                            ("name", J::s(called_name(rng, names))),
                            ("arguments", J::Str(crate::json::compact(&arguments, rng))),
                        ]),
                    ),
                ])
            })
            .collect();
        let ids: Vec<String> = (0..calls.len()).map(|c| format!("call_{t}_{c}")).collect();
        messages.push(J::obj(vec![
            ("role", J::s("assistant")),
            ("content", J::Null),
            ("tool_calls", J::Arr(calls)),
        ]));
        for id in ids {
            messages.push(J::obj(vec![
                ("role", J::s("tool")),
                ("tool_call_id", J::s(id)),
                ("content", string(rng, 8)),
            ]));
        }
    }
    J::Arr(messages)
}

/// A body of `wire` built from scratch.
pub fn body(rng: &mut Rng, wire: Wire) -> J {
    draw_oddity(rng);
    let (tools, names) = tools(rng, wire);
    let mut members: Vec<(String, J)> = vec![("model".to_owned(), J::s(*rng.one(MODELS)))];
    let (history_key, history, choice) = match wire {
        Wire::AnthropicMessages => {
            members.push(("max_tokens".to_owned(), number(rng)));
            if rng.chance(0.5) {
                let system = if rng.chance(0.5) {
                    string(rng, 20)
                } else {
                    let system = J::Str(text(rng, 20));
                    J::Arr(vec![anthropic_text_block(rng, system)])
                };
                members.push(("system".to_owned(), system));
            }
            if rng.chance(0.2) {
                members.push((
                    "thinking".to_owned(),
                    J::obj(vec![
                        ("type", J::s("enabled")),
                        ("budget_tokens", number(rng)),
                    ]),
                ));
            }
            (
                "messages",
                anthropic_messages(rng, &names),
                anthropic_tool_choice(rng, &names),
            )
        }
        Wire::Responses => {
            if rng.chance(0.6) {
                members.push(("instructions".to_owned(), string(rng, 20)));
            }
            for (k, v) in [
                ("parallel_tool_calls", J::Bool(rng.chance(0.5))),
                ("store", J::Bool(false)),
                (
                    "reasoning",
                    J::obj(vec![("effort", J::s("medium")), ("summary", J::s("auto"))]),
                ),
                ("include", J::Arr(vec![J::s("reasoning.encrypted_content")])),
                ("prompt_cache_key", J::s("0199-abcd")),
            ] {
                if rng.chance(0.5) {
                    members.push((k.to_owned(), v));
                }
            }
            (
                "input",
                responses_input(rng, &names),
                responses_tool_choice(rng, &names),
            )
        }
        Wire::ChatCompletions => {
            members.push(("max_tokens".to_owned(), number(rng)));
            let choice = match rng.below(4) {
                0 => None,
                1 => Some(J::s("auto")),
                2 => Some(J::s("required")),
                _ => Some(J::obj(vec![
                    ("type", J::s("function")),
                    (
                        "function",
                        J::obj(vec![("name", J::s(called_name(rng, &names)))]),
                    ),
                ])),
            };
            ("messages", chat_messages(rng, &names), choice)
        }
    };
    if rng.chance(0.5) {
        members.push(("temperature".to_owned(), number(rng)));
    }
    members.push(("stream".to_owned(), J::Bool(rng.chance(0.8))));
    if rng.chance(0.1) {
        members.push(("metadata".to_owned(), value(rng, 5)));
    }
    // Where clients put `tools`: after the history (most), before it, or anywhere.
    let history = (history_key.to_owned(), history);
    let tools_absent = matches!(tools, J::Null) && rng.chance(0.5);
    let tools = ("tools".to_owned(), tools);
    match rng.below(4) {
        0 => {
            members.push(history);
            if !tools_absent {
                members.push(tools);
            }
        }
        1 => {
            if !tools_absent {
                members.push(tools);
            }
            members.push(history);
        }
        2 => {
            members.push(history);
            if !tools_absent {
                members.push(tools);
            }
            shuffle(rng, &mut members);
        }
        _ => {
            members.insert(1, history);
            if !tools_absent {
                members.push(tools);
            }
        }
    }
    if let Some(choice) = choice {
        let at = rng.below(members.len() + 1);
        members.insert(at, ("tool_choice".to_owned(), choice));
    }
    let mut body = J::Obj(members);
    maybe_duplicate(rng, &mut body, 0.03);
    body
}

/// A capture's body changed the way a client could have sent it: deferral removed (so the
/// clients that already defer go through the full plan), breakpoints added or removed,
/// another `tool_choice`, tools dropped, repeated or reordered, the history cut, text
/// changed.
pub fn change_capture(rng: &mut Rng, mut body: J, wire: Wire) -> J {
    draw_oddity(rng);
    if rng.chance(0.75)
        && let Some(J::Arr(tools)) = body.get_mut("tools")
    {
        tools.retain(|t| {
            let kind = t.get("type").and_then(J::as_str).unwrap_or("");
            !kind.starts_with("tool_search")
        });
        for tool in tools.iter_mut() {
            tool.remove("defer_loading");
        }
    }
    if let Some(J::Arr(tools)) = body.get_mut("tools") {
        if rng.chance(0.3) && !tools.is_empty() {
            for _ in 0..rng.range(1, 4) {
                let at = rng.below(tools.len());
                tools[at].set("cache_control", cache_control(rng));
            }
        }
        if rng.chance(0.1) {
            for tool in tools.iter_mut() {
                tool.remove("cache_control");
            }
        }
        if rng.chance(0.15) && tools.len() > 1 {
            let keep = rng.range(1, tools.len());
            tools.truncate(keep);
        }
        if rng.chance(0.1) && !tools.is_empty() {
            let at = rng.below(tools.len());
            let copy = tools[at].clone();
            tools.push(copy);
        }
        if rng.chance(0.15) {
            shuffle(rng, tools);
        }
        if rng.chance(0.1) && !tools.is_empty() {
            let at = rng.below(tools.len());
            if let Some(J::Str(d)) = tools[at].get_mut("description") {
                d.push_str(&text(rng, 6));
            }
        }
    }
    if rng.chance(0.3) {
        let names: Vec<String> = match body.get("tools") {
            Some(J::Arr(tools)) => tools
                .iter()
                .filter_map(|t| t.get("name").and_then(J::as_str).map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        let choice = match wire {
            Wire::AnthropicMessages => anthropic_tool_choice(rng, &names),
            _ => responses_tool_choice(rng, &names),
        };
        match choice {
            Some(choice) => body.set("tool_choice", choice),
            None => body.remove("tool_choice"),
        }
    }
    let history = if wire == Wire::Responses {
        "input"
    } else {
        "messages"
    };
    if rng.chance(0.3)
        && let Some(J::Arr(items)) = body.get_mut(history)
        && !items.is_empty()
    {
        let keep = rng.range(1, items.len() + 1);
        items.truncate(keep);
    }
    if rng.chance(0.1) {
        let v = value(rng, 4);
        body.set(&key(rng), v);
    }
    if rng.chance(0.2)
        && let Some(members) = body.members_mut()
    {
        shuffle(rng, members);
    }
    maybe_duplicate(rng, &mut body, 0.02);
    body
}
