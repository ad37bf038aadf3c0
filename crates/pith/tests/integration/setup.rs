//! `pith setup <client>` on temporary projects and a temporary CODEX_HOME.

use std::path::Path;
use std::process::{Command, Output};

fn setup(dir: &Path, codex_home: &Path, args: &[&str]) -> Output {
    Command::new(crate::support::pith_bin())
        .arg("setup")
        .args(args)
        .current_dir(dir)
        .env("CODEX_HOME", codex_home)
        .env("PITH_HOME", codex_home.join("pith-home"))
        .env("HOME", codex_home.join("home"))
        .env("XDG_CONFIG_HOME", codex_home.join("home/.config"))
        .env("PATH", "/usr/bin:/bin")
        .env_remove("CLAUDE_CONFIG_DIR")
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap()
}

fn ok(dir: &Path, codex_home: &Path, args: &[&str]) -> String {
    let out = setup(dir, codex_home, args);
    assert!(
        out.status.success(),
        "pith setup {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails(dir: &Path, codex_home: &Path, args: &[&str]) -> String {
    let out = setup(dir, codex_home, args);
    assert!(!out.status.success(), "pith setup {args:?} should fail");
    String::from_utf8(out.stderr).unwrap()
}

/// What `pith setup codex` adds to `config.toml` for the hook.
const CODEX_HOOKS: &str = "\n[[hooks.PostToolUse]]\nmatcher = \"Bash|apply_patch\"\n\n[[hooks.PostToolUse.hooks]]\ntype = \"command\"\ncommand = \"pith hook\"\ntimeout = 10\n";

/// The scope whose files the byte-for-byte tests below edit: the project's for the clients that
/// have one, the user's for Codex.
fn scope_of(client: &str) -> &'static str {
    if client == "codex" { "user" } else { "project" }
}

fn project() -> (tempfile::TempDir, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    (dir, tempfile::tempdir().unwrap())
}

#[test]
fn setup_claude_code_creates_then_is_idempotent() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let preview = ok(
        dir,
        codex,
        &["claude-code", "--scope", "project", "--command", "pith"],
    );
    let root = dir.canonicalize().unwrap();
    insta::assert_snapshot!(
        "setup_claude_code_new_file",
        preview.replace(root.to_str().unwrap(), "[PROJECT]")
    );
    let written = std::fs::read_to_string(dir.join(".mcp.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&written).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"mcpServers": {"pith": {"type": "stdio", "command": "pith", "args": ["mcp"]}}})
    );

    let again = ok(
        dir,
        codex,
        &["claude-code", "--scope", "project", "--command", "pith"],
    );
    assert!(again.contains("already registers pith"), "{again}");
    assert_eq!(
        std::fs::read_to_string(dir.join(".mcp.json")).unwrap(),
        written
    );
}

#[test]
fn setup_defaults_to_this_binarys_path_when_pith_is_not_on_path() {
    let (dir, codex) = project();
    ok(
        dir.path(),
        codex.path(),
        &["claude-code", "--scope", "project"],
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(".mcp.json")).unwrap())
            .unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_pith"))
        .canonicalize()
        .unwrap();
    assert_eq!(v["mcpServers"]["pith"]["command"], exe.to_str().unwrap());
}

#[test]
fn setup_keeps_unrelated_json_byte_for_byte() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let old = "{\n    \"mcpServers\": {\n        \"github\": { \"command\": \"gh-mcp\", \"env\": {\"TOKEN\": \"é\"} }\n    },\n    \"zzz\": [1, 2]\n}\n";
    std::fs::write(dir.join(".mcp.json"), old).unwrap();
    let preview = ok(
        dir,
        codex,
        &["claude-code", "--scope", "project", "--command", "pith"],
    );
    assert!(
        preview.contains("+         \"pith\": {"),
        "preview shows the addition:\n{preview}"
    );
    let new = std::fs::read_to_string(dir.join(".mcp.json")).unwrap();
    assert_eq!(
        new,
        "{\n    \"mcpServers\": {\n        \"github\": { \"command\": \"gh-mcp\", \"env\": {\"TOKEN\": \"é\"} },\n        \"pith\": {\n            \"type\": \"stdio\",\n            \"command\": \"pith\",\n            \"args\": [\"mcp\"]\n        }\n    },\n    \"zzz\": [1, 2]\n}\n"
    );
}

#[test]
fn setup_never_clobbers_a_different_pith_entry() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let old = r#"{"mcpServers": {"pith": {"command": "/opt/old/pith", "args": ["mcp"]}}}"#;
    std::fs::write(dir.join(".mcp.json"), old).unwrap();
    let err = fails(
        dir,
        codex,
        &["claude-code", "--scope", "project", "--command", "pith"],
    );
    assert!(
        err.contains("already has a different \"pith\" entry"),
        "{err}"
    );
    assert!(err.contains("/opt/old/pith"), "{err}");
    assert!(
        err.contains("then run `pith setup claude-code --scope project` again"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(dir.join(".mcp.json")).unwrap(), old);

    std::fs::write(dir.join(".mcp.json"), "{ not json").unwrap();
    let err = fails(
        dir,
        codex,
        &["claude-code", "--scope", "project", "--command", "pith"],
    );
    assert!(
        err.contains(".mcp.json is not valid JSON (Expected string for object property on line 1 column 3); fix that, then run `pith setup claude-code --scope project` again"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(".mcp.json")).unwrap(),
        "{ not json"
    );
}

#[test]
fn setup_dry_run_writes_nothing() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let out = ok(
        dir,
        codex,
        &[
            "opencode",
            "--scope",
            "project",
            "--dry-run",
            "--command",
            "pith",
        ],
    );
    assert!(out.contains("(new file):"), "{out}");
    assert!(out.contains("+ {"), "{out}");
    assert!(out.contains("dry run: nothing written."), "{out}");
    assert!(!dir.join("opencode.json").exists());
    let out = ok(dir, codex, &["codex", "--dry-run", "--command", "pith"]);
    assert!(out.contains("+ [mcp_servers.pith]"), "{out}");
    assert!(!codex.join("config.toml").exists());
}

#[test]
fn setup_opencode_adds_a_local_server_beside_existing_ones() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let old = "{\n  \"$schema\": \"https://opencode.ai/config.json\",\n  \"provider\": {\"anthropic\": {\"options\": {\"baseURL\": \"http://127.0.0.1:8787/v1\"}}},\n  \"mcp\": {\n    \"other\": {\"type\": \"remote\", \"url\": \"http://127.0.0.1:1/mcp\"}\n  }\n}\n";
    std::fs::write(dir.join("opencode.json"), old).unwrap();
    ok(
        dir,
        codex,
        &[
            "opencode",
            "--scope",
            "project",
            "--command",
            "/usr/local/bin/pith",
        ],
    );
    let new = std::fs::read_to_string(dir.join("opencode.json")).unwrap();
    assert!(new.starts_with(
        "{\n  \"$schema\": \"https://opencode.ai/config.json\",\n  \"provider\": {\"anthropic\": {\"options\": {\"baseURL\": \"http://127.0.0.1:8787/v1\"}}},\n  \"mcp\": {\n    \"other\": {\"type\": \"remote\", \"url\": \"http://127.0.0.1:1/mcp\"},\n    \"pith\": {\n"
    ), "{new}");
    let v: serde_json::Value = serde_json::from_str(&new).unwrap();
    assert_eq!(
        v["mcp"]["pith"],
        serde_json::json!({"type": "local", "command": ["/usr/local/bin/pith", "mcp"], "enabled": true})
    );
    let again = ok(
        dir,
        codex,
        &[
            "opencode",
            "--scope",
            "project",
            "--command",
            "/usr/local/bin/pith",
        ],
    );
    assert!(again.contains("already registers pith"), "{again}");
    assert_eq!(
        std::fs::read_to_string(dir.join("opencode.json")).unwrap(),
        new
    );
}

#[test]
fn setup_opencode_edits_a_commented_jsonc_keeping_every_comment() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let old = "// project settings\n{\n  /* the proxy */\n  \"provider\": {\"anthropic\": {}}, // local\n  \"model\": \"anthropic/claude-sonnet-4-5\",\n}\n";
    std::fs::write(dir.join("opencode.jsonc"), old).unwrap();
    let preview = ok(
        dir,
        codex,
        &["opencode", "--scope", "project", "--command", "pith"],
    );
    assert!(
        preview.contains("opencode.jsonc:\n"),
        "edits the jsonc:\n{preview}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("opencode.jsonc")).unwrap(),
        "// project settings\n{\n  /* the proxy */\n  \"provider\": {\"anthropic\": {}}, // local\n  \"model\": \"anthropic/claude-sonnet-4-5\",\n  \"mcp\": {\n    \"pith\": {\n      \"type\": \"local\",\n      \"command\": [\"pith\", \"mcp\"],\n      \"enabled\": true,\n    },\n  },\n}\n"
    );
    assert!(!dir.join("opencode.json").exists());
}

#[test]
fn setup_opencode_adds_to_an_existing_section_of_a_commented_jsonc() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    // OpenCode reads both files and lets opencode.jsonc win, so that is the one edited.
    let json = "{\"mcp\": {}}\n";
    std::fs::write(dir.join("opencode.json"), json).unwrap();
    let old = "{\n  \"mcp\": {\n    // search\n    \"other\": {\"type\": \"remote\", \"url\": \"http://127.0.0.1:1/mcp\"} /* keep */\n    // the end\n  }\n}";
    std::fs::write(dir.join("opencode.jsonc"), old).unwrap();
    ok(
        dir,
        codex,
        &["opencode", "--scope", "project", "--command", "pith"],
    );
    let new = std::fs::read_to_string(dir.join("opencode.jsonc")).unwrap();
    assert_eq!(
        new,
        "{\n  \"mcp\": {\n    // search\n    \"other\": {\"type\": \"remote\", \"url\": \"http://127.0.0.1:1/mcp\"}, /* keep */\n    \"pith\": {\n      \"type\": \"local\",\n      \"command\": [\"pith\", \"mcp\"],\n      \"enabled\": true\n    }\n    // the end\n  }\n}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("opencode.json")).unwrap(),
        json
    );
    let again = ok(
        dir,
        codex,
        &["opencode", "--scope", "project", "--command", "pith"],
    );
    assert!(again.contains("already registers pith"), "{again}");
    assert_eq!(
        std::fs::read_to_string(dir.join("opencode.jsonc")).unwrap(),
        new
    );
}

#[test]
fn setup_opencode_refuses_an_invalid_jsonc_and_writes_nothing() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let old = "{\n  // an unfinished edit\n  \"mcp\": {\n}\n";
    std::fs::write(dir.join("opencode.jsonc"), old).unwrap();
    let err = fails(
        dir,
        codex,
        &["opencode", "--scope", "project", "--command", "pith"],
    );
    assert!(
        err.contains("opencode.jsonc is not valid JSONC (Unterminated object on line 1 column 1); fix that, then run `pith setup opencode --scope project` again"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("opencode.jsonc")).unwrap(),
        old
    );
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, [".git", "opencode.jsonc"]);
}

#[test]
fn setup_codex_edits_codex_home_config_preserving_it() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let old = "# my codex settings\nmodel = \"gpt-5.4\"   # keep this comment\n\n[model_providers.localproxy]\nname = \"Local proxy\"\nbase_url = \"http://127.0.0.1:8787/v1\"\n\n[mcp_servers.other]\ncommand = \"other-mcp\"\n";
    std::fs::write(codex.join("config.toml"), old).unwrap();
    let preview = ok(dir, codex, &["codex", "--command", "pith"]);
    assert!(preview.contains("+ [mcp_servers.pith]"), "{preview}");
    let new = std::fs::read_to_string(codex.join("config.toml")).unwrap();
    assert_eq!(
        new,
        format!("{old}\n[mcp_servers.pith]\ncommand = \"pith\"\nargs = [\"mcp\"]\n{CODEX_HOOKS}")
    );
    let parsed: toml::Table = toml::from_str(&new).unwrap();
    assert_eq!(
        parsed["mcp_servers"]["pith"]["args"][0].as_str(),
        Some("mcp")
    );

    let again = ok(dir, codex, &["codex", "--command", "pith"]);
    assert!(again.contains("already registers pith"), "{again}");
    let err = fails(dir, codex, &["codex", "--command", "/elsewhere/pith"]);
    assert!(
        err.contains("already has a different [mcp_servers.pith]"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(codex.join("config.toml")).unwrap(),
        new
    );
}

#[test]
fn setup_codex_creates_the_config_when_missing() {
    let (dir, codex) = project();
    let home = codex.path().join("nested/.codex");
    ok(dir.path(), &home, &["codex", "--command", "pith"]);
    assert_eq!(
        std::fs::read_to_string(home.join("config.toml")).unwrap(),
        format!("[mcp_servers.pith]\ncommand = \"pith\"\nargs = [\"mcp\"]\n{CODEX_HOOKS}")
    );
}

#[test]
fn setup_claude_code_adds_the_hook_to_project_settings_keeping_whats_there() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    std::fs::create_dir(dir.join(".claude")).unwrap();
    // A settings file with comments, permissions and a hook of its own on the same event.
    let old = "{\n  // team settings\n  \"permissions\": {\"allow\": [\"Bash(npm test)\"]},\n  \"hooks\": {\n    \"PostToolUse\": [\n      {\"matcher\": \"Write\", \"hooks\": [{\"type\": \"command\", \"command\": \"prettier-hook\"}]}\n    ]\n  }\n}\n";
    std::fs::write(dir.join(".claude/settings.json"), old).unwrap();
    let out = ok(
        dir,
        codex,
        &["claude-code", "--scope", "project", "--command", "pith"],
    );
    assert!(out.contains(".claude/settings.json:"), "{out}");
    let new = std::fs::read_to_string(dir.join(".claude/settings.json")).unwrap();
    assert!(new.contains("// team settings"), "{new}");
    let v: serde_json::Value = jsonc(&new);
    assert_eq!(v["permissions"]["allow"][0], "Bash(npm test)");
    let post = v["hooks"]["PostToolUse"].as_array().unwrap();
    assert_eq!(post.len(), 2, "{new}");
    assert_eq!(post[0]["hooks"][0]["command"], "prettier-hook");
    assert_eq!(
        post[1],
        serde_json::json!({
            "matcher": "Read|Edit|Write|MultiEdit|NotebookEdit|Bash",
            "hooks": [{"type": "command", "command": "pith hook", "timeout": 10}]
        })
    );
    assert_eq!(
        v["hooks"]["PostToolUseFailure"],
        serde_json::json!([{
            "matcher": "Bash",
            "hooks": [{"type": "command", "command": "pith hook", "timeout": 10}]
        }])
    );

    // Again: nothing to change. Another pith binary's hook is not overwritten.
    let again = ok(
        dir,
        codex,
        &["claude-code", "--scope", "project", "--command", "pith"],
    );
    assert!(again.contains("already runs `pith hook`"), "{again}");
    assert_eq!(
        std::fs::read_to_string(dir.join(".claude/settings.json")).unwrap(),
        new
    );
    std::fs::remove_file(dir.join(".mcp.json")).unwrap();
    let err = fails(
        dir,
        codex,
        &[
            "claude-code",
            "--scope",
            "project",
            "--command",
            "/opt/other/pith",
        ],
    );
    assert!(
        err.contains("already runs a different pith hook on PostToolUse: `pith hook`"),
        "{err}"
    );
    // Both files are planned before either is written.
    assert!(!dir.join(".mcp.json").exists());
}

#[test]
fn setup_codex_uses_hooks_json_when_codex_home_has_one() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    std::fs::write(codex.join("hooks.json"), "{\"hooks\": {}}\n").unwrap();
    ok(dir, codex, &["codex", "--command", "pith"]);
    let v = jsonc(&std::fs::read_to_string(codex.join("hooks.json")).unwrap());
    assert_eq!(
        v,
        serde_json::json!({"hooks": {"PostToolUse": [{
            "matcher": "Bash|apply_patch",
            "hooks": [{"type": "command", "command": "pith hook", "timeout": 10}]
        }]}})
    );
    // The MCP server still goes in config.toml, which holds no hooks.
    let config = std::fs::read_to_string(codex.join("config.toml")).unwrap();
    assert_eq!(
        config,
        "[mcp_servers.pith]\ncommand = \"pith\"\nargs = [\"mcp\"]\n"
    );
}

#[test]
fn setup_quotes_a_hook_command_with_spaces() {
    let (dir, codex) = project();
    ok(
        dir.path(),
        codex.path(),
        &["codex", "--command", "/opt/my tools/pith"],
    );
    let config: toml::Table =
        toml::from_str(&std::fs::read_to_string(codex.path().join("config.toml")).unwrap())
            .unwrap();
    assert_eq!(
        config["hooks"]["PostToolUse"][0]["hooks"][0]["command"].as_str(),
        Some("'/opt/my tools/pith' hook")
    );
    assert_eq!(
        config["mcp_servers"]["pith"]["command"].as_str(),
        Some("/opt/my tools/pith")
    );
}

fn jsonc(text: &str) -> serde_json::Value {
    jsonc_parser::parse_to_serde_value(text, &Default::default()).unwrap()
}

/// Real-looking config files of each client, with comments and entries of the user's own.
const CLAUDE_MCP: &str = "{\n  \"mcpServers\": {\n    \"github\": {\"type\": \"http\", \"url\": \"https://api.githubcopilot.com/mcp/\"}\n  }\n}\n";
const CLAUDE_SETTINGS: &str = "{\n  // team settings\n  \"permissions\": {\"allow\": [\"Bash(npm test)\"], \"deny\": [\"Read(./.env)\"]},\n  \"hooks\": {\n    \"PostToolUse\": [\n      {\"matcher\": \"Write\", \"hooks\": [{\"type\": \"command\", \"command\": \"prettier-hook\"}]}\n    ]\n  },\n  \"env\": {\"DISABLE_TELEMETRY\": \"1\"}\n}\n";
const OPENCODE_JSONC: &str = "// OpenCode, this project\n{\n  \"$schema\": \"https://opencode.ai/config.json\",\n  /* the model we use */\n  \"model\": \"anthropic/claude-sonnet-4-5\",\n  \"mcp\": {\n    \"docs\": {\"type\": \"remote\", \"url\": \"https://docs.example/mcp\"}, // keep\n  },\n  \"provider\": {\"anthropic\": {\"options\": {\"timeout\": 600000}}},\n}\n";
const CODEX_TOML: &str = "# my Codex\nmodel = \"gpt-5.5\"\napproval_policy = \"on-request\"\n\n[mcp_servers.docs] # docs server\ncommand = \"docs-mcp\"\nargs = [\"--stdio\"]\n\n[profiles.fast]\nmodel = \"gpt-5.5-mini\"\n";

#[test]
fn setup_then_undo_leaves_each_clients_real_files_byte_identical() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    std::fs::create_dir(dir.join(".claude")).unwrap();
    let files = [
        (dir.join(".mcp.json"), CLAUDE_MCP),
        (dir.join(".claude/settings.json"), CLAUDE_SETTINGS),
        (dir.join("opencode.jsonc"), OPENCODE_JSONC),
        (codex.join("config.toml"), CODEX_TOML),
    ];
    for (path, text) in &files {
        std::fs::write(path, text).unwrap();
    }
    for client in ["claude-code", "opencode", "codex"] {
        let out = ok(
            dir,
            codex,
            &[
                client,
                "--scope",
                scope_of(client),
                "--command",
                "pith",
                "--proxy",
            ],
        );
        assert!(out.contains("wrote "), "{client}: {out}");
    }
    // Each part went in.
    let settings = jsonc(&std::fs::read_to_string(dir.join(".claude/settings.json")).unwrap());
    assert_eq!(settings["statusLine"]["command"], "pith statusline");
    assert_eq!(
        settings["env"]["ANTHROPIC_BASE_URL"],
        "http://127.0.0.1:8787"
    );
    assert_eq!(settings["env"]["DISABLE_TELEMETRY"], "1");
    assert_eq!(
        settings["hooks"]["PostToolUse"][1]["hooks"][0]["command"],
        "pith hook"
    );
    let opencode = std::fs::read_to_string(dir.join("opencode.jsonc")).unwrap();
    assert!(opencode.contains("/* the model we use */"), "{opencode}");
    let oc = jsonc(&opencode);
    assert_eq!(
        oc["provider"]["anthropic"]["options"]["baseURL"],
        "http://127.0.0.1:8787/v1"
    );
    assert_eq!(oc["provider"]["anthropic"]["options"]["timeout"], 600000);
    assert_eq!(
        oc["mcp"]["pith"]["command"],
        serde_json::json!(["pith", "mcp"])
    );
    let toml_text = std::fs::read_to_string(codex.join("config.toml")).unwrap();
    let toml: toml::Table = toml::from_str(&toml_text).unwrap();
    assert_eq!(
        toml["openai_base_url"].as_str(),
        Some("http://127.0.0.1:8787/v1")
    );
    assert!(toml_text.contains("# docs server"), "{toml_text}");

    // A dry run of the undo changes nothing; the undo puts back every byte.
    let preview = ok(dir, codex, &["--undo", "codex", "--dry-run"]);
    assert!(preview.contains("dry run: nothing written."), "{preview}");
    assert_eq!(
        std::fs::read_to_string(codex.join("config.toml")).unwrap(),
        toml_text
    );
    for client in ["claude-code", "opencode", "codex"] {
        let out = ok(dir, codex, &["--undo", client, "--scope", scope_of(client)]);
        assert!(out.contains("restored "), "{client}: {out}");
    }
    for (path, text) in &files {
        assert_eq!(
            &std::fs::read_to_string(path).unwrap(),
            text,
            "{}",
            path.display()
        );
    }
    let again = ok(dir, codex, &["--undo", "codex"]);
    assert!(again.contains("nothing to undo"), "{again}");
}

#[test]
fn undo_removes_files_setup_created_and_only_pith_entries_from_a_file_changed_since() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let project_scope = ["claude-code", "--scope", "project", "--command", "pith"];
    ok(dir, codex, &project_scope);
    assert!(dir.join(".mcp.json").exists());
    // The user edits the settings afterwards: undo takes out pith's entries and keeps theirs.
    let settings = dir.join(".claude/settings.json");
    let mut edited = std::fs::read_to_string(&settings).unwrap();
    edited = edited.replacen('{', "{\n  \"model\": \"opus\",", 1);
    std::fs::write(&settings, &edited).unwrap();
    let out = ok(dir, codex, &["--undo", "claude-code", "--scope", "project"]);
    assert!(
        out.contains("changed since; only pith's entries go"),
        "{out}"
    );
    assert!(out.contains("removed "), "{out}");
    assert!(
        !dir.join(".mcp.json").exists(),
        "the file setup created is gone"
    );
    assert_eq!(
        jsonc(&std::fs::read_to_string(&settings).unwrap()),
        serde_json::json!({"model": "opus"})
    );

    // An entry of pith's the user changed is theirs: that file is left, and named.
    ok(dir, codex, &project_scope);
    let edited = std::fs::read_to_string(&settings)
        .unwrap()
        .replace("pith statusline", "my-statusline");
    let hooks_gone = edited.replace("pith hook", "my-hook");
    std::fs::write(&settings, &hooks_gone).unwrap();
    let out = setup(dir, codex, &["--undo", "claude-code", "--scope", "project"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("pith leaves it"), "{said}");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), hooks_gone);
}

#[test]
fn setup_proxy_leaves_a_codex_provider_of_the_users_own_alone_and_says_so() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let config = "model_provider = \"router\"\n\n[model_providers.router]\nbase_url = \"https://router.example/api/v1\"\n";
    std::fs::write(codex.join("config.toml"), config).unwrap();
    let out = ok(dir, codex, &["codex", "--command", "pith", "--proxy"]);
    assert!(
        out.contains("Codex uses its model provider `router`"),
        "{out}"
    );
    let text = std::fs::read_to_string(codex.join("config.toml")).unwrap();
    assert!(!text.contains("openai_base_url"), "{text}");
    assert!(
        text.contains("base_url = \"https://router.example/api/v1\""),
        "{text}"
    );
    assert!(text.contains("[mcp_servers.pith]"), "{text}");
}

#[test]
fn setup_claude_code_writes_the_local_scope_by_default_and_undo_takes_out_only_its_entries() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let home = codex.join("home");
    std::fs::create_dir_all(&home).unwrap();
    // Claude Code's global config, as it keeps it: state of its own, other projects.
    let global = home.join(".claude.json");
    let before = "{\n  \"numStartups\": 4,\n  \"projects\": {\n    \"/elsewhere\": {\n      \"allowedTools\": []\n    }\n  }\n}\n";
    std::fs::write(&global, before).unwrap();
    let out = ok(dir, codex, &["claude-code", "--command", "pith"]);
    assert!(out.contains("for you only"), "{out}");
    let root = dir.canonicalize().unwrap();
    let root = root.to_str().unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&global).unwrap()).unwrap();
    assert_eq!(
        v["projects"][root]["mcpServers"]["pith"],
        serde_json::json!({"type": "stdio", "command": "pith", "args": ["mcp"]})
    );
    assert_eq!(v["numStartups"], 4);
    assert_eq!(
        v["projects"]["/elsewhere"],
        serde_json::json!({"allowedTools": []})
    );
    let local = jsonc(&std::fs::read_to_string(dir.join(".claude/settings.local.json")).unwrap());
    assert_eq!(
        local["hooks"]["PostToolUse"][0]["hooks"][0]["command"],
        "pith hook"
    );
    assert_eq!(local["statusLine"]["command"], "pith statusline");
    // Nothing of the project's shared files.
    assert!(!dir.join(".mcp.json").exists());
    assert!(!dir.join(".claude/settings.json").exists());

    // Claude Code rewrites its global config as it runs; undo takes out only pith's entry.
    let mut rewritten = v.clone();
    rewritten["numStartups"] = serde_json::json!(5);
    rewritten["projects"][root]["lastCost"] = serde_json::json!(0.5);
    std::fs::write(&global, serde_json::to_string_pretty(&rewritten).unwrap()).unwrap();
    let out = ok(dir, codex, &["--undo", "claude-code"]);
    assert!(out.contains("only pith's entries go"), "{out}");
    let after: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&global).unwrap()).unwrap();
    assert_eq!(after["numStartups"], 5);
    assert_eq!(
        after["projects"][root],
        serde_json::json!({"lastCost": 0.5})
    );
    assert!(
        !dir.join(".claude/settings.local.json").exists(),
        "setup created it"
    );
    let again = ok(dir, codex, &["--undo", "claude-code"]);
    assert!(again.contains("nothing to undo"), "{again}");
}

#[test]
fn setup_opencode_writes_the_users_config_by_default_and_has_no_local_scope() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    ok(dir, codex, &["opencode", "--command", "pith"]);
    let file = codex.join("home/.config/opencode/opencode.json");
    let v = jsonc(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(
        v["mcp"]["pith"]["command"],
        serde_json::json!(["pith", "mcp"])
    );
    assert!(!dir.join("opencode.json").exists());
    let err = fails(dir, codex, &["opencode", "--scope", "local"]);
    assert!(err.contains("OpenCode has no local scope"), "{err}");
    let err = fails(dir, codex, &["codex", "--scope", "project"]);
    assert!(err.contains("--scope user"), "{err}");
    let err = fails(dir, codex, &["cursor"]);
    assert!(
        err.contains("name one of claude-code (or claude), opencode, codex"),
        "{err}"
    );
    let out = ok(dir, codex, &["--undo", "opencode"]);
    assert!(out.contains("removed "), "{out}");
    assert!(!file.exists());
}

/// `pith setup <client>` in its default scope, with `home` as the client's home the way the
/// real-client runs set it (`CLAUDE_CONFIG_DIR=$HOME/.claude`, `CODEX_HOME=$HOME/.codex`).
fn setup_for_real_client(dir: &Path, home: &Path, client: &str) {
    let out = Command::new(crate::support::pith_bin())
        .args(["setup", client, "--command", env!("CARGO_BIN_EXE_pith")])
        .current_dir(dir)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
        .env("CODEX_HOME", home.join(".codex"))
        .env("PITH_HOME", home.join("pith-home"))
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_real_clients_find_the_mcp_server_pith_setup_wrote_in_their_default_scope() {
    use crate::clients::client_subcommand;
    let (dir, homes) = project();
    let home = homes.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let limit = std::time::Duration::from_secs(90);
    // Claude Code: the local scope; `claude mcp list` starts each server to check it.
    setup_for_real_client(dir.path(), &home, "claude-code");
    assert!(!dir.path().join(".mcp.json").exists());
    let run = client_subcommand("claude", dir.path(), &home, &["mcp", "list"], limit);
    run.assert_ok("");
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("pith:"))
        .unwrap_or_default();
    assert!(line.contains("Connected"), "{}", run.stdout);
    let run = client_subcommand("claude", dir.path(), &home, &["mcp", "get", "pith"], limit);
    run.assert_ok("");
    assert!(run.stdout.contains("Local config"), "{}", run.stdout);

    // OpenCode: the user's global config.
    setup_for_real_client(dir.path(), &home, "opencode");
    assert!(!dir.path().join("opencode.json").exists());
    let run = client_subcommand("opencode", dir.path(), &home, &["mcp", "list"], limit);
    run.assert_ok("");
    let listed = run.stdout.to_lowercase();
    assert!(
        listed.contains("pith") && listed.contains("connected"),
        "{}",
        run.stdout
    );

    // Codex: its config.toml.
    setup_for_real_client(dir.path(), &home, "codex");
    let run = client_subcommand("codex", dir.path(), &home, &["mcp", "list"], limit);
    run.assert_ok("");
    assert!(run.stdout.contains("pith"), "{}", run.stdout);
    assert!(
        run.stdout.contains(env!("CARGO_BIN_EXE_pith")),
        "{}",
        run.stdout
    );
}

#[test]
fn two_projects_in_one_global_config_each_undo_their_own_entry() {
    let (a, codex) = project();
    let b = tempfile::tempdir().unwrap();
    std::fs::create_dir(b.path().join(".git")).unwrap();
    let codex = codex.path();
    let global = codex.join("home/.claude.json");
    ok(a.path(), codex, &["claude-code", "--command", "pith"]);
    // Claude Code rewrites its global config between the two setups, as it does.
    let mut v = jsonc(&std::fs::read_to_string(&global).unwrap());
    v["numStartups"] = serde_json::json!(1);
    std::fs::write(&global, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    ok(b.path(), codex, &["claude-code", "--command", "pith"]);
    let key = |dir: &Path| dir.canonicalize().unwrap().to_str().unwrap().to_owned();
    let (ka, kb) = (key(a.path()), key(b.path()));
    // Undo in A takes out A's entry, and B's stays.
    ok(a.path(), codex, &["--undo", "claude-code"]);
    let v = jsonc(&std::fs::read_to_string(&global).unwrap());
    assert!(v["projects"][&ka]["mcpServers"]["pith"].is_null(), "{v:#}");
    assert_eq!(
        v["projects"][&kb]["mcpServers"]["pith"]["command"], "pith",
        "{v:#}"
    );
    assert_eq!(v["numStartups"], 1);
    // And B's own undo takes out B's.
    ok(b.path(), codex, &["--undo", "claude-code"]);
    let v = jsonc(&std::fs::read_to_string(&global).unwrap());
    assert!(v["projects"][&kb]["mcpServers"]["pith"].is_null(), "{v:#}");
    assert_eq!(v["numStartups"], 1);
}

/// `pith setup claude` is Claude Code, as `pith run claude` is: each command takes a client's
/// name and its executable's alike, and says both in its help.
#[test]
fn setup_takes_a_clients_executable_name_as_run_does() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let out = ok(dir, codex, &["claude", "--dry-run", "--command", "pith"]);
    assert!(out.contains("settings.local.json"), "{out}");
    let help = ok(dir, codex, &["--help"]);
    assert!(help.contains("claude-code (or claude)"), "{help}");
    let refused = fails(dir, codex, &["cursor"]);
    assert!(
        refused.contains("claude-code (or claude), opencode, codex"),
        "{refused}"
    );
}

/// Undo takes out the directories setup created once they are empty (`.claude/` in a project
/// that had none), never one that was there before, nor one holding anything else.
#[test]
fn undo_removes_the_directories_setup_created_when_they_are_empty() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let claude = dir.join(".claude");
    ok(dir, codex, &["claude-code", "--command", "pith"]);
    assert!(claude.join("settings.local.json").exists());
    let out = ok(dir, codex, &["--undo", "claude-code"]);
    assert!(!claude.exists(), "{out}");
    assert!(
        out.contains("pith setup created it, and it is empty"),
        "{out}"
    );

    // Created by setup, then used: it stays with what it holds.
    ok(dir, codex, &["claude-code", "--command", "pith"]);
    std::fs::create_dir(claude.join("commands")).unwrap();
    std::fs::write(claude.join("commands/fix.md"), "fix it\n").unwrap();
    ok(dir, codex, &["--undo", "claude-code"]);
    assert!(claude.join("commands/fix.md").exists());
    assert!(!claude.join("settings.local.json").exists());
    std::fs::remove_dir_all(&claude).unwrap();

    // There before setup, empty: it stays.
    std::fs::create_dir(&claude).unwrap();
    ok(dir, codex, &["claude-code", "--command", "pith"]);
    ok(dir, codex, &["--undo", "claude-code"]);
    assert!(claude.is_dir());
    assert!(!claude.join("settings.local.json").exists());
}

/// A directory setup created that the repository then turns into a link out of the project
/// (a pull, a checkout): undo deletes nothing there, neither the file nor the directory, and
/// says why.
#[test]
fn undo_deletes_nothing_through_a_created_directory_the_repository_turned_into_a_link() {
    let (dir, codex) = project();
    let (dir, codex) = (dir.path(), codex.path());
    let outside = tempfile::tempdir().unwrap();
    let elsewhere = outside.path().join("claude");
    ok(dir, codex, &["claude-code", "--command", "pith"]);
    std::fs::rename(dir.join(".claude"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join(".claude")).unwrap();
    let err = fails(dir, codex, &["--undo", "claude-code"]);
    assert!(err.contains("leads out of the project"), "{err}");
    assert!(elsewhere.join("settings.local.json").exists(), "{err}");
    assert!(elsewhere.is_dir());
}

/// `git init` in `dir`, with git's config from the test's home only.
fn git(dir: &Path, home: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `.claude/settings.local.json` is one person's: setup has git ignore it the way Claude Code
/// does when it creates the file (a line in git's global excludes file), so `git status` does
/// not offer it; in a directory that is not a git repository nothing of git's is touched.
#[test]
fn the_local_settings_setup_writes_are_ignored_by_git_as_claude_code_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let codex = tempfile::tempdir().unwrap();
    let (dir, codex) = (dir.path(), codex.path());
    let home = codex.join("home");
    std::fs::create_dir_all(&home).unwrap();
    git(dir, &home, &["init", "-q"]);
    let excludes = home.join(".config/git/ignore");
    // A dry run says that git's excludes file would change too, and changes nothing.
    let dry = ok(
        dir,
        codex,
        &["claude-code", "--command", "pith", "--dry-run"],
    );
    assert!(
        dry.contains(&format!(
            "would add `**/.claude/settings.local.json` to {}",
            excludes.display()
        )),
        "{dry}"
    );
    assert!(!excludes.exists() && !dir.join(".claude").exists());
    let out = ok(dir, codex, &["claude-code", "--command", "pith"]);
    assert!(dir.join(".claude/settings.local.json").exists());
    let status = git(
        dir,
        &home,
        &["status", "--porcelain", "--untracked-files=all"],
    );
    assert!(!status.contains("settings.local.json"), "{status}\n{out}");
    assert_eq!(
        std::fs::read_to_string(&excludes).unwrap(),
        "**/.claude/settings.local.json\n"
    );
    // Once only, whatever setup runs again.
    ok(dir, codex, &["--undo", "claude-code"]);
    ok(dir, codex, &["claude-code", "--command", "pith"]);
    assert_eq!(
        std::fs::read_to_string(&excludes).unwrap(),
        "**/.claude/settings.local.json\n"
    );

    // Not a git repository: git's files are not touched.
    let plain = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(other.path().join("home")).unwrap();
    ok(
        plain.path(),
        other.path(),
        &["claude-code", "--command", "pith"],
    );
    assert!(plain.path().join(".claude/settings.local.json").exists());
    assert!(!other.path().join("home/.config/git").exists());
}
