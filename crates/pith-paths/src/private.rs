//! pith's own files and directories: created 0600 and 0700 whatever the umask, and never
//! opened through a symbolic link. A link where pith keeps a file of its own was put there by
//! someone else; following it would let them aim pith's writes (a lock, a segment, a stamp)
//! at any file the user can write, so it is refused, naming the path.
//!
//! For files under `$PITH_HOME` and the like, whose parents are the user's own (a parent may be
//! a link: a home directory often is one). Inside a project, where no component may be a link,
//! [`crate::own::OwnDir`] is the rule.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// The mode of every file pith creates for itself.
pub const FILE_MODE: u32 = 0o600;
/// The mode of every directory pith creates for itself.
pub const DIR_MODE: u32 = 0o700;

/// The error for a link found where pith keeps a file or directory of its own.
fn is_a_link(path: &Path) -> io::Error {
    io::Error::other(format!(
        "{path:?} is a symbolic link; pith does not open its own files through a link \
         (remove the link, and name the real location in the configuration instead)"
    ))
}

/// `dir` as a directory of pith's own: created (with missing parents) 0700 whatever the
/// umask, or already there as a real directory; a link there is refused. The parents may
/// be links (a home directory often is one); only `dir` itself is pith's.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    if std::fs::symlink_metadata(dir).is_ok_and(|meta| meta.file_type().is_symlink()) {
        return Err(is_a_link(dir));
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true).mode(DIR_MODE);
    builder.create(dir)?;
    // Created just now, or by a racing process: still no link.
    if std::fs::symlink_metadata(dir)?.file_type().is_symlink() {
        return Err(is_a_link(dir));
    }
    Ok(())
}

/// Open `path` with `options`, adding what every file of pith's own needs: mode 0600 when it
/// is created, no following a link at its last component (`O_NOFOLLOW`: refused, naming
/// it), and close-on-exec.
pub fn open(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    options
        .mode(FILE_MODE)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32);
    match options.open(path) {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            Err(is_a_link(path))
        }
        other => other,
    }
}

/// [`open`] for writing: created 0600 when missing, never truncated (a lock file, a stamp).
pub fn create_or_open(path: &Path) -> io::Result<File> {
    open(
        path,
        OpenOptions::new().write(true).create(true).truncate(false),
    )
}

/// [`open`] for appending to a file that must not exist yet (a new segment, a new log).
pub fn create_new(path: &Path) -> io::Result<File> {
    open(path, OpenOptions::new().append(true).create_new(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    }

    /// Whatever the umask (the test's own: 022 or 002 gives 0644 or 0664 to a plain create),
    /// files are 0600 and directories 0700.
    #[test]
    fn modes_ignore_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a/b");
        create_dir(&sub).unwrap();
        let file = sub.join("lock");
        create_or_open(&file).unwrap();
        let segment = sub.join("1.spool");
        create_new(&segment).unwrap();
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        assert_eq!(mode(&sub), 0o700);
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&segment), 0o600);
        // An existing directory is fine; an existing file opens again, not truncated.
        std::fs::write(&file, b"kept").unwrap();
        create_dir(&sub).unwrap();
        create_or_open(&file).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"kept");
        assert!(create_new(&segment).is_err());
    }

    /// A link where pith keeps its own file or directory is refused, naming it, and its
    /// target is left untouched.
    #[test]
    fn a_link_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, b"precious").unwrap();
        let link = dir.path().join("lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = create_or_open(&link).unwrap_err();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert!(e.to_string().contains("lock"), "{e}");
        // O_EXCL never follows a link either (it finds the name taken).
        assert!(create_new(&link).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        let elsewhere = tempfile::tempdir().unwrap();
        let dir_link = dir.path().join("spool");
        std::os::unix::fs::symlink(elsewhere.path(), &dir_link).unwrap();
        let e = create_dir(&dir_link).unwrap_err();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        // A dangling link too: nothing is created at its target.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(create_dir(&dangling).is_err());
        assert!(create_or_open(&dangling).is_err());
        assert!(!dir.path().join("nowhere").exists());
    }
}
