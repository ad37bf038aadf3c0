//! What the benchmarks share: a criterion measurement of the benchmark thread's CPU time
//! (which other processes on a shared machine do not inflate, unlike wall time), and capture
//! bodies by id.

use std::time::Duration;

use cpu_time::ThreadTime;
use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// CPU time of the measuring thread, as a criterion measurement.
pub struct ThreadCpu;

static WALL: WallTime = WallTime;

impl Measurement for ThreadCpu {
    type Intermediate = ThreadTime;
    type Value = Duration;

    fn start(&self) -> ThreadTime {
        ThreadTime::now()
    }
    fn end(&self, start: ThreadTime) -> Duration {
        start.elapsed()
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        WALL.formatter()
    }
}

/// A comma-separated list from the environment (a benchmark's selection), or `default`'s.
pub fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The `p` quantile (0 to 1, nearest rank) of `sorted` times, in milliseconds.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

/// A number from the environment (a benchmark's knob), or `default` when unset or not one.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The body of the capture `id` (`client/scenario/reqNNN`). Panics when it is missing: a
/// benchmark without its input must stop loudly, not measure nothing.
pub fn capture_body(id: &str) -> Vec<u8> {
    let captures = match crate::fixtures::captures() {
        Ok(c) => c,
        Err(e) => panic!("the captures in pith-testkit/fixtures: {e}"),
    };
    match captures.into_iter().find(|c| c.id() == id) {
        Some(c) => c.body.to_vec(),
        None => panic!("no capture {id}"),
    }
}

/// An Anthropic Messages `body` grown by `calls` Read round trips before its last exchange,
/// each result about `size` bytes of distinct numbered source lines (Claude Code's Read shape):
/// a long session's transcript, mostly tool output. Panics on a body that is not a
/// conversation: a benchmark must not measure something else.
pub fn grown_conversation(body: &str, calls: usize, size: usize) -> String {
    use serde_json::{Value, json};
    let mut body: Value = match serde_json::from_str(body) {
        Ok(body) => body,
        Err(e) => panic!("not a JSON body: {e}"),
    };
    let Some(messages) = body["messages"].as_array_mut() else {
        panic!("a body with no messages");
    };
    let tail = messages.split_off(messages.len().saturating_sub(2));
    for i in 0..calls {
        let id = format!("toolu_bench_{i:04}");
        let path = format!("/home/dev/calc/src/module_{i}.py");
        let mut source = String::with_capacity(size + 80);
        let mut line = 0;
        while source.len() < size {
            line += 1;
            source.push_str(&format!(
                "{line:>6}\tdef handler_{i}_{line}(value):  # returns value scaled by {line}\n"
            ));
        }
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "Read", "input": {"file_path": path}}
        ]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": source}
        ]}));
    }
    messages.extend(tail);
    body.to_string()
}
