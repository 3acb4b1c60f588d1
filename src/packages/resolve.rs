//! Resolving and downloading wheels with pip, for the guest's platform: CPython on WASI
//! (3.15 or 3.13, by runtime flavour), which can load only pure-Python wheels
//! (`py3-none-any` and the like).
//!
//! pip runs as `python3 -m pip download` with `--only-binary=:all: --platform any
//! --abi none --implementation py --python-version 3.15`, so it picks only wheels the
//! guest can load, for the guest's Python, whatever the host runs. Packages the runtime
//! bundles are pinned to their bundled versions with a constraints file, and offered to
//! pip as metadata-only stand-in wheels (in a private `--find-links` folder) so that a
//! package depending on, say, numpy resolves against the bundled numpy instead of
//! looking for a pure-Python numpy that does not exist. Stand-ins are never installed.
//!
//! Source distributions are never downloaded (`--only-binary=:all:`): installing one
//! runs its build code. When pip finds nothing for a requirement, its debug log (`--log`)
//! says which files it skipped, which tells a requirement published only as a source
//! distribution ([`PackagesError::SourceOnly`]) from one without a pure-Python wheel.
//! pip itself runs confined, in a [`PipSession`].

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;

use super::bundled::Bundled;
use super::lock::{Lock, LockedWheel};
use super::requirement::Requirement;
use super::session::{PipSession, find_links_dir, session_failure};
use super::{PackagesError, io};
use crate::sandbox::Progress;
use diagnose::{PipLog, diagnose};

mod diagnose;

/// How pip reaches packages: the configured index (pip's own configuration, e.g.
/// `PIP_INDEX_URL`), plus local wheelhouses, or local wheelhouses only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pip {
    /// Folders of wheels to use besides the index (`--find-links`).
    pub find_links: Vec<PathBuf>,
    /// Use no index at all: only `find_links` (for offline and edge machines).
    pub no_index: bool,
    /// Warden's binary, which confines pip (`warden __confined-exec`). `None`: the
    /// running executable, which is Warden's except in tests of the library (whose
    /// executable is the test binary: they pass the built `warden`).
    pub warden: Option<PathBuf>,
}

/// A wheel pip left on disk, with what the lock records of it.
pub(super) struct Downloaded {
    pub locked: LockedWheel,
    pub path: PathBuf,
}

impl Pip {
    /// Resolves `requirements` (those not satisfied by the runtime) into wheels saved
    /// under `work`, which must be an empty private folder.
    pub(super) fn resolve(
        &self,
        requirements: &[Requirement],
        bundled: &Bundled,
        python: &str,
        work: &Path,
        progress: Progress,
    ) -> Result<Vec<Downloaded>, PackagesError> {
        let stand_ins = work.join("bundled");
        let wheels = work.join("wheels");
        for dir in [&stand_ins, &wheels] {
            fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let mut constraints = String::new();
        for (name, version) in bundled.iter() {
            write_stand_in(&stand_ins, name, &version.to_string())?;
            constraints.push_str(&format!("{name}=={version}\n"));
        }
        let constraints_file = work.join("constraints.txt");
        write(&constraints_file, &constraints)?;
        let mut lines = String::new();
        for r in requirements {
            lines.push_str(&format!("{r}\n"));
        }
        let requirements_file = work.join("requirements.txt");
        write(&requirements_file, &lines)?;

        let session = PipSession::new(self)?;
        let mut cmd = self.command(&session, &[work], &wheels, python)?;
        cmd.arg("--find-links")
            .arg(&stand_ins)
            .arg("-c")
            .arg(&constraints_file)
            .arg("-r")
            .arg(&requirements_file);
        let listed = requirements
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        run(cmd, &session, &format!("resolving {listed}"), progress)?;
        collect(&wheels, |name| bundled.version(name).is_some())
    }

    /// Downloads exactly the wheels of `lock` into `into`, each checked against its
    /// SHA-256 (pip's `--require-hashes`, then again here). When the `--find-links`
    /// folders hold every locked wheel file, they are copied from there and pip is not
    /// run at all: an edge device with a wheelhouse needs no Python on the host.
    pub(super) fn download(
        &self,
        lock: &Lock,
        into: &Path,
        python: &str,
        progress: Progress,
    ) -> Result<Vec<Downloaded>, PackagesError> {
        fs::create_dir_all(into).map_err(|e| io(into, e))?;
        // pip runs confined, in a folder of its own: it is granted, and told, the
        // folder itself, not a path relative to where Warden was started.
        let into = &fs::canonicalize(into).map_err(|e| io(into, e))?;
        if let Some(copied) = self.copy_from_wheelhouses(lock, into)? {
            return Ok(copied);
        }
        let mut lines = String::new();
        for w in &lock.packages {
            lines.push_str(&format!(
                "{}=={} --hash=sha256:{}\n",
                w.name, w.version, w.sha256
            ));
        }
        let requirements_file = into.join(".warden-lock.txt");
        write(&requirements_file, &lines)?;
        let session = PipSession::new(self)?;
        let mut cmd = self.command(&session, &[], into, python)?;
        cmd.args(["--no-deps", "--require-hashes", "-r"])
            .arg(&requirements_file);
        let result = run(
            cmd,
            &session,
            &format!("downloading {} locked wheel(s)", lock.packages.len()),
            progress,
        );
        let _ = fs::remove_file(&requirements_file);
        result?;
        let got = collect(into, |_| false)?;
        let mut out = Vec::with_capacity(lock.packages.len());
        for want in &lock.packages {
            let found = got
                .iter()
                .find(|d| d.locked.name == want.name && d.locked.version == want.version);
            match found {
                Some(d) if d.locked.sha256 == want.sha256 => out.push(Downloaded {
                    locked: want.clone(),
                    path: d.path.clone(),
                }),
                Some(d) => {
                    return Err(PackagesError::HashMismatch {
                        detail: format!(
                            "{} has SHA-256 {}, the lock says {}",
                            d.locked.wheel, d.locked.sha256, want.sha256
                        ),
                    });
                }
                None => {
                    return Err(PackagesError::Pip {
                        action: "downloading the locked wheels".into(),
                        detail: format!("pip left no wheel for {} {}", want.name, want.version),
                    });
                }
            }
        }
        Ok(out)
    }

    /// `pip download` of wheels for the guest (Python `python`, `major.minor`) into
    /// `dest`, confined by `session` with `read_only` (the caller's request files) and
    /// `dest` (writable) granted.
    fn command(
        &self,
        session: &PipSession,
        read_only: &[&Path],
        dest: &Path,
        python: &str,
    ) -> Result<Command, PackagesError> {
        let find_links = self
            .find_links
            .iter()
            .map(|dir| find_links_dir(dir))
            .collect::<Result<Vec<_>, _>>()?;
        let mut cmd = session.python(read_only, &[dest])?;
        cmd.args([
            "-m",
            "pip",
            "download",
            "--disable-pip-version-check",
            "--no-input",
        ])
        .args(["--progress-bar", "off", "--only-binary=:all:"])
        .args([
            "--platform",
            "any",
            "--abi",
            "none",
            "--implementation",
            "py",
        ])
        .args(["--python-version", python, "--log"])
        .arg(log_file(session))
        .arg("-d")
        .arg(dest);
        for dir in find_links {
            cmd.arg("--find-links").arg(dir);
        }
        if self.no_index {
            cmd.arg("--no-index");
        }
        Ok(cmd)
    }
}

/// pip's debug log in its session, which says why it skipped each file.
fn log_file(session: &PipSession) -> PathBuf {
    session.home().join("pip.log")
}

/// Runs pip, showing its latest line as progress; its error output on failure.
fn run(
    mut cmd: Command,
    session: &PipSession,
    what: &str,
    progress: Progress,
) -> Result<(), PackagesError> {
    let spinner = progress.spinner(format!("{what} with pip"));
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = child.map_err(|e| io(Path::new(cmd.get_program()), e))?;
    let stderr = child.stderr.take();
    let errors = thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stderr {
            // At most 1 MiB of pip's complaints.
            let _ = s.take(1 << 20).read_to_string(&mut text);
        }
        text
    });
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let line = line.trim();
            if line.starts_with("Collecting")
                || line.starts_with("Downloading")
                || line.starts_with("Saved")
            {
                spinner.set_message(format!("{what}: {}", clip(line, 100)));
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| io(Path::new(cmd.get_program()), e))?;
    spinner.finish_and_clear();
    let stderr = errors.join().unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    if status.code() == Some(i32::from(crate::confine::EXIT_NOT_CONFINED)) {
        return Err(session_failure(status.code(), &stderr, what));
    }
    Err(diagnose(what, &stderr, &PipLog::read(&log_file(session))))
}

/// Every wheel pip saved in `dir`, hashed, except those `skip` names (stand-ins for
/// bundled packages). Anything else (an sdist) is refused.
fn collect(dir: &Path, skip: impl Fn(&str) -> bool) -> Result<Vec<Downloaded>, PackagesError> {
    let mut out = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| io(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| io(dir, e))?.path();
        let Some(file) = path.file_name().and_then(|f| f.to_str()).map(str::to_owned) else {
            continue;
        };
        if file.starts_with(".warden") {
            continue;
        }
        let tags = WheelName::parse(&file).ok_or_else(|| PackagesError::NotPure {
            file: file.clone(),
            reason: "it is not a wheel (a source distribution would need a build)".into(),
        })?;
        if skip(&tags.name) {
            continue;
        }
        if !tags.is_pure() {
            return Err(PackagesError::NotPure {
                file,
                reason: "its tags name a platform or ABI; the guest loads only pure-Python wheels"
                    .into(),
            });
        }
        let f = fs::File::open(&path).map_err(|e| io(&path, e))?;
        let (_, sha256) = crate::sandbox::artifacts::hash_reader(f).map_err(|e| io(&path, e))?;
        out.push(Downloaded {
            locked: LockedWheel {
                name: tags.name,
                version: tags.version,
                wheel: file,
                sha256,
            },
            path,
        });
    }
    out.sort_by(|a, b| a.locked.cmp(&b.locked));
    Ok(out)
}

/// The parts of a wheel's file name (PEP 427).
pub(super) struct WheelName {
    pub name: String,
    pub version: String,
    python: String,
    abi: String,
    platform: String,
}

impl WheelName {
    pub(super) fn parse(file: &str) -> Option<WheelName> {
        let stem = file.strip_suffix(".whl")?;
        let parts: Vec<&str> = stem.split('-').collect();
        let (name, version, rest) = match parts.as_slice() {
            [n, v, py, abi, plat] => (n, v, [py, abi, plat]),
            [n, v, _build, py, abi, plat] => (n, v, [py, abi, plat]),
            _ => return None,
        };
        Some(WheelName {
            name: super::requirement::normalize_name(name),
            version: (*version).to_owned(),
            python: (*rest[0]).to_owned(),
            abi: (*rest[1]).to_owned(),
            platform: (*rest[2]).to_owned(),
        })
    }

    /// `none` ABI, `any` platform, and a Python 3 tag.
    pub(super) fn is_pure(&self) -> bool {
        self.abi == "none"
            && self.platform == "any"
            && self
                .python
                .split('.')
                .any(|t| t.starts_with("py3") || t == "cp315")
    }
}

/// A wheel holding only metadata, named like a bundled package, for pip's resolver.
fn write_stand_in(dir: &Path, name: &str, version: &str) -> Result<(), PackagesError> {
    let dist = name.replace('-', "_");
    let path = dir.join(format!("{dist}-{version}-py3-none-any.whl"));
    let file = fs::File::create(&path).map_err(|e| io(&path, e))?;
    let mut zip = zip::ZipWriter::new(file);
    let info = format!("{dist}-{version}.dist-info");
    let files = [
        (
            format!("{info}/METADATA"),
            format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"),
        ),
        (
            format!("{info}/WHEEL"),
            "Wheel-Version: 1.0\nGenerator: warden\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                .to_owned(),
        ),
        (
            format!("{info}/RECORD"),
            format!("{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n"),
        ),
    ];
    let zip_err = |e: zip::result::ZipError| io(&path, std::io::Error::other(e));
    for (entry, text) in files {
        zip.start_file(entry, zip::write::SimpleFileOptions::default())
            .map_err(zip_err)?;
        zip.write_all(text.as_bytes()).map_err(|e| io(&path, e))?;
    }
    zip.finish().map_err(zip_err)?;
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<(), PackagesError> {
    fs::write(path, text).map_err(|e| io(path, e))
}

fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheel_names() {
        let w = WheelName::parse("pydantic-1.10.27-py3-none-any.whl").unwrap();
        assert_eq!(
            (w.name.as_str(), w.version.as_str()),
            ("pydantic", "1.10.27")
        );
        assert!(w.is_pure());
        assert!(
            WheelName::parse("six-1.17.0-py2.py3-none-any.whl")
                .unwrap()
                .is_pure()
        );
        let native = WheelName::parse("numpy-2.1.0-cp312-cp312-manylinux_2_17_x86_64.whl").unwrap();
        assert!(!native.is_pure());
        assert!(WheelName::parse("pkg-1.0.tar.gz").is_none());
        let build = WheelName::parse("Foo_Bar-1.0-1-py3-none-any.whl").unwrap();
        assert_eq!(build.name, "foo-bar");
    }
}
