//! The messages between the server and a worker process, and how they are framed.
//!
//! Every message is one frame on the worker's socket: a header (the message as JSON)
//! and a payload of raw bytes (a door frame, a door answer, a warm state's image):
//!
//! ```text
//! u32 LE header length | u64 LE payload length | header | payload
//! ```
//!
//! The server reads a worker's frames as it reads any untrusted input: both lengths are
//! bounded before anything is allocated, and a frame that does not parse ends the worker.

use std::io::{Read, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::grants::ResolvedMount;
use crate::outcome::CallResult;
use crate::sandbox::{Job, Prepared, WarmState};

/// The largest header either side accepts: a job's arguments or a call's result, JSON.
pub const MAX_HEADER: u32 = 256 << 20;
/// The largest payload either side accepts: a warm state's compressed delta (at most
/// [`crate::sandbox::MAX_STATE_DELTA`] before compression) or a door frame.
pub const MAX_PAYLOAD: u64 = 1 << 30;

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
        /// Highest memory cap a call may ask for, in bytes (sizes the pool's slots).
        max_memory_bytes: u64,
    },
    /// The second: confine yourself to these folders, for calls of one tenant only.
    Assign {
        /// Trees the worker may read: the runtime, warm states, package sites and the
        /// tool's folder (Warden's own folders, never a tenant's).
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
    /// An epoch tick while the guest runs: the server gives the core to a waiting call
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

/// A frame that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed or was closed.
    #[error("the worker's channel is closed: {0}")]
    Io(#[from] std::io::Error),
    /// A length above its bound.
    #[error("a frame of {len} bytes is larger than the {max} allowed")]
    TooLarge {
        /// The length announced.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// A header that is not a message.
    #[error("a frame does not parse: {0}")]
    Malformed(#[from] serde_json::Error),
}

fn encode<T: Serialize>(message: &T, payload: &[u8]) -> Result<Vec<u8>, WireError> {
    let header = serde_json::to_vec(message)?;
    let len = header.len() as u64;
    if len > u64::from(MAX_HEADER) {
        return Err(WireError::TooLarge {
            len,
            max: u64::from(MAX_HEADER),
        });
    }
    let mut frame = Vec::with_capacity(12 + header.len() + payload.len());
    frame.extend_from_slice(&(header.len() as u32).to_le_bytes());
    frame.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(payload);
    Ok(frame)
}

fn lengths(prefix: [u8; 12]) -> Result<(usize, usize), WireError> {
    let mut h = [0u8; 4];
    h.copy_from_slice(&prefix[..4]);
    let mut p = [0u8; 8];
    p.copy_from_slice(&prefix[4..]);
    let (header, payload) = (u32::from_le_bytes(h), u64::from_le_bytes(p));
    if header > MAX_HEADER {
        return Err(WireError::TooLarge {
            len: u64::from(header),
            max: u64::from(MAX_HEADER),
        });
    }
    if payload > MAX_PAYLOAD {
        return Err(WireError::TooLarge {
            len: payload,
            max: MAX_PAYLOAD,
        });
    }
    // Both fit: the header's bound is below u32::MAX, the payload's below 2^30.
    Ok((header as usize, payload as usize))
}

/// Writes one frame (blocking: the worker's side).
pub fn send<T: Serialize>(
    mut to: impl Write,
    message: &T,
    payload: &[u8],
) -> Result<(), WireError> {
    to.write_all(&encode(message, payload)?)?;
    Ok(())
}

/// Reads one frame (blocking: the worker's side).
pub fn receive<T: for<'de> Deserialize<'de>>(
    mut from: impl Read,
) -> Result<(T, Vec<u8>), WireError> {
    let mut prefix = [0u8; 12];
    from.read_exact(&mut prefix)?;
    let (header_len, payload_len) = lengths(prefix)?;
    let mut header = vec![0u8; header_len];
    from.read_exact(&mut header)?;
    let mut payload = vec![0u8; payload_len];
    from.read_exact(&mut payload)?;
    Ok((serde_json::from_slice(&header)?, payload))
}

/// Writes one frame (the server's side).
pub async fn send_async<T: Serialize>(
    to: &mut (impl AsyncWriteExt + Unpin),
    message: &T,
    payload: &[u8],
) -> Result<(), WireError> {
    to.write_all(&encode(message, payload)?).await?;
    Ok(())
}

/// Reads one frame (the server's side). The payload is read only after the header
/// parsed, so a worker cannot make the server allocate for a frame it would refuse.
pub async fn receive_async<T: for<'de> Deserialize<'de>>(
    from: &mut (impl AsyncReadExt + Unpin),
) -> Result<(T, Vec<u8>), WireError> {
    let mut prefix = [0u8; 12];
    from.read_exact(&mut prefix).await?;
    let (header_len, payload_len) = lengths(prefix)?;
    let mut header = vec![0u8; header_len];
    from.read_exact(&mut header).await?;
    let message = serde_json::from_slice(&header)?;
    let mut payload = vec![0u8; payload_len];
    from.read_exact(&mut payload).await?;
    Ok((message, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_oversized_lengths_are_refused() {
        let mut buf = Vec::new();
        send(&mut buf, &ToServer::Door { len: 3 }, b"abc").unwrap();
        let (message, payload): (ToServer, _) = receive(&buf[..]).unwrap();
        assert!(matches!(message, ToServer::Door { len: 3 }));
        assert_eq!(payload, b"abc");

        let mut huge = Vec::new();
        huge.extend_from_slice(&(MAX_HEADER + 1).to_le_bytes());
        huge.extend_from_slice(&0u64.to_le_bytes());
        assert!(matches!(
            receive::<ToServer>(&huge[..]),
            Err(WireError::TooLarge { .. })
        ));
        let mut garbage = Vec::new();
        garbage.extend_from_slice(&2u32.to_le_bytes());
        garbage.extend_from_slice(&0u64.to_le_bytes());
        garbage.extend_from_slice(b"{}");
        assert!(matches!(
            receive::<ToServer>(&garbage[..]),
            Err(WireError::Malformed(_))
        ));
    }
}
