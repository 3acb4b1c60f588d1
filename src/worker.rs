//! The second wall: guest code runs in worker processes that hold nothing worth
//! stealing.
//!
//! WebAssembly is the first wall. If a wasmtime or Cranelift bug ever let a tool run
//! native code, it would run in a worker: a process started from Warden's own binary
//! (`warden __worker`), that loaded the runtime, lowered its priority and confined
//! itself (`confinement.rs`) before it had a second thread, and that can then read only
//! the runtime, warm states, package sites, its tool's folder and the folders its calls
//! are granted, write only the read-write ones, open no socket, exec nothing and signal
//! no one. The server process, which holds the database, the keys, the secret values and
//! the network, never runs guest code.
//!
//! - [`wire`]: the messages between server and worker, plain serde types.
//! - `child.rs`: the worker's side: load, confine, then run calls until the server hangs
//!   up. A guest's outbound requests and its turns at the cores become questions to
//!   the server, which checks and answers them exactly as for a call in its own process.
//! - [`namespaces`]: the third layer, namespaces of the worker's own where the kernel
//!   allows them (and with them a mount view of its own folders, `crate::confine::narrow`).
//! - `process.rs`: a worker process as the server sees it (start, `load`, `assign`,
//!   end); `stderr.rs`: what it writes to stderr, relayed into the server's log;
//!   `call.rs`: one call served (the worker's questions answered, its death
//!   turned into the call's `crashed` or `timeout` result).
//! - [`pool`]: the server's side: [`Workers`] starts workers, lends each to calls of one
//!   key only (`key.rs`: a tenant, a tool, a set of folders: a worker never serves two
//!   tenants), keeps a spare that has loaded the runtime, and turns a worker that dies
//!   under a call into that call's `crashed` result. `lending.rs`: checking workers out
//!   and back in, stopping idle ones, ending those past their bounds; `prepare.rs`: a
//!   warm state prepared in a fresh worker and stored.

mod call;
mod child;
mod confinement;
#[cfg(feature = "escape-hatch")]
mod escape;
#[cfg(test)]
mod fuzz;
mod key;
mod lending;
pub mod namespaces;
pub mod pool;
mod prepare;
mod process;
mod stderr;
pub mod wire;

pub use child::main;
pub use namespaces::NamespacePolicy;
pub use pool::{Workers, WorkersConfig};
