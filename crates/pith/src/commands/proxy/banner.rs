//! The lines `pith proxy` prints on stderr once it listens: where it is, where each kind of
//! traffic goes, what it records and what it requires of clients.

use std::net::SocketAddr;

use super::Started;
use super::plan::Plan;

pub fn print(plan: &Plan, started: &Started, addr: SocketAddr, instance: &str, stages: &[&str]) {
    eprintln!("pith proxy listening on http://{addr}");
    eprintln!(
        "  instance  -> {instance} (on stop: health fails for {}, then {} for open requests)",
        crate::duration::format(plan.drain),
        crate::duration::format(plan.grace)
    );
    eprintln!("  dashboard -> http://{addr}/");
    eprintln!("  anthropic -> {}", plan.anthropic);
    eprintln!("  openai    -> {}", plan.openai);
    eprintln!(
        "  chatgpt   -> {} (Codex signed in with ChatGPT)",
        plan.chatgpt
    );
    match (&plan.ledger, &started.ledger) {
        (Some(p), Some(sink)) => {
            let waiting = match sink.stats().backlog {
                0 => String::new(),
                n => format!(" ({n} requests left in the spool are being written)"),
            };
            eprintln!("  ledger    -> {}{waiting}", p.display())
        }
        _ => eprintln!("  ledger    -> off"),
    }
    match (plan.history_path(), &started.history_error) {
        (Some(p), Some(e)) => eprintln!("  history   -> off (cannot open {}: {e})", p.display()),
        (Some(p), None) => eprintln!("  history   -> {}", p.display()),
        (None, _) => eprintln!("  history   -> off"),
    }
    let shipping = if plan.history_path().is_some() && started.history_error.is_none() {
        "ledger rows and conversation history"
    } else {
        "ledger rows"
    };
    match (&plan.store, &started.shipper) {
        (Some(url), Some(_)) => eprintln!(
            "  team      -> {url} ({shipping} shipped in the background, account {})",
            plan.account
        ),
        (Some(url), None) => eprintln!("  team      -> {url} (nothing shipped: the ledger is off)"),
        _ => {}
    }
    match (&plan.searches, &started.searches) {
        (Some(path), Some(s)) if s.is_shared() => eprintln!(
            "  searches  -> {} and the team store (each read and write waits at most {})",
            path.display(),
            crate::duration::format(plan.store_timeout)
        ),
        (Some(path), Some(_)) => eprintln!("  searches  -> {}", path.display()),
        _ => {}
    }
    if !plan.keys.is_empty() {
        eprintln!(
            "  accounts  -> {} keys; clients must send theirs in the {} header (refused without)",
            plan.keys.len(),
            pith_proxy::ACCOUNT_KEY_HEADER
        );
    }
    if plan.token.is_some() {
        eprintln!(
            "  access    -> clients must send the {} header",
            pith_proxy::TOKEN_HEADER
        );
    }
    let transforms = if stages.is_empty() {
        "none".to_owned()
    } else {
        stages.join(", ")
    };
    eprintln!("  transforms: {transforms}");
    if let Some(idle) = plan.idle_stop {
        eprintln!(
            "  idle stop : after {} with no connection and no `pith run` client",
            crate::duration::format(idle)
        );
    }
}
