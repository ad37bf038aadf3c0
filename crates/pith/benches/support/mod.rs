//! What the proxy benches share: starting a `pith proxy` and reading its memory.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// Start `cmd` (a `pith proxy --listen 127.0.0.1:0 ...`, its flags and environment set) and
/// wait for the address it listens on; its stderr is drained from then on.
pub fn spawn_pith(mut cmd: Command) -> (Child, SocketAddr) {
    let mut child = cmd
        .env("PITH_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("pith exited before listening").unwrap();
        if let Some(a) = line.strip_prefix("pith proxy listening on http://") {
            break a.trim().parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

/// VmRSS and VmHWM (peak) of a process, in KiB.
pub fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

pub use pith_testkit::bench::env_usize;
