//! `pith service install|uninstall|status`: keep `pith proxy` running as the user's own
//! service, restarted when it fails: a systemd user unit on Linux
//! (`$XDG_CONFIG_HOME/systemd/user/pith.service`), a launchd agent on macOS
//! (`~/Library/LaunchAgents/dev.pith.proxy.plist`). The answer to `pith setup --proxy`'s
//! warning: a client with a permanent base URL needs a proxy that is always there.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use crate::background::{self, Probe};
use crate::config::Config;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Linux: a systemd user unit, enabled and started with `systemctl --user`
(`loginctl enable-linger $USER` keeps it running while you are logged out). macOS: a launchd
agent, loaded with `launchctl`. The service runs `pith proxy` with the config file and PITH_HOME
in effect at install time; its log is the service manager's (journalctl --user -u pith)."
)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Write the service and start it (again, when one is there: the file is rewritten).
    Install {
        /// Write the service file only; start nothing.
        #[arg(long)]
        no_start: bool,
        /// Print the service file and write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Stop the service and remove its file.
    Uninstall {
        /// Remove the file only; stop nothing.
        #[arg(long)]
        no_stop: bool,
    },
    /// Whether the service file is there, runs this binary, and the proxy answers.
    Status,
}

/// What the service runs: this binary's `proxy`, with the config file in effect.
struct Launch {
    exe: PathBuf,
    config: Option<PathBuf>,
    pith_home: Option<PathBuf>,
}

impl Launch {
    fn args(&self) -> Vec<String> {
        let mut args = vec![self.exe.to_string_lossy().into_owned()];
        if let Some(c) = &self.config {
            args.push("--config".to_owned());
            args.push(c.to_string_lossy().into_owned());
        }
        args.push("proxy".to_owned());
        args
    }
}

/// A word of an `ExecStart=` line: quoted when it holds anything but plain characters.
fn systemd_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c))
    {
        word.to_owned()
    } else {
        format!(
            "\"{}\"",
            word.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('%', "%%")
        )
    }
}

/// The systemd user unit.
fn systemd_unit(launch: &Launch) -> String {
    let exec: Vec<String> = launch.args().iter().map(|a| systemd_word(a)).collect();
    let env = launch
        .pith_home
        .as_ref()
        .map(|h| {
            format!(
                "Environment={}\n",
                systemd_word(&format!("PITH_HOME={}", h.display()))
            )
        })
        .unwrap_or_default();
    format!(
        "# Written by `pith service install`; `pith service uninstall` removes it.\n\
         [Unit]\n\
         Description=pith proxy for coding agents\n\
         After=network.target\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={}\n\
         {env}\
         Restart=on-failure\n\
         RestartSec=2\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        exec.join(" ")
    )
}

/// `text` escaped for an XML text node.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The launchd agent: runs at load, restarted when it exits unsuccessfully.
fn launchd_plist(launch: &Launch, log: &Path) -> String {
    let args: String = launch
        .args()
        .iter()
        .map(|a| format!("    <string>{}</string>\n", xml(a)))
        .collect();
    let env = launch
        .pith_home
        .as_ref()
        .map(|h| {
            format!(
                "  <key>EnvironmentVariables</key>\n  <dict>\n    <key>PITH_HOME</key>\n    <string>{}</string>\n  </dict>\n",
                xml(&h.to_string_lossy())
            )
        })
        .unwrap_or_default();
    let log = xml(&log.to_string_lossy());
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <!-- Written by `pith service install`; `pith service uninstall` removes it. -->\n\
         <plist version=\"1.0\">\n\
         <dict>\n  <key>Label</key>\n  <string>{LAUNCHD_LABEL}</string>\n  <key>ProgramArguments</key>\n  <array>\n{args}  </array>\n{env}  <key>RunAtLoad</key>\n  <true/>\n  <key>KeepAlive</key>\n  <dict>\n    <key>SuccessfulExit</key>\n    <false/>\n  </dict>\n  <key>StandardErrorPath</key>\n  <string>{log}</string>\n  <key>StandardOutPath</key>\n  <string>{log}</string>\n</dict>\n</plist>\n"
    )
}

const LAUNCHD_LABEL: &str = "dev.pith.proxy";
const SYSTEMD_UNIT: &str = "pith.service";

/// Where the service file goes on this system.
fn service_path() -> anyhow::Result<PathBuf> {
    if cfg!(target_os = "macos") {
        Ok(dirs::home_dir()
            .context("cannot find your home directory")?
            .join("Library/LaunchAgents")
            .join(format!("{LAUNCHD_LABEL}.plist")))
    } else {
        let config = crate::env::path(crate::env::Var::XdgConfigHome)
            .or_else(|| dirs::home_dir().map(|h| h.join(".config")))
            .context("cannot find your config directory; set XDG_CONFIG_HOME")?;
        Ok(config.join("systemd/user").join(SYSTEMD_UNIT))
    }
}

/// Run a service-manager command; its failure is reported, with the command to run by hand.
fn manage(program: &str, args: &[&str]) -> bool {
    let shown = format!("{program} {}", args.join(" "));
    match Command::new(program).args(args).status() {
        Ok(s) if s.success() => {
            println!("ran `{shown}`.");
            true
        }
        Ok(s) => {
            eprintln!("pith: `{shown}` failed ({s}); run it yourself once the problem is fixed.");
            false
        }
        Err(e) => {
            eprintln!("pith: cannot run `{shown}` ({e}); run it yourself where it is available.");
            false
        }
    }
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    let path = service_path()?;
    let exe = std::env::current_exe().context("cannot find this binary's path")?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let launch = Launch {
        exe,
        config: config.source.clone(),
        pith_home: crate::env::absolute_path(crate::env::Var::Home)?,
    };
    match args.action {
        Action::Install { no_start, dry_run } => install(&path, &launch, no_start, dry_run),
        Action::Uninstall { no_stop } => uninstall(&path, no_stop),
        Action::Status => status(&path, &launch, config),
    }
}

const MACOS: bool = cfg!(target_os = "macos");

/// Write the unit (or plist) and, unless told not to, start it.
fn install(path: &Path, launch: &Launch, no_start: bool, dry_run: bool) -> anyhow::Result<()> {
    let text = if MACOS {
        let log = background::log_path(&crate::config::pith_home()?);
        launchd_plist(launch, &log)
    } else {
        systemd_unit(launch)
    };
    if dry_run {
        println!("{}:", path.display());
        print!("{text}");
        println!("dry run: nothing written.");
        return Ok(());
    }
    let file = background::open_private(path, false)?;
    drop(file);
    std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    println!("wrote {}.", path.display());
    if no_start {
        return Ok(());
    }
    if MACOS {
        let target = path.to_string_lossy().into_owned();
        let _ = Command::new("launchctl").args(["unload", &target]).status();
        manage("launchctl", &["load", "-w", &target]);
    } else if manage("systemctl", &["--user", "daemon-reload"]) {
        manage("systemctl", &["--user", "enable", "--now", SYSTEMD_UNIT]);
        manage("systemctl", &["--user", "restart", SYSTEMD_UNIT]);
    }
    Ok(())
}

/// Stop it (unless told not to) and remove the unit.
fn uninstall(path: &Path, no_stop: bool) -> anyhow::Result<()> {
    if !path.exists() {
        println!("no pith service at {}; nothing to remove.", path.display());
        return Ok(());
    }
    if !no_stop {
        if MACOS {
            manage("launchctl", &["unload", "-w", &path.to_string_lossy()]);
        } else {
            manage("systemctl", &["--user", "disable", "--now", SYSTEMD_UNIT]);
        }
    }
    std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))?;
    println!("removed {}.", path.display());
    if !no_stop && !MACOS {
        manage("systemctl", &["--user", "daemon-reload"]);
    }
    Ok(())
}

/// Whether the unit runs this binary, and whether a proxy answers.
fn status(path: &Path, launch: &Launch, config: &Config) -> anyhow::Result<()> {
    match std::fs::read_to_string(path) {
        Err(_) => println!(
            "no pith service at {} (`pith service install` writes one).",
            path.display()
        ),
        Ok(text) => {
            let runs_this = text.contains(&*launch.exe.to_string_lossy());
            println!(
                "{}: {}",
                path.display(),
                if runs_this {
                    "runs this binary".to_owned()
                } else {
                    format!(
                        "runs another binary than this one ({}); `pith service install` rewrites it",
                        launch.exe.display()
                    )
                }
            );
        }
    }
    let listen = super::proxy::listen_addr(None, config)?;
    let addr = super::run::reachable(listen);
    match background::probe(addr, None, background::PROBE_TIMEOUT) {
        Probe::Pith(h) => println!(
            "proxy: pith {} answers on {addr}.",
            pith_brain::render::one_line(&h.version, 80)
        ),
        Probe::Other(what) => println!(
            "proxy: {addr} answers, but not as pith ({}).",
            pith_brain::render::one_line(&what, 300)
        ),
        Probe::Nothing => println!("proxy: nothing answers on {addr}."),
    }
    if path.exists() && !MACOS {
        let _ = Command::new("systemctl")
            .args(["--user", "--no-pager", "status", SYSTEMD_UNIT])
            .status();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> Launch {
        Launch {
            exe: PathBuf::from("/opt/pith tools/pith"),
            config: Some(PathBuf::from("/home/u/.config/pith/config.toml")),
            pith_home: Some(PathBuf::from("/home/u/pith-data")),
        }
    }

    #[test]
    fn the_unit_runs_this_proxy_and_restarts_it_on_failure() {
        let unit = systemd_unit(&launch());
        assert!(
            unit.contains(
                "ExecStart=\"/opt/pith tools/pith\" --config /home/u/.config/pith/config.toml proxy\n"
            ),
            "{unit}"
        );
        assert!(
            unit.contains("Environment=PITH_HOME=/home/u/pith-data\n"),
            "{unit}"
        );
        assert!(unit.contains("Restart=on-failure\n"), "{unit}");
        assert!(unit.contains("WantedBy=default.target\n"), "{unit}");
    }

    #[test]
    fn the_launchd_agent_runs_this_proxy_and_keeps_it_alive_on_failure() {
        let plist = launchd_plist(&launch(), Path::new("/home/u/pith-data/logs/proxy.log"));
        assert!(plist.contains("<string>dev.pith.proxy</string>"), "{plist}");
        assert!(
            plist.contains(
                "<array>\n    <string>/opt/pith tools/pith</string>\n    <string>--config</string>\n    <string>/home/u/.config/pith/config.toml</string>\n    <string>proxy</string>\n  </array>"
            ),
            "{plist}"
        );
        assert!(
            plist.contains(
                "<key>KeepAlive</key>\n  <dict>\n    <key>SuccessfulExit</key>\n    <false/>"
            ),
            "{plist}"
        );
        assert!(plist.contains("<key>RunAtLoad</key>\n  <true/>"), "{plist}");
        assert!(
            plist.contains("<key>PITH_HOME</key>\n    <string>/home/u/pith-data</string>"),
            "{plist}"
        );
        assert_eq!(xml("a<b&c>"), "a&lt;b&amp;c&gt;");
    }
}
