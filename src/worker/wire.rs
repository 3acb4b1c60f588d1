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
use std::path::PathBuf;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::grants::ResolvedMount;
use crate::limits::Limits;
use crate::outcome::CallResult;
use crate::sandbox::{Flavour, Job, Prepared, WarmState};

/// The largest header a worker accepts from the server: a job's arguments, JSON.
pub const MAX_HEADER: u32 = 256 << 20;
/// The largest payload a worker accepts from the server: a warm state's compressed
/// delta or a door answer.
pub const MAX_PAYLOAD: u64 = 1 << 30;

/// Bytes before a frame's header: its two lengths and its call.
const PREFIX: usize = 20;

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
        /// Which runtime.
        flavour: Flavour,
        /// Highest memory cap a call may ask for, in bytes (sizes the pool's slots).
        max_memory_bytes: u64,
    },
    /// The second: confine yourself to these folders, for calls of one tenant only.
    Assign {
        /// Trees the worker may read: the runtime, its tenant's warm states, its tool's
        /// folder and package site (Warden's own folders, never a tenant's grants).
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
    /// A slice's end while the guest runs (`sandbox::call::slices`): the server gives the core to a waiting call
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

/// Which call a frame belongs to: a number the server draws at random for each call
/// and preparation (a worker cannot guess the next one), [`CallId::NONE`] while the
/// worker starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallId(pub u64);

impl CallId {
    /// Frames of a worker's start (`load`, `assign`).
    pub const NONE: CallId = CallId(0);

    /// A new call's number: random, never [`CallId::NONE`].
    pub fn draw() -> CallId {
        CallId(rand::random::<u64>() | 1)
    }
}

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
mod tests {
    use super::*;

    fn frame(header: &[u8], payload: &[u8], call: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&call.to_le_bytes());
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(payload);
        bytes
    }

    async fn read(bytes: &[u8], expect: &Expect) -> Result<Frame, WireError> {
        let mut from = bytes;
        receive_async(&mut from, expect, &FrameBudget::default()).await
    }

    #[test]
    fn a_frame_round_trips_with_its_call() {
        let mut buf = Vec::new();
        send(&mut buf, &ToServer::Door { len: 3 }, b"abc", CallId(7)).unwrap();
        let (message, payload, call): (ToServer, _, _) = receive(&buf[..]).unwrap();
        assert!(matches!(message, ToServer::Door { len: 3 }));
        assert_eq!((payload.as_slice(), call), (&b"abc"[..], CallId(7)));
    }

    #[tokio::test]
    async fn the_server_holds_each_frame_to_its_call_and_kind() {
        let limits = Limits::default();
        let call = CallId(0x51);
        let expect = Expect::call(call, &limits);
        let tick = serde_json::to_vec(&ToServer::Tick).unwrap();
        let door = serde_json::to_vec(&ToServer::Door { len: 2 }).unwrap();

        let ok = read(&frame(&door, b"hi", call.0), &expect).await.unwrap();
        assert_eq!(ok.payload, b"hi");
        // Another call's frame: refused before its lengths are looked at.
        assert!(matches!(
            read(&frame(&tick, &[], 0x53), &expect).await,
            Err(WireError::Stray { got: 0x53, .. })
        ));
        // A tick with a payload; a tick padded past a few bytes.
        assert!(matches!(
            read(&frame(&tick, b"x", call.0), &expect).await,
            Err(WireError::TooLarge { max: 0, .. })
        ));
        let mut padded = tick.clone();
        padded.extend(std::iter::repeat_n(b' ', 4096));
        assert!(matches!(
            read(&frame(&padded, &[], call.0), &expect).await,
            Err(WireError::TooLarge { .. })
        ));
        // Lengths past what the call can carry are refused from the prefix alone: the
        // bytes announced are never sent, and nothing waits for them.
        let mut huge = frame(&tick, &[], call.0);
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            read(&huge, &expect).await,
            Err(WireError::TooLarge { .. })
        ));
        let mut huge = frame(&door, &[], call.0);
        huge[4..12].copy_from_slice(&(expect.door + 1).to_le_bytes());
        assert!(matches!(
            read(&huge, &expect).await,
            Err(WireError::TooLarge { .. })
        ));
        // A worker starting may say nothing larger than its reason.
        let mut garbage = frame(b"{}", &[], 0);
        assert!(matches!(
            read(&garbage, &Expect::start()).await,
            Err(WireError::Malformed(_))
        ));
        garbage[..4].copy_from_slice(&(8u32 << 20).to_le_bytes());
        assert!(matches!(
            read(&garbage, &Expect::start()).await,
            Err(WireError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn frames_wait_for_the_budget_and_give_it_back_when_dropped() {
        let budget = FrameBudget::new(ByteSize::kib(4));
        let call = CallId(3);
        let expect = Expect::call(call, &Limits::default());
        let door = serde_json::to_vec(&ToServer::Door { len: 3000 }).unwrap();
        let bytes = frame(&door, &[7u8; 3000], call.0);
        let first = receive_async(&mut &bytes[..], &expect, &budget)
            .await
            .unwrap();
        assert_eq!(budget.available(), ByteSize::kib(1));
        let mut from = &bytes[..];
        let second = receive_async(&mut from, &expect, &budget);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), second).await;
        assert!(waited.is_err(), "the second frame must wait for the budget");
        drop(first);
        assert_eq!(budget.available(), ByteSize::kib(4));
        // A frame larger than the whole budget takes all of it, and does not wait
        // forever.
        let big = frame(&door, &[7u8; 9000], call.0);
        let taken = receive_async(&mut &big[..], &expect, &budget)
            .await
            .unwrap();
        assert_eq!(budget.available(), ByteSize::kib(0));
        drop(taken);
    }

    #[test]
    fn what_a_worker_says_cannot_forge_a_log_line() {
        let forged = "ok\n2026-01-01T00:00:00Z  INFO warden: all fine\u{1b}[2J";
        let shown = said(forged);
        assert!(
            !shown.contains('\n') && !shown.contains('\u{1b}'),
            "{shown}"
        );
        assert!(said(&"x".repeat(10_000)).len() < 2_100);
    }
}
