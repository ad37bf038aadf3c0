//! The one rule for a path a caller names inside a workspace: it may not lead out of the root,
//! whether by an absolute path elsewhere, by `..`, or through a symlink.
//!
//! Workspace search, the brain's evidence and file reads (`pith_brain::Workspace::resolve`), and
//! the CLI's evidence paths all go through here; each caller words the refusal itself. It is a
//! leaf of its own so that the brain (and through it the store and the proxy) does not link
//! the search crate's ripgrep libraries for one rule.
//!
//! [`private`] and [`own`] hold the other rules for paths: how pith creates and opens files of
//! its own, in its own home ([`private`]) and in a project, a stranger's ([`own`]); [`small`]
//! how it reads a small settings file that may be a stranger's; [`shown`] which characters of
//! a stranger's name are escaped when shown.

#[cfg(unix)]
pub mod own;
#[cfg(unix)]
pub mod private;
pub mod shown;
pub mod small;

use std::path::{Component, Path, PathBuf};

/// Why a path is not an existing path inside the root.
#[derive(Debug)]
pub enum Refused {
    /// It leads outside the root: an absolute path elsewhere, `..` past the root, or a symlink
    /// that points out.
    Outside,
    /// Read as written it lies inside the root, but it cannot be resolved: usually it does not
    /// exist (the error says).
    Unresolved(std::io::Error),
}

/// `path` (relative to `root`, or absolute) resolved to its canonical form, symlinks followed,
/// when that lies inside `root`. `root` must be canonical.
///
/// A path that cannot be resolved is judged by its name alone ([`lexically_normal`]), so a
/// missing file inside the root is told apart from a name that points outside it.
pub fn confine(root: &Path, path: &Path) -> Result<PathBuf, Refused> {
    let joined = root.join(path);
    match joined.canonicalize() {
        Ok(resolved) if resolved.starts_with(root) => Ok(resolved),
        Ok(_) => Err(Refused::Outside),
        Err(e) if lexically_normal(&joined).starts_with(root) => Err(Refused::Unresolved(e)),
        Err(_) => Err(Refused::Outside),
    }
}

/// `path` with `.` and `..` folded away without touching the file system (`..` at the root
/// stays at the root), for paths that may not exist.
pub fn lexically_normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `<tmp>/ws/src/lib.rs` inside, `<tmp>/secret.txt` outside; returns the canonical root.
    fn tree() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws/src")).unwrap();
        std::fs::write(dir.path().join("ws/src/lib.rs"), "fn x() {}\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "secret\n").unwrap();
        let root = dir.path().join("ws").canonicalize().unwrap();
        (dir, root)
    }

    #[test]
    fn inside_paths_resolve_relative_absolute_and_through_dots() {
        let (_dir, root) = tree();
        let lib = root.join("src/lib.rs");
        assert_eq!(confine(&root, Path::new("src/lib.rs")).unwrap(), lib);
        assert_eq!(
            confine(&root, Path::new("./src/../src/lib.rs")).unwrap(),
            lib
        );
        assert_eq!(confine(&root, &lib).unwrap(), lib);
        assert_eq!(confine(&root, Path::new("")).unwrap(), root);
    }

    #[test]
    fn parent_dirs_and_absolute_paths_outside_are_refused() {
        let (dir, root) = tree();
        for outside in [
            PathBuf::from("../secret.txt"),
            PathBuf::from("src/../../secret.txt"),
            dir.path().join("secret.txt"),
            PathBuf::from("/"),
        ] {
            assert!(
                matches!(confine(&root, &outside), Err(Refused::Outside)),
                "{outside:?}"
            );
        }
    }

    #[test]
    fn missing_inside_is_unresolved_and_missing_outside_is_outside() {
        let (dir, root) = tree();
        let missing = confine(&root, Path::new("src/nope.rs"));
        assert!(
            matches!(&missing, Err(Refused::Unresolved(e)) if e.kind() == std::io::ErrorKind::NotFound),
            "{missing:?}"
        );
        assert!(matches!(
            confine(&root, Path::new("a/../b/nope.rs")),
            Err(Refused::Unresolved(_))
        ));
        assert!(matches!(
            confine(&root, Path::new("../nope.rs")),
            Err(Refused::Outside)
        ));
        assert!(matches!(
            confine(&root, &dir.path().join("nope.rs")),
            Err(Refused::Outside)
        ));
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_out_are_refused_and_symlinks_inside_followed() {
        let (dir, root) = tree();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("leak")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
        std::os::unix::fs::symlink(root.join("src/lib.rs"), root.join("alias.rs")).unwrap();
        std::os::unix::fs::symlink(root.join("src"), root.join("code")).unwrap();
        for escape in ["leak", "up/secret.txt", "up"] {
            assert!(
                matches!(confine(&root, Path::new(escape)), Err(Refused::Outside)),
                "{escape}"
            );
        }
        let lib = root.join("src/lib.rs");
        assert_eq!(confine(&root, Path::new("alias.rs")).unwrap(), lib);
        assert_eq!(confine(&root, Path::new("code/lib.rs")).unwrap(), lib);
        // A dangling link inside is missing, not outside: its name stays in the root.
        std::os::unix::fs::symlink(dir.path().join("gone"), root.join("dangling")).unwrap();
        assert!(matches!(
            confine(&root, Path::new("dangling")),
            Err(Refused::Unresolved(_))
        ));
    }

    #[test]
    fn lexical_folding() {
        let fold = |p: &str| lexically_normal(Path::new(p));
        assert_eq!(fold("/ws/sub/../src/./a.rs"), Path::new("/ws/src/a.rs"));
        assert_eq!(fold("/ws/../../x"), Path::new("/x"));
        assert_eq!(fold("a/./b/.."), Path::new("a"));
    }
}
