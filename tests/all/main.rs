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

mod cli;
mod hostile;
mod http;
mod registry;
mod sandbox;
mod schema;
mod support;
mod tenant;
