//! Warm states on disk: one file per state under `$WARDEN_HOME/warm`, within a budget.
//!
//! Each owner (a tenant's share key; the host's own for calls on no tenant's behalf)
//! has a folder of its own, `o<16 hex digits>/`, named by a digest of the owner: a
//! state's key is `o.../<64 hex digits>`. A worker may read only its own tenant's
//! folder (a state's memory image holds the tenant's constants and bytecode).
//!
//! `<key>.warm` holds a header and, for a warm state, its delta ([`super::delta`]):
//!
//! ```text
//! "warden-warm-2\n" | u32 LE header length | header (JSON) | compressed delta
//! ```
//!
//! A state is written to a temporary file (`.tmp-*`, locked with `flock` while it is
//! written) and renamed into place, so a reader sees a whole state or none. A
//! temporary file whose lock is free belongs to a preparation that was interrupted
//! (killed, out of disk) and is removed by [`WarmStore::sweep`] at start.
//!
//! The folder keeps within a budget: storing a state evicts the least recently used
//! others (a file's modification time marks its last use, set at most once a
//! minute per state by the process that sends calls to it), first the owner's own
//! beyond half the budget, so that no tenant's states evict all the others'. A state larger than the
//! whole budget is not stored: its tool runs from Warden's snapshot, and is prepared
//! again after a restart. An evicted state is prepared again on its tool's next call.
//!
//! An installed edge bundle may ship states its maker prepared for its tools
//! (`DIR/runtime/warm/<key>.warm`, [`WarmStore::with_shipped`]): a state the home lacks
//! is copied from there into the home the first time it is looked up, then used and
//! evicted like any other. The bundle's folder is only read.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytesize::ByteSize;
use sha2::{Digest, Sha256};

use super::{ColdReason, FORMAT, Prepared, Record, WarmState, Warmth};
use crate::sandbox::{SandboxError, ShareKey, ToolFolder, io_error};

/// Default of the warm folder's budget: 1 GiB. A trivial tool's state takes ~33 KiB
/// and a pandas tool's ~10 MiB, so this holds tens of thousands of trivial tools or
/// about a hundred heavy ones: about three times the compiled runtime the node keeps
/// anyway, and small beside any disk a node runs on.
pub const DEFAULT_WARM_BUDGET: ByteSize = ByteSize::gib(1);

/// How often a state's use is written to its file's modification time, at most: the
/// least recently used order is exact to this, and a busy state costs one `utimensat`
/// a minute rather than one per call.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// The extension of a state's file.
const EXTENSION: &str = "warm";
/// The prefix of a state being written.
const TEMPORARY: &str = ".tmp-";
/// Most bytes a header may take (a record with its globals is about 2 KiB).
const MAX_HEADER: u32 = 1 << 20;
/// The share of the budget one tenant's states may take: a half.
const OWNER_SHARE: u64 = 2;

/// The warm states on disk under Warden's home: keys, files and the budget. Needs no
/// engine: the server of worker processes uses it to know which state a call starts
/// from, and to store the states workers prepare.
#[derive(Debug, Clone)]
pub struct WarmStore {
    dir: PathBuf,
    /// Names what the states are built from: the compiled snapshot's identity.
    base_identity: String,
    budget: ByteSize,
    /// When this process last marked each state used.
    touched: Arc<Mutex<HashMap<String, Instant>>>,
    /// A read-only folder of states shipped with an installed bundle.
    shipped: Option<PathBuf>,
}

impl WarmStore {
    /// The states under `home` built from the compiled snapshot named `base_identity`,
    /// kept within `budget`.
    pub fn new(home: &Path, base_identity: String, budget: ByteSize) -> WarmStore {
        WarmStore {
            dir: home.join("warm"),
            base_identity,
            budget,
            touched: Arc::default(),
            shipped: None,
        }
    }

    /// The same store, taking a state it lacks from `dir` (an installed bundle's
    /// `runtime/warm`) when `dir` holds one under the same key. `dir` is never written.
    pub fn with_shipped(mut self, dir: PathBuf) -> WarmStore {
        self.shipped = Some(dir);
        self
    }

    /// The file of the state stored under `key`.
    pub fn file(&self, key: &str) -> PathBuf {
        self.path(key)
    }

    /// The folder the states live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The compiled snapshot's identity, which states are keyed by.
    pub fn base_identity(&self) -> &str {
        &self.base_identity
    }

    /// Most disk the folder's states may take together.
    pub fn budget(&self) -> ByteSize {
        self.budget
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
        Ok(format!(
            "{}/{}",
            owner_folder(&owner),
            hex::encode(h.finalize())
        ))
    }

    /// The folder of `owner`'s states, made if missing: what its workers may read.
    pub fn owner_dir(&self, owner: &ShareKey) -> Result<PathBuf, SandboxError> {
        let dir = self.dir.join(owner_folder(&owner.to_string()));
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        Ok(dir)
    }

    /// The tool's warm state if `owner`'s workers prepared it before (and it was not
    /// evicted since), without preparing it.
    pub fn cached(
        &self,
        tool: &ToolFolder,
        packages: Option<&Path>,
        owner: &ShareKey,
    ) -> Result<Option<Warmth>, SandboxError> {
        let key = self.key(tool, packages, owner)?;
        Ok(self
            .read(&key, false)?
            .map(|(record, _, bytes)| warmth(&key, record, bytes)))
    }

    /// Stores what a preparation made under `key`, then evicts the least recently used
    /// other states until the folder is within its budget. Returns what calls start
    /// from: a state larger than the whole budget is not stored, and its tool runs cold.
    pub fn store(&self, key: &str, prepared: Prepared) -> Result<Warmth, SandboxError> {
        let header = serde_json::to_vec(&prepared.record)
            .map_err(|e| SandboxError::Harness(format!("cannot encode a warm record: {e}")))?;
        let payload = match (&prepared.record, &prepared.payload) {
            (Record::Warm { delta, .. }, Some(payload)) => {
                if payload.len() as u64 != delta.compressed {
                    return Err(malformed("its delta is not as long as its header says"));
                }
                payload.as_slice()
            }
            (Record::Warm { .. }, None) => {
                return Err(malformed("a warm state arrived without its delta"));
            }
            (Record::Cold(_), _) => &[],
        };
        let header_len = u32::try_from(header.len())
            .ok()
            .filter(|&n| n <= MAX_HEADER)
            .ok_or_else(|| malformed("its header is too large"))?;
        let size = (FORMAT.len() + 1 + 4 + header.len() + payload.len()) as u64;
        if matches!(prepared.record, Record::Warm { .. }) && size > self.budget.as_u64() {
            let reason = ColdReason {
                message: format!(
                    "its warm state takes {}, more than the warm folder's whole budget of {} \
                     (--warm-budget)",
                    ByteSize(size),
                    self.budget
                ),
                error: None,
            };
            tracing::info!("tool runs cold: {reason}");
            return Ok(Warmth::Cold(reason));
        }
        let path = self.path(key);
        let folder = path.parent().unwrap_or(&self.dir).to_owned();
        std::fs::create_dir_all(&folder).map_err(|e| io_error(&folder, e))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(TEMPORARY)
            .tempfile_in(&folder)
            .map_err(|e| io_error(&folder, e))?;
        // Held until the file is renamed into place (or dropped): a sweep at another
        // process's start leaves a file being written alone.
        rustix::fs::flock(tmp.as_file(), rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io_error(tmp.path(), e.into()))?;
        let write = |file: &mut File| -> std::io::Result<()> {
            file.write_all(FORMAT.as_bytes())?;
            file.write_all(b"\n")?;
            file.write_all(&header_len.to_le_bytes())?;
            file.write_all(&header)?;
            file.write_all(payload)?;
            file.sync_all()
        };
        write(tmp.as_file_mut()).map_err(|e| io_error(&path, e))?;
        tmp.persist(&path).map_err(|e| io_error(&path, e.error))?;
        match &prepared.record {
            Record::Cold(reason) => tracing::info!("tool runs cold: {reason}"),
            Record::Warm {
                delta, prepared_ms, ..
            } => tracing::info!(
                "prepared a warm state in {prepared_ms} ms: {} pages changed, {} on disk",
                delta.pages,
                ByteSize(size)
            ),
        }
        self.touched().insert(key.to_owned(), Instant::now());
        self.evict(Some(&path))?;
        Ok(warmth(key, prepared.record, size))
    }

    /// Notes that a call starts from `state`, for the least recently used order: at
    /// most one write per state per minute. Best effort (a confined worker may not
    /// write here; its server does).
    pub fn touch(&self, state: &WarmState) {
        if self.touch_due(state) {
            self.mark_used(state);
        }
    }

    /// Whether a call starting from `state` should mark it used now (at most once a
    /// minute); when true, the caller marks it with [`WarmStore::mark_used`]. In memory
    /// only: cheap on a call's path.
    pub fn touch_due(&self, state: &WarmState) -> bool {
        let now = Instant::now();
        let mut touched = self.touched();
        match touched.get(state.key()) {
            Some(at) if now.duration_since(*at) < TOUCH_EVERY => false,
            _ => {
                touched.insert(state.key().to_owned(), now);
                true
            }
        }
    }

    /// Writes `state`'s last use to its file's modification time (file work: off an
    /// async runtime).
    pub fn mark_used(&self, state: &WarmState) {
        if let Ok(file) = File::options().write(true).open(self.path(state.key())) {
            let _ = file.set_modified(SystemTime::now());
        }
    }

    /// Whether `state` is still on disk (it may have been evicted since it was read).
    pub fn present(&self, state: &WarmState) -> bool {
        self.path(state.key()).is_file()
    }

    /// Removes the state stored under `key`, if any: one found unusable is prepared
    /// again on its tool's next call.
    pub fn remove(&self, key: &str) -> Result<(), SandboxError> {
        let path = self.path(key);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error(&path, e)),
            _ => Ok(()),
        }
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.{EXTENSION}"))
    }

    /// The state stored under `key`: its record, its delta when `with_delta`, and the
    /// file's length. An unreadable state counts as none and is removed.
    pub(super) fn read(
        &self,
        key: &str,
        with_delta: bool,
    ) -> Result<Option<(Record, Vec<u8>, u64)>, SandboxError> {
        let path = self.path(key);
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match self.adopt(key) {
                Some(file) => file,
                None => return Ok(None),
            },
            Err(e) => return Err(io_error(&path, e)),
        };
        let len = file.metadata().map_err(|e| io_error(&path, e))?.len();
        match parse(&mut file, with_delta) {
            Ok((record, delta)) => Ok(Some((record, delta, len))),
            Err(why) => {
                tracing::warn!(
                    "removing the unreadable warm state {}: {why}; it is prepared again",
                    path.display()
                );
                let _ = std::fs::remove_file(&path);
                Ok(None)
            }
        }
    }

    /// The state shipped under `key`, copied into the home (whole or not at all) and
    /// opened there; `None` when none is shipped or it cannot be copied (a confined
    /// worker cannot write the home: its server copies it first), in which case the
    /// state is prepared as if none were shipped.
    fn adopt(&self, key: &str) -> Option<File> {
        let shipped = self.shipped.as_ref()?.join(format!("{key}.{EXTENSION}"));
        if !shipped.is_file() {
            return None;
        }
        let path = self.path(key);
        let folder = path.parent().unwrap_or(&self.dir).to_owned();
        let copied = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(&folder)?;
            let mut tmp = tempfile::Builder::new()
                .prefix(TEMPORARY)
                .tempfile_in(&folder)?;
            rustix::fs::flock(tmp.as_file(), rustix::fs::FlockOperation::LockExclusive)?;
            std::io::copy(&mut File::open(&shipped)?, tmp.as_file_mut())?;
            tmp.as_file().sync_all()?;
            // Writable like a state prepared here, so that eviction can remove it.
            tmp.persist(&path).map_err(|e| e.error)?;
            Ok(())
        })();
        match copied {
            Ok(()) => {
                tracing::info!("using the warm state shipped in {}", shipped.display());
                File::open(&path).ok()
            }
            Err(e) => {
                tracing::debug!(
                    "cannot copy the shipped warm state {}: {e}",
                    shipped.display()
                );
                None
            }
        }
    }

    fn touched(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.touched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The folder of `owner`'s states, under the store's: `o` and 16 hex digits of a digest.
fn owner_folder(owner: &str) -> String {
    let digest = Sha256::digest(owner.as_bytes());
    format!("o{}", &hex::encode(digest)[..16])
}

/// A state's record and, when asked, its delta, checked against the header.
fn parse(file: &mut File, with_delta: bool) -> Result<(Record, Vec<u8>), String> {
    let mut magic = vec![0u8; FORMAT.len() + 1];
    let mut len = [0u8; 4];
    file.read_exact(&mut magic)
        .and_then(|()| file.read_exact(&mut len))
        .map_err(|e| format!("its header cannot be read: {e}"))?;
    if magic.strip_suffix(b"\n") != Some(FORMAT.as_bytes()) {
        return Err("it is not a warm state of this format".into());
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_HEADER {
        return Err("its header is too large".into());
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header)
        .map_err(|e| format!("its header is cut short: {e}"))?;
    let record: Record =
        serde_json::from_slice(&header).map_err(|e| format!("its header does not parse: {e}"))?;
    let mut delta = Vec::new();
    if with_delta {
        let Record::Warm { delta: shape, .. } = &record else {
            return Ok((record, delta));
        };
        file.read_to_end(&mut delta)
            .map_err(|e| format!("its delta cannot be read: {e}"))?;
        if delta.len() as u64 != shape.compressed {
            return Err(format!(
                "its delta has {} bytes where its header says {}: the file is cut short",
                delta.len(),
                shape.compressed
            ));
        }
    }
    Ok((record, delta))
}

fn malformed(what: &str) -> SandboxError {
    SandboxError::Warm(wasmtime::Error::msg(format!(
        "a prepared warm state is malformed: {what}"
    )))
}

pub(super) fn warmth(key: &str, record: Record, disk_bytes: u64) -> Warmth {
    match record {
        Record::Cold(reason) => Warmth::Cold(reason),
        Record::Warm { .. } => Warmth::Warm(Arc::new(WarmState {
            key: key.to_owned(),
            disk_bytes,
        })),
    }
}

mod budget;
mod sweep;
#[cfg(test)]
mod tests;

pub use sweep::{Pruned, Swept, prune};
