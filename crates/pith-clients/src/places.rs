//! Where the clients keep their files on this machine: the one place their environment
//! variables are read.

use std::path::PathBuf;

/// The directories the clients' files are found from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Places {
    /// The person's home directory.
    pub home: Option<PathBuf>,
    /// The project (workspace root) a command runs for.
    pub project: Option<PathBuf>,
    /// `CLAUDE_CONFIG_DIR`: Claude Code's config directory, when moved.
    pub claude_config_dir: Option<PathBuf>,
    /// `CODEX_HOME`: Codex's home, when moved.
    pub codex_home: Option<PathBuf>,
    /// `XDG_CONFIG_HOME`: where OpenCode's global config directory is, when moved.
    pub xdg_config_home: Option<PathBuf>,
    /// `XDG_DATA_HOME`: where OpenCode keeps its sessions, when moved.
    pub xdg_data_home: Option<PathBuf>,
    /// `OPENCODE_DB`: OpenCode's session database, when moved.
    pub opencode_db: Option<PathBuf>,
}

impl Places {
    /// The places from the environment. A variable set to the empty string counts as unset,
    /// as the clients read it.
    pub fn from_env(home: Option<PathBuf>, project: Option<PathBuf>) -> Places {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Places {
            home,
            project,
            claude_config_dir: var("CLAUDE_CONFIG_DIR"),
            codex_home: var("CODEX_HOME"),
            xdg_config_home: var("XDG_CONFIG_HOME"),
            xdg_data_home: var("XDG_DATA_HOME"),
            opencode_db: var("OPENCODE_DB"),
        }
    }
}
