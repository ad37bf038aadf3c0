//! `pith hook`: run by Claude Code and Codex after their own tool calls. Reads one payload from
//! stdin, prints the host's answer (one line for the model) or nothing, and exits 0 whatever
//! happens: a recall hint must never be why a tool call reports an error.
//!
//! Synchronous and small on purpose: it is a fresh process on every tool call. No async runtime,
//! no network, no tokenizer, no logger unless `PITH_LOG` asks for one (the host records a hook's
//! stderr), and the brain opened read-only with a short lock wait.

use std::io::{Read, Write};
use std::time::Duration;

use pith_brain::Workspace;
use pith_brain::recall::{self, Settings};
use pith_store::brain::open_workspace_brain_for_hook;

use crate::config::HookConfig;

/// Payloads larger than this are not read to the end (a Write of a huge file): silence.
const MAX_INPUT: u64 = 64 * 1024 * 1024;
/// Longest wait for another process's lock on the brain.
const BUSY: Duration = Duration::from_millis(100);

#[derive(Debug, clap::Args)]
pub struct Args {}

/// Answer one hook call. Never fails: every error is silence.
pub fn run(_args: Args, config: Option<&HookConfig>) {
    if crate::env::is_set(crate::env::Var::Log) {
        crate::logging::init_with("warn", false);
    }
    let mut input = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_INPUT)
        .read_to_end(&mut input);
    if read.is_err() || input.len() as u64 >= MAX_INPUT {
        // Let the host finish writing; what it wrote is not answered.
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        return;
    }
    let settings = settings(config);
    let note = recall::recall(&input, &settings, &mut |ws: &Workspace, access| {
        match open_workspace_brain_for_hook(ws.clone(), access, BUSY) {
            Ok(brain) => brain,
            Err(e) => {
                tracing::debug!(error = &e as &dyn std::error::Error, "brain not opened");
                None
            }
        }
    });
    if let Some(note) = note {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", note.host_answer()).and_then(|()| out.flush());
    }
}

fn settings(config: Option<&HookConfig>) -> Settings {
    let capture = config.and_then(|c| c.capture_fixes).unwrap_or(false);
    match config.and_then(|c| c.verdict_commands.as_ref()) {
        Some(list) => Settings::new(list.iter().map(String::as_str), capture),
        None => Settings::new(recall::DEFAULT_VERDICT_COMMANDS.iter().copied(), capture),
    }
}
