//! Per-tool warm states: a tool's imports paid once per version, not on every call.
//!
//! Warden's snapshot holds the interpreter and the harness; every call of a tool still
//! imports the tool and whatever it imports (numpy: ~700 M fuel, hundreds of ms). A
//! warm state is that snapshot one step further: the tool module already imported.
//!
//! # Preparing one (seconds, once per tool source and package set)
//!
//! 1. Instantiate Warden's snapshot with **no grants**: only the runtime's folders, the
//!    tool's folder and its packages, no granted variable, no argument.
//! 2. Run `_warden_prepare()` (`runtime/harness.py`): import the tool, refuse if its own
//!    module-level code read `os.environ` (a call's variables differ), freeze the
//!    collector's objects.
//! 3. Make wasi-libc forget the folders it has seen, so each call reads its own.
//! 4. Read the instance's memory (from where Warden's image starts, up to its last
//!    non-zero page) and its mutable globals, through the exports
//!    [`super::state_exports`] added. The memory is written as a sparse file (zero
//!    pages are holes) under `$WARDEN_HOME/warm/`, with a small JSON description.
//!
//! A tool whose module-level code raises, reads the environment, loops past its fuel or
//! deadline or exhausts its memory gets a [`Warmth::Cold`] with the reason, recorded
//! beside the images so it is not retried, and runs cold as before.
//!
//! # Using one
//!
//! [`wasmtime::Module::with_initial_state`] (Warden's wasmtime patch, see
//! `vendor/README.md`) makes a module that shares Warden's compiled code and starts
//! from the saved memory (mapped copy-on-write from the file) and globals: no
//! compilation per tool. Every call still gets a fresh instance of it, so nothing one
//! call does is seen by the next.
//!
//! States are keyed by what determines them: Warden's compiled snapshot, the tool's file
//! name and source, and its package site; and by whose workers prepared them (a
//! tenant's), so two versions of a tenant with the same source and packages share one
//! state, and two tenants never do.

mod prepare;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use wasmtime::{InstancePre, Linker, Module, Val};

use super::guest::{Exports, Guest};
use super::{SandboxError, ShareKey, ToolFolder, io_error};
use crate::limits::Fuel;
use crate::outcome::ToolError;
use prepare::{prepare, write_atomically};

/// Fuel a tool's module-level code may spend while its warm state is prepared: numpy
/// and pandas imports take ~0.7 and ~3 G; a loop stops after ~10 s of CPU.
pub const PREPARE_FUEL: Fuel = Fuel(10_000_000_000);
/// Wall time it may take.
pub const PREPARE_DEADLINE: Duration = Duration::from_secs(120);
/// Memory it may grow to.
pub const PREPARE_MEMORY: ByteSize = ByteSize::gib(1);
/// Most disk one warm state may take (its non-zero pages): a tool whose imports leave
/// more runs cold rather than filling the disk, one version at a time.
pub const MAX_STATE_DISK: ByteSize = ByteSize::mib(256);

/// Bumped whenever what a warm state holds or how it is read changes.
const FORMAT: &str = "warden-warm-1";

/// The host page: the unit the image is written and mapped in.
const PAGE: usize = 4096;
/// A wasm page.
const WASM_PAGE: usize = 65536;

/// What a tool version's calls start from.
#[derive(Debug, Clone)]
pub enum Warmth {
    /// The tool's warm state.
    Warm(Arc<WarmState>),
    /// Warden's snapshot; the reason the tool has no warm state.
    Cold(ColdReason),
}

/// Why a tool runs cold: what its module-level code did while being prepared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColdReason {
    /// One sentence.
    pub message: String,
    /// The exception, when the module-level code raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

impl std::fmt::Display for ColdReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if let Some(error) = &self.error {
            write!(f, ": {}: {}", error.kind, error.message)?;
        }
        Ok(())
    }
}

/// A tool's warm state, as prepared and stored under Warden's home: plain data naming
/// it. A [`super::Sandbox`] loads the module it stands for (sharing Warden's compiled
/// code) on the first call that starts from it, in whichever process runs that call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmState {
    key: String,
    /// Bytes of the image on disk (its non-zero pages).
    pub disk_bytes: u64,
}

impl WarmState {
    /// The key the state is stored under.
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// A warm state's module, linked once, in the process that runs its calls.
pub(super) struct Loaded {
    pub(super) pre: InstancePre<Guest>,
    pub(super) exports: Exports,
}

/// A preparation's outcome, as it crosses from the process that ran the tool's
/// module-level code to the one that stores it: the record, and the image when warm.
#[derive(Debug, Serialize, Deserialize)]
pub struct Prepared {
    record: Record,
    /// The saved memory, when the record is warm.
    #[serde(skip)]
    pub image: Option<SavedImage>,
    /// Where each run of the image's non-zero pages starts and how long it is, in bytes.
    runs: Vec<(u64, u64)>,
    /// Bytes of the image file that are memory; the trailer follows.
    memory_len: u64,
}

/// The bytes of a saved memory: its runs of non-zero pages one after the other, then
/// the module's trailer ([`Prepared`] says where each run goes).
#[derive(Debug, Default)]
pub struct SavedImage {
    /// The runs' bytes, concatenated, followed by the trailer.
    pub bytes: Vec<u8>,
}

impl Prepared {
    fn cold(reason: ColdReason) -> Prepared {
        Prepared {
            record: Record::Cold(reason),
            image: None,
            runs: Vec::new(),
            memory_len: 0,
        }
    }

    /// Bytes the image takes on the wire.
    pub fn image_len(&self) -> u64 {
        self.image.as_ref().map_or(0, |i| i.bytes.len() as u64)
    }
}

/// The description stored beside an image, or the reason there is none.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
enum Record {
    Warm {
        /// The memory's size when the state was taken, in wasm pages.
        memory_pages: u64,
        /// Bytes of the image file that are memory; the module's passive data follows.
        memory_len: u64,
        /// Mutable globals: index, type and bits.
        globals: Vec<SavedGlobal>,
        /// Bytes of the image's non-zero pages.
        disk_bytes: u64,
        /// How long preparing took, for `warden runtime info` and the logs.
        prepared_ms: u64,
        /// Fuel the preparation used.
        fuel: u64,
    },
    Cold(ColdReason),
}

#[derive(Debug, Serialize, Deserialize)]
struct SavedGlobal {
    index: u32,
    #[serde(rename = "type")]
    ty: GlobalType,
    /// The value's bits, in decimal (JSON numbers cannot hold 128 bits).
    #[serde(with = "decimal")]
    bits: u128,
}

mod decimal {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(bits: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&bits.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum GlobalType {
    I32,
    I64,
    F32,
    F64,
    V128,
}

/// Most warm states a process keeps loaded; the least recently used goes first.
const MAX_LOADED: usize = 64;

/// Where warm states live and how they are made, for one [`super::Sandbox`].
pub(super) struct WarmStates {
    store: WarmStore,
    /// States loaded in this process, most recently used last.
    loaded: Mutex<Vec<(String, Arc<Loaded>)>>,
    /// One preparation at a time: each takes a core for seconds.
    preparing: Mutex<()>,
}

/// The warm states on disk under Warden's home: keys, records and images. Needs no
/// engine: the server of worker processes uses it to know which state a call starts
/// from, and to store the states workers prepare.
#[derive(Debug, Clone)]
pub struct WarmStore {
    dir: PathBuf,
    /// Names what the states are built from: the compiled snapshot's identity.
    base_identity: String,
}

/// What a preparation needs from the sandbox.
pub(super) struct Base<'a> {
    pub(super) engine: &'a wasmtime::Engine,
    /// The pool's slots: a preparation's instance takes one like a call's, so calls
    /// and preparations together never ask the pool for more instances than it has.
    pub(super) slots: &'a tokio::sync::Semaphore,
    pub(super) module: &'a Module,
    pub(super) linker: &'a Linker<Guest>,
    pub(super) pre: &'a InstancePre<Guest>,
    pub(super) exports: &'a Exports,
    pub(super) empty_root: &'a Path,
    pub(super) stdlib: PathBuf,
    pub(super) matplotlib_data: PathBuf,
}

impl WarmStore {
    /// The states under `home` built from the compiled snapshot named `base_identity`.
    pub fn new(home: &Path, base_identity: String) -> WarmStore {
        WarmStore {
            dir: home.join("warm"),
            base_identity,
        }
    }

    /// The folder the states live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of a tool's state: Warden's snapshot, the tool's file name and source,
    /// its package site, and whose workers prepared it (`owner`, a tenant's share key;
    /// empty for states prepared in this process). A state is never shared between
    /// owners: one a breached worker made is used by its own tenant's calls only.
    pub fn key(
        &self,
        tool: &ToolFolder,
        packages: Option<&Path>,
        owner: &ShareKey,
    ) -> Result<String, SandboxError> {
        let path = tool.host_dir().join(tool.file_name());
        let source = std::fs::read(&path).map_err(|e| io_error(&path, e))?;
        let site = packages
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let owner = owner.to_string();
        let mut h = Sha256::new();
        for part in [
            FORMAT.as_bytes(),
            self.base_identity.as_bytes(),
            tool.file_name().as_bytes(),
            &source,
            site.as_bytes(),
            owner.as_bytes(),
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        Ok(hex::encode(h.finalize()))
    }

    /// The tool's warm state if `owner`'s workers prepared it before, without
    /// preparing it.
    pub fn cached(
        &self,
        tool: &ToolFolder,
        packages: Option<&Path>,
        owner: &ShareKey,
    ) -> Result<Option<Warmth>, SandboxError> {
        let key = self.key(tool, packages, owner)?;
        Ok(self.record(&key)?.map(|record| warmth(&key, record)))
    }

    /// Stores what a preparation made under `key`: the image first, then the record
    /// that names it. Returns what calls start from.
    pub fn store(&self, key: &str, prepared: Prepared) -> Result<Warmth, SandboxError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| io_error(&self.dir, e))?;
        if let (Record::Warm { .. }, Some(image)) = (&prepared.record, &prepared.image) {
            prepare::write_image(
                &self.dir,
                &self.image_path(key),
                &prepared.runs,
                prepared.memory_len,
                &image.bytes,
            )?;
        } else if matches!(prepared.record, Record::Warm { .. }) {
            return Err(SandboxError::Warm(wasmtime::Error::msg(
                "a warm state arrived without its image",
            )));
        }
        let json = serde_json::to_vec_pretty(&prepared.record)
            .map_err(|e| SandboxError::Harness(format!("cannot encode a warm record: {e}")))?;
        write_atomically(&self.dir, &self.record_path(key), &json)?;
        match &prepared.record {
            Record::Cold(reason) => tracing::info!("tool runs cold: {reason}"),
            Record::Warm {
                disk_bytes,
                prepared_ms,
                ..
            } => tracing::info!(
                "prepared a warm state in {prepared_ms} ms ({} on disk)",
                ByteSize(*disk_bytes)
            ),
        }
        Ok(warmth(key, prepared.record))
    }

    fn record_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    fn image_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.mem"))
    }

    /// The record stored under `key`, if any (an unreadable one counts as none).
    fn record(&self, key: &str) -> Result<Option<Record>, SandboxError> {
        let path = self.record_path(key);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&path, e)),
        };
        // Marks the state as used: `warden runtime prune` removes the long unused ones.
        // (A confined worker may not write here; the server that sent it the call did.)
        if let Ok(file) = File::options().write(true).open(&path) {
            let _ = file.set_modified(std::time::SystemTime::now());
        }
        match serde_json::from_slice::<Record>(&bytes) {
            Ok(record) => Ok(Some(record)),
            Err(e) => {
                tracing::warn!("discarding unreadable warm record {}: {e}", path.display());
                Ok(None)
            }
        }
    }
}

fn warmth(key: &str, record: Record) -> Warmth {
    match record {
        Record::Cold(reason) => Warmth::Cold(reason),
        Record::Warm { disk_bytes, .. } => Warmth::Warm(Arc::new(WarmState {
            key: key.to_owned(),
            disk_bytes,
        })),
    }
}

impl WarmStates {
    pub(super) fn new(home: &Path, base_identity: String) -> WarmStates {
        WarmStates {
            store: WarmStore::new(home, base_identity),
            loaded: Mutex::new(Vec::new()),
            preparing: Mutex::new(()),
        }
    }

    pub(super) fn store(&self) -> &WarmStore {
        &self.store
    }

    /// The tool's warm state: read from disk, or prepared now in this process (seconds).
    pub(super) fn get_or_prepare(
        &self,
        base: &Base<'_>,
        tool: &ToolFolder,
        packages: Option<&Path>,
    ) -> Result<Warmth, SandboxError> {
        let key = self.store.key(tool, packages, &ShareKey::default())?;
        if let Some(record) = self.store.record(&key)? {
            return Ok(warmth(&key, record));
        }
        let _one_at_a_time = self
            .preparing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Prepared by another caller while this one waited.
        if let Some(record) = self.store.record(&key)? {
            return Ok(warmth(&key, record));
        }
        let prepared = self.prepare(base, tool, packages)?;
        self.store.store(&key, prepared)
    }

    /// Runs the tool's module-level code and saves the instance, without storing it.
    pub(super) fn prepare(
        &self,
        base: &Base<'_>,
        tool: &ToolFolder,
        packages: Option<&Path>,
    ) -> Result<Prepared, SandboxError> {
        prepare(base, tool, packages)
    }

    /// The module of the state stored under `key`, loaded once per process.
    pub(super) fn load(
        &self,
        base: &Base<'_>,
        state: &WarmState,
    ) -> Result<Arc<Loaded>, SandboxError> {
        let key = state.key();
        {
            let mut loaded = self.loaded();
            if let Some(i) = loaded.iter().position(|(k, _)| k == key) {
                let entry = loaded.remove(i);
                let found = Arc::clone(&entry.1);
                loaded.push(entry);
                return Ok(found);
            }
        }
        let Some(record) = self.store.record(key)? else {
            return Err(SandboxError::Warm(wasmtime::Error::msg(format!(
                "the warm state {key} is gone from {}",
                self.store.dir.display()
            ))));
        };
        let Record::Warm {
            memory_pages,
            memory_len,
            globals,
            ..
        } = record
        else {
            return Err(SandboxError::Warm(wasmtime::Error::msg(format!(
                "the warm state {key} is recorded cold"
            ))));
        };
        let path = self.store.image_path(key);
        let file = File::open(&path).map_err(|e| io_error(&path, e))?;
        let globals: Vec<(u32, Val)> = globals.iter().map(|g| (g.index, g.value())).collect();
        let module = base
            .module
            .with_initial_state(file, memory_len, memory_pages, &globals)
            .map_err(SandboxError::Warm)?;
        let pre = base
            .linker
            .instantiate_pre(&module)
            .map_err(SandboxError::Warm)?;
        let exports = Exports::of(&module)?;
        let state = Arc::new(Loaded { pre, exports });
        let mut loaded = self.loaded();
        loaded.retain(|(k, _)| k != key);
        if loaded.len() >= MAX_LOADED {
            loaded.remove(0);
        }
        loaded.push((key.to_owned(), Arc::clone(&state)));
        Ok(state)
    }

    fn loaded(&self) -> std::sync::MutexGuard<'_, Vec<(String, Arc<Loaded>)>> {
        self.loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl SavedGlobal {
    fn of(index: u32, value: &Val) -> Option<SavedGlobal> {
        let (ty, bits) = match value {
            Val::I32(x) => (GlobalType::I32, u128::from(x.cast_unsigned())),
            Val::I64(x) => (GlobalType::I64, u128::from(x.cast_unsigned())),
            Val::F32(x) => (GlobalType::F32, u128::from(*x)),
            Val::F64(x) => (GlobalType::F64, u128::from(*x)),
            Val::V128(x) => (GlobalType::V128, x.as_u128()),
            _ => return None,
        };
        Some(SavedGlobal { index, ty, bits })
    }

    fn value(&self) -> Val {
        // The bits were saved from a value of this type, so truncating them is exact.
        #[expect(clippy::cast_possible_truncation, reason = "saved from this width")]
        match self.ty {
            GlobalType::I32 => Val::I32((self.bits as u32).cast_signed()),
            GlobalType::I64 => Val::I64((self.bits as u64).cast_signed()),
            GlobalType::F32 => Val::F32(self.bits as u32),
            GlobalType::F64 => Val::F64(self.bits as u64),
            GlobalType::V128 => Val::V128(self.bits.into()),
        }
    }
}

/// What [`prune`] removed and kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// States removed (warm or recorded cold).
    pub removed: usize,
    /// Disk their files took.
    pub freed: ByteSize,
    /// States kept.
    pub kept: usize,
}

/// Removes the warm states under `home` not used for `unused_for` (by any process
/// since: a state's record is marked when a process loads it), and leftovers of
/// interrupted preparations. A state removed while a running server has it loaded stays
/// usable there (its file stays mapped) and is prepared again after a restart.
pub fn prune(home: &Path, unused_for: Duration) -> Result<Pruned, SandboxError> {
    use std::os::unix::fs::MetadataExt;
    let dir = home.join("warm");
    let mut pruned = Pruned::default();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(pruned),
        Err(e) => return Err(io_error(&dir, e)),
    };
    let now = std::time::SystemTime::now();
    let old = |meta: &std::fs::Metadata| {
        meta.modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age >= unused_for)
    };
    let mut freed = 0u64;
    for entry in entries {
        let entry = entry.map_err(|e| io_error(&dir, e))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(meta) = entry.metadata() else { continue };
        if let Some(key) = name.strip_suffix(".json") {
            if !old(&meta) {
                pruned.kept += 1;
                continue;
            }
            let image = dir.join(format!("{key}.mem"));
            if let Ok(image_meta) = std::fs::metadata(&image) {
                std::fs::remove_file(&image).map_err(|e| io_error(&image, e))?;
                freed += image_meta.blocks() * 512;
            }
            std::fs::remove_file(&path).map_err(|e| io_error(&path, e))?;
            freed += meta.blocks() * 512;
            pruned.removed += 1;
        } else if name.starts_with('.') && old(&meta) {
            // A temporary file of a preparation that never finished.
            std::fs::remove_file(&path).map_err(|e| io_error(&path, e))?;
            freed += meta.blocks() * 512;
        }
    }
    pruned.freed = ByteSize(freed);
    Ok(pruned)
}
