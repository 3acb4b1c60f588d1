//! A worker process as the server sees it: started from Warden's binary with its socket
//! in place, taken through its start (`load`, `assign`), ended with the reason it died.

use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use bytesize::ByteSize;
use tokio::net::UnixStream;
use tokio::process::{Child, Command};

use super::child::SOCKET_FD;
use super::wire::{self, ToServer, ToWorker, WireError};
use crate::sandbox::{SandboxError, ScratchRoot};

/// How long a worker may take to load the runtime and confine itself.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One worker process and its socket.
pub(super) struct Worker {
    child: Child,
    socket: Socket,
    /// Calls it has run.
    pub(super) calls: u32,
    /// Its scratch root, once assigned: removed when the worker is dropped.
    pub(super) scratch: Option<ScratchDir>,
}

/// A worker's scratch root, removed (off the async runtime, where there is one) when
/// the worker is dropped: killed on drop, it writes nothing more there.
pub(super) struct ScratchDir(pub(super) std::path::PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let dir = std::mem::take(&mut self.0);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || ScratchRoot::remove(&dir))),
            Err(_) => ScratchRoot::remove(&dir),
        }
    }
}

/// A worker's socket: registered with the runtime of the task that uses it, or with
/// none while the worker waits between calls, so that a call uses it from its own
/// runtime (no hop to another thread and back).
enum Socket {
    Attached(UnixStream),
    Detached(std::os::unix::net::UnixStream),
    /// Lost while moving between the two (its registration failed).
    Gone,
}

impl Worker {
    /// Starts a worker process from `binary`, its socket at [`SOCKET_FD`].
    pub(super) async fn start(binary: &Path) -> Result<Worker, SandboxError> {
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().map_err(|source| SandboxError::Start {
                what: "worker's socket",
                source,
            })?;
        let mut command = Command::new(binary);
        command
            .arg("__worker")
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if let Some(log) = std::env::var_os("WARDEN_LOG") {
            command.env("WARDEN_LOG", log);
        }
        place_socket(&mut command, theirs.as_raw_fd());
        let child = command.spawn().map_err(|source| SandboxError::Start {
            what: "worker process",
            source,
        })?;
        drop(theirs);
        ours.set_nonblocking(true)
            .map_err(|source| SandboxError::Start {
                what: "worker's socket",
                source,
            })
            .map(|()| Worker {
                child,
                socket: Socket::Detached(ours),
                calls: 0,
                scratch: None,
            })
    }

    /// The socket, registered with the current runtime if it is not yet.
    fn stream(&mut self) -> Result<&mut UnixStream, WireError> {
        // Only the first message of a call moves the socket; the others find it here.
        if let Socket::Detached(_) = self.socket
            && let Socket::Detached(stream) = std::mem::replace(&mut self.socket, Socket::Gone)
        {
            self.socket = Socket::Attached(UnixStream::from_std(stream)?);
        }
        match &mut self.socket {
            Socket::Attached(stream) => Ok(stream),
            _ => Err(lost()),
        }
    }

    /// Unregisters the socket from the runtime that used it, so that the next call
    /// uses it from its own. Done whenever the worker is put aside: the runtime that
    /// used it may be gone by its next call.
    pub(super) fn detach(&mut self) -> Result<(), WireError> {
        self.socket = match std::mem::replace(&mut self.socket, Socket::Gone) {
            Socket::Attached(stream) => Socket::Detached(stream.into_std()?),
            other => other,
        };
        match self.socket {
            Socket::Gone => Err(lost()),
            _ => Ok(()),
        }
    }

    pub(super) async fn send(
        &mut self,
        message: &ToWorker,
        payload: &[u8],
    ) -> Result<(), WireError> {
        wire::send_async(self.stream()?, message, payload).await
    }

    pub(super) async fn receive(&mut self) -> Result<(ToServer, Vec<u8>), WireError> {
        wire::receive_async(self.stream()?).await
    }

    /// Why the process ended, once it has (killing it first if it has not).
    pub(super) async fn end(mut self) -> String {
        // A worker that died on its own (its socket closed as it exited) is reaped in a
        // moment: its signal or status is the cause. Otherwise the SIGKILL is ours.
        if let Ok(Ok(status)) = tokio::time::timeout(EXIT_GRACE, self.child.wait()).await {
            return describe(status);
        }
        // `wait` learns of the exit when this runtime next turns, which on a busy
        // machine can be after the grace; asking the kernel directly cannot be late. (A
        // worker killed by an operator's SIGKILL was reported as ended by the server.)
        if let Ok(Some(status)) = self.child.try_wait() {
            return describe(status);
        }
        let _ = self.child.start_kill();
        match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(Ok(status)) if status.signal() == Some(libc::SIGKILL) => {
                "the server ended it".to_owned()
            }
            // It was already dying (on a busy machine its reaping can take longer than
            // the grace): the kernel keeps the signal it was dying of, and ours did
            // nothing.
            Ok(Ok(status)) => describe(status),
            _ => "it did not exit".to_owned(),
        }
    }
}

fn lost() -> WireError {
    WireError::Io(std::io::Error::other(
        "the worker's socket was lost when it moved between runtimes",
    ))
}

/// How long [`Worker::end`] waits for a worker dying on its own before ending it: 50 ms.
const EXIT_GRACE: Duration = Duration::from_millis(50);

fn describe(status: std::process::ExitStatus) -> String {
    match status.signal() {
        Some(libc::SIGSYS) => {
            "it was killed by SIGSYS: it made a system call its confinement forbids".to_owned()
        }
        Some(libc::SIGKILL) => {
            "it was killed by SIGKILL (out of memory, or killed by an operator)".to_owned()
        }
        Some(libc::SIGSEGV) => "it crashed with SIGSEGV".to_owned(),
        Some(signal) => format!("it was killed by signal {signal}"),
        None => format!("it exited with {status}"),
    }
}

impl Worker {
    pub(super) async fn load(
        self,
        home: &Path,
        runtime: Option<&Path>,
        max_memory: ByteSize,
    ) -> Result<Worker, SandboxError> {
        let load = ToWorker::Load {
            home: home.to_owned(),
            runtime: runtime.map(Path::to_owned),
            max_memory_bytes: max_memory.as_u64(),
        };
        self.step(&load, "load", |m| matches!(m, ToServer::Loaded))
            .await
    }

    /// One step of a worker's start (`load`, `assign`): the message, and the answer
    /// that means it went well, within [`START_TIMEOUT`]. A worker that answers
    /// anything else, or nothing, is ended.
    pub(super) async fn step(
        mut self,
        message: &ToWorker,
        what: &str,
        done: impl Fn(&ToServer) -> bool,
    ) -> Result<Worker, SandboxError> {
        let answered = tokio::time::timeout(START_TIMEOUT, async {
            self.send(message, &[]).await?;
            self.receive().await
        })
        .await;
        let failed = match answered {
            Ok(Ok((answer, _))) if done(&answer) => return Ok(self),
            Ok(Ok((ToServer::Unusable { reason }, _))) => {
                // It said why; the SIGKILL that ends it now is the server's own, not a
                // cause (it read "out of memory, or killed by an operator").
                self.end().await;
                return Err(worker_failed(reason));
            }
            Ok(Ok((other, _))) => format!("it answered `{what}` with {other:?}"),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!(
                "it did not answer `{what}` within {}",
                humantime::format_duration(START_TIMEOUT)
            ),
        };
        let why = self.end().await;
        Err(worker_failed(format!("{failed}; {why}")))
    }
}

/// A worker that could not be started or broke its protocol.
pub(super) fn worker_failed(reason: String) -> SandboxError {
    SandboxError::Worker(reason)
}

#[expect(
    unsafe_code,
    reason = "placing the worker's socket at a fixed descriptor between fork and exec"
)]
fn place_socket(command: &mut Command, fd: i32) {
    // SAFETY: the hook runs in the child between fork and exec and calls only
    // async-signal-safe functions (dup2, fcntl) on descriptors it owns.
    unsafe {
        command.pre_exec(move || {
            if fd == SOCKET_FD {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(fd, SOCKET_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
