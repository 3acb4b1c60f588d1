//! What lives for one call: its store and guest (`guest.rs`), the WASI context it sees
//! ([`wasi`]) and the calls checked there ([`syscalls`]), its stdout and stderr
//! (`pipe.rs`), its scratch folder ([`scratch`]), the JSON that crosses its stdin and
//! stdout ([`protocol`]), the host calls it makes through the runtime's door
//! ([`host_calls`]), its run cut into slices of fuel (`slices.rs`), the call as sent
//! to a worker (`job.rs`), the verdict on how it ended (`verdict.rs`) and the parts of
//! a rich result ([`content`]); `run.rs` runs it, from instance to result.

pub mod content;
pub(in crate::sandbox) mod guest;
pub mod host_calls;
pub(in crate::sandbox) mod job;
mod missing;
pub(in crate::sandbox) mod pipe;
pub mod protocol;
mod run;
pub mod scratch;
pub(in crate::sandbox) mod slices;
pub mod syscalls;
pub(in crate::sandbox) mod verdict;
pub mod wasi;
