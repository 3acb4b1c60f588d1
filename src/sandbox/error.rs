//! What stops the host from running a call, as opposed to a call that ran and failed.

use std::path::PathBuf;

use bytesize::ByteSize;

use super::ArtifactError;
use crate::grants::GrantError;
use crate::outbound::MissingSecret;

/// The host could not run a call (as opposed to a call that ran and failed, which is a
/// [`crate::outcome::CallResult`]).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The runtime could not be fetched or verified.
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A thread or async runtime the sandbox needs could not be started.
    #[error("cannot start the {what}: {source}; the host may be out of threads or memory")]
    Start {
        /// What could not be started.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// Compiling the runtime failed.
    #[error("compiling the Python runtime failed: {0:#}")]
    Compile(wasmtime::Error),
    /// The compiled runtime is not there, and this process will not compile it.
    #[error("the compiled runtime {} is missing: {what}", path.display())]
    NotCompiled {
        /// Where it was looked for.
        path: PathBuf,
        /// What to do.
        what: String,
    },
    /// wasmtime refuses the compiled runtime on this host (another CPU level, target,
    /// wasmtime version or engine settings). Never rebuilt silently.
    #[error(
        "the compiled runtime {} (for {compiled_for}) cannot run on this host: {reason:#}; \
         {instead}",
        path.display()
    )]
    Incompatible {
        /// The `.cwasm` file.
        path: PathBuf,
        /// The platform it was compiled for.
        compiled_for: String,
        /// wasmtime's reason.
        reason: wasmtime::Error,
        /// Which bundle to use instead.
        instead: String,
    },
    /// Building Warden's snapshot of the runtime failed.
    #[error(
        "pre-initializing the Python runtime with Warden's harness failed: {0:#}; \
         run `warden runtime verify`, and report it if the runtime is intact"
    )]
    Snapshot(wasmtime::Error),
    /// The engine or linker could not be set up.
    #[error("setting up the WebAssembly engine failed: {0:#}")]
    Engine(wasmtime::Error),
    /// A grant cannot be honoured.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The call asks for more memory than the sandbox was sized for.
    #[error("a memory cap of {asked} exceeds this sandbox's maximum of {max}: ask for less")]
    MemoryAboveMaximum {
        /// The call's cap.
        asked: ByteSize,
        /// The sandbox's maximum.
        max: ByteSize,
    },
    /// The harness could not be prepared: a packaging problem.
    #[error("the guest harness does not work with this runtime ({0}): reinstall warden")]
    Harness(String),
    /// The instance could not be created for a host-side reason.
    #[error("could not start the guest: {0:#}")]
    Instantiate(wasmtime::Error),
    /// A worker process could not be started or broke its protocol (a call whose worker
    /// died under it is a [`crate::outcome::CallResult`] with status `crashed`, not this).
    #[error(
        "a worker process failed: {0}; check that the kernel offers Landlock and seccomp \
         and that Warden's binary is intact"
    )]
    Worker(String),
    /// A secret the tool is granted has no value on this host.
    #[error(transparent)]
    Secret(#[from] MissingSecret),
    /// A tool's warm state could not be saved or loaded (a host-side fault; the tool
    /// itself is fine and can run cold).
    #[error(
        "the tool's warm state could not be saved or loaded: {0:#}; remove the `warm` \
         folder of Warden's home to rebuild it"
    )]
    Warm(wasmtime::Error),
    /// A tool's warm state cannot be used: gone (evicted), corrupt, or taken against
    /// another snapshot. A call given it runs from Warden's snapshot instead, and the
    /// state is prepared again.
    #[error("the warm state {key} cannot be used: {reason}")]
    WarmRefused {
        /// The state's key.
        key: String,
        /// Why, in one sentence.
        reason: String,
    },
}

impl SandboxError {
    /// What failed, as a category without the host's paths or messages: what the audit
    /// trail, which a tenant reads, records of a call the host could not run.
    pub fn category(&self) -> &'static str {
        match self {
            SandboxError::Artifact(_)
            | SandboxError::Compile(_)
            | SandboxError::NotCompiled { .. }
            | SandboxError::Incompatible { .. }
            | SandboxError::Snapshot(_) => "runtime",
            SandboxError::Io { .. } => "io",
            SandboxError::Start { .. } => "start",
            SandboxError::Engine(_) => "engine",
            SandboxError::Grant(_) => "grant",
            SandboxError::MemoryAboveMaximum { .. } => "memory_above_maximum",
            SandboxError::Harness(_) => "harness",
            SandboxError::Instantiate(_) => "instance",
            SandboxError::Worker(_) => "worker",
            SandboxError::Secret(_) => "secret",
            SandboxError::Warm(_) | SandboxError::WarmRefused { .. } => "warm_state",
        }
    }
}
