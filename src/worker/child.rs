//! The worker process: load the runtime, confine, then run calls until the server hangs
//! up. It holds nothing worth stealing: no database, no key, no secret value, no
//! socket but the one to its server, and only the folders of its one tenant's calls.
//!
//! A guest's outbound requests and its turns at the cores are messages to the server
//! ([`RemoteDoor`], [`RemoteSeat`]), which checks and performs them as for a call run in
//! its own process. The worker waits for each answer on its socket: it runs one call at
//! a time, and the server answers every question by the call's deadline.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytesize::ByteSize;

use super::confinement;
use super::wire::{self, CallId, ToServer, ToWorker, WireError};
use crate::sandbox::{
    CoreSeat, Door, Progress, Sandbox, SandboxConfig, ToolFolder, cores::SeatFuture,
};

/// The file descriptor the server places the worker's socket at.
pub const SOCKET_FD: i32 = 3;

/// How nice a worker is: guest code yields the CPU to the server's request path.
pub const NICENESS: i32 = 10;

/// The worker's socket, shared by the loop and the guest's door and seat.
struct Channel {
    stream: Mutex<UnixStream>,
}

/// The call under way, whose number every frame the worker sends carries (one socket,
/// one call at a time, per process).
static CALL: AtomicU64 = AtomicU64::new(CallId::NONE.0);

/// The call under way.
pub(super) fn current_call() -> CallId {
    CallId(CALL.load(Ordering::Acquire))
}

impl Channel {
    fn lock(&self) -> std::sync::MutexGuard<'_, UnixStream> {
        self.stream.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends a question and waits for its answer.
    fn ask(&self, message: &ToServer, payload: &[u8]) -> Result<(ToWorker, Vec<u8>), WireError> {
        let stream = self.lock();
        wire::send(&*stream, message, payload, current_call())?;
        wire::receive(&*stream).map(|(message, payload, _)| (message, payload))
    }

    fn tell(&self, message: &ToServer, payload: &[u8]) -> Result<(), WireError> {
        wire::send(&*self.lock(), message, payload, current_call())
    }
}

/// The worker's main: `warden __worker`, with its socket at `SOCKET_FD`. Returns the
/// process's exit code.
pub fn main() -> u8 {
    if let Some(ended) = super::namespaces::start_as_init() {
        return ended;
    }
    #[cfg(feature = "escape-hatch")]
    super::escape::note_host_pid();
    if let Err(reason) = confinement::harden(SOCKET_FD as u32) {
        eprintln!("warden __worker: {reason}");
        return 2;
    }
    let Some(stream) = socket() else {
        eprintln!(
            "warden __worker: no socket at fd {SOCKET_FD}; this command is started by Warden itself"
        );
        return 2;
    };
    let channel = Arc::new(Channel {
        stream: Mutex::new(stream),
    });
    match serve(&channel) {
        Ok(()) => 0,
        Err(reason) => {
            let _ = channel.tell(
                &ToServer::Unusable {
                    reason: reason.clone(),
                },
                &[],
            );
            tracing::error!("worker stops: {reason}");
            1
        }
    }
}

#[expect(
    unsafe_code,
    reason = "taking ownership of the descriptor the server placed for the worker"
)]
fn socket() -> Option<UnixStream> {
    use std::os::fd::FromRawFd;
    // Is it open, and a socket?
    let stat = rustix::fs::fstat(unsafe { rustix::fd::BorrowedFd::borrow_raw(SOCKET_FD) }).ok()?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::Socket {
        return None;
    }
    // SAFETY: the server placed this descriptor for the worker alone (dup2 in its
    // pre-exec hook) and nothing else in this process owns it.
    Some(unsafe { UnixStream::from_raw_fd(SOCKET_FD) })
}

fn serve(channel: &Arc<Channel>) -> Result<(), String> {
    let stream = channel.lock().try_clone().map_err(|e| e.to_string())?;
    let receive = || {
        wire::receive::<ToWorker>(&stream)
            .map(|(message, payload, _)| (message, payload))
            .map_err(|e| e.to_string())
    };
    let (
        ToWorker::Load {
            home,
            runtime,
            flavour,
            max_memory_bytes,
        },
        _,
    ) = receive()?
    else {
        return Err("the server's first message was not `load`".into());
    };
    let mut config = SandboxConfig::new(home);
    config.runtime = runtime;
    config.flavour = flavour;
    // One call at a time; its instance and a preparation's never overlap.
    config.max_instances = 1;
    config.max_memory = ByteSize(max_memory_bytes);
    config.cores = std::num::NonZeroUsize::MIN;
    config.progress = Progress::Quiet;
    let mut sandbox = Sandbox::load(&config).map_err(|e| format!("{e:#}"))?;
    // Guest code runs behind the server's request path.
    let _ = rustix::process::setpriority_process(None, NICENESS);
    // A worker outlives no server: when the thread that started it ends (the pool's,
    // with the server, even by SIGKILL), so does the worker, at once rather than at its
    // call's end.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    // A current-thread runtime starts no thread, but its drivers open descriptors (a
    // socket pair for signals) that the confinement would refuse afterwards.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the worker's async runtime: {e}"))?;
    // The first instance in a process faults in the runtime's memory image; a spare
    // worker pays for that with a call of Warden's own, while it waits
    // for a tenant, before any tenant's call does.
    prime(&sandbox, &runtime);
    channel
        .tell(&ToServer::Loaded, &[])
        .map_err(|e| e.to_string())?;

    let (
        ToWorker::Assign {
            read_only,
            mounts,
            scratch,
        },
        _,
    ) = receive()?
    else {
        return Err("the server's second message was not `assign`".into());
    };
    // Opened before the confinement and never by path again: a link planted on a
    // mount's path since its admission (by another worker breached by its tool) is
    // refused here, not followed.
    let folders = mounts
        .into_iter()
        .map(|mount| {
            let fd = mount.open()?;
            Ok((mount, fd))
        })
        .collect::<Result<Vec<_>, crate::grants::GrantError>>()
        .map_err(|e| e.to_string())?;
    // Before any second thread: the confinement covers every thread made afterwards.
    let applied =
        confinement::apply(&read_only, &scratch, &folders).map_err(|e| format!("{e:#}"))?;
    sandbox.hold(folders);
    sandbox.set_scratch(Some(crate::sandbox::ScratchRoot::given(scratch)));
    tracing::debug!("worker confined: {applied}");
    channel
        .tell(&ToServer::Ready, &[])
        .map_err(|e| e.to_string())?;

    loop {
        let message = match wire::receive::<ToWorker>(&stream) {
            Ok((message, _, call)) => {
                // A call or a preparation: every frame until its answer carries its
                // number.
                CALL.store(call.0, Ordering::Release);
                message
            }
            // The server hung up: the worker's work is done.
            Err(WireError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Ok(());
            }
            Err(e) => return Err(e.to_string()),
        };
        match message {
            ToWorker::Run {
                job,
                warm,
                budget_us,
            } => {
                let door: Arc<dyn Door> = Arc::new(RemoteDoor {
                    channel: Arc::clone(channel),
                    max_frame: crate::outbound::max_frame(&job.limits),
                });
                // The server took a core for the call before sending it.
                let seat: Arc<dyn CoreSeat> = Arc::new(RemoteSeat {
                    channel: Arc::clone(channel),
                    holds: AtomicBool::new(true),
                    granted: Mutex::new(Some(std::time::Instant::now())),
                });
                let ran = runtime.block_on(sandbox.run_job(
                    &job,
                    warm.as_ref(),
                    Some(std::time::Duration::from_micros(budget_us)),
                    |_| Some(door),
                    Some(seat),
                ));
                let (result, spent) = match ran {
                    Ok((result, spent)) => (Ok(result), Some(spent)),
                    Err(e) => (Err(format!("{e:#}")), None),
                };
                channel
                    .tell(&ToServer::Done { result }, &[])
                    .map_err(|e| e.to_string())?;
                // The instance is reset while the server answers its caller.
                drop(spent);
            }
            ToWorker::Prepare {
                tool_dir,
                file_name,
                packages,
            } => {
                let tool = ToolFolder::existing(tool_dir, &file_name);
                let mut prepared = sandbox
                    .prepare_warm_state(&tool, packages.as_deref())
                    .map_err(|e| format!("{e:#}"));
                let image = match &mut prepared {
                    Ok(p) => p.payload.take().unwrap_or_default(),
                    Err(_) => Vec::new(),
                };
                channel
                    .tell(&ToServer::Prepared { prepared }, &image)
                    .map_err(|e| e.to_string())?;
            }
            other => return Err(format!("unexpected message from the server: {other:?}")),
        }
    }
}

/// Runs one trivial call of Warden's own (no tenant's code, no grant), so that the
/// runtime's pages are resident before the worker is given to a tenant. Best effort: a
/// failure only costs the first call its speed.
fn prime(sandbox: &Sandbox, runtime: &tokio::runtime::Runtime) {
    const SOURCE: &str = "def prime() -> int:\n    return 1\n";
    let Ok(tool) = ToolFolder::temporary("prime.py", SOURCE) else {
        return;
    };
    let (grants, limits) = (
        crate::grants::Grants::default(),
        crate::limits::Limits::default(),
    );
    let call = crate::sandbox::Call {
        tool: &tool,
        function: "prime",
        arguments: &serde_json::Map::new(),
        none_if_omitted: &[],
        grants: &grants,
        limits: &limits,
        packages: None,
    };
    match runtime.block_on(sandbox.call(call)) {
        Ok(result) if result.status == crate::outcome::Status::Ok => {}
        Ok(result) => tracing::warn!("a worker's priming call ended {}", result.status),
        Err(e) => tracing::warn!("a worker's priming call failed: {e}"),
    }
}

/// The door of a call run in a worker: each frame goes to the server.
struct RemoteDoor {
    channel: Arc<Channel>,
    max_frame: u64,
}

impl RemoteDoor {
    fn ask(&self, len: u64, frame: &[u8]) -> Vec<u8> {
        match self.channel.ask(&ToServer::Door { len }, frame) {
            Ok((ToWorker::DoorAnswer, answer)) => answer,
            // The server is gone or confused: the guest sees a failed request; the
            // call ends soon anyway.
            _ => br#"{"ok":false,"error":{"type":"ConnectionError","message":"Warden's host did not answer"}}"#.to_vec(),
        }
    }
}

impl Door for RemoteDoor {
    fn max_frame(&self) -> u64 {
        self.max_frame
    }

    fn oversized(
        &self,
        len: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<u8>> + Send + '_>> {
        let answer = self.ask(len, &[]);
        Box::pin(async move { answer })
    }

    fn answer<'a>(
        &'a self,
        frame: &'a [u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<u8>> + Send + 'a>> {
        #[cfg(feature = "escape-hatch")]
        if let Some(answer) = super::escape::answer(frame) {
            return Box::pin(async move { answer });
        }
        let answer = self.ask(frame.len() as u64, frame);
        Box::pin(async move { answer })
    }
}

/// The seat of a call run in a worker: the server holds the call's real seat at the
/// cores it shares with every other call; this one asks it.
struct RemoteSeat {
    channel: Arc<Channel>,
    holds: AtomicBool,
    /// When the server last said the guest may go on.
    granted: Mutex<Option<std::time::Instant>>,
}

impl RemoteSeat {
    fn go(&self, message: &ToServer) {
        // A server that does not answer has killed or will kill this worker.
        let _ = self.channel.ask(message, &[]);
        self.holds.store(true, Ordering::Release);
        *self.granted.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(std::time::Instant::now());
    }
}

impl CoreSeat for RemoteSeat {
    fn acquire(&self) -> SeatFuture<'_> {
        if !self.holds.load(Ordering::Acquire) {
            self.go(&ToServer::Acquire);
        }
        Box::pin(async {})
    }

    fn release(&self) {
        if self.holds.swap(false, Ordering::AcqRel) {
            let _ = self.channel.tell(&ToServer::Release, &[]);
        }
    }

    /// The server frees the core when the call's answer arrives.
    fn finish(&self) {
        self.holds.store(false, Ordering::Release);
    }

    /// Whether others wait is the server's to know: every slice's end asks it.
    fn contended(&self) -> bool {
        true
    }

    fn held_for(&self) -> std::time::Duration {
        if !self.holds.load(Ordering::Acquire) {
            return std::time::Duration::ZERO;
        }
        self.granted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map_or(std::time::Duration::ZERO, |at| at.elapsed())
    }

    fn yield_core(self: Arc<Self>) -> SeatFuture<'static> {
        self.go(&ToServer::Tick);
        Box::pin(async {})
    }
}
