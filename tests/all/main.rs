//! Warden's integration tests: one binary, against the real runtime.
//!
//! The runtime is fetched and compiled at most once per run (and reused from
//! `$WARDEN_HOME`, default the per-user cache, by later runs); every test shares one
//! [`warden::sandbox::Sandbox`].

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

/// `warden audit` and `warden tenant policy`: exports checked offline, policies changed.
mod audit;
/// The second wall: an escaped tool, confined by its worker process.
#[cfg(feature = "escape-hatch")]
mod breach;
/// The review console in headless Chromium: sign in, review, approve; screenshots.
mod browser;
/// Edge bundles: made, verified, installed, and run offline with nothing compiled.
mod bundle;
/// The `warden` binary as a user runs it: commands, flags, output, exit codes.
mod cli;
/// The compiled runtime: one per home, compiled by one process at a time.
mod compiled;
/// The manual and the README: every link to a file or heading resolves, every chapter
/// is in the book's summary, every JSON, TOML and Python example is well formed.
mod docs;
#[cfg(feature = "escape-hatch")]
mod escape;
/// The guest side's pure parts (runtime/*.py) under the host's CPython.
mod guest;
/// A hostile guest: blocking calls, file ceilings, special files, forged answers.
mod hostile;
/// The HTTP service through its router and on a real socket: lifecycle, tenancy, load.
mod http;
/// Warden's wasmtime patch: a module sharing compiled code with another memory image.
mod initial_state;
#[cfg(feature = "escape-hatch")]
mod layers;
/// `warden mcp` through an MCP client: list, call, errors, progress, cancellation, changes.
mod mcp;
mod mcp_python;
/// Several `warden serve` processes on one PostgreSQL: changes, ceilings, keys, health.
mod nodes;
/// Outbound HTTP through the host: grants, private addresses, secrets, limits.
mod outbound;
/// Tool packages: requirements, locks, safe installs, imports in the guest.
mod packages;
/// A real PostgreSQL server for the tests (Debian's package), one per run.
mod pg;
/// Several nodes on one PostgreSQL: concurrent chains, migrations, outages.
mod postgres;
/// The Pydantic runtime: built when missing, chosen from requirements, Pydantic 2 in
/// the guest.
mod pydantic;
/// Storage on SQLite and PostgreSQL (one suite, both databases): versions, migrations,
/// the hash-chained audit trail, restarts.
mod registry;
/// The executor core: one call in a fresh instance, its limits and its grants.
mod sandbox;
/// Schema derivation: fixture corpus, exports, health, argument checks, properties.
mod schema;
/// The scratch folder every call gets: `/tmp`, private, bounded, gone at the end.
mod scratch;
/// Warden's wasmtime patch: a reused pool slot reset in place, every dirty page.
mod slot_reset;
/// The shared sandbox of this run and helpers to call fixture tools.
mod support;
/// Tenants, keys and policy admission.
mod tenant;
/// The manual's walk-throughs marked `<!-- runs -->` (the README's tour first), run as
/// written.
mod tour;
/// Warm states: imports once per tool version, a fresh instance per call.
mod warm;
/// Worker processes: one per tenant, a crash fails one call.
mod workers;
