//! What lives once per machine: the runtime fetched and verified ([`artifacts`]), the
//! host's CPU level ([`platform`]), Warden's snapshot of it ([`snapshot`], whose
//! exports `state_exports.rs` adds), the snapshot compiled and cached ([`compiled`]),
//! the engine's settings (`engine.rs`), and opening all of it (`open.rs`).
//!
//! Runtime flavours plug in here ([`flavour`]): what differs between the standard
//! runtime and the Pydantic one is what `artifacts` fetches or [`build`] makes, and the
//! file names `flavour` gives; everything per version and per call is the same.

pub mod artifacts;
pub mod build;
pub mod compiled;
pub(in crate::sandbox) mod engine;
pub mod flavour;
pub(in crate::sandbox) mod open;
pub mod platform;
pub mod snapshot;
#[cfg_attr(
    not(feature = "compiler"),
    expect(dead_code, reason = "only building a snapshot adds exports")
)]
pub(in crate::sandbox) mod state_exports;
