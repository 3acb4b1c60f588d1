//! What a call reports while it runs: progress (`warden.progress`, FastMCP's
//! `ctx.report_progress`) and log records (standard `logging`, `ctx.info`), sent by the
//! guest through the runtime's door and handed to whoever watches the call (the MCP
//! server turns them into `notifications/progress` and `notifications/message`).
//!
//! The guest is untrusted here as everywhere: [`Events`] forwards only what the caller
//! asked for ([`Wants`]), keeps progress strictly increasing, drops log records below
//! the level asked for, rate-limits both per call, and bounds every text. Nothing here
//! touches the sandbox, the network or the protocol: it is the channel between them.

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// MCP's log levels (RFC 5424's), least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Detail for debugging.
    Debug,
    /// What happened.
    Info,
    /// Normal but significant.
    Notice,
    /// Something may be wrong.
    Warning,
    /// Something failed.
    Error,
    /// A part failed.
    Critical,
    /// Act now.
    Alert,
    /// Unusable.
    Emergency,
}

impl LogLevel {
    /// The name, as MCP spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the caller of a call asked to hear while it runs. Crosses to the guest (so
/// `warden.progress` costs nothing when nobody listens) and to worker processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wants {
    /// Progress reports (the MCP request carried a progress token).
    pub progress: bool,
    /// Log records at this level and above; none when nobody asked (MCP: no
    /// `logging/setLevel` in the session, no log level in the request).
    pub log_level: Option<LogLevel>,
}

/// One thing a call reported.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEvent {
    /// How far the call is.
    Progress {
        /// Done so far; greater than every earlier report of the call.
        progress: f64,
        /// Out of this many, when known.
        total: Option<f64>,
        /// What it is doing.
        message: Option<String>,
    },
    /// A log record.
    Log {
        /// Its level, at or above the one asked for.
        level: LogLevel,
        /// The logger's name.
        logger: Option<String>,
        /// The message (secrets already redacted by the caller of [`Events::log`]).
        message: String,
    },
}

/// Reports queued before the watcher reads them; more are dropped.
const QUEUE: usize = 256;
/// Longest message kept, in characters.
pub const MAX_MESSAGE_CHARS: usize = 16_000;
/// Longest logger name kept, in characters.
const MAX_LOGGER_CHARS: usize = 200;

/// A token bucket: `burst` reports at once, then `per_second`.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    burst: f64,
    per_second: f64,
    at: Instant,
}

impl Bucket {
    fn new(burst: f64, per_second: f64) -> Bucket {
        Bucket {
            tokens: burst,
            burst,
            per_second,
            at: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[derive(Debug)]
struct State {
    last_progress: Option<f64>,
    progress: Bucket,
    logs: Bucket,
    dropped: u64,
}

/// Progress reports a call may send at once (then [`PROGRESS_PER_SECOND`]).
pub const PROGRESS_BURST: u32 = 20;
/// Progress reports per second past the burst.
pub const PROGRESS_PER_SECOND: u32 = 10;
/// Log records a call may send at once (then [`LOGS_PER_SECOND`]).
pub const LOG_BURST: u32 = 100;
/// Log records per second past the burst.
pub const LOGS_PER_SECOND: u32 = 50;

/// One call's reports on their way to its watcher: the checks above, then a bounded
/// queue (a watcher that does not keep up loses reports, the call never waits).
pub struct Events {
    wants: Wants,
    sender: mpsc::Sender<CallEvent>,
    state: Mutex<State>,
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Events")
            .field("wants", &self.wants)
            .finish()
    }
}

impl Events {
    /// The sink of a call whose caller wants `wants`, and the receiving end.
    pub fn channel(wants: Wants) -> (Events, mpsc::Receiver<CallEvent>) {
        let (sender, receiver) = mpsc::channel(QUEUE);
        let state = State {
            last_progress: None,
            progress: Bucket::new(f64::from(PROGRESS_BURST), f64::from(PROGRESS_PER_SECOND)),
            logs: Bucket::new(f64::from(LOG_BURST), f64::from(LOGS_PER_SECOND)),
            dropped: 0,
        };
        let events = Events {
            wants,
            sender,
            state: Mutex::new(state),
        };
        (events, receiver)
    }

    /// What the caller asked for.
    pub fn wants(&self) -> Wants {
        self.wants
    }

    /// Reports dropped so far: not increasing, over the rate, or not kept up with.
    pub fn dropped(&self) -> u64 {
        self.state().dropped
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A progress report, forwarded if it was asked for, is finite, increases, and is
    /// within the rate.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if !self.wants.progress {
            return;
        }
        let mut state = self.state();
        let increasing = state.last_progress.is_none_or(|last| progress > last);
        let finite = progress.is_finite() && total.is_none_or(f64::is_finite);
        if !increasing || !finite || !state.progress.take() {
            state.dropped += 1;
            return;
        }
        state.last_progress = Some(progress);
        let event = CallEvent::Progress {
            progress,
            total,
            message: message.map(|m| clip(m, MAX_MESSAGE_CHARS)),
        };
        if self.sender.try_send(event).is_err() {
            state.dropped += 1;
        }
    }

    /// A log record, forwarded if a level was asked for, it is at or above it, and it is
    /// within the rate.
    pub fn log(&self, level: LogLevel, logger: Option<&str>, message: &str) {
        if self.wants.log_level.is_none_or(|least| level < least) {
            return;
        }
        let mut state = self.state();
        if !state.logs.take() {
            state.dropped += 1;
            return;
        }
        let event = CallEvent::Log {
            level,
            logger: logger.map(|l| clip(l, MAX_LOGGER_CHARS)),
            message: clip(message, MAX_MESSAGE_CHARS),
        };
        if self.sender.try_send(event).is_err() {
            state.dropped += 1;
        }
    }
}

fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => text[..at].to_owned(),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(rx: &mut mpsc::Receiver<CallEvent>) -> Vec<CallEvent> {
        let mut out = Vec::new();
        while let Ok(e) = rx.try_recv() {
            out.push(e);
        }
        out
    }

    #[test]
    fn progress_is_forwarded_only_when_asked_and_only_increasing() {
        let (quiet, mut rx) = Events::channel(Wants::default());
        quiet.progress(1.0, None, None);
        assert!(drain(&mut rx).is_empty());

        let wants = Wants {
            progress: true,
            log_level: None,
        };
        let (events, mut rx) = Events::channel(wants);
        for p in [0.0, 50.0, 50.0, 20.0, f64::NAN, 100.0] {
            events.progress(p, Some(100.0), Some("step"));
        }
        let seen: Vec<f64> = drain(&mut rx)
            .into_iter()
            .map(|e| match e {
                CallEvent::Progress { progress, .. } => progress,
                CallEvent::Log { .. } => panic!("a log record"),
            })
            .collect();
        assert_eq!(seen, [0.0, 50.0, 100.0]);
        assert_eq!(events.dropped(), 3);
    }

    #[test]
    fn progress_past_the_burst_is_dropped() {
        let wants = Wants {
            progress: true,
            log_level: None,
        };
        let (events, mut rx) = Events::channel(wants);
        for i in 0..1000 {
            events.progress(f64::from(i), None, None);
        }
        let sent = drain(&mut rx).len();
        assert!(
            (PROGRESS_BURST as usize..PROGRESS_BURST as usize + 5).contains(&sent),
            "{sent}"
        );
    }

    #[test]
    fn logs_below_the_level_or_unasked_are_not_forwarded() {
        let (quiet, mut rx) = Events::channel(Wants::default());
        quiet.log(LogLevel::Emergency, None, "x");
        assert!(drain(&mut rx).is_empty());

        let wants = Wants {
            progress: false,
            log_level: Some(LogLevel::Warning),
        };
        let (events, mut rx) = Events::channel(wants);
        events.log(LogLevel::Info, Some("tool"), "quiet");
        events.log(
            LogLevel::Error,
            Some("tool"),
            &"x".repeat(MAX_MESSAGE_CHARS + 10),
        );
        let seen = drain(&mut rx);
        assert_eq!(seen.len(), 1);
        let CallEvent::Log {
            level,
            logger,
            message,
        } = &seen[0]
        else {
            panic!("{seen:?}")
        };
        assert_eq!(*level, LogLevel::Error);
        assert_eq!(logger.as_deref(), Some("tool"));
        assert_eq!(message.len(), MAX_MESSAGE_CHARS);
    }

    #[test]
    fn levels_order_as_mcp_lists_them() {
        assert!(LogLevel::Debug < LogLevel::Info && LogLevel::Alert < LogLevel::Emergency);
        let parsed: LogLevel = serde_json::from_str("\"notice\"").unwrap();
        assert_eq!(parsed, LogLevel::Notice);
    }
}
