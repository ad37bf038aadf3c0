//! Benchmark driver for scripts/bench-search.
//!
//! `search_bench gen DIR FILES` writes a deterministic synthetic Rust/C source tree (with a
//! .gitignore'd `target/` and a `.git/` that both searchers must skip).
//! `search_bench search DIR PATTERN [-i] [-F]` runs `search_workspace` once, like one MCP call,
//! and prints the rendered report (so the work cannot be optimised away).

use std::error::Error;
use std::fs;
use std::io::Write as _;
use std::path::Path;

use pith_search::{SearchRequest, search_workspace};
use pith_testkit::rng::Rng;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("gen") if args.len() == 3 => generate(Path::new(&args[1]), args[2].parse()?),
        Some("search") if args.len() >= 3 => {
            let req = SearchRequest {
                case_insensitive: args[3..].iter().any(|a| a == "-i"),
                literal: args[3..].iter().any(|a| a == "-F"),
                ..SearchRequest::new(args[2].clone())
            };
            let report = search_workspace(
                Path::new(&args[1]),
                &req,
                None,
                pith_search::RankPolicy::default(),
            )?;
            std::io::stdout()
                .lock()
                .write_all(report.render().as_bytes())?;
            Ok(())
        }
        _ => Err(
            "usage: search_bench gen DIR FILES | search_bench search DIR PATTERN [-i] [-F]".into(),
        ),
    }
}

const NOUNS: &[&str] = &[
    "buffer", "config", "header", "request", "response", "session", "token", "cache", "index",
    "entry", "record", "stream", "frame", "packet", "handle", "context", "state", "layout",
    "widget", "parser", "lexer", "schema", "query", "route", "store", "ledger", "memory", "queue",
    "worker", "signal", "channel", "socket", "path", "node", "graph", "tree", "span", "range",
];
const VERBS: &[&str] = &[
    "parse", "build", "render", "flush", "read", "write", "open", "close", "apply", "merge",
    "split", "load", "save", "check", "resolve", "encode", "decode", "compute", "update", "reset",
];
const TYPES: &[&str] = &[
    "u32",
    "u64",
    "usize",
    "bool",
    "String",
    "Vec<u8>",
    "&str",
    "Option<usize>",
    "PathBuf",
];

fn camel(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

fn rust_file(rng: &mut Rng) -> String {
    let mut out = String::from("// SPDX-License-Identifier: MIT\n//! Generated module.\n\n");
    for _ in 0..rng.below(4) + 1 {
        out.push_str(&format!(
            "use crate::{}::{};\n",
            rng.pick(NOUNS),
            camel(rng.pick(NOUNS))
        ));
    }
    for _ in 0..rng.below(6) + 2 {
        let name = format!("{}{}", camel(rng.pick(NOUNS)), camel(rng.pick(NOUNS)));
        out.push_str(&format!(
            "\n/// A {} for the {}.\npub struct {name} {{\n",
            rng.pick(NOUNS),
            rng.pick(NOUNS)
        ));
        for _ in 0..rng.below(5) + 1 {
            out.push_str(&format!(
                "    pub {}: {},\n",
                rng.pick(NOUNS),
                rng.pick(TYPES)
            ));
        }
        out.push_str(&format!("}}\n\nimpl {name} {{\n"));
        for _ in 0..rng.below(5) + 1 {
            let verb = rng.pick(VERBS);
            let noun = rng.pick(NOUNS);
            out.push_str(&format!(
                "    pub fn {verb}_{noun}(&mut self, {noun}: {}) -> Result<{}, {}Error> {{\n",
                rng.pick(TYPES),
                rng.pick(TYPES),
                camel(rng.pick(NOUNS))
            ));
            for _ in 0..rng.below(12) + 2 {
                let line = match rng.below(6) {
                    0 => format!(
                        "        let {} = self.{}.{}()?;\n",
                        rng.pick(NOUNS),
                        rng.pick(NOUNS),
                        rng.pick(VERBS)
                    ),
                    1 => format!(
                        "        if {} > {} {{ return Err({}Error::{}); }}\n",
                        rng.pick(NOUNS),
                        rng.below(4096),
                        camel(rng.pick(NOUNS)),
                        camel(rng.pick(VERBS))
                    ),
                    2 => format!(
                        "        // TODO: {} the {} before {}\n",
                        rng.pick(VERBS),
                        rng.pick(NOUNS),
                        rng.pick(VERBS)
                    ),
                    3 => format!(
                        "        self.{} = {}::{}(&{});\n",
                        rng.pick(NOUNS),
                        camel(rng.pick(NOUNS)),
                        rng.pick(VERBS),
                        rng.pick(NOUNS)
                    ),
                    4 => format!(
                        "        tracing::debug!({} = %{}, \"{} {}\");\n",
                        rng.pick(NOUNS),
                        rng.pick(NOUNS),
                        rng.pick(VERBS),
                        rng.pick(NOUNS)
                    ),
                    _ => format!(
                        "        {}.{}_{}({})?;\n",
                        rng.pick(NOUNS),
                        rng.pick(VERBS),
                        rng.pick(NOUNS),
                        rng.below(100)
                    ),
                };
                out.push_str(&line);
            }
            out.push_str(&format!("        Ok({})\n    }}\n", rng.pick(NOUNS)));
        }
        out.push_str("}\n");
    }
    out
}

fn c_file(rng: &mut Rng) -> String {
    let mut out = String::from(
        "/* SPDX-License-Identifier: MIT */\n#include <stdint.h>\n#include <string.h>\n\n",
    );
    for _ in 0..rng.below(10) + 3 {
        let verb = rng.pick(VERBS);
        let noun = rng.pick(NOUNS);
        out.push_str(&format!(
            "static int {verb}_{noun}(struct {} *{noun}, size_t len)\n{{\n",
            rng.pick(NOUNS)
        ));
        for _ in 0..rng.below(15) + 2 {
            let line = match rng.below(4) {
                0 => format!(
                    "\tif ({}->{} == NULL)\n\t\treturn -E{};\n",
                    rng.pick(NOUNS),
                    rng.pick(NOUNS),
                    rng.pick(NOUNS).to_uppercase()
                ),
                1 => format!("\tmemcpy({}, {}, len);\n", rng.pick(NOUNS), rng.pick(NOUNS)),
                2 => format!("\t/* {} the {} */\n", rng.pick(VERBS), rng.pick(NOUNS)),
                _ => format!(
                    "\t{}_{}({}, {});\n",
                    rng.pick(VERBS),
                    rng.pick(NOUNS),
                    rng.pick(NOUNS),
                    rng.below(64)
                ),
            };
            out.push_str(&line);
        }
        out.push_str("\treturn 0;\n}\n\n");
    }
    out
}

fn generate(root: &Path, files: usize) -> Result<(), Box<dyn Error>> {
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    fs::create_dir_all(root.join(".git"))?;
    fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n")?;
    fs::write(root.join(".gitignore"), "target/\n*.o\n")?;
    let mut bytes = 0usize;
    for n in 0..files {
        let dir = format!(
            "{}/{}/{}",
            if n % 5 == 0 { "drivers" } else { "crates" },
            rng.pick(NOUNS),
            rng.pick(VERBS)
        );
        fs::create_dir_all(root.join(&dir))?;
        let (name, body) = if n % 5 == 0 {
            (format!("{dir}/{}_{n}.c", rng.pick(NOUNS)), c_file(&mut rng))
        } else {
            (
                format!("{dir}/{}_{n}.rs", rng.pick(NOUNS)),
                rust_file(&mut rng),
            )
        };
        bytes += body.len();
        fs::write(root.join(name), body)?;
        // Build output and git objects that a gitignore-aware search must not read.
        if n % 10 == 0 {
            fs::create_dir_all(root.join("target/debug"))?;
            fs::write(
                root.join(format!("target/debug/{n}.rs")),
                rust_file(&mut rng),
            )?;
            fs::write(root.join(format!(".git/obj{n}")), rust_file(&mut rng))?;
        }
    }
    writeln!(
        std::io::stdout().lock(),
        "{files} files, {bytes} bytes of searchable source"
    )?;
    Ok(())
}
