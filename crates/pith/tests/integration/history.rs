//! Conversation history end to end: imports of real session files (Claude Code's transcript
//! from the captures, Codex's recorded from the real CLI), the same sessions recorded by the
//! proxy as the real clients talk through it, the `pith-agent-type` header, the switch that
//! turns recording off, and the CLI's candidates, delete and purge.

use pith_testkit::wait::wait_for;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use pith_testkit::fixtures::{self, anthropic, responses};
use pith_testkit::{MockUpstream, Reply};
use serde_json::Value;

use crate::clients::{self, LIMIT, project};
use crate::support::{self, PithProxy, pith_bin};

/// `pith ARGS` with `home` as PITH_HOME and no config from the environment.
pub(crate) fn pith(home: &Path, args: &[&str]) -> Output {
    Command::new(pith_bin())
        .args(args)
        .env("PITH_HOME", home)
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_HISTORY")
        .env_remove("PITH_HISTORY_PATH")
        .env_remove("PITH_HISTORY_TOKEN_KEY")
        .output()
        .unwrap()
}

/// `pith ARGS --json`, which must succeed, parsed.
pub(crate) fn pith_json(home: &Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = pith(home, &all);
    assert!(
        out.status.success(),
        "pith {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn captures_dir() -> PathBuf {
    fixtures::fixtures_dir().unwrap().join("captures")
}

fn transcript() -> PathBuf {
    captures_dir().join("claude-code-2.1.328/fix-calc/transcript.jsonl")
}

/// The Codex session file recorded from the real CLI against the mock (see its README).
fn codex_session() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../pith-testkit/fixtures/sessions/codex-0.169.0/sessions/2026/12/01/rollout-2026-12-01T14-05-29-01a231ec-c287-7b80-92d7-91a4c892139c.jsonl")
}

pub(crate) fn import(home: &Path, claude_dir: &Path, codex_home: &Path) -> Value {
    pith_json(
        home,
        &[
            "history",
            "import",
            "--claude-dir",
            claude_dir.to_str().unwrap(),
            "--codex-home",
            codex_home.to_str().unwrap(),
        ],
    )
}

/// The conversation `pith history import` made of `session`, named in the panic when none.
pub(crate) fn imported_conversation(home: &Path, session: &str) -> Value {
    conversation(home, "import", session)
        .unwrap_or_else(|| panic!("no import of {session}: {:?}", conversations(home, false)))
}

pub(crate) fn conversations(home: &Path, trashed: bool) -> Vec<Value> {
    let listed = if trashed {
        pith_json(home, &["history", "trash", "list"])
    } else {
        pith_json(home, &["history", "list"])
    };
    listed["conversations"].as_array().unwrap().clone()
}

/// The conversation of `source` for `session`, if there is one.
pub(crate) fn conversation(home: &Path, source: &str, session: &str) -> Option<Value> {
    conversations(home, false)
        .into_iter()
        .find(|c| c["source"] == source && c["sessionId"] == session)
}

/// Each message's role, and `+` when a person typed it.
/// Each message of conversation `id`: its role, whether a person typed it, and its text as
/// previewed (tool calls and results included): what "message for message" compares.
pub(crate) fn said(home: &Path, id: &str) -> Vec<(Value, Value, Value)> {
    let shown = pith_json(home, &["history", "show", id]);
    shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].clone(),
                m["realUser"].clone(),
                m["preview"].clone(),
            )
        })
        .collect()
}

pub(crate) fn shape(home: &Path, id: &str) -> Vec<String> {
    let shown = pith_json(home, &["history", "show", id]);
    shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let role = m["role"].as_str().unwrap();
            if m["realUser"] == true {
                format!("{role}+")
            } else {
                role.to_owned()
            }
        })
        .collect()
}

/// Wait for the proxy's conversation of `session` to hold `n` messages: each round waits on
/// the proxy's flush barrier (history turns are written with their ledger rows), then reads.
pub(crate) fn wait_recorded(pith: &PithProxy, session: &str, n: u64) -> Value {
    let home = pith.home.path();
    wait_for(
        &format!("the proxy recorded {n} messages of {session}"),
        Duration::from_secs(20),
        || {
            pith.flush();
            if home.join("history.db").exists()
                && let Some(c) = conversation(home, "proxy", session)
                && c["messages"].as_u64() >= Some(n)
            {
                return Ok(c);
            }
            Err(format!("{:?}", conversations(home, false)))
        },
    )
}

/// A Claude Code projects dir holding the real transcript, an empty session file and one
/// holding a single assistant message.
pub fn claude_projects_with_junk() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("projects/-home-dev-calc");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::copy(transcript(), project.join("cf203161.jsonl")).unwrap();
    std::fs::write(project.join("0a1b-empty.jsonl"), "").unwrap();
    let lone = serde_json::json!({
        "type": "assistant", "sessionId": "lone-assistant", "uuid": "u1",
        "timestamp": "2026-11-30T03:00:00.000Z",
        "message": {"id": "msg_x", "role": "assistant", "type": "message",
                    "content": [{"type": "text", "text": "API Error: 500"}]},
    });
    std::fs::write(project.join("lone.jsonl"), format!("{lone}\n")).unwrap();
    dir
}

#[test]
fn the_real_claude_code_transcript_imports_to_its_messages_and_reimporting_adds_nothing() {
    let home = tempfile::tempdir().unwrap();
    let claude = claude_projects_with_junk();
    let nowhere = home.path().join("no-codex");
    let first = import(home.path(), claude.path(), &nowhere);
    assert_eq!(first["files"], 3);
    assert_eq!(first["conversationsCreated"], 3);
    assert_eq!(first["messagesAdded"], 13);

    let session = "cf203161-95d5-4e5b-b9c2-9c92eed69b04";
    let calc = conversation(home.path(), "import", session).unwrap();
    assert_eq!(calc["client"], "claude-code");
    assert_eq!(calc["messages"], 12);
    assert_eq!(calc["realUserMessages"], 1);
    assert_eq!(calc["assistantMessages"], 6);
    assert_eq!(calc["firstUserPreview"], "the test fails, fix calc.py");
    // The prompt, then each API message (its blocks were separate entries) and tool result.
    let mut expected = vec!["user+".to_owned()];
    for _ in 0..5 {
        expected.push("assistant".into());
        expected.push("user".into());
    }
    expected.push("assistant".into());
    assert_eq!(shape(home.path(), calc["id"].as_str().unwrap()), expected);
    let empty = conversation(home.path(), "import", "0a1b-empty").unwrap();
    assert_eq!(
        empty["messages"], 0,
        "a file with no messages is a conversation"
    );

    let again = import(home.path(), claude.path(), &nowhere);
    assert_eq!(again["conversationsCreated"], 0);
    assert_eq!(again["messagesAdded"], 0);
    assert_eq!(conversations(home.path(), false).len(), 3);

    let hits = pith_json(home.path(), &["history", "search", "subtracted", "adding"]);
    assert_eq!(hits["hits"][0]["id"], calc["id"]);
    assert!(
        hits["hits"][0]["snippet"]
            .as_str()
            .unwrap()
            .contains("subtracted"),
        "{hits}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(home.path().join("history.db"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[test]
fn a_real_codex_session_file_imports_to_its_messages() {
    let home = tempfile::tempdir().unwrap();
    let codex_home = tempfile::tempdir().unwrap();
    let into = codex_home.path().join("sessions/2026/12/01");
    std::fs::create_dir_all(&into).unwrap();
    std::fs::copy(codex_session(), into.join("rollout-say-hi.jsonl")).unwrap();
    let nowhere = home.path().join("no-claude");
    let first = import(home.path(), &nowhere, codex_home.path());
    assert_eq!(first["codexFiles"], 1);
    let listed = conversations(home.path(), false);
    assert_eq!(listed.len(), 1);
    let c = &listed[0];
    assert_eq!(c["client"], "codex");
    assert_eq!(c["realUserMessages"], 2, "{c}");
    assert_eq!(c["firstUserPreview"], "say hi");
    assert_eq!(
        shape(home.path(), c["id"].as_str().unwrap()),
        ["user", "user+", "assistant", "user+", "assistant"],
        "the environment context is not typed; two turns of prompt and answer"
    );
    let again = import(home.path(), &nowhere, codex_home.path());
    assert_eq!(again["messagesAdded"], 0);
}

#[test]
fn claude_code_through_the_proxy_is_recorded_with_the_shape_its_session_file_imports_to() {
    let mock = MockUpstream::start().unwrap();
    mock.set_default(Reply::sse(anthropic::stream(
        &["Hi", " there."],
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start(&mock.url(), &[]);
    let (work, home) = project();
    for (args, prompt) in [(&[][..], "say hi"), (&["--continue"][..], "and again")] {
        let run = clients::claude_code(work.path(), home.path(), &pith.url(), args, prompt, LIMIT);
        run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    }
    let received = mock.received();
    assert_eq!(received.len(), 2);
    let session = received[1]
        .header("x-claude-code-session-id")
        .unwrap()
        .to_owned();
    let recorded = wait_recorded(&pith, &session, 4);

    let nowhere = home.path().join("no-codex");
    import(pith.home.path(), &home.path().join(".claude"), &nowhere);
    let imported = imported_conversation(pith.home.path(), &session);
    let proxy_shape = shape(pith.home.path(), recorded["id"].as_str().unwrap());
    assert_eq!(proxy_shape, ["user+", "assistant", "user+", "assistant"]);
    assert_eq!(
        proxy_shape,
        shape(pith.home.path(), imported["id"].as_str().unwrap())
    );
    assert_eq!(recorded["realUserMessages"], imported["realUserMessages"]);
    assert_eq!(recorded["firstUserPreview"], "say hi");
    assert_eq!(
        said(pith.home.path(), recorded["id"].as_str().unwrap()),
        said(pith.home.path(), imported["id"].as_str().unwrap()),
        "message for message"
    );
}

#[test]
fn codex_through_the_proxy_is_recorded_with_the_shape_its_session_file_imports_to() {
    let mock = MockUpstream::start().unwrap();
    // The first turn runs a command (Codex runs it and sends its output); the others answer.
    let call = fixtures::ToolCall::new("call_01Cat", "exec_command", r#"{"cmd":"cat README.md"}"#);
    mock.push_when(
        |body| !clients::has(body, "function_call_output"),
        Reply::sse(responses::stream_with_tool(
            &["Let me look."],
            &call,
            fixtures::DEFAULT_USAGE,
        )),
    );
    mock.set_default(Reply::sse(responses::stream(
        &["Hi", " there."],
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start(&mock.url(), &[]);
    let (work, home) = project();
    let base = format!("{}/v1", pith.url());
    for (args, prompt) in [
        (&[][..], "say hi"),
        (&["resume", "--last"][..], "and again"),
    ] {
        let run = clients::codex(work.path(), home.path(), &base, args, prompt, LIMIT);
        run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    }
    let received = mock.received();
    assert_eq!(
        received.len(),
        3,
        "the command's turn, its output's, the resumed one"
    );
    let session = received[2].header("session-id").unwrap().to_owned();
    let recorded = wait_recorded(&pith, &session, 7);

    let codex_home = home.path().join(".codex");
    if let Some(keep) = std::env::var_os("PITH_KEEP_CODEX_SESSION") {
        // How the fixture was made: the session file this run wrote, kept.
        copy_tree(
            &codex_home.join("sessions"),
            &PathBuf::from(keep).join("sessions"),
        );
    }
    import(
        pith.home.path(),
        &home.path().join("no-claude"),
        &codex_home,
    );
    let imported = imported_conversation(pith.home.path(), &session);
    let proxy_shape = shape(pith.home.path(), recorded["id"].as_str().unwrap());
    assert_eq!(
        proxy_shape,
        [
            "user",
            "user+",
            "assistant",
            "tool",
            "assistant",
            "user+",
            "assistant"
        ]
    );
    assert_eq!(
        proxy_shape,
        shape(pith.home.path(), imported["id"].as_str().unwrap())
    );
    assert_eq!(recorded["realUserMessages"], 2);
    assert_eq!(
        said(pith.home.path(), recorded["id"].as_str().unwrap()),
        said(pith.home.path(), imported["id"].as_str().unwrap()),
        "message for message"
    );
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A mock that answers every request with a short Anthropic stream.
fn streaming_mock() -> MockUpstream {
    let mock = MockUpstream::start().unwrap();
    mock.set_default(Reply::sse(anthropic::stream(
        &["ok"],
        fixtures::DEFAULT_USAGE,
    )));
    mock
}

/// An Anthropic request of one user message, with `extra` headers.
fn send_message(pith: &PithProxy, session: &str, extra: &[(&str, &str)]) {
    let body = serde_json::json!({
        "model": "claude-x", "max_tokens": 16, "stream": true,
        "messages": [{"role": "user", "content": "which agent am I"}],
    });
    let mut headers = vec![
        ("content-type", "application/json"),
        ("x-claude-code-session-id", session),
        ("user-agent", "claude-cli/2.1.328 (external, sdk-cli)"),
    ];
    headers.extend_from_slice(extra);
    let url = format!("{}/v1/messages", pith.url());
    let rt = support::runtime();
    rt.block_on(async {
        let client = support::client();
        let req = support::request("POST", &url, &support::headers(&headers), body.to_string());
        let (status, _, _) = support::read_all(support::send(&client, req).await).await;
        assert_eq!(status, 200);
    });
}

#[test]
fn the_agent_type_header_labels_the_conversation_and_never_reaches_the_provider() {
    let mock = streaming_mock();
    let pith = PithProxy::start(&mock.url(), &[]);
    send_message(&pith, "s-admin", &[("pith-agent-type", "admin")]);
    send_message(&pith, "s-plain", &[]);
    for r in mock.received() {
        assert_eq!(r.header("pith-agent-type"), None, "{:?}", r.headers);
    }
    let admin = wait_recorded(&pith, "s-admin", 2);
    let plain = wait_recorded(&pith, "s-plain", 2);
    assert_eq!(admin["agentType"], "admin");
    assert_eq!(plain["agentType"], "public");
    let found = pith_json(
        pith.home.path(),
        &[
            "history",
            "candidates",
            "--filter",
            "empty",
            "--agent-type",
            "admin",
        ],
    );
    assert_eq!(found["matched"], 0);
}

#[test]
fn the_agent_type_of_a_client_is_set_in_config_and_a_header_overrides_it() {
    let mock = streaming_mock();
    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("config.toml");
    std::fs::write(
        &file,
        "[history]\nagent_types = { claude-code = \"admin\" }\n",
    )
    .unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_CONFIG", file.to_str().unwrap())]);
    send_message(&pith, "s-configured", &[]);
    send_message(&pith, "s-told", &[("pith-agent-type", "public")]);
    let configured = wait_recorded(&pith, "s-configured", 2);
    let told = wait_recorded(&pith, "s-told", 2);
    assert_eq!(configured["agentType"], "admin");
    assert_eq!(told["agentType"], "public");
    let bad =
        support::proxy_start_error(Some("[history]\nagent_types = { codex = \"root\" }\n"), &[]);
    assert!(bad.contains("history.agent_types.codex"), "{bad}");
    assert!(bad.contains("expected one of: public, admin"), "{bad}");
}

#[test]
fn recording_is_off_with_one_config_key() {
    let mock = streaming_mock();
    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("config.toml");
    std::fs::write(&file, "[history]\nrecord = false\n").unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_CONFIG", file.to_str().unwrap())]);
    send_message(&pith, "s-off", &[]);
    pith.wait_rows(1);
    assert!(
        pith.stderr().contains("history   -> off"),
        "{}",
        pith.stderr()
    );
    assert!(!pith.home.path().join("history.db").exists());
}

/// A history file pith cannot open leaves the proxy serving, without recording, and its
/// startup lines say so and why.
#[test]
fn a_history_that_cannot_be_opened_is_named_and_the_proxy_serves_anyway() {
    let mock = streaming_mock();
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("history.db");
    std::fs::write(&broken, "not a database, just some words\n").unwrap();
    let pith = PithProxy::start(
        &mock.url(),
        &[("PITH_HISTORY_PATH", broken.to_str().unwrap())],
    );
    send_message(&pith, "s-broken", &[]);
    assert_eq!(pith.wait_rows(1).len(), 1);
    let stderr = pith.stderr();
    assert!(
        stderr.contains(&format!(
            "history   -> off (cannot open {}",
            broken.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&broken).unwrap(),
        b"not a database, just some words\n"
    );
}

#[test]
fn delete_needs_the_token_and_purge_is_the_only_hard_delete() {
    let home = tempfile::tempdir().unwrap();
    let claude = claude_projects_with_junk();
    import(home.path(), claude.path(), &home.path().join("no-codex"));

    // A token edited by hand is refused and nothing changes.
    let found = pith_json(
        home.path(),
        &["history", "candidates", "--filter", "single-assistant"],
    );
    assert_eq!(found["matched"], 1);
    let token = found["filterToken"].as_str().unwrap();
    let mut forged = token.to_owned();
    forged.insert(5, 'x');
    let out = pith(home.path(), &["history", "delete", "--token", &forged]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing was deleted"), "{err}");
    assert!(conversations(home.path(), true).is_empty());

    let done = pith_json(home.path(), &["history", "delete", "--token", token]);
    assert_eq!(done["trashed"].as_array().unwrap().len(), 1);
    assert_eq!(conversations(home.path(), true).len(), 1);

    // Not old enough: nothing to purge. Without --yes and without a terminal: refused.
    let young = pith_json(
        home.path(),
        &["history", "trash", "purge", "--older-than", "30d", "--yes"],
    );
    assert_eq!(young["conversations"], 0);
    let out = pith(
        home.path(),
        &["history", "trash", "purge", "--older-than", "0s"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--yes"));
    assert_eq!(conversations(home.path(), true).len(), 1);

    let before = pith_json(home.path(), &["history", "search", "API", "Error"]);
    assert!(
        before["hits"].as_array().unwrap().is_empty(),
        "the trash is not searched"
    );
    let purged = pith_json(
        home.path(),
        &["history", "trash", "purge", "--older-than", "0s", "--yes"],
    );
    assert_eq!(purged["conversations"], 1);
    assert_eq!(purged["messages"], 1);
    assert!(purged["indexRows"].as_u64().unwrap() >= 3, "{purged}");
    assert!(conversations(home.path(), true).is_empty());
    assert_eq!(conversations(home.path(), false).len(), 2);
}

/// `pith ARGS`, which must succeed: its stdout.
fn pith_text(home: &Path, args: &[&str]) -> String {
    let out = pith(home, args);
    assert!(
        out.status.success(),
        "pith {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn history_cli_human_output() {
    let home = tempfile::tempdir().unwrap();
    let claude = claude_projects_with_junk();
    import(home.path(), claude.path(), &home.path().join("no-codex"));
    let calc = conversation(
        home.path(),
        "import",
        "cf203161-95d5-4e5b-b9c2-9c92eed69b04",
    )
    .unwrap();
    let snapshot = |name: &str, text: &str| {
        insta::with_settings!({
            filters => vec![
                (r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+", "[TOKEN]"),
                (r"trashed at \d+", "trashed at [MS]"),
            ],
            prepend_module_to_snapshot => true,
        }, {
            insta::assert_snapshot!(name, text);
        });
    };
    snapshot("list", &pith_text(home.path(), &["history", "list"]));
    snapshot(
        "show",
        &pith_text(
            home.path(),
            &["history", "show", calc["id"].as_str().unwrap()],
        ),
    );
    snapshot(
        "search",
        &pith_text(home.path(), &["history", "search", "subtracted"]),
    );
    snapshot(
        "candidates",
        &pith_text(
            home.path(),
            &["history", "candidates", "--filter", "single-assistant"],
        ),
    );
    let out = pith(home.path(), &["history", "show", "c-nope"]);
    assert!(!out.status.success());
    snapshot("show_unknown", &String::from_utf8_lossy(&out.stderr));
}

/// The real OpenCode through pith: its title call, sent beside the first turn with the same
/// session id, is not recorded in the conversation's place; the conversation is the typed
/// prompt and the answer.
#[test]
fn opencode_through_the_proxy_records_the_conversation_not_its_title_call() {
    let mock = MockUpstream::start().unwrap();
    mock.set_default(Reply::sse(anthropic::stream(
        &["Hi", " there."],
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start(&mock.url(), &[]);
    let (work, home) = project();
    let run = clients::opencode(
        work.path(),
        home.path(),
        &format!("{}/v1", pith.url()),
        &[],
        "say hi",
        LIMIT,
    );
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    let received = mock.received();
    assert!(
        received
            .iter()
            .any(|r| clients::has(&r.body, pith_clients::opencode::TITLE_CALL)),
        "OpenCode sent no title call this time"
    );
    let main = received
        .iter()
        .find(|r| clients::has(&r.body, "\"tools\":["))
        .expect("the main turn");
    let session = main.header("x-session-id").unwrap().to_owned();
    let recorded = wait_recorded(&pith, &session, 2);
    // (`opencode run` sends the prompt in quotes.)
    assert_eq!(recorded["firstUserPreview"], "\"say hi\"", "{recorded}");
    let id = recorded["id"].as_str().unwrap();
    assert_eq!(shape(pith.home.path(), id), ["user+", "assistant"]);
    let shown = pith_text(pith.home.path(), &["history", "show", id]);
    assert!(!shown.contains("Generate a title"), "{shown}");
}

#[test]
fn opencode_through_the_proxy_is_recorded_as_its_own_session_database_imports() {
    let mock = MockUpstream::start().unwrap();
    let main_loop = |body: &[u8]| clients::has(body, "\"tools\":[");
    let grep = fixtures::ToolCall::new("toolu_01Grep", "grep", r#"{"pattern":"def add"}"#);
    mock.push_when(
        main_loop,
        Reply::sse(anthropic::stream_with_tool(
            &["Let me look."],
            &grep,
            fixtures::DEFAULT_USAGE,
        )),
    );
    mock.push_when(
        main_loop,
        Reply::sse(anthropic::stream(
            &["Fixed: add now adds."],
            fixtures::DEFAULT_USAGE,
        )),
    );
    // The title call (no tools) takes the default.
    mock.set_default(Reply::sse(anthropic::stream(
        &["Fix calc"],
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start(&mock.url(), &[]);
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    clients::write_calc_project(work.path());
    let run = clients::opencode(
        work.path(),
        home.path(),
        &format!("{}/v1", pith.url()),
        &[],
        "fix the bug in calc.py",
        LIMIT,
    );
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert_eq!(
        mock.queued_replies(),
        0,
        "both main-loop turns reached the mock"
    );
    let session = mock
        .received()
        .iter()
        .find(|r| main_loop(&r.body))
        .and_then(|r| r.header("x-session-id").map(str::to_owned))
        .expect("the main turn");
    // The prompt, the step that called grep, its result, the answer.
    let recorded = wait_recorded(&pith, &session, 4);

    let db = home.path().join(".local/share/opencode/opencode.db");
    assert!(
        db.is_file(),
        "OpenCode wrote no database at {}",
        db.display()
    );
    let nowhere = home.path().join("nowhere");
    let import_opencode = || {
        pith_json(
            pith.home.path(),
            &[
                "history",
                "import",
                "--claude-dir",
                nowhere.to_str().unwrap(),
                "--codex-home",
                nowhere.to_str().unwrap(),
                "--opencode-db",
                db.to_str().unwrap(),
            ],
        )
    };
    let report = import_opencode();
    assert_eq!(report["opencodeSessions"], 1, "{report}");
    assert_eq!(report["unreadable"], 0, "{report}");
    let imported = imported_conversation(pith.home.path(), &session);
    let proxy_shape = shape(pith.home.path(), recorded["id"].as_str().unwrap());
    assert_eq!(proxy_shape, ["user+", "assistant", "user", "assistant"]);
    assert_eq!(
        proxy_shape,
        shape(pith.home.path(), imported["id"].as_str().unwrap()),
        "the proxy's history differs from OpenCode's own"
    );
    assert_eq!(recorded["firstUserPreview"], imported["firstUserPreview"]);
    // Message for message: role, whether a person typed it, and its text as previewed (the
    // tool call and its result included).
    let proxied = said(pith.home.path(), recorded["id"].as_str().unwrap());
    assert!(
        proxied
            .iter()
            .all(|(_, _, p)| p.as_str().is_some_and(|p| !p.is_empty())),
        "{proxied:?}"
    );
    assert_eq!(
        proxied,
        said(pith.home.path(), imported["id"].as_str().unwrap())
    );
    // Importing again adds nothing.
    let again = import_opencode();
    assert_eq!(again["messagesAdded"], 0, "{again}");
}
