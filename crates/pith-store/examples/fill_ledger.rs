//! Writes a ledger of N synthetic requests (1,000 sessions, Claude Code-sized prompt
//! fingerprints, the defer and pins stages' reports) for the dashboard's benchmark
//! (`scripts/bench-dashboard`); LONG of them (default 0) in one more session, `ses_long`,
//! whose prompt the client changes at a tool every tenth request (a cache bust each time).
//!
//! `cargo run --release -p pith-store --example fill_ledger -- PATH [N [LONG]]` (`--help`: this line)
#![expect(clippy::print_stdout, reason = "a report printed for a person")]

use std::path::PathBuf;

use pith_store::ledger::{
    Fact, Ledger, RequestOutcome, Row, Saving, Transform, TransformResult, Usage,
};
use pith_wire::fingerprint::Fingerprint;

fn main() -> Result<(), String> {
    const USAGE: &str = "usage: fill_ledger PATH [N [LONG]] (PATH: a new ledger file)";
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or(USAGE)?;
    // An option where the path goes once made a 170 MB ledger named `--help` (committed).
    if path.starts_with('-') {
        println!("{USAGE}");
        return Ok(());
    }
    let path = PathBuf::from(path);
    let n: usize = match args.next() {
        Some(v) => v.parse().map_err(|e| format!("N={v}: {e}"))?,
        None => 100_000,
    };
    let long: usize = match args.next() {
        Some(v) => v.parse().map_err(|e| format!("LONG={v}: {e}"))?,
        None => 0,
    };
    if long > n {
        return Err(format!("LONG={long} is more than N={n}"));
    }
    let mut ledger = Ledger::open(&path).map_err(|e| e.to_string())?;
    let sessions = 1_000;
    let per_session = (n - long).div_ceil(sessions);
    let mut batch = Vec::with_capacity(1_000);
    let mut written = 0;
    'outer: for turn in 0..per_session {
        for s in 0..sessions {
            if written == n - long {
                break 'outer;
            }
            // A growing prompt: 14 tools, 3 system blocks, then two blocks a turn.
            let segments: Vec<u64> = (0..(18 + 2 * turn as u64))
                .map(|i| (s as u64) << 32 | i)
                .collect();
            batch.push(Row {
                ts_ms: 1_790_000_000_000 + (turn * sessions + s) as i64 * 1_000,
                client: if s % 2 == 0 {
                    "claude-code"
                } else {
                    "opencode"
                }
                .into(),
                session: Some(format!("ses_{s:05}")),
                wire: Some("anthropic".into()),
                provider: "anthropic".into(),
                model: Some("claude-sonnet-4-5".into()),
                method: "POST".into(),
                path: "/v1/messages".into(),
                status: Some(200),
                outcome: RequestOutcome::Ok,
                bytes_client: 60_000,
                bytes_upstream: 20_000,
                bytes_response: 2_000,
                tools_bytes: 35_000,
                system_bytes: 15_000,
                messages_bytes: 10_000,
                usage: Some(Usage {
                    input: 25,
                    output: 300,
                    cache_write: 500,
                    cache_write_1h: 0,
                    cache_read: 20_000,
                }),
                savings: vec![Saving {
                    stage: "defer".into(),
                    band: "cache_read".into(),
                    tokens: 10_427 - 13,
                }],
                ttfb_ms: Some(400.0),
                total_ms: 3_000.0,
                transforms: vec![
                    Transform {
                        stage: "pins".into(),
                        result: TransformResult::Unchanged("no_pin_commands".into()),
                    },
                    Transform {
                        stage: "defer".into(),
                        result: TransformResult::Applied(vec![
                            Fact {
                                name: "tools".into(),
                                kind: "count".into(),
                                value: 48,
                            },
                            Fact {
                                name: "chars".into(),
                                kind: "chars_kept_out".into(),
                                value: 41_707,
                            },
                            Fact {
                                name: "added".into(),
                                kind: "chars_added".into(),
                                value: 52,
                            },
                        ]),
                    },
                ],
                fingerprint: Some(claude_code_prompt(segments)),
                ..Row::default()
            });
            written += 1;
            if batch.len() == 1_000 {
                ledger.insert(&batch).map_err(|e| e.to_string())?;
                batch.clear();
            }
        }
    }
    ledger.insert(&batch).map_err(|e| e.to_string())?;
    batch.clear();
    // The long session, after the others: a prompt that grows, its tool 5 changed by the
    // client every tenth request.
    let template = ledger
        .rows_after(0, 1)
        .map_err(|e| e.to_string())?
        .pop()
        .map(|(_, row)| row);
    for turn in 0..long {
        let Some(mut row) = template.clone() else {
            break;
        };
        let mut segments: Vec<u64> = (0..(18 + 2 * turn as u64)).collect();
        segments[5] = (turn / 10) as u64 + 1_000;
        row.session = Some("ses_long".into());
        row.ts_ms = 1_800_000_000_000 + turn as i64 * 1_000;
        row.arrival_us = Some(row.ts_ms * 1_000);
        row.fingerprint = Some(claude_code_prompt(segments));
        batch.push(row);
        written += 1;
    }
    ledger.insert(&batch).map_err(|e| e.to_string())?;
    println!("{written} requests in {}", path.display());
    Ok(())
}

/// The stored fingerprint of an Anthropic prompt of `segments`: the model, 14 tools, 3 system
/// blocks, then the conversation, cached through its last segment.
fn claude_code_prompt(segments: Vec<u64>) -> Vec<u8> {
    Fingerprint {
        breakpoints: vec![(segments.len() - 1) as u32],
        segments,
        automatic: false,
        layout: Some(pith_wire::fingerprint::Layout {
            tools_at: 1,
            system_at: 15,
            conversation_at: 18,
        }),
    }
    .to_bytes()
}
