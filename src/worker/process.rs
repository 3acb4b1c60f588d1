//! A worker process as the server sees it: started from Warden's binary with its socket
//! in place, taken through its start (`load`, `assign`), ended with the reason it died.

use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bytesize::ByteSize;
use tokio::net::UnixStream;
use tokio::process::{Child, Command};

use super::child::SOCKET_FD;
use super::namespaces::Entry;
use super::wire::{self, CallId, Expect, Frame, FrameBudget, ToServer, ToWorker, WireError, said};
use crate::sandbox::{SandboxError, ScratchRoot};

/// How long a worker may take to load the runtime and confine itself.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One worker process and its socket.
pub(super) struct Worker {
    /// The process started: the worker itself, or in a PID namespace its parent
    /// (`namespaces::start_as_init`), whose end ends the worker.
    child: Child,
    /// The worker's own process id, as the server sees it.
    pid: u32,
    /// The worker's process, for signals (`pidfd`); none if the kernel has no pidfds.
    process: Option<std::os::fd::OwnedFd>,
    socket: Socket,
    /// Calls it has run.
    pub(super) calls: u32,
    /// Its scratch root, once assigned: removed when the worker is dropped.
    pub(super) scratch: Option<ScratchDir>,
    /// The call under way (its frames carry its number), or [`CallId::NONE`].
    pub(super) call: CallId,
    /// Since when it has waited among the idle workers, if it does.
    pub(super) idle_since: Option<Instant>,
    /// Whether it is stopped (SIGSTOP) while it waits.
    stopped: bool,
    /// The CPU time it had used when last looked at, and when that was.
    cpu_seen: Option<(Duration, Instant)>,
    /// What its frames may take of the server's memory, with every other worker's.
    budget: FrameBudget,
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
    /// Starts a worker process from `binary`, its socket at [`SOCKET_FD`], its frames
    /// read within `budget`, what it writes to stderr logged by the server.
    pub(super) async fn start(
        binary: &Path,
        budget: FrameBudget,
        namespaces: Option<&Entry>,
        layers_only: Option<&str>,
    ) -> Result<Worker, SandboxError> {
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
            // In namespaces, the worker's parent says there which process is the worker.
            .stdout(if namespaces.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(log) = std::env::var_os("WARDEN_LOG") {
            command.env("WARDEN_LOG", log);
        }
        // Read by test builds' workers only (see `Workers::open_with_layers`).
        #[cfg(feature = "escape-hatch")]
        if let Some(layers) = layers_only {
            command.env(super::confinement::TEST_LAYERS, layers);
        }
        #[cfg(not(feature = "escape-hatch"))]
        let _ = layers_only;
        place_socket(&mut command, theirs.as_raw_fd());
        if let Some(entry) = namespaces {
            enter_namespaces(&mut command, entry.clone());
        }
        let mut child = command.spawn().map_err(|source| SandboxError::Start {
            what: "worker process",
            source,
        })?;
        drop(theirs);
        let pid = match child.stdout.take() {
            Some(stdout) => worker_pid(stdout).await?,
            None => child.id().unwrap_or(0),
        };
        // Signals go to the worker through a descriptor of its own, never to a number
        // another process could have taken after it ended.
        let process = rustix::process::Pid::from_raw(pid as i32).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(super::stderr::relay_stderr(stderr, pid));
        }
        ours.set_nonblocking(true)
            .map_err(|source| SandboxError::Start {
                what: "worker's socket",
                source,
            })
            .map(|()| Worker {
                child,
                pid,
                process,
                socket: Socket::Detached(ours),
                calls: 0,
                scratch: None,
                call: CallId::NONE,
                idle_since: None,
                stopped: false,
                cpu_seen: None,
                budget,
            })
    }

    /// A worker whose far end of the socket is `stream`'s peer, held by the test
    /// itself (the process is a stand-in that has exited).
    #[cfg(test)]
    pub(super) async fn over(
        stream: std::os::unix::net::UnixStream,
        budget: FrameBudget,
    ) -> Worker {
        let child = Command::new("true")
            .kill_on_drop(true)
            .spawn()
            .expect("`true` starts");
        stream
            .set_nonblocking(true)
            .expect("a socket goes non-blocking");
        Worker {
            pid: child.id().unwrap_or(0),
            child,
            process: None,
            socket: Socket::Detached(stream),
            calls: 0,
            scratch: None,
            call: CallId::NONE,
            idle_since: None,
            stopped: false,
            cpu_seen: None,
            budget,
        }
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

    /// Stops the worker while it waits: a breached worker spends no CPU between its
    /// calls.
    pub(super) fn pause(&mut self) {
        if !self.stopped && self.signal(rustix::process::Signal::STOP) {
            self.stopped = true;
        }
    }

    /// Lets a stopped worker go on, for a call.
    pub(super) fn resume(&mut self) {
        if self.stopped {
            self.signal(rustix::process::Signal::CONT);
            self.stopped = false;
        }
    }

    fn signal(&self, signal: rustix::process::Signal) -> bool {
        if let Some(process) = &self.process {
            return rustix::process::pidfd_send_signal(process, signal).is_ok();
        }
        // Only while the child is not reaped: its pid cannot have been reused.
        let Some(pid) = self
            .child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        else {
            return false;
        };
        rustix::process::kill_process(pid, signal).is_ok()
    }

    /// The CPU time the worker process has used, all its threads together, as the
    /// kernel counts it (`/proc/PID/stat`), not as the worker says.
    fn cpu_time(&self) -> Option<Duration> {
        // Only while the process started is not reaped (the worker's parent, in a PID
        // namespace, ends as soon as the worker does): its pid cannot have been reused.
        self.child.id()?;
        let pid = self.pid;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // After the command name, which may hold anything but ends at the last ')':
        // state, then 10 fields up to utime and stime (fields 14 and 15 in proc(5)).
        let mut fields = stat
            .get(stat.rfind(')')? + 1..)?
            .split_whitespace()
            .skip(11);
        let ticks: u64 =
            fields.next()?.parse::<u64>().ok()? + fields.next()?.parse::<u64>().ok()?;
        let per_second = rustix::param::clock_ticks_per_second().max(1);
        Some(Duration::from_nanos(
            ticks.saturating_mul(1_000_000_000) / per_second,
        ))
    }

    /// Takes the first look at the worker's CPU time, if none was taken yet.
    pub(super) fn watch_cpu(&mut self) {
        if self.cpu_seen.is_none() {
            self.cpu_seen = self.cpu_time().map(|cpu| (cpu, Instant::now()));
        }
    }

    /// Why the worker must not serve again if, since the last look, it used more CPU
    /// than one core could give it in that time (with [`CPU_SLACK`]): a worker runs one
    /// guest on one thread at a time, so more means threads of its own making, at cores
    /// the server never gave it.
    pub(super) fn overspent(&mut self) -> Option<String> {
        let (before, since) = self.cpu_seen?;
        let now = self.cpu_time()?;
        let wall = since.elapsed();
        self.cpu_seen = Some((now, Instant::now()));
        let used = now.saturating_sub(before);
        (used > wall.mul_f64(CPU_SLACK.0) + CPU_SLACK.1).then(|| {
            format!(
                "it used {used:?} of CPU in {wall:?}, more than one core gives: it runs \
                 threads of its own"
            )
        })
    }

    /// Whether the worker, idle, has written nothing and is alive: a worker writes only
    /// during a call, so a frame written while it waited (to answer the next call
    /// before it is asked) is a breached worker's, and it is not lent again.
    pub(super) fn quiet(&self) -> bool {
        let Socket::Detached(stream) = &self.socket else {
            return false;
        };
        let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
        matches!(
            rustix::net::recv(stream, &mut [0u8; 1], flags),
            Err(rustix::io::Errno::AGAIN)
        )
    }

    pub(super) async fn send(
        &mut self,
        message: &ToWorker,
        payload: &[u8],
    ) -> Result<(), WireError> {
        let call = self.call;
        wire::send_async(self.stream()?, message, payload, call).await
    }

    /// The worker's next frame, as `expect` allows (its call is the worker's).
    pub(super) async fn receive(&mut self, expect: &Expect) -> Result<Frame, WireError> {
        debug_assert_eq!(expect.call, self.call);
        let budget = self.budget.clone();
        wire::receive_async(self.stream()?, expect, &budget).await
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
        // In a PID namespace the process started is the worker's parent, which ends as
        // the worker ended once it is scheduled to notice: if the worker itself has
        // ended, its cause is on the way and only waiting is right.
        let ended_on_its_own = self.process.as_ref().is_some_and(has_exited);
        if !ended_on_its_own {
            self.kill();
        }
        match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(Ok(status)) if status.signal() == Some(libc::SIGKILL) && !ended_on_its_own => {
                "the server ended it".to_owned()
            }
            // It was already dying (on a busy machine its reaping can take longer than
            // the grace): the kernel keeps the signal it was dying of, and ours did
            // nothing.
            Ok(Ok(status)) => describe(status),
            _ => {
                let _ = self.child.start_kill();
                "it did not exit".to_owned()
            }
        }
    }

    /// Kills the worker: through its own descriptor when it has a parent of its own
    /// (which then ends by the same signal), else the process started.
    fn kill(&mut self) {
        if let Some(process) = &self.process
            && rustix::process::pidfd_send_signal(process, rustix::process::Signal::KILL).is_ok()
        {
            return;
        }
        let _ = self.child.start_kill();
    }
}

/// Whether the process behind `pidfd` has ended (its descriptor reads as ready).
fn has_exited(pidfd: &std::os::fd::OwnedFd) -> bool {
    use rustix::event::{PollFd, PollFlags, poll};
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    poll(&mut fds, Some(&rustix::time::Timespec::default())).is_ok_and(|ready| ready > 0)
}

fn lost() -> WireError {
    WireError::Io(std::io::Error::other(
        "the worker's socket was lost when it moved between runtimes",
    ))
}

/// How much more CPU than wall time a worker may use between two looks: 1.25 times,
/// plus 100 ms. Its guest runs on one thread; the runtime's helper threads (file work)
/// run while the guest waits, or take next to nothing.
const CPU_SLACK: (f64, Duration) = (1.25, Duration::from_millis(100));

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
        flavour: crate::sandbox::Flavour,
        max_memory: ByteSize,
    ) -> Result<Worker, SandboxError> {
        let load = ToWorker::Load {
            home: home.to_owned(),
            runtime: runtime.map(Path::to_owned),
            flavour,
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
        self.call = CallId::NONE;
        let answered = tokio::time::timeout(START_TIMEOUT, async {
            self.send(message, &[]).await?;
            self.receive(&Expect::start()).await
        })
        .await
        .map(|frame| frame.map(|f| f.message));
        let failed = match answered {
            Ok(Ok(answer)) if done(&answer) => return Ok(self),
            Ok(Ok(ToServer::Unusable { reason })) => {
                // It said why; the SIGKILL that ends it now is the server's own, not a
                // cause (it read "out of memory, or killed by an operator").
                self.end().await;
                return Err(worker_failed(said(&reason)));
            }
            Ok(Ok(other)) => format!("it answered `{what}` with {other:?}"),
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

/// The worker's process id, which its parent in a PID namespace writes first on its
/// standard output.
async fn worker_pid(stdout: tokio::process::ChildStdout) -> Result<u32, SandboxError> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let mut line = String::new();
    let mut reader = tokio::io::BufReader::new(stdout.take(32));
    let read = tokio::time::timeout(START_TIMEOUT, reader.read_line(&mut line)).await;
    match read {
        Ok(Ok(_)) => line.trim().parse().map_err(|_| {
            worker_failed(format!(
                "the worker's parent did not say which process is the worker (it wrote {line:?})"
            ))
        }),
        Ok(Err(e)) => Err(worker_failed(format!(
            "cannot read which process is the worker: {e}"
        ))),
        Err(_) => Err(worker_failed(format!(
            "the worker's parent did not say which process is the worker within {START_TIMEOUT:?}"
        ))),
    }
}

/// A worker that could not be started or broke its protocol.
pub(super) fn worker_failed(reason: String) -> SandboxError {
    SandboxError::Worker(reason)
}

#[expect(unsafe_code, reason = "entering namespaces between fork and exec")]
fn enter_namespaces(command: &mut Command, entry: Entry) {
    // SAFETY: `Entry::enter` makes only async-signal-safe calls and allocates nothing.
    unsafe {
        command.pre_exec(move || entry.enter());
    }
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
