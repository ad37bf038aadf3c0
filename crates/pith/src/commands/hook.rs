//! `pith hook`: run by Claude Code and Codex after their own tool calls. Reads one payload from
//! stdin, prints the host's answer (one line for the model) or nothing, and exits 0 whatever
//! happens: a recall hint must never be why a tool call reports an error.
//!
//! Synchronous and small on purpose: it is a fresh process on every tool call. No async runtime,
//! no network, no tokenizer, no logger unless `PITH_LOG` asks for one (the host records a hook's
//! stderr). The brain is opened only if it exists, read-only, except to save a captured fix
//! (`[hook] capture_fixes`), when it is a writer of the existing file; either way with a short
//! lock wait ([`BUSY`]) instead of the 5 s other commands wait, so a locked brain costs a
//! tool call milliseconds. `main.rs` calls [`run`] apart from the other commands (exit 0,
//! silence on a panic).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use pith_brain::Workspace;
use pith_brain::origin::{Origin, Origins};
use pith_brain::recall::{self, Settings};
use pith_store::brain::open_workspace_brain_for_hook;

use crate::config::HookConfig;

/// Payloads larger than this are not read to the end (a Write of a huge file): silence.
const MAX_INPUT: u64 = 64 * 1024 * 1024;
/// Longest a payload may take to arrive whole: a stdin that never ends (or stalls) gets
/// silence well within the 10 s a host gives the hook.
const READ_WITHIN: Duration = Duration::from_secs(5);
/// Longest wait for another process's lock on the brain.
const BUSY: Duration = Duration::from_millis(100);

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Reads one hook payload (JSON) on stdin and prints the host's answer: one line for the model, \
or nothing. It always exits 0 and prints nothing else: a bad payload, a missing or broken brain \
or config, a locked database or a panic all mean silence (a hook's failure would show as the \
tool call's). With PITH_LOG set it logs to stderr, for debugging a setup.")]
pub struct Args {}

/// Answer one hook call. Never fails: every error is silence.
pub fn run(_args: Args, config: Option<&HookConfig>) {
    if crate::env::is_set(crate::env::Var::Log) {
        crate::logging::init_with("warn", false);
    }
    let Some(input) = read_payload() else {
        return;
    };
    let settings = settings(config);
    let note = recall::recall(&input, &settings, &mut |ws: &Workspace, access| {
        match open_workspace_brain_for_hook(ws.clone(), access, BUSY) {
            Ok(mut brain) => {
                // Where it came from, looked up only once a brain is open (most calls find
                // none): without a home of pith's own, none is known as the user's.
                if let Some(brain) = &mut brain {
                    let origins = crate::config::pith_home().ok().map(|h| Origins::new(&h));
                    brain.set_origin(origins.map_or(Origin::Project, |o| o.of(ws.root())));
                }
                brain
            }
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

/// The whole payload on stdin, or `None` for silence: larger than [`MAX_INPUT`], or not ended
/// within [`READ_WITHIN`] (an endless or stalled stdin). A payload too large is read on to
/// its end, within the same time, so the host finishes writing without a broken pipe.
fn read_payload() -> Option<Vec<u8>> {
    let deadline = Instant::now() + READ_WITHIN;
    let stdin = std::io::stdin();
    let mut stdin = stdin.lock();
    let mut input = Vec::new();
    // At least the lock's buffer, so every read goes to the pipe and waiting on it is exact.
    let mut chunk = vec![0u8; 64 * 1024];
    let mut too_large = false;
    loop {
        if !readable_before(deadline) {
            return None;
        }
        match stdin.read(&mut chunk) {
            Ok(0) => return (!too_large).then_some(input),
            Ok(n) if too_large => {
                let _ = n;
            }
            Ok(n) => {
                input.extend_from_slice(&chunk[..n]);
                too_large = input.len() as u64 > MAX_INPUT;
                if too_large {
                    input = Vec::new();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// Whether stdin has something to read (or its end) before `deadline`.
#[cfg(unix)]
fn readable_before(deadline: Instant) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let timeout = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let stdin = std::io::stdin();
        let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(rustix::io::Errno::INTR) => {}
            // Not a descriptor poll can wait on: read it as it is.
            Err(_) => return true,
        }
    }
}

#[cfg(not(unix))]
fn readable_before(deadline: Instant) -> bool {
    Instant::now() < deadline
}
