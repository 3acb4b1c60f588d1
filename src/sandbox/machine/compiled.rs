//! The compiled cache: Warden's snapshot as native code, built once per machine (or
//! shipped in a bundle, built for the device).
//!
//! `<compiled>/warden-<snapshot>-wasmtime-<version>-<target>-<cpu>-<settings>.cwasm`,
//! where `<compiled>` is `compiled/` under Warden's home or a bundle's runtime folder,
//! `<snapshot>` identifies what the snapshot is built from (the pinned runtime's hash and
//! the harness, see [`snapshot::identity`]), `<target>` and `<cpu>` the platform it is
//! compiled for ([`crate::sandbox::platform`]: an explicit CPU level, never the build host's own
//! flags) and `<settings>` hashes Warden's engine settings (`engine::SETTINGS`).
//! Any change to one gives a new name, so a stale file is never loaded; older files are
//! removed once a new one is in place. wasmtime checks the header again on every load.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::{Engine, Module};

#[cfg(feature = "compiler")]
use crate::sandbox::artifacts::Progress;
use crate::sandbox::engine::SETTINGS;
#[cfg(feature = "compiler")]
use crate::sandbox::io_error;
use crate::sandbox::{RuntimeFiles, SandboxError, WASMTIME_VERSION, snapshot};

/// The `.cwasm` file of this runtime for its platform.
pub fn path(files: &RuntimeFiles) -> Result<PathBuf, SandboxError> {
    Ok(files.compiled_dir.join(name(files)?))
}

/// The compiled snapshot's file name: its identity, which warm states are keyed by.
pub fn name(files: &RuntimeFiles) -> Result<String, SandboxError> {
    let identity = snapshot::identity(files)?;
    let settings = hex::encode(Sha256::digest(format!("{SETTINGS:?}")));
    // Another flavour's files are named apart, so that neither removes the other's.
    let flavour = match files.flavour {
        crate::sandbox::Flavour::Standard => String::new(),
        other => format!("{other}-"),
    };
    Ok(format!(
        "warden-{flavour}{}-wasmtime-{WASMTIME_VERSION}-{}-{}-{}.cwasm",
        &identity[..16],
        files.platform.target(),
        files.platform.cpu(),
        &settings[..12]
    ))
}

/// A freshly compiled snapshot under a temporary name.
#[cfg(feature = "compiler")]
pub struct Pending {
    tmp: tempfile::NamedTempFile,
    path: PathBuf,
    /// The compiled cache's lock, released once the file is named (or dropped).
    _compiling: std::fs::File,
}

#[cfg(feature = "compiler")]
impl Pending {
    /// Moves the compiled snapshot to its cache name and removes older ones. A file
    /// already there (another process compiled the same runtime first) is kept, never
    /// replaced: readers of it (a bundle being packed, warm states prepared from it)
    /// must see one content under one name. Which one was kept: a process whose own
    /// was not must load the one that was, since two builds of the snapshot are not
    /// byte for byte the same (its memory holds the times its imports read).
    pub fn keep(self) -> Result<Kept, SandboxError> {
        let Pending { tmp, path, .. } = self;
        let kept = persist_once(tmp, &path)?;
        if let Some(dir) = path.parent() {
            remove_stale(dir, &path);
        }
        Ok(kept)
    }
}

/// Whose compiled snapshot a cache name holds once [`Pending::keep`] is done.
#[cfg(feature = "compiler")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// This process's: the file is what it has loaded.
    Ours,
    /// Another process's, compiled at the same time and named first.
    Theirs,
}

/// Gives `tmp` the name `path` unless a file has it already (then `tmp` is dropped).
#[cfg(feature = "compiler")]
pub(crate) fn persist_once(
    tmp: tempfile::NamedTempFile,
    path: &Path,
) -> Result<Kept, SandboxError> {
    match tmp.persist_noclobber(path) {
        Ok(_) => Ok(Kept::Ours),
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(Kept::Theirs),
        Err(e) => Err(io_error(path, e.error)),
    }
}

/// Loads the compiled snapshot, which must exist: a worker process never compiles (the
/// server that started it did, before), nor does a bundle's runtime or a binary built
/// without the compiler. A module this host cannot run is refused with wasmtime's
/// reason and the bundle to use instead.
#[expect(
    unsafe_code,
    reason = "loading a compiled module is unsafe in wasmtime; see the SAFETY note"
)]
pub fn load_existing(engine: &Engine, files: &RuntimeFiles) -> Result<Module, SandboxError> {
    let path = path(files)?;
    if !path.is_file() {
        return Err(missing(files, &path));
    }
    // SAFETY: a file Warden wrote (into its own home, or into a bundle whose every file
    // was checked against a signed manifest on install), named by this engine's settings
    // and platform; wasmtime checks its header, settings and CPU features before use.
    unsafe { Module::deserialize_file(engine, &path) }
        .map_err(|reason| incompatible(files, &path, reason))
}

/// The error for a compiled runtime that is not there (or not runnable).
pub(in crate::sandbox) fn missing(files: &RuntimeFiles, path: &Path) -> SandboxError {
    if files.bundled {
        return SandboxError::Artifact(crate::sandbox::ArtifactError::Bundle {
            dir: files.compiled_dir.parent().unwrap_or(path).to_owned(),
            reason: format!("it has no {}", path.display()),
        });
    }
    if cfg!(feature = "compiler") {
        SandboxError::NotCompiled {
            path: path.to_owned(),
            what: "run `warden runtime fetch` to compile it".into(),
        }
    } else {
        SandboxError::NotCompiled {
            path: path.to_owned(),
            what: "this warden is built without the compiler and only loads precompiled \
                   runtimes: install a bundle made for this machine (`warden bundle create` \
                   on a build machine, then `warden bundle install FILE DIR` here) and run \
                   DIR/bin/warden"
                .into(),
        }
    }
}

/// The error for a compiled runtime wasmtime will not load on this host.
fn incompatible(files: &RuntimeFiles, path: &Path, reason: wasmtime::Error) -> SandboxError {
    let host = crate::sandbox::platform::Platform::host();
    SandboxError::Incompatible {
        path: path.to_owned(),
        compiled_for: files.platform.to_string(),
        reason,
        instead: format!(
            "use a bundle made with `warden bundle create --target {} --cpu {}`",
            host.target(),
            host.cpu()
        ),
    }
}

/// The engine that compiles for `files`' platform: Warden's settings, no instance pool
/// (its slots are sized by the host that runs calls, not by compilation).
#[cfg(feature = "compiler")]
fn compile_engine(files: &RuntimeFiles) -> Result<Engine, SandboxError> {
    let config = crate::sandbox::engine::settings_config(&files.platform)?;
    Engine::new(&config).map_err(|e| {
        let hint = if files.platform.is_host_target() {
            String::new()
        } else {
            " (to compile for another architecture, build warden with `--features all-arch`)"
                .to_owned()
        };
        SandboxError::Engine(e.context(format!("cannot compile for {}{hint}", files.platform)))
    })
}

/// Builds Warden's snapshot and compiles it for `files`' platform: the bytes of a
/// `.cwasm` (minutes and ~2.5 GB of memory, with progress). Blocking.
#[cfg(feature = "compiler")]
pub fn compile(files: &RuntimeFiles, progress: Progress) -> Result<Vec<u8>, SandboxError> {
    let engine = compile_engine(files)?;
    let spinner = progress.spinner(format!(
        "preparing the Python runtime for {}, step 1/2: loading Warden's harness into a \
         snapshot (about 2-3 minutes on 2 cores in all)",
        files.platform
    ));
    let built = snapshot::build(files);
    spinner.finish_and_clear();
    let wasm = built?;
    let spinner = progress.spinner(format!(
        "preparing the Python runtime for {}, step 2/2: compiling it to native code",
        files.platform
    ));
    let compiled = engine
        .precompile_module(&wasm)
        .map_err(SandboxError::Compile);
    spinner.finish_and_clear();
    compiled
}

/// Loads the compiled snapshot, or builds and compiles it (minutes, once, with
/// progress). A new one comes with its [`Pending`] cache entry, kept only after the
/// caller has checked it.
#[cfg(feature = "compiler")]
#[expect(
    unsafe_code,
    reason = "loading a compiled module is unsafe in wasmtime; see the SAFETY notes"
)]
pub fn load_or_build(
    engine: &Engine,
    files: &RuntimeFiles,
    progress: Progress,
) -> Result<(Module, Option<Pending>), SandboxError> {
    let path = path(files)?;
    if let Some(module) = load_cached(engine, &path) {
        return Ok((module, None));
    }
    let dir = &files.compiled_dir;
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    // One process of a home compiles at a time; the others wait for its file rather
    // than build their own (minutes and ~2.5 GB each, and another image: see
    // [`Pending::keep`]).
    let lock = lock_compiling(dir, progress)?;
    if let Some(module) = load_cached(engine, &path) {
        return Ok((module, None));
    }
    let compiled = compile(files, progress)?;
    tracing::info!(
        "compiled the runtime for {} into {}",
        files.platform,
        path.display()
    );
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| io_error(dir, e))?;
    std::io::Write::write_all(tmp.as_file_mut(), &compiled).map_err(|e| io_error(tmp.path(), e))?;
    drop(compiled);
    tmp.as_file()
        .sync_all()
        .map_err(|e| io_error(tmp.path(), e))?;
    // SAFETY: as in `load_cached`; the file was written just now from `precompile_module`.
    let module =
        unsafe { Module::deserialize_file(engine, tmp.path()) }.map_err(SandboxError::Compile)?;
    Ok((
        module,
        Some(Pending {
            tmp,
            path,
            _compiling: lock,
        }),
    ))
}

/// The compiled file at `path` loaded, if there is one this engine can use. One it
/// cannot (left by an interrupted write, or corrupted since) is removed, to be compiled
/// again.
#[cfg(feature = "compiler")]
#[expect(
    unsafe_code,
    reason = "loading a compiled module is unsafe in wasmtime; see the SAFETY note"
)]
fn load_cached(engine: &Engine, path: &Path) -> Option<Module> {
    if !path.is_file() {
        return None;
    }
    // SAFETY: the file was produced by `Engine::precompile_module` with this engine's
    // settings (the name carries their hash) and written by Warden into its own home
    // folder, which only this user can write. wasmtime checks the header and
    // compatibility before using it.
    match unsafe { Module::deserialize_file(engine, path) } {
        Ok(module) => Some(module),
        Err(e) => {
            tracing::warn!(
                "discarding unusable compiled runtime {}: {e:#}",
                path.display()
            );
            let _ = std::fs::remove_file(path);
            None
        }
    }
}

/// An exclusive lock on the compiled cache's folder, held while this process compiles
/// into it; waits (saying so) while another process holds it.
#[cfg(feature = "compiler")]
pub(crate) fn lock_compiling(
    dir: &Path,
    progress: Progress,
) -> Result<std::fs::File, SandboxError> {
    use rustix::fs::{FlockOperation, flock};
    let folder = std::fs::File::open(dir).map_err(|e| io_error(dir, e))?;
    match flock(&folder, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => return Ok(folder),
        Err(rustix::io::Errno::WOULDBLOCK) => {}
        Err(e) => return Err(io_error(dir, e.into())),
    }
    let spinner = progress.spinner(format!(
        "waiting for another warden process, which is compiling the runtime into {}",
        dir.display()
    ));
    let locked = flock(&folder, FlockOperation::LockExclusive);
    spinner.finish_and_clear();
    locked.map_err(|e| io_error(dir, e.into()))?;
    Ok(folder)
}

/// The runtime flavour a compiled file's name is of (`warden-pydantic-...`, else the
/// standard runtime's).
#[cfg(feature = "compiler")]
fn flavour_of(name: &str) -> Option<crate::sandbox::Flavour> {
    use crate::sandbox::Flavour;
    let rest = name.strip_prefix("warden-")?;
    Some(
        Flavour::ALL
            .into_iter()
            .find(|f| !f.is_standard() && rest.starts_with(&format!("{f}-")))
            .unwrap_or(Flavour::Standard),
    )
}

/// Removes compiled runtimes of `current`'s flavour other than `current` (earlier
/// harnesses, settings or wasmtime versions): each is ~300 MB. A process still using
/// one keeps its mapping. Another flavour's are kept: they are current too.
#[cfg(feature = "compiler")]
fn remove_stale(dir: &Path, current: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let current_name = current
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let flavour = current_name
        .as_deref()
        .and_then(flavour_of)
        .unwrap_or_default();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let same_flavour = match flavour_of(&name) {
            Some(f) => f == flavour,
            // Names from before Warden compiled its own snapshot: the standard runtime.
            None => flavour.is_standard(),
        };
        let ours =
            same_flavour && (name.starts_with("warden-") || name.starts_with("python-snapshot-"));
        if ours && name.ends_with(".cwasm") && path != current {
            match std::fs::remove_file(&path) {
                Ok(()) => tracing::info!("removed stale compiled runtime {}", path.display()),
                Err(e) => tracing::warn!("cannot remove {}: {e}", path.display()),
            }
        }
    }
}

#[cfg(all(test, feature = "compiler"))]
mod tests {
    use super::*;

    #[test]
    fn the_first_file_named_is_kept_and_the_second_process_told_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("warden-x.cwasm");
        let compiled = |bytes: &[u8]| {
            let mut tmp = tempfile::NamedTempFile::new_in(dir.path()).unwrap();
            std::io::Write::write_all(tmp.as_file_mut(), bytes).unwrap();
            tmp
        };
        assert_eq!(persist_once(compiled(b"first"), &path).unwrap(), Kept::Ours);
        assert_eq!(
            persist_once(compiled(b"second"), &path).unwrap(),
            Kept::Theirs
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        // The loser's temporary file is gone.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn only_the_current_compiled_runtime_stays() {
        let dir = tempfile::tempdir().unwrap();
        let current = dir.path().join("warden-new-wasmtime-48.0.8-1.cwasm");
        let names = [
            "warden-old-wasmtime-48.0.8-1.cwasm",
            "python-snapshot-879bdb628a1a799d-wasmtime-48.0.8-1.cwasm",
            "warden-pydantic-0123456789abcdef-wasmtime-48.0.8-1.cwasm",
            "somebody-else.cwasm",
            "warden-notes.txt",
        ];
        for name in names
            .iter()
            .copied()
            .chain(["warden-new-wasmtime-48.0.8-1.cwasm"])
        {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        remove_stale(dir.path(), &current);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "somebody-else.cwasm",
                "warden-new-wasmtime-48.0.8-1.cwasm",
                "warden-notes.txt",
                "warden-pydantic-0123456789abcdef-wasmtime-48.0.8-1.cwasm"
            ]
        );
        // A new Pydantic runtime removes the old one only.
        let newer = dir
            .path()
            .join("warden-pydantic-fedcba9876543210-wasmtime-48.0.8-1.cwasm");
        std::fs::write(&newer, b"x").unwrap();
        remove_stale(dir.path(), &newer);
        assert!(!dir.path().join(&left[3]).exists());
        assert!(
            dir.path()
                .join("warden-new-wasmtime-48.0.8-1.cwasm")
                .exists()
        );
    }
}
