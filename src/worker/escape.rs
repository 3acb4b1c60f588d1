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
    /// Send SIGCONT to a process (0: the worker's parent, the server).
    Signal(i32),
    /// Attach to a process with ptrace (0: the server).
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

fn server(pid: i32) -> i32 {
    if pid == 0 {
        rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get())
    } else {
        pid
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
            let pid = rustix::process::Pid::from_raw(server(*pid)).ok_or("no such process")?;
            rustix::process::kill_process(pid, rustix::process::Signal::CONT)
                .map_err(|errno| errno.to_string())?;
            Ok(json!("signalled"))
        }
        Operation::Ptrace(pid) => ptrace(server(*pid)),
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
