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
//! 2. Run `_warden_prepare()` (`runtime/harness.py`, with `runtime/warm.py`): import
//!    the tool, refuse if its own module-level code read `os.environ` (a call's
//!    variables differ), freeze the collector's objects.
//! 3. Make wasi-libc forget the folders it has seen, so each call reads its own.
//! 4. Read the instance's memory and its mutable globals, through the exports
//!    [`super::state_exports`] added, and keep only the memory's difference from the
//!    snapshot's image ([`delta`]): a one-line tool changes a few hundred pages, which
//!    compress to tens of KiB. It is stored as one file under `$WARDEN_HOME/warm/`
//!    ([`store`]), within the folder's budget.
//!
//! A tool whose module-level code raises, reads the environment, loops past its fuel or
//! deadline or exhausts its memory gets a [`Warmth::Cold`] with the reason, recorded
//! beside the states so it is not retried, and runs cold as before.
//!
//! # Using one
//!
//! The process that runs a call rebuilds the state's image once, in memory, from the
//! snapshot's image and the delta, and [`wasmtime::Module::with_initial_state`]
//! (Warden's wasmtime patch, see `vendor/README.md`) makes a module that shares
//! Warden's compiled code and starts from that image (mapped copy-on-write) and the
//! saved globals: no compilation per tool. Every call still gets a fresh instance of
//! it, so nothing one call does is seen by the next. A state that cannot be used (gone,
//! corrupt, taken against another snapshot) is refused: the call runs from Warden's
//! snapshot and the state is prepared again.
//!
//! States are keyed by what determines them: Warden's compiled snapshot, the tool's file
//! name and source, and its package site; and by whose workers prepared them (a
//! tenant's), so two versions of a tenant with the same source and packages share one
//! state, and two tenants never do.

mod delta;
mod prepare;
mod store;

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};
use wasmtime::{InstancePre, Linker, Module, Val};

use super::guest::{Exports, Guest};
use super::{SandboxError, ToolFolder};
use crate::limits::Fuel;
use crate::outcome::ToolError;
pub use delta::{BaseRef, DeltaError, DeltaShape};
use prepare::prepare;
pub use store::{DEFAULT_WARM_BUDGET, Pruned, Swept, WarmStore, prune};

/// Fuel a tool's module-level code may spend while its warm state is prepared: numpy
/// and pandas imports take ~0.7 and ~3 G; a loop stops after ~10 s of CPU.
pub const PREPARE_FUEL: Fuel = Fuel(10_000_000_000);
/// Wall time it may take.
pub const PREPARE_DEADLINE: Duration = Duration::from_secs(120);
/// Memory it may grow to.
pub const PREPARE_MEMORY: ByteSize = ByteSize::gib(1);
/// Most memory a warm state may differ from Warden's snapshot by (its changed pages,
/// before compression): a tool whose imports change more runs cold rather than taking
/// that much memory in every process that runs it.
pub const MAX_STATE_DELTA: ByteSize = ByteSize::mib(256);

/// Bumped whenever what a warm state holds or how it is read changes. The second format
/// stores the memory as a delta from the snapshot's image; the first stored it whole.
const FORMAT: &str = "warden-warm-2";

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
    /// Bytes of its file on disk: header and compressed delta.
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
    /// Bytes of its rebuilt image, held in memory while it is loaded.
    image_bytes: u64,
}

/// A preparation's outcome, as it crosses from the process that ran the tool's
/// module-level code to the one that stores it: the record, and the delta when warm.
#[derive(Debug, Serialize, Deserialize)]
pub struct Prepared {
    record: Record,
    /// The compressed delta, when the record is warm (sent beside the message).
    #[serde(skip)]
    pub payload: Option<Vec<u8>>,
}

impl Prepared {
    fn cold(reason: ColdReason) -> Prepared {
        Prepared {
            record: Record::Cold(reason),
            payload: None,
        }
    }
}

/// The header of a stored state, or the reason there is none.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome", deny_unknown_fields)]
enum Record {
    Warm {
        /// The snapshot image the delta was taken against.
        base: BaseRef,
        /// The memory's size when the state was taken, in wasm pages.
        memory_pages: u64,
        /// Bytes of the rebuilt image (from where the snapshot's image starts).
        memory_len: u64,
        /// Mutable globals: index, type and bits.
        globals: Vec<SavedGlobal>,
        /// The pages the delta replaces, and its compressed size.
        delta: DeltaShape,
        /// How long preparing took, for `warden runtime info` and the logs.
        prepared_ms: u64,
        /// Fuel the preparation used.
        fuel: u64,
    },
    Cold(ColdReason),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// Most bytes of rebuilt images a process keeps loaded (each loaded state holds its
/// whole image in memory, ~20 MiB for a trivial tool); the least recently used goes
/// first, and the most recently used always stays.
const MAX_LOADED_BYTES: ByteSize = ByteSize::mib(512);

/// Where warm states live and how they are made, for one [`super::Sandbox`].
pub(super) struct WarmStates {
    store: WarmStore,
    /// The snapshot's image, summarized on first use.
    base_image: OnceLock<delta::BaseImage>,
    /// States loaded in this process, most recently used last.
    loaded: Mutex<Vec<(String, Arc<Loaded>)>>,
    /// One preparation at a time: each takes a core for seconds.
    preparing: Mutex<()>,
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
    pub(super) stdlib: std::path::PathBuf,
    pub(super) matplotlib_data: std::path::PathBuf,
    /// Where the preparing instance's `/tmp` is made, if the sandbox has one.
    pub(super) scratch: Option<&'a super::ScratchRoot>,
}

impl WarmStates {
    pub(super) fn new(store: WarmStore) -> WarmStates {
        WarmStates {
            store,
            base_image: OnceLock::new(),
            loaded: Mutex::new(Vec::new()),
            preparing: Mutex::new(()),
        }
    }

    pub(super) fn store(&self) -> &WarmStore {
        &self.store
    }

    /// The snapshot's image and its summary (made once per process: ~5 ms).
    fn base_image<'m>(
        &self,
        module: &'m Module,
    ) -> Result<(&'m [u8], &delta::BaseImage), SandboxError> {
        let image = module.initial_memory_image().map_err(SandboxError::Warm)?;
        let summary = self
            .base_image
            .get_or_init(|| delta::BaseImage::of(self.store.base_identity(), image));
        Ok((image, summary))
    }

    /// Removes the stored states taken against another image of this snapshot's name
    /// (see [`WarmStore::forget_other_images`]); how many went.
    #[cfg(feature = "compiler")]
    pub(super) fn forget_other_images(&self, module: &Module) -> Result<usize, SandboxError> {
        let (_, summary) = self.base_image(module)?;
        self.store.forget_other_images(&summary.reference)
    }

    /// The tool's warm state: read from disk, or prepared now in this process (seconds).
    pub(super) fn get_or_prepare(
        &self,
        base: &Base<'_>,
        tool: &ToolFolder,
        packages: Option<&Path>,
    ) -> Result<Warmth, SandboxError> {
        let owner = super::ShareKey::default();
        if let Some(found) = self.store.cached(tool, packages, &owner)? {
            return Ok(found);
        }
        let _one_at_a_time = self
            .preparing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Prepared by another caller while this one waited.
        if let Some(found) = self.store.cached(tool, packages, &owner)? {
            return Ok(found);
        }
        let key = self.store.key(tool, packages, &owner)?;
        let prepared = self.prepare(base, tool, packages)?;
        self.store.store(&key, prepared)
    }

    /// Runs the tool's module-level code and takes the instance's state, without
    /// storing it.
    pub(super) fn prepare(
        &self,
        base: &Base<'_>,
        tool: &ToolFolder,
        packages: Option<&Path>,
    ) -> Result<Prepared, SandboxError> {
        let (image, summary) = self.base_image(base.module)?;
        prepare(base, image, &summary.reference, tool, packages)
    }

    /// The module of the state stored under `key`, loaded once per process: its image
    /// rebuilt from the snapshot's and its delta. A state that is gone, corrupt or
    /// taken against another snapshot is refused with [`SandboxError::WarmRefused`].
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
        let refused = |reason: String| SandboxError::WarmRefused {
            key: key.to_owned(),
            reason,
        };
        // A state that cannot be read (a file this process may not open, a disk error)
        // is refused like one that is gone: the call runs cold rather than fail.
        let read = self
            .store
            .read(key, true)
            .map_err(|e| refused(format!("it cannot be read: {e}")))?;
        let Some((record, compressed, _)) = read else {
            return Err(refused(format!(
                "it is gone from {} (evicted or removed)",
                self.store.dir().display()
            )));
        };
        let Record::Warm {
            base: taken_against,
            memory_pages,
            memory_len,
            globals,
            delta: shape,
            ..
        } = record
        else {
            return Err(refused("it is recorded cold".into()));
        };
        let (image, summary) = self.base_image(base.module)?;
        let trailer = base
            .module
            .initial_state_trailer()
            .map_err(SandboxError::Warm)?;
        let file = delta::rebuild(
            image,
            summary,
            &taken_against,
            memory_len,
            shape,
            &compressed,
            trailer,
        )
        .map_err(|e| refused(e.to_string()))?;
        let globals: Vec<(u32, Val)> = globals.iter().map(|g| (g.index, g.value())).collect();
        let module = base
            .module
            .with_initial_state(file, memory_len, memory_pages, &globals)
            .map_err(|e| refused(format!("{e:#}")))?;
        let pre = base
            .linker
            .instantiate_pre(&module)
            .map_err(SandboxError::Warm)?;
        let exports = Exports::of(&module)?;
        let state = Arc::new(Loaded {
            pre,
            exports,
            image_bytes: memory_len,
        });
        let mut loaded = self.loaded();
        loaded.retain(|(k, _)| k != key);
        loaded.push((key.to_owned(), Arc::clone(&state)));
        let mut held: u64 = loaded.iter().map(|(_, l)| l.image_bytes).sum();
        while held > MAX_LOADED_BYTES.as_u64() && loaded.len() > 1 {
            let (_, oldest) = loaded.remove(0);
            held -= oldest.image_bytes;
        }
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
