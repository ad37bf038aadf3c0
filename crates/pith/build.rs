//! Links the `pith` binary as a position-dependent executable on Linux with glibc.
//!
//! Why: `pith hook` and `pith statusline` are fresh processes on every tool call and every
//! status refresh. As a PIE, each start had the dynamic loader apply about 41,000 relative
//! relocations (`LD_DEBUG=statistics`: 96% of its 3.9 M cycles), writing into some 180 pages
//! of `.data.rel.ro` and `.got`, each one a copy-on-write fault: 0.8 ms of CPU and 180 of the
//! 348 page faults of `pith --version` (BENCHMARKS.md, "`pith hook` linked without PIE").
//! Linked at a fixed address the linker resolves them once, and the loader applies 3.
//!
//! What it costs: the executable's own image is no longer placed at a random address (its heap,
//! stack, memory maps and shared libraries still are), as for Go's default Linux builds. A
//! packager who wants the image randomised builds with `PITH_BUILD_PIE=1`. The code is
//! compiled position-independent either way (only the link changes), so nothing else differs.

//!
//! The decision is made here once and handed to the crate's targets as `PITH_LINKED_PIE`
//! (`1` or `0`), which the test of the binary's ELF type reads.

#[path = "src/switch.rs"]
mod switch;

fn main() {
    println!("cargo:rerun-if-env-changed=PITH_BUILD_PIE");
    println!("cargo:rerun-if-changed=src/switch.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let asked = std::env::var("PITH_BUILD_PIE").unwrap_or_default();
    let Some(pie_wanted) = switch::parse_switch(&asked) else {
        // A build script reports by failing: a misspelt switch must not pick a link silently.
        eprintln!(
            "PITH_BUILD_PIE={asked:?} is not a switch; use 1 or 0 (or true/false, yes/no, on/off)"
        );
        std::process::exit(1);
    };
    let fixed = os == "linux" && env == "gnu" && !pie_wanted;
    if fixed {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rustc-env=PITH_LINKED_PIE={}", u8::from(!fixed));
}
