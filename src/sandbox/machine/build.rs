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
//! pinned versions are missing, and it is the only step run as Warden runs. Every other
//! step is confined as pip is, by [`Profile::Build`] (`warden __confined-exec`): its own
//! user and mount namespaces, where the machine is read-only but the work folder and the
//! build runs as an unprivileged user mapped to Warden's; Landlock lets it read only the
//! system's programs and libraries, the host's Python and pip, Debian's and pip's
//! configuration, and write and execute only in the work folder; TCP only to ports 80
//! and 443 (Debian's mirror, PyPI, crates.io) and to pip's configured index and proxies;
//! the seccomp filter pip runs under. Its home, temporary folder and cargo's and pip's
//! caches are in the work folder, and its environment holds only what pip and the
//! recipe need. The runtime is installed inside the work folder too, then moved into
//! place by Warden.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::confine::{self, Confinement, Profile};
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

/// The step that installs the toolchain: run as Warden runs (it may need root).
const UNCONFINED_STEP: &str = "step0";

/// What a confined step may read beyond the host's Python, pip and their configuration
/// ([`HostTools::read_only`]): the toolchain (under the system's folders there), Debian's
/// package configuration and database (apt downloads the sources), who is who, and the
/// kernel's description of the processors (cargo and make count them).
const BUILD_READ: &[&str] = &[
    "/etc/apt",
    "/etc/dpkg",
    "/etc/debian_version",
    "/etc/os-release",
    "/etc/alternatives",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/passwd",
    "/etc/group",
    "/etc/mime.types",
    "/var/lib/dpkg",
    "/var/lib/apt",
    "/proc",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
];

/// TCP ports a confined step may connect to besides pip's: Debian's mirror (HTTP) and
/// crates.io and PyPI (HTTPS).
const BUILD_PORTS: [u16; 2] = [80, 443];

/// The search path of a confined step: the system's programs only (the recipe names
/// the host's Python by [`HostTools::python`]).
const BUILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Environment variables of the caller's that a step's environment never takes from
/// [`HostTools::env`]: the step's own home, temporary folder and caches replace them.
const ENV_REPLACED: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "PIP_CACHE_DIR",
    "PYTHONDONTWRITEBYTECODE",
    "CARGO_HOME",
];

/// Settings of the recipe a caller may give (`JOBS=1`, `WASI_LIBC=sid`).
const ENV_RECIPE: &[&str] = &["JOBS", "WASI_LIBC"];

/// What a build takes from the host: Warden's binary (which confines each step), the
/// host's Python with pip (which downloads the Python sources), and what pip needs to
/// reach its index (see `PipSession::build_host`).
#[derive(Debug, Clone)]
pub struct HostTools {
    /// Warden's binary, for `warden __confined-exec`.
    pub warden: PathBuf,
    /// The host's Python, which has pip.
    pub python: PathBuf,
    /// pip's environment: its `PIP_*` settings, trust stores, proxies, locale.
    pub env: Vec<(String, String)>,
    /// What the host's Python, pip and their configuration need to read.
    pub read_only: Vec<PathBuf>,
    /// The ports of pip's index and proxies.
    pub tcp_connect: Vec<u16>,
}

impl HostTools {
    /// The confinement of a step working in `work`.
    fn confinement(&self, work: &Path) -> Confinement {
        let mut read_only = self.read_only.clone();
        read_only.extend(BUILD_READ.iter().map(PathBuf::from));
        let mut tcp_connect = self.tcp_connect.clone();
        tcp_connect.extend(BUILD_PORTS);
        tcp_connect.sort_unstable();
        tcp_connect.dedup();
        Confinement {
            read_only,
            read_write: vec![work.to_owned(), PathBuf::from("/dev/null")],
            tcp_connect,
            profile: Profile::Build,
            narrow_view: false,
        }
    }

    /// A step's environment: pip's, with the step's own folders in `work`.
    fn env(&self, work: &Path) -> Vec<(String, String)> {
        let at = |sub: &str| work.join(sub).display().to_string();
        let mut env: Vec<(String, String)> = self
            .env
            .iter()
            .filter(|(k, _)| !ENV_REPLACED.contains(&k.as_str()))
            .cloned()
            .collect();
        env.extend(
            ENV_RECIPE
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v))),
        );
        env.extend([
            ("PATH".into(), BUILD_PATH.into()),
            ("HOME".into(), at(HOME)),
            ("TMPDIR".into(), at(TMP)),
            ("XDG_CACHE_HOME".into(), at(&format!("{HOME}/.cache"))),
            ("XDG_CONFIG_HOME".into(), at(&format!("{HOME}/.config"))),
            ("PIP_CACHE_DIR".into(), at(&format!("{HOME}/.cache/pip"))),
            ("CARGO_HOME".into(), at(&format!("{HOME}/.cargo"))),
            ("PYTHON".into(), self.python.display().to_string()),
        ]);
        env
    }
}

/// A step's home and temporary folder, in the work folder.
const HOME: &str = "home";
const TMP: &str = "tmp";

/// Where the recipe installs the runtime, in the work folder, before Warden moves it
/// into place.
const INSTALLED: &str = "installed";

/// The runtime could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Only built flavours are built.
    #[error("the {0} runtime is fetched, not built: run `warden runtime fetch`")]
    Fetched(Flavour),
    /// `bash` (confined by Warden's binary) could not be started.
    #[error("cannot start bash to build the runtime: {0}; install bash")]
    NoShell(std::io::Error),
    /// A step could not be confined: nothing of it ran.
    #[error(
        "cannot confine the build of the {flavour} runtime, and Warden does not build it \
         unconfined: {reason}"
    )]
    Unconfined {
        /// The flavour.
        flavour: Flavour,
        /// Why (the confining process's last words).
        reason: String,
    },
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
    host: &HostTools,
) -> Result<RuntimeFiles, BuildError> {
    if !flavour.is_built() {
        return Err(BuildError::Fetched(flavour));
    }
    if let Ok(files) = RuntimeFiles::of(home, flavour)
        && files.verify().is_ok()
    {
        make_empty_root(&files)?;
        return Ok(files);
    }
    let key = recipe::key();
    let work = home.join("build").join(format!("{flavour}-{key}"));
    let dest = RuntimeFiles::folder(home, flavour)?;
    let recipe_dir = work.join("recipe");
    for dir in [&recipe_dir, &work.join(HOME), &work.join(TMP)] {
        fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    }
    let installed = work.join(INSTALLED);
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
        let run = Step {
            recipe_dir: &recipe_dir,
            work: &work,
            dest: &installed,
            key: &key,
            name: step,
        };
        let status = run.run(host, &mut log)?;
        spinner.finish_and_clear();
        if status.code() == Some(i32::from(confine::EXIT_NOT_CONFINED)) && *step != UNCONFINED_STEP
        {
            return Err(BuildError::Unconfined {
                flavour,
                reason: tail(&log_path, 1),
            });
        }
        if !status.success() {
            return Err(BuildError::Step {
                flavour,
                step: (*step).to_owned(),
                what: (*what).to_owned(),
                tail: tail(&log_path, 20),
                log: log_path,
            });
        }
    }
    move_into_place(&installed, &dest)?;
    let files = RuntimeFiles::of(home, flavour)
        .and_then(|f| f.verify().map(|()| f))
        .map_err(|source| BuildError::NotInstalled { flavour, source })?;
    make_empty_root(&files)?;
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

/// Makes the empty folder every runtime's guest sees as `/` (the standard runtime's
/// fetch makes it; a home that only builds never ran that).
fn make_empty_root(files: &RuntimeFiles) -> Result<(), ArtifactError> {
    fs::create_dir_all(&files.empty_root).map_err(|e| io_error(&files.empty_root, e))
}

/// Replaces `dest` (absent, or a runtime that failed its check) by the folder the
/// recipe installed.
fn move_into_place(installed: &Path, dest: &Path) -> Result<(), ArtifactError> {
    if dest.exists() {
        fs::remove_dir_all(dest).map_err(|e| io_error(dest, e))?;
    }
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
    }
    fs::rename(installed, dest).map_err(|e| io_error(dest, e))
}

/// One step of the recipe.
struct Step<'a> {
    recipe_dir: &'a Path,
    work: &'a Path,
    dest: &'a Path,
    key: &'a str,
    name: &'a str,
}

impl Step<'_> {
    /// Runs the step, confined unless it is [`UNCONFINED_STEP`], its output appended to
    /// `log`; how it ended.
    fn run(
        &self,
        host: &HostTools,
        log: &mut fs::File,
    ) -> Result<std::process::ExitStatus, BuildError> {
        let script = self.recipe_dir.join("build.sh");
        let mut command = if self.name == UNCONFINED_STEP {
            let mut c = Command::new("bash");
            c.arg(&script);
            c
        } else {
            let confinement = host.confinement(self.work);
            let mut c = confine::exec_command(&host.warden, &confinement, Path::new("/bin/bash"))
                .map_err(|e| BuildError::Unconfined {
                flavour: Flavour::Pydantic,
                reason: e.to_string(),
            })?;
            c.arg(&script).env_clear().envs(host.env(self.work));
            c
        };
        let mut child = command
            .env("WORK", self.work)
            .env("DEST", self.dest)
            .env("RECIPE_KEY", self.key)
            .env("STEPS", self.name)
            .current_dir(self.work)
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
        let log_path = self.work.join(LOG);
        for line in lines {
            writeln!(log, "{line}").map_err(|e| io_error(&log_path, e))?;
        }
        let _ = reader.join();
        Ok(child.wait().map_err(|e| io_error(&log_path, e))?)
    }
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
mod tests;
