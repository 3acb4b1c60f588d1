//! The messages themselves: what the server tells a worker ([`ToWorker`]), what a
//! worker tells the server ([`ToServer`]), and the call each belongs to ([`CallId`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::grants::ResolvedMount;
use crate::outcome::CallResult;
use crate::sandbox::{Flavour, Job, Prepared, WarmState};

/// What the server tells a worker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ToWorker {
    /// The first message: load the runtime from Warden's home (no thread, no write).
    Load {
        /// Warden's home.
        home: PathBuf,
        /// An installed bundle's runtime folder, if the server runs one.
        runtime: Option<PathBuf>,
        /// Which runtime.
        flavour: Flavour,
        /// Highest memory cap a call may ask for, in bytes (sizes the pool's slots).
        max_memory_bytes: u64,
    },
    /// The second: confine yourself to these folders, for calls of one tenant only.
    Assign {
        /// Trees the worker may read: the runtime, its tenant's warm states, its tool's
        /// folder and package site (Warden's own folders, never a tenant's grants).
        read_only: Vec<PathBuf>,
        /// The folders its calls are granted, as admitted: the worker opens each without
        /// following a link (refusing one that is no longer the folder admitted),
        /// confines itself to those open folders and mounts them from there for every
        /// call, never by path again.
        mounts: Vec<ResolvedMount>,
        /// The folder its calls' scratch folders (`/tmp`) are made in: its own, the
        /// only one it may write besides its calls' read-write grants.
        scratch: PathBuf,
    },
    /// Run one call. The server sends it holding a core for the call: the guest starts
    /// at once, and its core is freed when its [`ToServer::Done`] arrives.
    Run {
        /// The call.
        job: Box<Job>,
        /// The warm state it starts from, if any.
        warm: Option<WarmState>,
        /// Wall time the call has left, in microseconds: the worker's deadline is the
        /// server's.
        budget_us: u64,
    },
    /// Prepare a tool's warm state (its module-level code runs here, not in the server).
    Prepare {
        /// The tool's folder.
        tool_dir: PathBuf,
        /// The tool's file name in it.
        file_name: String,
        /// Its installed packages, if any.
        packages: Option<PathBuf>,
    },
    /// The answer to [`ToServer::Door`]; the payload holds it.
    DoorAnswer,
    /// The answer to [`ToServer::Acquire`] and [`ToServer::Tick`]: the guest may run.
    Go,
}

/// What a worker tells the server.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ToServer {
    /// The runtime is loaded; waiting for [`ToWorker::Assign`].
    Loaded,
    /// Confined; waiting for calls.
    Ready,
    /// The worker could not start (no runtime, no confinement); it exits.
    Unusable {
        /// Why, in a sentence.
        reason: String,
    },
    /// The guest wants a core again (after a wait in a host call).
    Acquire,
    /// The guest gives its core back for a wait in a host call.
    Release,
    /// A slice's end while the guest runs (`sandbox::call::slices`): the server gives the core to a waiting call
    /// if any and answers [`ToWorker::Go`] when the guest may go on.
    Tick,
    /// A frame through the runtime's door (payload), or only its length when longer
    /// than the call could use.
    Door {
        /// The frame's length in bytes.
        len: u64,
    },
    /// The call's result, or why the worker could not run it.
    Done {
        /// The result; `Err` says why the host could not run the call.
        result: Result<CallResult, String>,
    },
    /// A preparation's outcome (its compressed delta is the payload), or why it failed.
    Prepared {
        /// The outcome without its image.
        prepared: Result<Prepared, String>,
    },
}

/// Which call a frame belongs to: a number the server draws at random for each call
/// and preparation (a worker cannot guess the next one), [`CallId::NONE`] while the
/// worker starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallId(pub u64);

impl CallId {
    /// Frames of a worker's start (`load`, `assign`).
    pub const NONE: CallId = CallId(0);

    /// A new call's number: random, never [`CallId::NONE`].
    pub fn draw() -> CallId {
        CallId(rand::random::<u64>() | 1)
    }
}
