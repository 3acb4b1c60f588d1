//! The messages between the server and a worker process, and how they are framed.
//!
//! Every message is one frame on the worker's socket: a header (the message as JSON)
//! and a payload of raw bytes (a door frame, a door answer, a warm state's image),
//! stamped with the call it belongs to:
//!
//! ```text
//! u32 LE header length | u64 LE payload length | u64 LE call | header | payload
//! ```
//!
//! The server reads a worker's frames as it reads any untrusted input ([`Expect`]): a
//! frame of another call (written while the worker sat idle, say) is refused before
//! anything is read; both lengths are bounded by what the conversation can carry at
//! that point before anything is allocated, and the bytes allocated are taken from one
//! budget shared by all workers ([`FrameBudget`]); each message is then held to what
//! its kind can carry (nothing but a few bytes for a tick or a core's turn, the call's
//! largest door frame for a door frame, the call's output caps for its result); a large
//! header is parsed off the async runtime. A frame past any bound, or that does not
//! parse, ends the worker.

use std::io::{Read, Write};

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::limits::Limits;

/// The largest header a worker accepts from the server: a job's arguments, JSON.
pub const MAX_HEADER: u32 = 256 << 20;
/// The largest payload a worker accepts from the server: a warm state's compressed
/// delta or a door answer.
pub const MAX_PAYLOAD: u64 = 1 << 30;

/// Bytes before a frame's header: its two lengths and its call.
const PREFIX: usize = 20;

mod messages;

pub use messages::{CallId, ToServer, ToWorker};

/// The largest header of a message that only says what it is: a tick, a core's turn,
/// a door frame's length, `loaded`, `ready`.
const SMALL_HEADER: u64 = 1 << 10;
/// The largest header of a worker's reason it cannot start.
const REASON_HEADER: u64 = 64 << 10;
/// The largest header of a preparation's outcome: its failure may carry the module's
/// exception, read from the preparation's stdout (1 MiB), each byte at most 6 once
/// JSON-escaped.
const PREPARED_HEADER: u64 = 7 << 20;
/// The largest image of a prepared state: its delta, at most
/// [`crate::sandbox::MAX_STATE_DELTA`], zstd-compressed (which adds at most a few
/// bytes per 128 KiB block on data it cannot shrink).
const MAX_IMAGE: u64 = crate::sandbox::MAX_STATE_DELTA.as_u64() + (2 << 20);
/// Bytes a JSON-escaped byte of guest output may take (`\u0000`).
const ESCAPED: u64 = 6;

/// What the server accepts from a worker at one point of their conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// The call every frame must belong to.
    pub call: CallId,
    /// The largest result (`done`): everything in it comes from the call's stdout and
    /// stderr, each byte at most 6 once JSON-escaped.
    pub result: u64,
    /// The largest door frame: the call's own bound on an outbound request.
    pub door: u64,
    /// The largest prepared image.
    pub image: u64,
}

impl Expect {
    /// A worker's start: `loaded`, `ready` or `unusable`, nothing else.
    pub fn start() -> Expect {
        Expect {
            call: CallId::NONE,
            result: 0,
            door: 0,
            image: 0,
        }
    }

    /// A call with these limits: ticks, core turns, door frames and its result.
    pub fn call(call: CallId, limits: &Limits) -> Expect {
        Expect {
            call,
            result: crate::sandbox::max_output(limits)
                .as_u64()
                .saturating_mul(ESCAPED)
                .saturating_add(REASON_HEADER),
            door: crate::outbound::max_frame(limits),
            image: 0,
        }
    }

    /// A preparation: its outcome and image.
    pub fn prepare(call: CallId) -> Expect {
        Expect {
            call,
            result: 0,
            door: 0,
            image: MAX_IMAGE,
        }
    }

    /// The largest header any message may have here.
    fn header(&self) -> u64 {
        self.result.max(PREPARED_HEADER)
    }

    /// The largest payload any message may have here.
    fn payload(&self) -> u64 {
        self.door.max(self.image)
    }

    /// The largest header and payload `message` may have here.
    fn of(&self, message: &ToServer) -> (u64, u64) {
        match message {
            ToServer::Loaded
            | ToServer::Ready
            | ToServer::Acquire
            | ToServer::Release
            | ToServer::Tick => (SMALL_HEADER, 0),
            ToServer::Door { .. } => (SMALL_HEADER, self.door),
            ToServer::Unusable { .. } => (REASON_HEADER, 0),
            ToServer::Done { .. } => (self.result.max(REASON_HEADER), 0),
            ToServer::Prepared { .. } => (PREPARED_HEADER, self.image),
        }
    }
}

/// Bytes the server may hold at once for frames read from workers, all workers
/// together: a frame's bytes are taken from it before they are allocated and given
/// back when the frame is dropped. A frame larger than the whole budget waits for all
/// of it, so at most one such frame is in memory at a time.
#[derive(Debug, Clone)]
pub struct FrameBudget {
    kib: std::sync::Arc<tokio::sync::Semaphore>,
    total_kib: u32,
}

/// Default of [`FrameBudget`]: 512 MiB.
pub const DEFAULT_FRAME_BUDGET: ByteSize = ByteSize::mib(512);

impl FrameBudget {
    /// A budget of `total` bytes (counted in KiB, at least 1 KiB, at most 4 TiB).
    pub fn new(total: ByteSize) -> FrameBudget {
        let total_kib = u32::try_from(total.as_u64().div_ceil(1024))
            .unwrap_or(u32::MAX)
            .max(1);
        FrameBudget {
            kib: std::sync::Arc::new(tokio::sync::Semaphore::new(total_kib as usize)),
            total_kib,
        }
    }

    async fn take(&self, bytes: u64) -> Result<tokio::sync::OwnedSemaphorePermit, WireError> {
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.total_kib);
        std::sync::Arc::clone(&self.kib)
            .acquire_many_owned(kib)
            .await
            .map_err(|_| WireError::Io(std::io::Error::other("the frame budget is closed")))
    }

    /// Bytes free now.
    pub fn available(&self) -> ByteSize {
        ByteSize::kib(self.kib.available_permits() as u64)
    }
}

impl Default for FrameBudget {
    fn default() -> Self {
        FrameBudget::new(DEFAULT_FRAME_BUDGET)
    }
}

/// A frame the server read from a worker; its bytes count against the budget until it
/// is dropped.
#[derive(Debug)]
pub struct Frame {
    /// The message.
    pub message: ToServer,
    /// Its payload.
    pub payload: Vec<u8>,
    _held: tokio::sync::OwnedSemaphorePermit,
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
    /// A frame stamped with another call than the one under way.
    #[error("a frame of another call ({got:#x}) arrived during call {expected:#x}")]
    Stray {
        /// The call the frame named.
        got: u64,
        /// The call under way.
        expected: u64,
    },
    /// A header that is not a message (the parser's words, escaped).
    #[error("a frame does not parse: {0}")]
    Malformed(String),
}

impl From<serde_json::Error> for WireError {
    fn from(e: serde_json::Error) -> Self {
        // The parser quotes what it did not expect (a variant's name): the worker's
        // words, which reach the server's log.
        WireError::Malformed(said(&e.to_string()))
    }
}

/// What a worker said, fit for a log line or an error message: control characters
/// (newlines, terminal escapes) escaped, at most 2,000 characters.
pub fn said(text: &str) -> String {
    const MOST: usize = 2_000;
    let mut out = String::with_capacity(text.len().min(MOST));
    for (n, c) in text.chars().enumerate() {
        if n == MOST {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn encode<T: Serialize>(message: &T, payload: &[u8], call: CallId) -> Result<Vec<u8>, WireError> {
    let header = serde_json::to_vec(message)?;
    let len = header.len() as u64;
    if len > u64::from(MAX_HEADER) {
        return Err(WireError::TooLarge {
            len,
            max: u64::from(MAX_HEADER),
        });
    }
    let mut frame = Vec::with_capacity(PREFIX + header.len() + payload.len());
    frame.extend_from_slice(&(header.len() as u32).to_le_bytes());
    frame.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    frame.extend_from_slice(&call.0.to_le_bytes());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(payload);
    Ok(frame)
}

/// A frame's prefix: header length, payload length, call.
fn prefix(bytes: [u8; PREFIX]) -> (u64, u64, CallId) {
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let mut h = [0u8; 4];
    h.copy_from_slice(&bytes[..4]);
    (u64::from(u32::from_le_bytes(h)), word(4), CallId(word(12)))
}

fn bounded(len: u64, max: u64) -> Result<usize, WireError> {
    if len > max {
        return Err(WireError::TooLarge { len, max });
    }
    usize::try_from(len).map_err(|_| WireError::TooLarge { len, max })
}

/// Writes one frame (blocking: the worker's side).
pub fn send<T: Serialize>(
    mut to: impl Write,
    message: &T,
    payload: &[u8],
    call: CallId,
) -> Result<(), WireError> {
    to.write_all(&encode(message, payload, call)?)?;
    Ok(())
}

/// Reads one frame of the server's, and the call it belongs to (blocking: the
/// worker's side).
pub fn receive<T: for<'de> Deserialize<'de>>(
    mut from: impl Read,
) -> Result<(T, Vec<u8>, CallId), WireError> {
    let mut bytes = [0u8; PREFIX];
    from.read_exact(&mut bytes)?;
    let (header_len, payload_len, call) = prefix(bytes);
    let mut header = vec![0u8; bounded(header_len, u64::from(MAX_HEADER))?];
    from.read_exact(&mut header)?;
    let mut payload = vec![0u8; bounded(payload_len, MAX_PAYLOAD)?];
    from.read_exact(&mut payload)?;
    Ok((serde_json::from_slice(&header)?, payload, call))
}

/// Writes one frame (the server's side).
pub async fn send_async<T: Serialize>(
    to: &mut (impl AsyncWriteExt + Unpin),
    message: &T,
    payload: &[u8],
    call: CallId,
) -> Result<(), WireError> {
    to.write_all(&encode(message, payload, call)?).await?;
    Ok(())
}

/// Headers longer than this are parsed on a blocking thread, not the async runtime.
const PARSE_INLINE: usize = 64 << 10;

/// Reads one frame of a worker's, as [`Expect`] allows at this point (the server's
/// side). Nothing is allocated for a frame of another call or one longer than the
/// conversation can carry here, and the payload is read only once the header parsed
/// and its kind allows that much.
pub async fn receive_async(
    from: &mut (impl AsyncReadExt + Unpin),
    expect: &Expect,
    budget: &FrameBudget,
) -> Result<Frame, WireError> {
    let mut bytes = [0u8; PREFIX];
    from.read_exact(&mut bytes).await?;
    let (header_len, payload_len, call) = prefix(bytes);
    if call != expect.call {
        return Err(WireError::Stray {
            got: call.0,
            expected: expect.call.0,
        });
    }
    let header_len = bounded(header_len, expect.header())?;
    bounded(payload_len, expect.payload())?;
    let held = budget.take(header_len as u64 + payload_len).await?;
    let mut header = vec![0u8; header_len];
    from.read_exact(&mut header).await?;
    let message: ToServer = if header.len() > PARSE_INLINE {
        tokio::task::spawn_blocking(move || serde_json::from_slice(&header))
            .await
            .map_err(|e| WireError::Io(std::io::Error::other(e)))??
    } else {
        serde_json::from_slice(&header)?
    };
    let (header_max, payload_max) = expect.of(&message);
    bounded(header_len as u64, header_max)?;
    let mut payload = vec![0u8; bounded(payload_len, payload_max)?];
    from.read_exact(&mut payload).await?;
    Ok(Frame {
        message,
        payload,
        _held: held,
    })
}

#[cfg(test)]
mod tests;
