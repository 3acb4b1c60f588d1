//! FOR TESTS ONLY: the first wall breached on purpose.
//!
//! Compiled only with the `escape-hatch` feature, which no release build enables (a
//! test checks that the default features leave it out). With it, a frame through the
//! runtime's door of the form `{"escape": {...}}` is not sent to the server: the worker
//! carries it out itself, natively, from where guest code runs, as a tool that had
//! escaped WebAssembly could. The confinement tests make tools try what must fail there
//! (read outside, write outside, exec, sockets, signals, ptrace) and check that it does.

use std::io::Write;

use serde::Deserialize;
use serde_json::{Value, json};

/// One native operation a tool asks for.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Operation {
    /// Read a file.
    Read(String),
    /// Create (or truncate) a file and write to it.
    Write(String),
    /// List a folder.
    List(String),
    /// Run a program.
    Exec(String),
    /// Connect over TCP.
    Tcp(String),
    /// Bind a UDP socket.
    Udp(String),
    /// Connect to a Unix socket.
    Unix(String),
    /// Send SIGCONT to a process (0: the worker's parent, if it sees one).
    Signal(i32),
    /// Attach to a process with ptrace (0: the worker's parent, if it sees one).
    Ptrace(i32),
    /// Make a symbolic link at `link` naming `target`.
    Symlink {
        /// What the link names.
        target: String,
        /// Where the link is made.
        link: String,
    },
    /// Rename `from` to `to`.
    Rename {
        /// The path renamed.
        from: String,
        /// Its new path.
        to: String,
    },
    /// Set a file's times by path (to the epoch), as `utimensat` with a path does.
    Touch(String),
    /// Whether anything is at a path (`lstat`, which Landlock does not govern).
    Exists(String),
    /// Take a read lease on a file (whoever opens it for writing then waits).
    Lease(String),
    /// Write a line to the worker's stderr.
    Stderr(String),
    /// Write a frame of the worker's own making on its socket to the server.
    Forge(Forged),
    /// The worker's process id, as the host sees it (noted when it started: its
    /// narrowed view has no `/proc` of the host's to ask).
    Pid,
    /// The worker's process id, as it sees itself (`getpid`: 1 in a PID namespace).
    OwnPid,
    /// A risky system call with the arguments the worker's filter refuses:
    /// `futex_lock_pi`, `membarrier_global`, `memfd_hugetlb`, `sendmsg`.
    Risky(String),
    /// Burn CPU on threads of its own, beside the guest's.
    Spin {
        /// Threads started.
        threads: u32,
        /// How long each spins, in milliseconds (the operation waits for them).
        ms: u64,
    },
}

/// A frame a breached worker writes to the server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Forged {
    /// The header, any JSON (a `done` with a result of its choosing, say).
    header: Value,
    /// Payload bytes sent after the header.
    #[serde(default)]
    payload: usize,
    /// The payload length the prefix announces, if not the bytes sent.
    #[serde(default)]
    announce: Option<u64>,
    /// The call number stamped on it (default: the call under way).
    #[serde(default)]
    call: Option<u64>,
    /// Milliseconds to wait first, on a thread of its own: the call is answered and
    /// the worker idle by the time the frame is written.
    #[serde(default)]
    delay_ms: u64,
}

/// The answer to an escape frame, or `None` for any other frame.
pub fn answer(frame: &[u8]) -> Option<Vec<u8>> {
    #[derive(Deserialize)]
    struct Escape {
        escape: Operation,
    }
    let Escape { escape } = serde_json::from_slice(frame).ok()?;
    let outcome = match run(&escape) {
        Ok(detail) => json!({"ok": true, "detail": detail}),
        Err(e) => json!({"ok": false, "error": e}),
    };
    Some(outcome.to_string().into_bytes())
}

/// `pid`, or for 0 the worker's parent as the worker sees it: none in a PID namespace
/// of its own (`getppid` is 0 there), where the tests name the server by its number.
/// The worker's process id as the host sees it ([`note_host_pid`]).
static HOST_PID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Notes the worker's process id as the host sees it (`/proc/self`, while the host's
/// `/proc` is in view), for the `pid` operation.
pub fn note_host_pid() {
    if let Some(pid) = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|link| link.to_string_lossy().parse().ok())
    {
        let _ = HOST_PID.set(pid);
    }
}

fn server(pid: i32) -> Result<i32, String> {
    if pid == 0 {
        rustix::process::getppid()
            .map(|p| p.as_raw_nonzero().get())
            .ok_or_else(|| "no parent in sight: the worker is PID 1 of its namespace".into())
    } else {
        Ok(pid)
    }
}

fn run(op: &Operation) -> Result<Value, String> {
    let e = |e: std::io::Error| e.to_string();
    match op {
        Operation::Read(path) => {
            let bytes = std::fs::read(path).map_err(e)?;
            Ok(json!(String::from_utf8_lossy(
                &bytes[..bytes.len().min(200)]
            )))
        }
        Operation::Write(path) => {
            let mut file = std::fs::File::create(path).map_err(e)?;
            file.write_all(b"escaped").map_err(e)?;
            Ok(json!("written"))
        }
        Operation::List(path) => {
            let names: Vec<String> = std::fs::read_dir(path)
                .map_err(e)?
                .flatten()
                .map(|d| d.file_name().to_string_lossy().into_owned())
                .collect();
            Ok(json!(names))
        }
        Operation::Exec(program) => {
            let status = std::process::Command::new(program).status().map_err(e)?;
            Ok(json!(status.to_string()))
        }
        Operation::Tcp(address) => {
            std::net::TcpStream::connect(address).map_err(e)?;
            Ok(json!("connected"))
        }
        Operation::Udp(address) => {
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").map_err(e)?;
            socket.send_to(b"escaped", address).map_err(e)?;
            Ok(json!("sent"))
        }
        Operation::Unix(path) => {
            std::os::unix::net::UnixStream::connect(path).map_err(e)?;
            Ok(json!("connected"))
        }
        Operation::Signal(pid) => {
            let pid = rustix::process::Pid::from_raw(server(*pid)?).ok_or("no such process")?;
            rustix::process::kill_process(pid, rustix::process::Signal::CONT)
                .map_err(|errno| errno.to_string())?;
            Ok(json!("signalled"))
        }
        Operation::Ptrace(pid) => ptrace(server(*pid)?),
        Operation::Exists(path) => Ok(json!(std::fs::symlink_metadata(path).is_ok())),
        Operation::Touch(path) => {
            let epoch = rustix::fs::Timestamps {
                last_access: rustix::fs::Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                last_modification: rustix::fs::Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
            };
            rustix::fs::utimensat(
                rustix::fs::CWD,
                path.as_str(),
                &epoch,
                rustix::fs::AtFlags::empty(),
            )
            .map_err(|errno| errno.to_string())?;
            Ok(json!("touched"))
        }
        Operation::Lease(path) => {
            let file = std::fs::File::open(path).map_err(e)?;
            lease(&file)?;
            // Held while the process lives.
            std::mem::forget(file);
            Ok(json!("leased"))
        }
        Operation::Stderr(text) => {
            eprintln!("{text}");
            Ok(json!("written"))
        }
        Operation::Forge(forged) => forge(forged),
        Operation::Pid => HOST_PID
            .get()
            .map(|pid| json!(pid))
            .ok_or_else(|| "the worker did not note its process id when it started".into()),
        Operation::OwnPid => Ok(json!(std::process::id())),
        Operation::Risky(name) => risky(name),
        Operation::Spin { threads, ms } => {
            let until = std::time::Instant::now() + std::time::Duration::from_millis(*ms);
            let spinning: Vec<_> = (0..*threads)
                .map(|_| {
                    std::thread::spawn(move || {
                        let mut n = 0u64;
                        while std::time::Instant::now() < until {
                            n = std::hint::black_box(n.wrapping_add(1));
                        }
                        n
                    })
                })
                .collect();
            let turns: u64 = spinning.into_iter().filter_map(|t| t.join().ok()).sum();
            Ok(json!(turns > 0))
        }
        // The `*at` calls, as the worker's filter allows them (it forbids the old
        // `symlink` and `rename`, which nothing in a worker uses).
        Operation::Symlink { target, link } => {
            rustix::fs::symlinkat(target.as_str(), rustix::fs::CWD, link.as_str())
                .map_err(|errno| errno.to_string())?;
            Ok(json!("linked"))
        }
        Operation::Rename { from, to } => {
            rustix::fs::renameat(rustix::fs::CWD, from.as_str(), rustix::fs::CWD, to.as_str())
                .map_err(|errno| errno.to_string())?;
            Ok(json!("renamed"))
        }
    }
}

#[expect(
    unsafe_code,
    reason = "ptrace has no safe wrapper; this is the test hatch"
)]
fn ptrace(pid: i32) -> Result<Value, String> {
    // SAFETY: PTRACE_ATTACH takes no pointers; a failure is reported through errno.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_ATTACH,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(json!("attached"))
}

#[expect(
    unsafe_code,
    reason = "F_SETLEASE has no safe wrapper; this is the test hatch"
)]
fn lease(file: &std::fs::File) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor this function borrows, with an integer argument.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(())
}

fn forge(forged: &Forged) -> Result<Value, String> {
    let header = serde_json::to_vec(&forged.header).map_err(|e| e.to_string())?;
    let call = forged.call.unwrap_or(super::child::current_call().0);
    let announce = forged.announce.unwrap_or(forged.payload as u64);
    let mut frame = Vec::new();
    frame.extend_from_slice(&(header.len() as u32).to_le_bytes());
    frame.extend_from_slice(&announce.to_le_bytes());
    frame.extend_from_slice(&call.to_le_bytes());
    frame.extend_from_slice(&header);
    frame.resize(frame.len() + forged.payload, b'x');
    let delay = std::time::Duration::from_millis(forged.delay_ms);
    let write = move || {
        std::thread::sleep(delay);
        write_socket(&frame);
    };
    if delay.is_zero() {
        write();
    } else {
        std::thread::spawn(write);
    }
    Ok(json!("forged"))
}

#[expect(
    unsafe_code,
    reason = "writing on the worker's socket behind its channel's back; this is the test hatch"
)]
fn write_socket(bytes: &[u8]) {
    // SAFETY: the socket the server placed stays open for the worker's life; it is
    // borrowed for this write only.
    let socket = unsafe { rustix::fd::BorrowedFd::borrow_raw(super::child::SOCKET_FD) };
    let mut rest = bytes;
    while !rest.is_empty() {
        match rustix::io::write(socket, rest) {
            Ok(0) | Err(_) => return,
            Ok(n) => rest = &rest[n..],
        }
    }
}

#[expect(
    unsafe_code,
    reason = "raw system calls with the arguments a worker must not use; this is the test hatch"
)]
fn risky(name: &str) -> Result<Value, String> {
    let futex = std::sync::atomic::AtomicU32::new(0);
    // SAFETY: each call is given pointers to live locals (or none); its result is only
    // reported.
    let rc = unsafe {
        match name {
            "futex_lock_pi" => libc::syscall(
                libc::SYS_futex,
                futex.as_ptr(),
                libc::FUTEX_LOCK_PI | libc::FUTEX_PRIVATE_FLAG,
                0,
                std::ptr::null::<libc::timespec>(),
            ),
            // MEMBARRIER_CMD_GLOBAL.
            "membarrier_global" => libc::syscall(libc::SYS_membarrier, 1, 0, 0),
            "memfd_hugetlb" => libc::syscall(
                libc::SYS_memfd_create,
                c"huge".as_ptr(),
                libc::MFD_HUGETLB | libc::MFD_CLOEXEC,
            ),
            "sendmsg" => {
                let mut byte = [0u8; 1];
                let mut iov = libc::iovec {
                    iov_base: byte.as_mut_ptr().cast(),
                    iov_len: 1,
                };
                let mut message: libc::msghdr = std::mem::zeroed();
                message.msg_iov = &mut iov;
                message.msg_iovlen = 1;
                libc::syscall(libc::SYS_sendmsg, super::child::SOCKET_FD, &message, 0)
            }
            other => return Err(format!("no risky call named {other}")),
        }
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(json!(rc))
}
