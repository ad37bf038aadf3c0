//! The clients' files on this machine, for `pith-clients`' rules: where they are (the
//! environment, read once) and what they hold (JSON and JSONC as OpenCode and Claude Code read
//! them, TOML as Codex does).

use std::path::{Path, PathBuf};

use jsonc_parser::ParseOptions;
use pith_clients::{Files, Places};
use serde_json::Value;

/// What OpenCode reads (comments, trailing commas) and no more: a file using the JSON5 extras
/// jsonc-parser also knows would not load in either client, so it is refused as invalid.
pub const JSONC: ParseOptions = ParseOptions {
    allow_comments: true,
    allow_trailing_commas: true,
    allow_loose_object_property_names: false,
    allow_missing_commas: false,
    allow_single_quoted_strings: false,
    allow_hexadecimal_numbers: false,
    allow_unary_plus_numbers: false,
    allow_bare_decimal_point_numbers: false,
    allow_non_finite_numbers: false,
    allow_extended_string_escapes: false,
};

/// The disk, read the way each client reads its own files.
pub struct Disk;

impl Files for Disk {
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn read(&self, path: &Path) -> Option<Value> {
        let text = pith_paths::small::read_small_file(path, SETTINGS_BYTES_MAX).ok()?;
        parse(path, &text)
    }
}

/// The largest client settings file pith reads. Claude Code's `~/.claude.json` keeps every
/// project's history: users report it past 100 MB, and `pith setup` must still edit it. What
/// the bound is for is a file that never ends: a project's `.mcp.json` or `opencode.json` that
/// is a FIFO or a device is refused before it is read (it hung or exhausted `pith doctor`,
/// `run`, `setup`).
pub const SETTINGS_BYTES_MAX: u64 = 1 << 30;

/// A settings file's text as JSON: TOML by its extension, else JSON with comments.
pub fn parse(path: &Path, text: &str) -> Option<Value> {
    if is_toml(path) {
        let table: toml::Table = toml::from_str(text).ok()?;
        serde_json::to_value(table).ok()
    } else {
        jsonc_parser::parse_to_serde_value(text, &JSONC).ok()
    }
}

/// Whether a settings file is TOML (Codex's), by its extension.
pub fn is_toml(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "toml")
}

/// Where the clients' files are, for the project `workspace` names (else the one found from
/// the current directory).
pub fn places(workspace: Option<&Path>) -> anyhow::Result<Places> {
    let project = crate::workspace::workspace_from(workspace)?;
    Ok(Places::from_env(
        dirs::home_dir(),
        Some(project.root().to_path_buf()),
    ))
}

/// The same when a command can go on without a project (`pith doctor`).
pub fn places_without_project() -> Places {
    Places::from_env(dirs::home_dir(), None)
}

/// The first `program` on PATH.
pub fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// This binary, its links resolved.
pub fn this_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.canonicalize().unwrap_or(exe))
}

/// The command a client's settings should run pith by: `pith` when the `pith` on PATH is this
/// very binary, so the settings survive reinstalls and work for teammates; otherwise this
/// binary's absolute path, which works wherever the client runs.
pub fn default_command() -> anyhow::Result<String> {
    let exe = this_binary().ok_or_else(|| anyhow::anyhow!("cannot find this binary's path"))?;
    let on_path = on_path("pith").and_then(|p| p.canonicalize().ok());
    Ok(if on_path.as_deref() == Some(exe.as_path()) {
        "pith".to_owned()
    } else {
        exe.to_string_lossy().into_owned()
    })
}
