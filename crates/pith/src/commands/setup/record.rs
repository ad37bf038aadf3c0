//! What `pith setup` wrote, per file, kept in `$PITH_HOME/setup.json` so that `--undo` can put
//! back exactly what was there, or, in a file someone changed since (Claude Code rewrites its
//! global config as it runs), take out just pith's entries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use pith_clients::{Client, Scope};
use serde_json::Value;

/// Every file setup changed.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub files: BTreeMap<String, RecordedFile>,
}

/// One file setup changed: for which client and scope, its text before (none: a new file) and
/// after, and what pith put in it.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct RecordedFile {
    pub client: String,
    /// The scope (records from before scopes existed have none: the client's only files then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    pub before: Option<String>,
    pub after: String,
    /// The members pith set, with the values it wrote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<(Vec<String>, Value)>,
    /// The hook command pith added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_command: Option<String>,
}

impl RecordedFile {
    /// Whether this record is of `client` in `scope`.
    pub fn is_of(&self, client: Client, scope: Scope) -> bool {
        self.client == client.name() && self.scope.as_deref().is_none_or(|s| s == scope.name())
    }
}

/// What pith put in one file, for the record.
#[derive(Default)]
pub struct Added {
    pub members: Vec<(Vec<String>, Value)>,
    pub hook_command: Option<String>,
}

impl Record {
    pub fn path() -> anyhow::Result<PathBuf> {
        Ok(crate::config::pith_home()?.join("setup.json"))
    }

    pub fn load() -> anyhow::Result<Record> {
        let path = Record::path()?;
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is not pith's setup record; move it away",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    pub fn save(&self) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).context("internal error: the record")?;
        write_file(&Record::path()?, &(text + "\n"))
    }

    pub fn key(path: &Path) -> String {
        std::path::absolute(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .to_string_lossy()
            .into_owned()
    }

    /// `path` went from `before` to `after`. A file pith changed before and nobody touched
    /// since keeps its first `before`: undo goes back to before pith, not one step.
    pub fn wrote(
        &mut self,
        client: Client,
        scope: Scope,
        path: &Path,
        (before, after): (Option<&str>, &str),
        added: Added,
    ) {
        let key = Record::key(path);
        let (before, mut members, mut hook_command) = match self.files.remove(&key) {
            Some(r) if before == Some(r.after.as_str()) => (r.before, r.members, r.hook_command),
            _ => (before.map(str::to_owned), Vec::new(), None),
        };
        for m in added.members {
            if !members.contains(&m) {
                members.push(m);
            }
        }
        hook_command = added.hook_command.or(hook_command);
        self.files.insert(
            key,
            RecordedFile {
                client: client.name().to_owned(),
                scope: Some(scope.name().to_owned()),
                before,
                after: after.to_owned(),
                members,
                hook_command,
            },
        );
    }
}

/// A config file's text, `None` when it does not exist.
pub fn read_config(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Write `text` to `path`. An existing file keeps its mode; a new one is 0600, and a missing
/// directory 0700, whatever the umask (a client config names a command the client runs).
pub fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // Write beside and rename, so an interrupted write never leaves half a config.
    let tmp = path.with_extension("pith-tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    // The mode the file has, or (a new file, or a temporary file left by an interrupted run
    // with another mode) 0600.
    let mode = match std::fs::metadata(path) {
        Ok(meta) => Some(meta.permissions()),
        #[cfg(unix)]
        Err(_) => Some(std::os::unix::fs::PermissionsExt::from_mode(0o600)),
        #[cfg(not(unix))]
        Err(_) => None,
    };
    if let Some(mode) = mode {
        std::fs::set_permissions(&tmp, mode)
            .with_context(|| format!("cannot set permissions on {}", tmp.display()))?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))
}

/// Changed lines with two lines of context: `+ ` added, `- ` removed.
pub fn diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let mut out = String::new();
    for line in &a[prefix.saturating_sub(2)..prefix] {
        out.push_str(&format!("  {line}\n"));
    }
    for line in &a[prefix..a.len() - suffix] {
        out.push_str(&format!("- {line}\n"));
    }
    for line in &b[prefix..b.len() - suffix] {
        out.push_str(&format!("+ {line}\n"));
    }
    let after = a.len() - suffix;
    for line in &a[after..(after + 2).min(a.len())] {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_shows_context_and_changes() {
        assert_eq!(
            diff("a\nb\nc\nd\ne\n", "a\nb\nc\nX\nd\ne\n"),
            "  b\n  c\n+ X\n  d\n  e\n"
        );
        assert_eq!(diff("", "x\n"), "+ x\n");
    }
}
