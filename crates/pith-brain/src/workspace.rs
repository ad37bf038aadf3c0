//! The workspace: where it is, and which paths are inside it.
//!
//! Every path an agent or user hands pith (a file to read, an evidence file) goes through
//! [`Workspace::resolve`], which refuses `..`, absolute paths outside the root and symlinks that
//! lead out of it, so no tool can be talked into reading `~/.ssh` through the workspace. The
//! confinement itself is `pith_paths`, the one rule workspace search uses too;
//! this module adds the brain's stricter policy (no `..` at all) and its words.

use std::path::{Component, Path, PathBuf};

use pith_paths::{Refused, confine};

/// A path pith refuses or cannot find, in words fit to show the caller.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The path was empty or only whitespace.
    #[error("empty path")]
    Empty,
    /// The path has a `..` component, refused outright.
    #[error("{path}: `..` is not allowed; give a path inside the workspace")]
    ParentDir {
        /// The path as given.
        path: String,
    },
    /// An absolute path outside the workspace root.
    #[error("{path} is outside the workspace ({root})")]
    Outside {
        /// The path as given.
        path: String,
        /// The workspace root, for the message.
        root: String,
    },
    /// The path is inside the root but a symlink on it leads out.
    #[error("{path} is a symlink that leads outside the workspace")]
    SymlinkEscape {
        /// The path as given.
        path: String,
    },
    /// Nothing exists at the path.
    #[error("{path} does not exist in the workspace")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// The path could not be read or canonicalized.
    #[error("cannot resolve {path}")]
    Io {
        /// The path as given.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// A path inside the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspacePath {
    /// Canonical absolute path (symlinks resolved).
    pub abs: PathBuf,
    /// Relative to the root as the caller named it, `/`-separated: the key evidence is stored
    /// and looked up under.
    pub rel: String,
}

/// A workspace root, canonicalized once.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// The workspace rooted exactly at `root`.
    pub fn new(root: &Path) -> Result<Workspace, PathError> {
        let root = root.canonicalize().map_err(|source| PathError::Io {
            path: root.display().to_string(),
            source,
        })?;
        Ok(Workspace { root })
    }

    /// The workspace containing `start`: its nearest ancestor (itself included) holding `.git`
    /// or `.pith`, else `start` itself.
    pub fn discover(start: &Path) -> Result<Workspace, PathError> {
        let ws = Workspace::new(start)?;
        let found = ws
            .root
            .ancestors()
            .find(|dir| dir.join(".git").exists() || dir.join(".pith").exists())
            .map(Path::to_path_buf);
        Ok(match found {
            Some(root) => Workspace { root },
            None => ws,
        })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolve a caller's path (relative to the root, or absolute inside it) to an existing
    /// file or directory inside the workspace.
    pub fn resolve(&self, input: &str) -> Result<WorkspacePath, PathError> {
        let input = input.trim();
        if input.is_empty() {
            return Err(PathError::Empty);
        }
        let given = Path::new(input);
        if given.components().any(|c| c == Component::ParentDir) {
            return Err(PathError::ParentDir {
                path: input.to_owned(),
            });
        }
        let relative = if given.is_absolute() {
            self.strip_root(given).ok_or_else(|| PathError::Outside {
                path: input.to_owned(),
                root: self.root.display().to_string(),
            })?
        } else {
            given.to_path_buf()
        };
        let parts: Vec<&str> = relative
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => s.to_str(),
                _ => None,
            })
            .collect();
        let rel = parts.join("/");
        // Relative and free of `..` by now: only a symlink can lead out.
        let abs = confine(&self.root, Path::new(&rel)).map_err(|refused| match refused {
            Refused::Outside => PathError::SymlinkEscape {
                path: input.to_owned(),
            },
            Refused::Unresolved(source) if source.kind() == std::io::ErrorKind::NotFound => {
                PathError::NotFound {
                    path: input.to_owned(),
                }
            }
            Refused::Unresolved(source) => PathError::Io {
                path: input.to_owned(),
                source,
            },
        })?;
        Ok(WorkspacePath { abs, rel })
    }

    /// `path` relative to the root, when it lies under it (as given, or once resolved, for
    /// absolute paths that reach the root through a symlinked prefix).
    fn strip_root(&self, path: &Path) -> Option<PathBuf> {
        if let Ok(rest) = path.strip_prefix(&self.root) {
            return Some(rest.to_path_buf());
        }
        let canonical = confine(&self.root, path).ok()?;
        canonical
            .strip_prefix(&self.root)
            .ok()
            .map(Path::to_path_buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws/src")).unwrap();
        std::fs::write(dir.path().join("ws/src/lib.rs"), "fn x() {}\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "secret\n").unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        (dir, ws)
    }

    #[test]
    fn resolves_relative_and_absolute_inside() {
        let (_dir, ws) = tree();
        let p = ws.resolve("./src//lib.rs").unwrap();
        assert_eq!(p.rel, "src/lib.rs");
        let abs = ws.root().join("src/lib.rs");
        assert_eq!(ws.resolve(abs.to_str().unwrap()).unwrap().rel, "src/lib.rs");
    }

    #[test]
    fn refuses_parent_outside_missing_and_empty() {
        let (dir, ws) = tree();
        assert!(matches!(
            ws.resolve("src/../../secret.txt"),
            Err(PathError::ParentDir { .. })
        ));
        let outside = dir.path().join("secret.txt");
        assert!(matches!(
            ws.resolve(outside.to_str().unwrap()),
            Err(PathError::Outside { .. })
        ));
        assert!(matches!(
            ws.resolve("src/nope.rs"),
            Err(PathError::NotFound { .. })
        ));
        assert!(matches!(ws.resolve("  "), Err(PathError::Empty)));
    }

    #[cfg(unix)]
    #[test]
    fn refuses_symlinks_that_escape_but_follows_inner_ones() {
        let (dir, ws) = tree();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), ws.root().join("leak")).unwrap();
        std::os::unix::fs::symlink(dir.path(), ws.root().join("up")).unwrap();
        std::os::unix::fs::symlink(ws.root().join("src/lib.rs"), ws.root().join("alias.rs"))
            .unwrap();
        assert!(matches!(
            ws.resolve("leak"),
            Err(PathError::SymlinkEscape { .. })
        ));
        assert!(matches!(
            ws.resolve("up/secret.txt"),
            Err(PathError::SymlinkEscape { .. })
        ));
        let inner = ws.resolve("alias.rs").unwrap();
        assert_eq!(inner.rel, "alias.rs");
        assert_eq!(inner.abs, ws.root().join("src/lib.rs"));
    }

    #[test]
    fn discover_finds_the_nearest_marked_ancestor() {
        let (_dir, ws) = tree();
        std::fs::create_dir(ws.root().join(".git")).unwrap();
        let found = Workspace::discover(&ws.root().join("src")).unwrap();
        assert_eq!(found.root(), ws.root());
        std::fs::create_dir(ws.root().join("src/.pith")).unwrap();
        let found = Workspace::discover(&ws.root().join("src")).unwrap();
        assert_eq!(found.root(), ws.root().join("src"));
    }
}
