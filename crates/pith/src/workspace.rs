//! Which workspace a command works on: the one rule for `--workspace` shared by `pith memory`,
//! `pith mcp` and `pith setup`.

use std::path::Path;

use anyhow::Context;
use pith_brain::Workspace;

/// The workspace a command works on: `--workspace` exactly, else discovered from the current
/// directory.
pub fn workspace_from(flag: Option<&Path>) -> anyhow::Result<Workspace> {
    match flag {
        Some(dir) => {
            anyhow::ensure!(
                dir.is_dir(),
                "--workspace {} is not a directory",
                dir.display()
            );
            Ok(Workspace::new(dir)?)
        }
        None => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            Ok(Workspace::discover(&cwd)?)
        }
    }
}
