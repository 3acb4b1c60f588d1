//! Outbound HTTP, carried out by the host on the guest's behalf.
//!
//! The guest has no sockets. Its HTTP libraries (`urllib.request`, `http.client`,
//! `requests`, `httpx`) hand each request to the host through the runtime's door
//! (`host.call`, see `runtime/outbound.py`), and the host decides:
//!
//! 1. the frame must parse, the URL must be http or https;
//! 2. the call must have requests left ([`crate::limits::Limits::http_requests`]);
//! 3. a [granted pattern](crate::grants::hosts) must allow the method, scheme, host and
//!    port;
//! 4. a secret's placeholder may travel only to that secret's hosts, where the host puts
//!    the value in its place ([`secrets`]);
//! 5. the body must fit what is left of `http_request_bytes`;
//! 6. the host resolves the name itself and refuses loopback, private, link-local,
//!    multicast and metadata addresses unless the operator allows private networks
//!    ([`address`]; the check sits in the client's resolver, so it holds for the
//!    address actually connected to);
//! 7. the response must fit what is left of `http_response_bytes`; a secret's value in
//!    it is replaced by the placeholder before the guest sees it.
//!
//! Redirects are not followed by the host: the guest's library follows them, and every
//! hop passes these checks again. Time in requests counts against the call's deadline,
//! which interrupts a request in flight. Every request, refused or not, is recorded in
//! the call's result ([`crate::outcome::RequestRecord`]).

pub mod address;
pub mod client;
mod exchange;
mod frame;
pub mod secrets;

pub use address::PrivateNetwork;
pub use client::Clients;
pub use exchange::{Exchange, max_frame};
pub use secrets::{CallSecrets, MissingSecret};
