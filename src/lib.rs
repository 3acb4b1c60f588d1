//! Warden runs untrusted Python tools for AI agents, one fresh CPython-on-WASI
//! instance per call.
//!
//! # The pipeline
//!
//! Data flows one way: tool source → **[`schema`]** (pure: the JSON Schema derived
//! statically, never by running the tool) → **[`manifest`]** (one immutable tool
//! version) → **[`sandbox`]** (one call in a fresh instance, caged by [`limits`] and
//! [`grants`]) → **[`outcome`]** (a [`outcome::CallResult`] with a status from a closed
//! set). [`packages`] turns a tool's requirements into a lock and a read-only site folder
//! (it runs pip, never the guest). The [`registry`] stores manifests, [`tenant`]s and a
//! hash-chained audit trail, whose formulas, signed export and offline check are in
//! [`audit`] (plain data and hashing, shared by the registry and the verifier).
//! [`app`] is the only module that combines the layers; the surfaces ([`http`], [`mcp`],
//! the CLI in `src/cli.rs`) call it.
//!
//! # Dependency rule
//!
//! Plain data ([`limits`], [`grants`], [`outcome`], [`tenant`]) imports nothing of
//! Warden's beyond other plain data. [`schema`] never touches files, the clock, the
//! environment, tokio or wasmtime. [`sandbox`] sees plain data and wasmtime, never
//! schemas, the registry or a surface. The [`registry`] never runs the sandbox.
//!
//! # The guest's view of the world
//!
//! A guest starts with nothing. It gets a read-only empty `/`, the standard library at
//! `/usr/local/lib`, its own source at `/tool`, its installed packages (if any) at
//! `/packages`, the folders and environment variables granted to it, and its request on
//! stdin. It has no sockets (its HTTP requests are carried out by the host, to the hosts
//! it is granted only, with secrets it never sees: [`outbound`]), no processes, no host
//! environment and no clock beyond wall and monotonic time. [`sandbox::wasi`] builds
//! that view in one short file, for reviewers.
//!
//! # The second wall
//!
//! Guest code runs in [`worker`] processes that hold nothing worth stealing, and the
//! processes that run code Warden does not trust (workers, pip) are confined by the
//! kernel with [`confine`]: Landlock for files and TCP ports, a seccomp filter for
//! system calls, so that escaping the first wall (WebAssembly) or subverting pip
//! reaches only what the process was given.

pub mod app;
pub mod audit;
pub mod bundle;
pub mod capabilities;
pub mod confine;
pub mod events;
pub mod grants;
pub mod http;
pub mod id;
pub mod limits;
pub mod manifest;
pub mod mcp;
pub mod outbound;
pub mod outcome;
pub mod packages;
pub mod registry;
pub mod sandbox;
pub mod schema;
pub mod tenant;
pub mod worker;
