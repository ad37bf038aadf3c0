//! Whether this user's pith made a workspace's brain, or it came with the project.
//!
//! `.pith/.gitignore` is `*`, so a brain in a clone is not the expected case; but a repository
//! can commit one, and its memory titles then reach the model in pith's notes. pith cannot
//! tell a memory's author from its text, so it remembers the brains it made: when pith creates
//! a workspace's `brain.db` it records the file's identity (device and inode) under
//! `$PITH_HOME/brains/`, a directory of the user's own, in a file named for the workspace. A
//! clone's brain is a new file (a new inode) that no record names; notes from it say where
//! they came from ([`crate::render::from_project`]). `pith memory trust` records a brain the
//! person has reviewed (and one made by a pith from before this record).
//!
//! Reading a record costs the hook one `lstat` and one small read.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::Brain;

/// Where a brain's notes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// This user's pith made it (or the person trusted it).
    Own,
    /// It came with the project: its text is the project's, not pith's.
    Project,
}

/// The records of the brains this user's pith made: `$PITH_HOME/brains/`.
#[derive(Debug, Clone)]
pub struct Origins {
    dir: PathBuf,
}

impl Origins {
    /// The records under `pith_home`.
    pub fn new(pith_home: &Path) -> Origins {
        Origins {
            dir: pith_home.join("brains"),
        }
    }

    /// Where the brain at `root` came from: [`Origin::Own`] when a record names its file as
    /// it is now.
    pub fn of(&self, root: &Path) -> Origin {
        match (identity(root), std::fs::read_to_string(self.record(root))) {
            (Some(id), Ok(recorded)) if recorded.trim() == id => Origin::Own,
            _ => Origin::Project,
        }
    }

    /// Record the brain at `root` as this user's (pith made it, or the person trusted it).
    pub fn remember(&self, root: &Path) -> std::io::Result<()> {
        let id = identity(root).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is not a brain file", Brain::db_path(root).display()),
            )
        })?;
        pith_paths::private::create_dir(&self.dir)?;
        let path = self.record(root);
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        let written = pith_paths::private::open(
            &tmp,
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true),
        )
        .and_then(|mut f| f.write_all(format!("{id}\n").as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// The record's file for the workspace at `root`: named by a hash of its path.
    fn record(&self, root: &Path) -> PathBuf {
        let digest = Sha256::digest(root.as_os_str().as_encoded_bytes());
        let name: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
        self.dir.join(name)
    }
}

/// The brain file's identity, not following a link: `"<device> <inode>"`.
#[cfg(unix)]
fn identity(root: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(Brain::db_path(root)).ok()?;
    meta.is_file()
        .then(|| format!("{} {}", meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn identity(root: &Path) -> Option<String> {
    let meta = std::fs::symlink_metadata(Brain::db_path(root)).ok()?;
    meta.is_file()
        .then(|| format!("{:?}", meta.created().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_brain_is_own_and_a_copy_of_it_elsewhere_or_in_its_place_is_not() {
        let home = tempfile::tempdir().unwrap();
        let origins = Origins::new(home.path());
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(crate::BRAIN_DIR)).unwrap();
        let db = Brain::db_path(ws.path());
        std::fs::write(&db, "x").unwrap();
        assert_eq!(origins.of(ws.path()), Origin::Project, "no record yet");
        origins.remember(ws.path()).unwrap();
        assert_eq!(origins.of(ws.path()), Origin::Own);
        // Another workspace with the same bytes: a file no record names.
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir(other.path().join(crate::BRAIN_DIR)).unwrap();
        std::fs::copy(&db, Brain::db_path(other.path())).unwrap();
        assert_eq!(origins.of(other.path()), Origin::Project);
        // The brain replaced in place (a fresh clone at the same path): a new file.
        let replaced = db.with_extension("new");
        std::fs::write(&replaced, "x").unwrap();
        std::fs::rename(&replaced, &db).unwrap();
        assert_eq!(origins.of(ws.path()), Origin::Project);
    }
}
