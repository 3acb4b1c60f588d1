//! The compiled cache: Warden's snapshot as native code, built once per machine.
//!
//! `compiled/warden-<snapshot>-wasmtime-<version>-<engine>.cwasm` under Warden's home,
//! where `<snapshot>` identifies what the snapshot is built from (the pinned runtime's
//! hash and the harness, see [`snapshot::identity`]) and `<engine>` hashes the engine's
//! compilation settings. Any change to either gives a new name, so a stale file is never
//! loaded; older files are removed once a new one is in place.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::{Engine, Module};

use super::artifacts::Progress;
use super::{RuntimeFiles, SandboxError, WASMTIME_VERSION, io_error, snapshot};

/// The `.cwasm` file for this engine, runtime and harness.
pub fn path(engine: &Engine, files: &RuntimeFiles, home: &Path) -> Result<PathBuf, SandboxError> {
    use std::hash::Hash;
    let identity = snapshot::identity(files)?;
    // SHA-256 rather than std's DefaultHasher, whose output may change between Rust
    // releases and would then orphan every cache.
    let mut engine_settings = Sha256Writer(Sha256::new());
    engine
        .precompile_compatibility_hash()
        .hash(&mut engine_settings);
    let engine_settings = hex::encode(engine_settings.0.finalize());
    let key = format!(
        "warden-{}-wasmtime-{WASMTIME_VERSION}-{}",
        &identity[..16],
        &engine_settings[..16]
    );
    Ok(home.join("compiled").join(format!("{key}.cwasm")))
}

/// Feeds what a `Hash` implementation writes into SHA-256.
struct Sha256Writer(Sha256);

impl std::hash::Hasher for Sha256Writer {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        // Only the full digest is used (see `path`).
        0
    }
}

/// A freshly compiled snapshot under a temporary name.
pub struct Pending {
    tmp: tempfile::NamedTempFile,
    path: PathBuf,
}

impl Pending {
    /// Moves the compiled snapshot to its cache name and removes older ones.
    pub fn keep(self) -> Result<(), SandboxError> {
        let Pending { tmp, path } = self;
        tmp.persist(&path).map_err(|e| io_error(&path, e.error))?;
        if let Some(dir) = path.parent() {
            remove_stale(dir, &path);
        }
        Ok(())
    }
}

/// The compiled snapshot's file name: its identity, which warm states are keyed by.
pub fn name(engine: &Engine, files: &RuntimeFiles, home: &Path) -> Result<String, SandboxError> {
    Ok(path(engine, files, home)?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default())
}

/// Loads the compiled snapshot, which must exist: a worker process never compiles (the
/// server that started it did, before).
#[expect(
    unsafe_code,
    reason = "loading a compiled module is unsafe in wasmtime; see the SAFETY note"
)]
pub fn load_existing(
    engine: &Engine,
    files: &RuntimeFiles,
    home: &Path,
) -> Result<Module, SandboxError> {
    let path = path(engine, files, home)?;
    // SAFETY: as in `load_or_build`: a file Warden wrote into its own home with this
    // engine's settings (its name carries their hash); wasmtime checks the header.
    unsafe { Module::deserialize_file(engine, &path) }.map_err(|e| {
        SandboxError::Compile(e.context(format!(
            "the compiled runtime {} cannot be loaded; run `warden runtime fetch`",
            path.display()
        )))
    })
}

/// Loads the compiled snapshot, or builds and compiles it (minutes, once, with
/// progress). A new one comes with its [`Pending`] cache entry, kept only after the
/// caller has checked it.
#[expect(
    unsafe_code,
    reason = "loading a compiled module is unsafe in wasmtime; see the SAFETY notes"
)]
pub fn load_or_build(
    engine: &Engine,
    files: &RuntimeFiles,
    home: &Path,
    progress: Progress,
) -> Result<(Module, Option<Pending>), SandboxError> {
    let path = path(engine, files, home)?;
    if path.is_file() {
        // SAFETY: the file was produced by `Engine::precompile_module` with this
        // engine's settings (the name carries their hash) and written by Warden into
        // its own home folder, which only this user can write. wasmtime checks the
        // header and compatibility before using it.
        match unsafe { Module::deserialize_file(engine, &path) } {
            Ok(module) => return Ok((module, None)),
            Err(e) => tracing::warn!(
                "discarding unusable compiled runtime {}: {e:#}",
                path.display()
            ),
        }
    }
    let dir = home.join("compiled");
    std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    let spinner = progress.spinner(
        "preparing the Python runtime for this machine, step 1/2: loading Warden's harness \
         into a snapshot; this happens once (about 2-3 minutes on 2 cores in all)"
            .to_owned(),
    );
    let built = snapshot::build(files);
    spinner.finish_and_clear();
    let wasm = built?;
    let spinner = progress.spinner(
        "preparing the Python runtime for this machine, step 2/2: compiling it to native \
         code; this happens once"
            .to_owned(),
    );
    let compiled = engine
        .precompile_module(&wasm)
        .map_err(SandboxError::Compile);
    spinner.finish_and_clear();
    drop(wasm);
    let compiled = compiled?;
    let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(|e| io_error(&dir, e))?;
    std::io::Write::write_all(tmp.as_file_mut(), &compiled).map_err(|e| io_error(tmp.path(), e))?;
    drop(compiled);
    tmp.as_file()
        .sync_all()
        .map_err(|e| io_error(tmp.path(), e))?;
    // SAFETY: as above; the file was written just now from `precompile_module`.
    let module =
        unsafe { Module::deserialize_file(engine, tmp.path()) }.map_err(SandboxError::Compile)?;
    Ok((module, Some(Pending { tmp, path })))
}

/// Removes compiled runtimes other than `current` (earlier harnesses, settings or
/// wasmtime versions): each is ~300 MB. A process still using one keeps its mapping.
fn remove_stale(dir: &Path, current: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = name.starts_with("warden-") || name.starts_with("python-snapshot-");
        if ours && name.ends_with(".cwasm") && path != current {
            match std::fs::remove_file(&path) {
                Ok(()) => tracing::info!("removed stale compiled runtime {}", path.display()),
                Err(e) => tracing::warn!("cannot remove {}: {e}", path.display()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_compiled_runtime_stays() {
        let dir = tempfile::tempdir().unwrap();
        let current = dir.path().join("warden-new-wasmtime-48.0.8-1.cwasm");
        let names = [
            "warden-old-wasmtime-48.0.8-1.cwasm",
            "python-snapshot-879bdb628a1a799d-wasmtime-48.0.8-1.cwasm",
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
                "warden-notes.txt"
            ]
        );
    }
}
