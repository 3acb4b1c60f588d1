//! The limits of one call, as typed values with a unit, a default and a sentence.
//!
//! Plain data: this module imports nothing else of Warden's. Human strings (`5s`,
//! `256MiB`) are parsed here once, at the boundary, into [`Duration`], [`ByteSize`],
//! [`Fuel`] and [`CharLimit`]; everything past the boundary sees only those types.
//!
//! # Zero and the minimum of each limit
//! One rule, applied wherever limits come in: `warden run` flags, the `limits` of a tool
//! registered with the service, and a tenant's ceilings ([`Limits::check`]).
//! - `fuel`, `deadline`, `memory`, `return_chars` and `open_files` have a minimum
//!   ([`MIN_FUEL`], [`MIN_DEADLINE`], [`MIN_MEMORY`], [`MIN_RETURN_CHARS`],
//!   [`MIN_OPEN_FILES`]); below it no call could do anything, so it is refused.
//! - `stdout`, `stderr`, `disk_write`, `files_created`, `scratch` and the three `http_*`
//!   limits may be zero: none allowed. A tool that prints one byte ends `output_limit`;
//!   one that writes a byte or creates a file in a read-write grant gets `EDQUOT` (in
//!   its scratch folder, `ENOSPC`); one that sends a request past an `http_*` limit gets
//!   `PermissionError`.
//!
//! Limits read back from storage are not checked again: a version stored before this
//! rule keeps running as it did.

use std::str::FromStr;
use std::time::Duration;

pub use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

mod units;

pub use units::{CharLimit, FileCount, Fuel, RequestCount};

/// CPU budget of a call. Default: 2 billion units, a few seconds of pure-Python work.
pub const DEFAULT_FUEL: Fuel = Fuel(2_000_000_000);
/// Wall-clock deadline of a call, measured from the start of instantiation. Default: 10 s.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
/// Largest linear memory the guest may grow to. Default: 256 MiB.
pub const DEFAULT_MEMORY: ByteSize = ByteSize::mib(256);
/// Bytes the tool may write to its stdout. Default: 1 MiB.
pub const DEFAULT_STDOUT: ByteSize = ByteSize::mib(1);
/// Bytes the tool may write to its stderr. Default: 1 MiB.
pub const DEFAULT_STDERR: ByteSize = ByteSize::mib(1);
/// Characters of the JSON-serialized return value kept before truncation. Default:
/// 50,000, as in Letta's Tool schema.
pub const DEFAULT_RETURN_CHARS: CharLimit = CharLimit(50_000);
/// Bytes the binary parts of a rich result (images, audio, files) may hold together,
/// decoded. Default: 8 MiB.
pub const DEFAULT_RETURN_BYTES: ByteSize = ByteSize::mib(8);
/// Files the guest may hold open at once, folders included (the runtime's own
/// standard-library and tool folders count too). Default: 256.
pub const DEFAULT_OPEN_FILES: FileCount = FileCount(256);
/// Bytes the guest may write to its read-write grants in one call. Default: 64 MiB.
pub const DEFAULT_DISK_WRITE: ByteSize = ByteSize::mib(64);
/// Files and folders the guest may create in its read-write grants in one call.
/// Default: 1,000.
pub const DEFAULT_FILES_CREATED: FileCount = FileCount(1_000);

/// Bytes a call's private scratch folder (`/tmp`) may take. Default: 64 MiB.
pub const DEFAULT_SCRATCH: ByteSize = ByteSize::mib(64);

/// Outbound HTTP requests one call may make (redirects followed are requests too).
/// Default: 32.
pub const DEFAULT_HTTP_REQUESTS: RequestCount = RequestCount(32);
/// Bytes of request bodies one call may send, all requests together. Default: 8 MiB.
pub const DEFAULT_HTTP_REQUEST_BYTES: ByteSize = ByteSize::mib(8);
/// Bytes of response bodies one call may receive, all requests together. Default:
/// 16 MiB.
pub const DEFAULT_HTTP_RESPONSE_BYTES: ByteSize = ByteSize::mib(16);

/// Least CPU budget: 1 unit (zero would stop every call before it starts).
pub const MIN_FUEL: Fuel = Fuel(1);
/// Least deadline: 1 ms, the unit it is stored and served in (`deadline_ms`).
pub const MIN_DEADLINE: Duration = Duration::from_millis(1);
/// Least memory cap: 40 MiB. The runtime's snapshot starts with 40 MiB of linear
/// memory, so under a smaller cap the guest cannot even be instantiated and every call
/// ends `memory_limit`; measured with a trivial tool (`tests/all/cli.rs` runs one at
/// exactly this cap, so a runtime that outgrows it is noticed).
pub const MIN_MEMORY: ByteSize = ByteSize::mib(40);
/// Least `return_char_limit`: 1 character (zero would cut every result to nothing).
pub const MIN_RETURN_CHARS: CharLimit = CharLimit(1);
/// Least number of files open at once: 1 (the guest could open nothing, not even its
/// tool).
pub const MIN_OPEN_FILES: FileCount = FileCount(1);

/// Every limit that applies to one call.
///
/// Each field says its unit, its default and what happens when the guest hits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// CPU budget in fuel units ([`DEFAULT_FUEL`]); when spent: status `out_of_fuel`.
    pub fuel: Fuel,
    /// Wall-clock deadline ([`DEFAULT_DEADLINE`]), checked every slice of fuel of
    /// running code and enforced by a host timer for code blocked in a host call
    /// (`time.sleep`); when passed: status `timeout`.
    #[serde(rename = "deadline_ms", with = "millis")]
    pub deadline: Duration,
    /// Memory cap on the guest's linear memory ([`DEFAULT_MEMORY`]); growth beyond it
    /// fails inside the guest (Python sees `MemoryError`) and the call ends with status
    /// `memory_limit`.
    #[serde(rename = "memory_bytes", with = "bytes")]
    pub memory: ByteSize,
    /// Cap on the tool's stdout ([`DEFAULT_STDOUT`]); when exceeded the guest is stopped
    /// and the call ends with status `output_limit`.
    #[serde(rename = "stdout_bytes", with = "bytes")]
    pub stdout: ByteSize,
    /// Cap on the tool's stderr ([`DEFAULT_STDERR`]); as for stdout.
    #[serde(rename = "stderr_bytes", with = "bytes")]
    pub stderr: ByteSize,
    /// Characters of the serialized return value kept ([`DEFAULT_RETURN_CHARS`]); a
    /// longer result is truncated, the call stays `ok` and says so in `truncated`.
    #[serde(rename = "return_char_limit")]
    pub return_chars: CharLimit,
    /// Files the guest may hold open at once ([`DEFAULT_OPEN_FILES`]); one more `open`
    /// fails inside the guest with `OSError` `EMFILE` ("Too many open files").
    #[serde(
        default = "default_open_files",
        skip_serializing_if = "is_default_open_files"
    )]
    pub open_files: FileCount,
    /// Bytes the guest may write to read-write grants in one call
    /// ([`DEFAULT_DISK_WRITE`]), counting writes and growth by truncate or allocate; a
    /// write that would pass it fails inside the guest with `OSError` `EDQUOT` ("Disk
    /// quota exceeded").
    #[serde(
        rename = "disk_write_bytes",
        with = "bytes",
        default = "default_disk_write",
        skip_serializing_if = "is_default_disk_write"
    )]
    pub disk_write: ByteSize,
    /// Files and folders the guest may create in one call ([`DEFAULT_FILES_CREATED`]);
    /// one more fails inside the guest with `OSError` `EDQUOT`.
    #[serde(
        default = "default_files_created",
        skip_serializing_if = "is_default_files_created"
    )]
    pub files_created: FileCount,
    /// Outbound HTTP requests one call may make ([`DEFAULT_HTTP_REQUESTS`]); one more is
    /// refused inside the guest with `PermissionError`.
    #[serde(
        default = "default_http_requests",
        skip_serializing_if = "is_default_http_requests"
    )]
    pub http_requests: RequestCount,
    /// Bytes of request bodies one call may send ([`DEFAULT_HTTP_REQUEST_BYTES`]); a
    /// request that would pass it is refused with `PermissionError`.
    #[serde(
        with = "bytes",
        default = "default_http_request_bytes",
        skip_serializing_if = "is_default_http_request_bytes"
    )]
    pub http_request_bytes: ByteSize,
    /// Bytes of response bodies one call may receive ([`DEFAULT_HTTP_RESPONSE_BYTES`]);
    /// a response that would pass it is cut off and refused with `PermissionError`.
    #[serde(
        with = "bytes",
        default = "default_http_response_bytes",
        skip_serializing_if = "is_default_http_response_bytes"
    )]
    pub http_response_bytes: ByteSize,
    /// Bytes the binary parts of a rich result (images, audio, files) may hold
    /// together, decoded ([`DEFAULT_RETURN_BYTES`]); a larger result ends the call
    /// `tool_error` (`ResultTooLarge`), saying so. Text counts against `return_chars`.
    #[serde(
        with = "bytes",
        default = "default_return_bytes",
        skip_serializing_if = "is_default_return_bytes"
    )]
    pub return_bytes: ByteSize,
    /// Bytes the call's private scratch folder may take ([`DEFAULT_SCRATCH`]). Every
    /// call gets a writable `/tmp` (also `$TMPDIR` and `$HOME`), empty at its start and
    /// removed at its end, with no grant; what the guest's files there hold counts
    /// (a file written, removed and written again counts once), and a write that
    /// would pass the limit fails inside the guest with `OSError` `ENOSPC` ("No space
    /// left on device"). Zero: `/tmp` is there but nothing can be written to it. A
    /// read-write grant mounted at `/tmp` itself replaces the scratch folder.
    #[serde(
        rename = "scratch_bytes",
        with = "bytes",
        default = "default_scratch",
        skip_serializing_if = "is_default_scratch"
    )]
    pub scratch: ByteSize,
    /// Whether a result that does not fit the tool's return annotation is refused
    /// (`tool_error`, `ResultMismatch`) rather than delivered as returned with a
    /// `result_mismatch` warning. Default: false, as Letta and FastMCP deliver what a
    /// tool returned. A tenant's ceilings set to true make it true for all its tools.
    #[serde(default, skip_serializing_if = "is_false")]
    pub strict_results: bool,
}

// The three file limits came after the first tool versions were stored: a stored
// manifest without them means the defaults, and a manifest at the defaults serializes
// (and so hashes) exactly as it did before they existed.
fn default_open_files() -> FileCount {
    DEFAULT_OPEN_FILES
}
fn is_default_open_files(n: &FileCount) -> bool {
    *n == DEFAULT_OPEN_FILES
}
fn default_disk_write() -> ByteSize {
    DEFAULT_DISK_WRITE
}
fn is_default_disk_write(n: &ByteSize) -> bool {
    *n == DEFAULT_DISK_WRITE
}
fn default_files_created() -> FileCount {
    DEFAULT_FILES_CREATED
}
fn is_default_files_created(n: &FileCount) -> bool {
    *n == DEFAULT_FILES_CREATED
}
// So did the HTTP limits.
fn default_http_requests() -> RequestCount {
    DEFAULT_HTTP_REQUESTS
}
fn is_default_http_requests(n: &RequestCount) -> bool {
    *n == DEFAULT_HTTP_REQUESTS
}
fn default_http_request_bytes() -> ByteSize {
    DEFAULT_HTTP_REQUEST_BYTES
}
fn is_default_http_request_bytes(n: &ByteSize) -> bool {
    *n == DEFAULT_HTTP_REQUEST_BYTES
}
fn default_http_response_bytes() -> ByteSize {
    DEFAULT_HTTP_RESPONSE_BYTES
}
fn is_default_http_response_bytes(n: &ByteSize) -> bool {
    *n == DEFAULT_HTTP_RESPONSE_BYTES
}
// And the binary budget of rich results.
fn default_return_bytes() -> ByteSize {
    DEFAULT_RETURN_BYTES
}
fn is_default_return_bytes(n: &ByteSize) -> bool {
    *n == DEFAULT_RETURN_BYTES
}

// And the scratch folder and strict results.
fn default_scratch() -> ByteSize {
    DEFAULT_SCRATCH
}
fn is_default_scratch(n: &ByteSize) -> bool {
    *n == DEFAULT_SCRATCH
}
fn is_false(b: &bool) -> bool {
    !*b
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: DEFAULT_FUEL,
            deadline: DEFAULT_DEADLINE,
            memory: DEFAULT_MEMORY,
            stdout: DEFAULT_STDOUT,
            stderr: DEFAULT_STDERR,
            return_chars: DEFAULT_RETURN_CHARS,
            open_files: DEFAULT_OPEN_FILES,
            disk_write: DEFAULT_DISK_WRITE,
            files_created: DEFAULT_FILES_CREATED,
            http_requests: DEFAULT_HTTP_REQUESTS,
            http_request_bytes: DEFAULT_HTTP_REQUEST_BYTES,
            http_response_bytes: DEFAULT_HTTP_RESPONSE_BYTES,
            return_bytes: DEFAULT_RETURN_BYTES,
            scratch: DEFAULT_SCRATCH,
            strict_results: false,
        }
    }
}

impl Limits {
    /// Checks each limit against its minimum (see the [module docs](self)): fuel,
    /// deadline, memory, return characters and open files; the others may be zero.
    /// Names the limit as its JSON field does (`memory_bytes`).
    pub fn check(&self) -> Result<(), LimitError> {
        at_least("fuel", self.fuel, MIN_FUEL, Fuel::to_string)?;
        at_least("deadline_ms", self.deadline, MIN_DEADLINE, |d| {
            humantime::format_duration(*d).to_string()
        })?;
        at_least("memory_bytes", self.memory, MIN_MEMORY, ByteSize::to_string)?;
        at_least(
            "return_char_limit",
            self.return_chars,
            MIN_RETURN_CHARS,
            CharLimit::to_string,
        )?;
        at_least(
            "open_files",
            self.open_files,
            MIN_OPEN_FILES,
            FileCount::to_string,
        )?;
        Ok(())
    }

    /// These limits, each lowered to the matching ceiling where it is higher.
    pub fn bounded_by(&self, ceilings: &Limits) -> Limits {
        Limits {
            fuel: self.fuel.min(ceilings.fuel),
            deadline: self.deadline.min(ceilings.deadline),
            memory: self.memory.min(ceilings.memory),
            stdout: self.stdout.min(ceilings.stdout),
            stderr: self.stderr.min(ceilings.stderr),
            return_chars: self.return_chars.min(ceilings.return_chars),
            open_files: self.open_files.min(ceilings.open_files),
            disk_write: self.disk_write.min(ceilings.disk_write),
            files_created: self.files_created.min(ceilings.files_created),
            http_requests: self.http_requests.min(ceilings.http_requests),
            http_request_bytes: self.http_request_bytes.min(ceilings.http_request_bytes),
            http_response_bytes: self.http_response_bytes.min(ceilings.http_response_bytes),
            return_bytes: self.return_bytes.min(ceilings.return_bytes),
            scratch: self.scratch.min(ceilings.scratch),
            strict_results: self.strict_results || ceilings.strict_results,
        }
    }
}

/// A limit that could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    /// Not a positive whole number of fuel units.
    #[error(
        "invalid fuel {0:?}: give a positive whole number such as 2000000000, 2_000_000_000 or 2G"
    )]
    Fuel(String),
    /// Not a byte size.
    #[error("invalid size {0:?}: give a size such as 256MiB, 64KiB or 1048576")]
    Size(String),
    /// Not a duration.
    #[error("invalid duration {0:?}: give a duration such as 5s, 500ms or 1m")]
    Duration(String),
    /// Not a whole number of files.
    #[error("invalid count {0:?}: give a whole number such as 256")]
    Count(String),
    /// Not a positive whole number of characters.
    #[error("invalid character count {0:?}: give a positive whole number such as 50000")]
    Chars(String),
    /// A limit below its minimum (see the [module docs](self)).
    #[error("{limit} {given} is below the minimum of {minimum}: raise it")]
    BelowMinimum {
        /// Which limit.
        limit: &'static str,
        /// What was given.
        given: String,
        /// The least it may be.
        minimum: String,
    },
}

/// `value`, unless it is below `minimum`.
fn at_least<T: PartialOrd>(
    limit: &'static str,
    value: T,
    minimum: T,
    show: impl Fn(&T) -> String,
) -> Result<T, LimitError> {
    if value < minimum {
        return Err(LimitError::BelowMinimum {
            limit,
            given: show(&value),
            minimum: show(&minimum),
        });
    }
    Ok(value)
}

/// Parses a byte size such as `256MiB`, `64 KiB` or `1048576`. Zero is accepted: for
/// the output and disk caps it means none allowed.
pub fn parse_size(s: &str) -> Result<ByteSize, LimitError> {
    ByteSize::from_str(s.trim()).map_err(|_| LimitError::Size(s.to_owned()))
}

/// Parses a memory cap such as `256MiB`; refuses less than [`MIN_MEMORY`].
pub fn parse_memory(s: &str) -> Result<ByteSize, LimitError> {
    at_least("memory", parse_size(s)?, MIN_MEMORY, ByteSize::to_string)
}

/// Parses a duration such as `5s`, `500ms` or `1m`. Zero is refused.
pub fn parse_duration(s: &str) -> Result<Duration, LimitError> {
    match humantime::parse_duration(s.trim()) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(LimitError::Duration(s.to_owned())),
    }
}

/// Parses a deadline such as `10s` or `500ms`; refuses less than [`MIN_DEADLINE`].
pub fn parse_deadline(s: &str) -> Result<Duration, LimitError> {
    at_least("deadline", parse_duration(s)?, MIN_DEADLINE, |d| {
        humantime::format_duration(*d).to_string()
    })
}

/// Parses a number of files open at once such as `256`; refuses less than
/// [`MIN_OPEN_FILES`].
pub fn parse_open_files(s: &str) -> Result<FileCount, LimitError> {
    at_least(
        "open files",
        s.parse::<FileCount>()?,
        MIN_OPEN_FILES,
        FileCount::to_string,
    )
}

/// A [`Duration`](std::time::Duration) as whole milliseconds in JSON.
pub(crate) mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes whole milliseconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
    /// Reads whole milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

mod bytes {
    use bytesize::ByteSize;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &ByteSize, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(b.as_u64())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
        Ok(ByteSize::b(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests;
