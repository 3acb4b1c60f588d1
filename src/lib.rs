//! Warden runs untrusted Python tools for AI agents, one fresh CPython-on-WASI
//! instance per call.
//!
//! # The pipeline
//!
//! Data flows one way: tool source → **sandbox** (one call in a fresh instance, caged
//! by [`limits`] and [`grants`]) → **outcome** (a [`outcome::CallResult`] with a status
//! from a closed set). The CLI (`src/cli.rs`) is the only place that combines them.
//!
//! # Dependency rule
//!
//! Plain data ([`limits`], [`grants`], [`outcome`]) imports nothing of Warden's.
//! [`sandbox`] sees plain data and wasmtime, never a surface such as the CLI.
//!
//! # The guest's view of the world
//!
//! A guest starts with nothing. It gets a read-only empty `/`, the standard library at
//! `/usr/local/lib`, its own source at `/tool`, the folders and environment variables
//! granted to it, and its request on stdin. It has no network, no processes, no host
//! environment and no clock beyond wall and monotonic time. [`sandbox::wasi`] builds
//! that view in one short file, for reviewers.

pub mod grants;
pub mod limits;
pub mod outcome;
pub mod sandbox;
