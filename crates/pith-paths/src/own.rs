//! pith's own files inside a directory it does not trust: a project someone cloned.
//!
//! Everything under a project is data from a stranger (DESIGN principle 13): `.pith/session`
//! committed as a link to `../..` once made the hook prune the user's other projects, and a
//! `.pruned` linked to `~/.bashrc` was truncated through the link. So pith reaches its own
//! directories there one component at a time from a directory it trusts (the workspace root),
//! each opened with `O_NOFOLLOW | O_DIRECTORY`, and works on files only through that directory's
//! descriptor: every open is `O_NOFOLLOW`, a file pith reads or writes must be a regular file
//! with one link (a hard link to a user's file is refused too), and it removes only regular
//! files whose names the caller says are its own, never a directory.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// A directory of pith's own, reached without following a link, and kept open: what is done
/// in it is done through its descriptor, so a link planted above it later cannot redirect it.
#[derive(Debug)]
pub struct OwnDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// How [`OwnDir::file`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read it; it must exist.
    Read,
    /// Read and append; it must exist.
    Append,
    /// Read and append, creating it (0600) when missing; `Err(AlreadyExists)` when it exists.
    CreateNew,
    /// Write it from empty, creating it (0600) when missing: for a temporary file of pith's own
    /// name that is then renamed over the real one.
    Replace,
}

/// The error for an entry that is not what pith made: a link, a directory where a file should
/// be, a file with other names (hard links).
fn not_own(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} is {what}; pith uses only what it made there and follows no link in a project",
            path.display()
        ),
    )
}

impl OwnDir {
    /// The directory `base/<names...>`: `base` is trusted (opened as it is, links in it
    /// followed: a canonical workspace root), each of `names` must be a real directory, not a
    /// link. With `create`, a missing one is made 0700 whatever the umask.
    pub fn open(base: &Path, names: &[&str], create: bool) -> io::Result<OwnDir> {
        let fd = rustix::fs::open(
            base,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut dir = OwnDir {
            fd,
            path: base.to_owned(),
        };
        for name in names {
            dir = dir.subdir(name, create)?;
        }
        Ok(dir)
    }

    /// The directory `name` inside this one, never through a link; made 0700 with `create`.
    pub fn subdir(&self, name: &str, create: bool) -> io::Result<OwnDir> {
        let path = self.path.join(name);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let opened = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Err(rustix::io::Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&self.fd, name, Mode::RWXU) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                rustix::fs::openat(&self.fd, name, flags, Mode::empty())
            }
            other => other,
        };
        match opened {
            Ok(fd) => Ok(OwnDir { fd, path }),
            // A link is refused as ELOOP or, with O_DIRECTORY, ENOTDIR: say which it is.
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                Err(match self.kind(name) {
                    Ok(Some(EntryKind::Link)) => not_own(&path, "a link"),
                    _ => not_own(&path, "not a directory"),
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Where this directory is (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file `name` in this directory, opened as `access` says, never through a link; an
    /// existing file must be a regular file with no other name.
    pub fn file(&self, name: &str, access: Access) -> io::Result<File> {
        let base = OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let flags = match access {
            Access::Read => OFlags::RDONLY,
            Access::Append => OFlags::RDWR | OFlags::APPEND,
            Access::CreateNew => OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::EXCL,
            // Truncated only once it is known to be pith's own (below): O_TRUNC would empty a
            // hard link to a user's file before the check.
            Access::Replace => OFlags::WRONLY | OFlags::CREATE,
        };
        let path = self.path.join(name);
        // A FIFO planted under pith's name would block an open without NONBLOCK; a regular
        // file ignores the flag.
        let fd = match rustix::fs::openat(&self.fd, name, base | flags, Mode::RUSR | Mode::WUSR) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP) => return Err(not_own(&path, "a link")),
            Err(e) => return Err(e.into()),
        };
        let stat = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(not_own(&path, "not a regular file"));
        }
        if stat.st_nlink > 1 {
            return Err(not_own(&path, "a file with other names (a hard link)"));
        }
        // Back to blocking for ordinary reads and writes.
        rustix::fs::fcntl_setfl(&fd, rustix::fs::fcntl_getfl(&fd)? - OFlags::NONBLOCK)?;
        let file = File::from(fd);
        if access == Access::Replace {
            file.set_len(0)?;
        }
        Ok(file)
    }

    /// What `name` is in this directory without following it: `None` when it does not exist.
    pub fn kind(&self, name: &str) -> io::Result<Option<EntryKind>> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(EntryKind::of(&stat))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The names in this directory with what each is and when it was last changed (not
    /// followed), `.` and `..` left out.
    pub fn entries(&self) -> io::Result<Vec<Entry>> {
        self.entries_at_most(usize::MAX)
    }

    /// [`OwnDir::entries`], the first `max` of them at most (a directory that came with a
    /// project may hold any number).
    pub fn entries_at_most(&self, max: usize) -> io::Result<Vec<Entry>> {
        let fd = rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut out = Vec::new();
        let me = rustix::process::geteuid().as_raw();
        for entry in rustix::fs::Dir::read_from(&fd)? {
            if out.len() >= max {
                break;
            }
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(name) else {
                continue;
            };
            let Ok(stat) = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            out.push(Entry {
                name: name.to_owned(),
                kind: EntryKind::of(&stat),
                modified: modified(&stat),
                private: stat.st_uid == me && stat.st_mode & 0o077 == 0,
            });
        }
        Ok(out)
    }

    /// Remove `name` when it is a regular file (a link is removed itself, never what it
    /// points to; a directory is never removed). The caller names only files of its own names.
    pub fn remove_file(&self, name: &str) -> io::Result<()> {
        match self.kind(name)? {
            Some(EntryKind::File) | Some(EntryKind::Link) => {
                rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())?;
                Ok(())
            }
            Some(_) => Err(not_own(&self.path.join(name), "not a regular file")),
            None => Ok(()),
        }
    }

    /// Rename `from` to `to`, both in this directory (a link at `to` is replaced, not followed).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        rustix::fs::renameat(&self.fd, from, &self.fd, to)?;
        Ok(())
    }

    /// Mark `name` as changed now, creating it empty (0600) when missing; never truncates, and
    /// never through a link.
    pub fn touch(&self, name: &str) -> io::Result<()> {
        let file = match self.file(name, Access::Append) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match self.file(name, Access::CreateNew) {
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        self.file(name, Access::Append)?
                    }
                    other => other?,
                }
            }
            other => other?,
        };
        file.set_modified(SystemTime::now())
    }
}

/// What a directory entry is, not following links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Link,
    /// Anything else (a FIFO, a socket, a device).
    Other,
}

impl EntryKind {
    fn of(stat: &rustix::fs::Stat) -> EntryKind {
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Link,
            _ => EntryKind::Other,
        }
    }
}

/// One entry of [`OwnDir::entries`].
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its name (names that are not UTF-8 are left out: pith makes none).
    pub name: String,
    /// What it is, not following a link.
    pub kind: EntryKind,
    /// When it was last changed.
    pub modified: SystemTime,
    /// Whether only its owner, this user, can read or write it: what pith makes (0600). A file
    /// git checks out is 0644 or 0755, so one that came with a clone is not private.
    pub private: bool,
}

fn modified(stat: &rustix::fs::Stat) -> SystemTime {
    let secs = u64::try_from(stat.st_mtime).unwrap_or(0);
    let nanos = u32::try_from(stat.st_mtime_nsec).unwrap_or(0);
    SystemTime::UNIX_EPOCH + std::time::Duration::new(secs, nanos.min(999_999_999))
}

/// Whether `dir/<sub>` is a real directory whose entries `names` are each absent or a regular
/// file with one name: what must hold before SQLite opens a database there by path (it follows
/// links, to the database and to its `-wal` and `-shm` files). `Ok(false)` when `sub` does not
/// exist; an error naming the entry when one is a link, a hard link or not a file.
pub fn own_files_or_none(dir: &Path, sub: &str, names: &[&str]) -> io::Result<bool> {
    let sub = match OwnDir::open(dir, &[sub], false) {
        Ok(sub) => sub,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    for name in names {
        let stat = match rustix::fs::statat(&sub.fd, *name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        let path = sub.path.join(name);
        match EntryKind::of(&stat) {
            EntryKind::File if stat.st_nlink > 1 => {
                return Err(not_own(&path, "a file with other names (a hard link)"));
            }
            EntryKind::File => {}
            EntryKind::Link => return Err(not_own(&path, "a link")),
            _ => return Err(not_own(&path, "not a regular file")),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::symlink;

    #[test]
    fn a_link_on_the_way_is_refused_and_a_real_directory_is_made_private() {
        let top = tempfile::tempdir().unwrap();
        let outside = top.path().join("outside");
        let ws = top.path().join("ws");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        symlink(&outside, ws.join(".pith")).unwrap();
        let err = OwnDir::open(&ws, &[".pith", "session"], true).unwrap_err();
        assert!(err.to_string().contains(".pith is a link"), "{err}");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        std::fs::remove_file(ws.join(".pith")).unwrap();
        let dir = OwnDir::open(&ws, &[".pith", "session"], true).unwrap();
        assert_eq!(dir.path(), ws.join(".pith/session"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(ws.join(".pith/session"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::write(ws.join("file"), "").unwrap();
        let err = OwnDir::open(&ws, &["file"], false).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn files_are_never_opened_touched_or_removed_through_a_link_or_a_hard_link() {
        let top = tempfile::tempdir().unwrap();
        let mine = top.path().join("bashrc");
        std::fs::write(&mine, "the user's").unwrap();
        let dir = OwnDir::open(top.path(), &["own"], true).unwrap();
        let own = top.path().join("own");
        symlink(&mine, own.join(".pruned")).unwrap();
        std::fs::hard_link(&mine, own.join("hard")).unwrap();
        for access in [Access::Read, Access::Append, Access::Replace] {
            let err = dir.file(".pruned", access).unwrap_err();
            assert!(err.to_string().contains("a link"), "{access:?}: {err}");
            let err = dir.file("hard", access).unwrap_err();
            assert!(err.to_string().contains("hard link"), "{access:?}: {err}");
        }
        assert!(dir.touch(".pruned").is_err());
        // Removing a link removes the link, never its target; a directory is never removed.
        dir.remove_file(".pruned").unwrap();
        std::fs::create_dir(own.join("sub")).unwrap();
        assert!(dir.remove_file("sub").is_err());
        assert!(own.join("sub").is_dir());
        assert_eq!(std::fs::read_to_string(&mine).unwrap(), "the user's");
        // A real file of pith's own: made 0600, appended, touched without truncation.
        let mut f = dir.file("a.claims", Access::CreateNew).unwrap();
        f.write_all(b"line\n").unwrap();
        dir.touch("a.claims").unwrap();
        let mut text = String::new();
        dir.file("a.claims", Access::Read)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "line\n");
        let names: Vec<String> = dir.entries().unwrap().into_iter().map(|e| e.name).collect();
        assert!(names.contains(&"a.claims".to_owned()), "{names:?}");
    }

    #[test]
    fn brain_files_are_checked_without_following_links() {
        let top = tempfile::tempdir().unwrap();
        assert!(!own_files_or_none(top.path(), ".pith", &["brain.db"]).unwrap());
        std::fs::create_dir(top.path().join(".pith")).unwrap();
        assert!(own_files_or_none(top.path(), ".pith", &["brain.db"]).unwrap());
        std::fs::write(top.path().join("x"), "").unwrap();
        symlink(top.path().join("x"), top.path().join(".pith/brain.db-wal")).unwrap();
        let err =
            own_files_or_none(top.path(), ".pith", &["brain.db", "brain.db-wal"]).unwrap_err();
        assert!(err.to_string().contains("brain.db-wal is a link"), "{err}");
    }
}
