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
    /// The directories writing the file created (none existed before), deepest first: undo
    /// removes each that is empty once the file is gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created_dirs: Vec<PathBuf>,
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
    pub created_dirs: Vec<PathBuf>,
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
        write_file(&Record::path()?, &(text + "\n"), None)
    }

    /// A file's key in the record: its absolute path, and the client, scope and project it
    /// was written for. One file can hold the entries of several (Claude Code's global config
    /// holds every project's local-scope servers and the user scope's), and each undoes its
    /// own.
    pub fn key(path: &Path, client: Client, scope: Scope, project: Option<&Path>) -> String {
        let file = Record::legacy_key(path);
        let project = project
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        format!(
            "{file}\u{0}{}\u{0}{}\u{0}{project}",
            client.name(),
            scope.name()
        )
    }

    /// The key records written before keys named their client and scope used: the path.
    pub fn legacy_key(path: &Path) -> String {
        std::path::absolute(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .to_string_lossy()
            .into_owned()
    }

    /// The record of `path` for this client, scope and project (or one of an older pith's).
    pub fn find(
        &self,
        path: &Path,
        client: Client,
        scope: Scope,
        project: Option<&Path>,
    ) -> Option<(String, &RecordedFile)> {
        let key = Record::key(path, client, scope, project);
        if let Some(r) = self.files.get(&key) {
            return Some((key, r));
        }
        let legacy = Record::legacy_key(path);
        self.files
            .get(&legacy)
            .filter(|r| r.is_of(client, scope))
            .map(|r| (legacy, r))
    }

    /// `path` went from `before` to `after`. A file pith changed before and nobody touched
    /// since keeps its first `before`: undo goes back to before pith, not one step.
    pub fn wrote(
        &mut self,
        (client, scope, project): (Client, Scope, Option<&Path>),
        path: &Path,
        (before, after): (Option<&str>, &str),
        added: Added,
    ) {
        let key = Record::key(path, client, scope, project);
        let (before, mut members, mut hook_command, mut created_dirs) =
            match self.files.remove(&key) {
                Some(r) if before == Some(r.after.as_str()) => {
                    (r.before, r.members, r.hook_command, r.created_dirs)
                }
                _ => (before.map(str::to_owned), Vec::new(), None, Vec::new()),
            };
        created_dirs.extend(added.created_dirs);
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
                created_dirs,
            },
        );
    }
}

/// A config file's text, `None` when it does not exist.
pub fn read_config(path: &Path) -> anyhow::Result<Option<String>> {
    match pith_paths::small::read_small_file(path, crate::client_files::SETTINGS_BYTES_MAX) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Where writing `path` lands: the file itself or, when it is a link, the file it leads to
/// (the link stays a link). A file of the project (`path` inside `project`) must land inside
/// the project: a link, or a linked directory on the way, that leads out of it is refused, so
/// a cloned repository cannot make setup write into another file of the user's. Outside the
/// project (the user's own settings, often links into a dotfiles repository) links are
/// followed.
pub fn landing(path: &Path, project: Option<&Path>) -> anyhow::Result<PathBuf> {
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // The nearest directory that exists, resolved; the ones still to create below it.
    let mut existing = parent;
    let mut missing = Vec::new();
    while !existing.exists() {
        missing.push(existing.file_name().unwrap_or_default().to_owned());
        existing = existing.parent().unwrap_or(Path::new("."));
    }
    let mut dir = existing
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", existing.display()))?;
    for m in missing.iter().rev() {
        dir.push(m);
    }
    let mut target = dir.join(name);
    if std::fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
        target = std::fs::canonicalize(&target).with_context(|| {
            format!(
                "{} is a link to nothing; remove it, or make it a file",
                path.display()
            )
        })?;
    }
    if let Some(root) = project
        && path.starts_with(root)
        && !target.starts_with(root)
    {
        anyhow::bail!(
            "{} leads out of the project (to {}) through a link; pith writes no file outside \
             the project for it: replace the link with a file, or use --scope user",
            path.display(),
            target.display()
        );
    }
    Ok(target)
}

/// Write `text` where `path` lands ([`landing`]). An existing file keeps its mode; a new one
/// is 0600, and a missing directory 0700, whatever the umask (a client config names a command
/// the client runs).
pub fn write_file(path: &Path, text: &str, project: Option<&Path>) -> anyhow::Result<()> {
    let target = landing(path, project)?;
    let dir = target
        .parent()
        .context("internal error: a file without a directory")?;
    crate::background::create_private_dir(dir)?;
    // Write beside and rename, so an interrupted write never leaves half a config. The
    // temporary name is this process's own and created new: a link or a file already there
    // (another setup at the same moment, or a repository's trap) is never written through.
    let tmp = dir.join(format!(
        ".{}.pith-{}-{}.tmp",
        target.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", tmp.display()));
    }
    // The mode the file has; a new one stays 0600.
    if let Ok(meta) = std::fs::metadata(&target)
        && let Err(e) = std::fs::set_permissions(&tmp, meta.permissions())
    {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot set permissions on {}", tmp.display()));
    }
    std::fs::rename(&tmp, &target).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::Error::new(e).context(format!("cannot replace {}", target.display()))
    })
}

/// Held for a whole `pith setup`: two at once would plan from the same old text, and the
/// second would write over the first's entries and record.
pub fn lock() -> anyhow::Result<std::fs::File> {
    let path = crate::config::pith_home()?.join("setup.lock");
    let file = crate::background::open_private(&path, false)?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let taken = crate::background::lock_until(&file, false, deadline)
        .with_context(|| format!("cannot lock {}", path.display()))?;
    anyhow::ensure!(
        taken,
        "another pith setup has held {} for 10 s; try again once it is done",
        path.display()
    );
    Ok(file)
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
