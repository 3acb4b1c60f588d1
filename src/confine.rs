//! The second wall: the kernel confines a Warden process that runs code Warden does not
//! trust (a worker running guest code, or pip resolving packages), so that if that code
//! took the process over (a wasmtime or Cranelift bug giving a tool native execution; a
//! bug in pip) it could reach only what the process was given.
//!
//! # What [`Confinement::apply`] does
//!
//! Three layers, applied in this order to the calling process, irreversibly, while it has
//! a single thread (Landlock on the kernels Warden runs on restricts only the calling
//! thread and the threads it creates afterwards, so a second thread would stay free):
//!
//! 1. **no_new_privs**: nothing the process executes can gain privileges (set-user-id
//!    programs, file capabilities). Landlock and seccomp both require it.
//! 2. **Landlock** (ABI 6, Linux 6.12, or later; refused on older kernels):
//!    - files: the trees of [`Confinement::read_only`] can be read (and executed, for
//!      [`Profile::Exec`]), those of [`Confinement::read_write`] read and written
//!      (create, remove, rename, truncate; never executed); nothing else can be opened,
//!      created, removed or truncated;
//!    - TCP: `connect` only to the ports of [`Confinement::tcp_connect`]; `bind` never;
//!    - scopes: no signal to a process outside the confined one (and its children), no
//!      connection to an abstract Unix socket created outside.
//! 3. **seccomp-bpf**, by [`Profile`]: for [`Profile::Worker`] an allow-list (every call
//!    not listed kills the process with `SIGSYS`, so a denied call is visible), for
//!    [`Profile::Exec`] a list of calls that kill, a filter on new sockets, and path-based
//!    changes of owner, mode and extended attributes refused (Landlock lets them by). Both
//!    kill any call of another ABI (i386 `int 0x80`, x32 numbers), and answer `clone3`
//!    with `ENOSYS` so that glibc falls back to `clone`, whose flags a filter can read.
//!
//! If the kernel lacks Landlock (or the needed ABI) or seccomp, [`Confinement::apply`]
//! fails: Warden never runs "partially confined" on its own; whether to run unconfined
//! is the caller's (and the operator's) decision.
//!
//! # What it does not do
//!
//! - File descriptors opened before confinement stay usable: open few, deliberately.
//! - Landlock governs opening, creating, removing and truncating files, not `stat` (a
//!   confined process can still learn whether a path exists, its size and times) nor
//!   changes of owner, mode, extended attributes or times by path: seccomp closes those
//!   ([`Profile::Worker`] allows only `utimensat` on a descriptor, never by path;
//!   [`Profile::Exec`] refuses or ignores all but times).
//! - Until Landlock ABI 10, UDP is not governed by Landlock: [`Profile::Worker`] cannot
//!   create any socket (seccomp), but [`Profile::Exec`] can send UDP (DNS needs it).
//!
//! # The hidden subcommand
//!
//! A process that must be confined and then run another program (pip) is started as
//! `warden __confined-exec --policy <json> -- PROGRAM ARGS...` ([`exec_command`]): the
//! binary's `main` calls [`exec_main`] before anything else (no thread, no logging), which
//! applies the policy and executes the program.
//!
//! This module holds plain data and kernel calls only: it imports nothing of Warden's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The name of the hidden subcommand that confines itself, then executes a program.
pub const EXEC_SUBCOMMAND: &str = "__confined-exec";

/// Exit status of `warden __confined-exec` when it could not confine itself (nothing was
/// executed); its error output says why.
pub const EXIT_NOT_CONFINED: u8 = 125;

/// Exit status of `warden __confined-exec` when it was confined but could not execute the
/// program (not found, or not executable where it may execute).
pub const EXIT_NOT_EXECUTED: u8 = 127;

/// What a confined process may reach. Paths are followed (symbolic links resolved) when
/// the confinement is applied; a `read_only` path that does not exist grants nothing and
/// is skipped, a `read_write` one is an error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Confinement {
    /// Trees the process may read (and, for [`Profile::Exec`], execute) but never write.
    pub read_only: Vec<PathBuf>,
    /// Trees it may read and write (create, remove, rename, truncate files and folders
    /// beneath), never execute.
    pub read_write: Vec<PathBuf>,
    /// TCP ports it may connect to; empty: no outbound TCP at all. It may never bind.
    pub tcp_connect: Vec<u16>,
    /// What the seccomp filter allows.
    pub profile: Profile,
    /// First narrow the process's mount view to `read_only`, `read_write` and its own
    /// descriptors' folder, `/proc/self/fd` ([`narrow`]): for a process in a mount namespace of its own whose user namespace
    /// it holds `CAP_SYS_ADMIN` in (a worker the server started in namespaces).
    #[serde(default)]
    pub narrow_view: bool,
}

/// The seccomp filter of a confined process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// A process that runs guest code (wasmtime under a tokio current-thread runtime,
    /// plus helper threads): an allow-list, everything else kills the process. No new
    /// socket of any family (the one it talks over was inherited), no exec, no
    /// ptrace or `process_vm_*`, no signal except to itself, no io_uring, bpf, mount,
    /// unshare or setns, `clone` for threads only. The table is `WORKER_ALLOWED`.
    ///
    /// Make before confining: the wasmtime engine (its pooling allocator opens
    /// `/proc/self/pagemap`), the compiled modules, and the tokio runtime (with tokio's
    /// `signal` feature its I/O driver makes a socketpair); and with
    /// `parallel_compilation(false)`, or compiling starts threads.
    #[default]
    Worker,
    /// A helper that executes a program after confinement (pip): exec allowed; ptrace,
    /// bpf, io_uring, namespaces, mounts, kernel modules and keyrings kill the process;
    /// new sockets only TCP or UDP over IPv4/IPv6; changes of owner, mode or extended
    /// attributes by path (which Landlock does not govern) refused or ignored. Landlock
    /// does the file and network part. The table is `EXEC_KILLED`.
    Exec,
    /// A build that compiles and runs what it compiled (the Pydantic runtime's recipe):
    /// [`Profile::Exec`]'s filter, and its read-write trees may also be executed. Modes,
    /// owners and times by path are not filtered: the process runs in its own user and
    /// mount namespaces (`view`), where every mount but the read-write trees is
    /// read-only and set-user-id-free, as an unprivileged user mapped to the caller.
    Build,
}

/// The confinement in force after [`Confinement::apply`], for logs, `/readyz` and
/// capability documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// The Landlock ABI the kernel enforces: 6 or later (7 on Linux 6.15 and later).
    pub landlock_abi: u32,
    /// The seccomp filter installed.
    pub profile: Profile,
}

impl std::fmt::Display for Applied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seccomp = match self.profile {
            Profile::Worker => "seccomp worker allow-list",
            Profile::Exec => "seccomp exec filter",
            Profile::Build => {
                "seccomp exec filter, own user and mount namespaces (read-only but its \
                 work folder)"
            }
        };
        write!(
            f,
            "Landlock ABI {} (files, TCP ports, signal and abstract-socket scopes), {seccomp}",
            self.landlock_abi
        )
    }
}

/// Why a process could not be confined. After an error the process may be partly
/// confined (some layers applied): it must not go on to run untrusted code; exit.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// Confinement uses Linux's Landlock and seccomp.
    #[error(
        "process confinement needs Linux (Landlock and seccomp); this is {os}: Warden cannot \
         confine the processes that run untrusted code here"
    )]
    Unsupported {
        /// The operating system.
        os: &'static str,
    },
    /// The process has more than one thread: the others would stay unconfined.
    #[error(
        "refusing to confine a process with {threads} threads: Landlock would leave the \
         others unconfined; confine before starting any thread"
    )]
    MultiThreaded {
        /// How many threads `/proc/self/status` counted.
        threads: usize,
    },
    /// The thread count could not be read.
    #[error("cannot count this process's threads in /proc/self/status: {reason}")]
    ThreadCount {
        /// Why.
        reason: String,
    },
    /// The kernel lacks Landlock, or the features Warden requires of it.
    #[error(
        "the kernel cannot confine processes with Landlock ({reason}): Warden needs Landlock \
         ABI 6 or later (Linux 6.12+, with `landlock` in the `lsm=` boot list)"
    )]
    Landlock {
        /// What the kernel or the landlock crate said.
        reason: String,
    },
    /// A path to grant could not be opened.
    #[error("cannot grant {}: {reason}", path.display())]
    Path {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The seccomp filter could not be built or installed.
    #[error("the kernel refused the seccomp filter ({reason}): Warden needs seccomp-bpf")]
    Seccomp {
        /// What failed.
        reason: String,
    },
    /// The user and mount namespaces of [`Profile::Build`] could not be made.
    #[error(
        "cannot give the build its own read-only view of the machine ({reason}): it needs \
         user namespaces (check `unshare --user --map-root-user true`; on distributions \
         that restrict them, `sysctl kernel.apparmor_restrict_unprivileged_userns=0` or \
         `user.max_user_namespaces` above 0)"
    )]
    Namespace {
        /// What failed.
        reason: String,
    },
    /// The policy of `warden __confined-exec` is malformed.
    #[error("invalid confinement policy: {reason}")]
    Policy {
        /// Why.
        reason: String,
    },
}

/// Folders a confined process may reach beyond its [`Confinement`]'s paths, given as
/// folders already open: the rule holds on to the folder the descriptor names, whatever
/// its path names by the time the confinement is applied.
#[derive(Debug, Default)]
pub struct Folders<'a> {
    /// Folders it may read (as [`Confinement::read_only`]).
    pub read_only: Vec<std::os::fd::BorrowedFd<'a>>,
    /// Folders it may read and write (as [`Confinement::read_write`]).
    pub read_write: Vec<std::os::fd::BorrowedFd<'a>>,
}

impl Confinement {
    /// Applies this confinement to the calling process: no_new_privs, Landlock, then
    /// seccomp (see the module's documentation). Irreversible. Refused
    /// ([`ConfineError::MultiThreaded`]) unless the process has a single thread.
    pub fn apply(&self) -> Result<Applied, ConfineError> {
        self.apply_with(&Folders::default())
    }

    /// [`Confinement::apply`], also granting `folders`.
    pub fn apply_with(&self, folders: &Folders<'_>) -> Result<Applied, ConfineError> {
        self.apply_layers(folders, true, true)
    }

    /// FOR TESTS ONLY (the `escape-hatch` feature): [`Confinement::apply_with`] with
    /// Landlock or seccomp left out, to show what each layer holds alone.
    #[cfg(feature = "escape-hatch")]
    pub fn apply_some(
        &self,
        folders: &Folders<'_>,
        landlock: bool,
        seccomp: bool,
    ) -> Result<Applied, ConfineError> {
        self.apply_layers(folders, landlock, seccomp)
    }

    fn apply_layers(
        &self,
        folders: &Folders<'_>,
        landlock: bool,
        seccomp: bool,
    ) -> Result<Applied, ConfineError> {
        #[cfg(target_os = "linux")]
        {
            let threads = threads()?;
            if threads != 1 {
                return Err(ConfineError::MultiThreaded { threads });
            }
            if self.profile == Profile::Build {
                // Refused before anything is entered, as for the other profiles.
                if landlock {
                    ruleset::ruleset()?;
                }
                let writable: Vec<&Path> = self.read_write.iter().map(PathBuf::as_path).collect();
                view::enter(&writable)?;
            }
            if self.narrow_view {
                // And the process's own descriptors, through which it reopens folders
                // it holds (a WASI preopen takes a path).
                let read_only = self
                    .read_only
                    .iter()
                    .map(PathBuf::as_path)
                    .chain([Path::new("/proc/self/fd")])
                    .collect::<Vec<_>>();
                let read_write = self
                    .read_write
                    .iter()
                    .map(PathBuf::as_path)
                    .collect::<Vec<_>>();
                view::narrow(&read_only, &read_write, folders)?;
            }
            let landlock_abi = if landlock {
                ruleset::landlock(self, folders)?
            } else {
                0
            };
            if seccomp {
                filters::seccomp(self.profile)?;
            }
            Ok(Applied {
                landlock_abi,
                profile: self.profile,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (folders, landlock, seccomp);
            Err(ConfineError::Unsupported {
                os: std::env::consts::OS,
            })
        }
    }
}

/// Checks, without confining anything, that this kernel can apply a [`Confinement`]'s
/// Landlock part: for a clear error before starting a process that would fail to.
pub fn check_support() -> Result<(), ConfineError> {
    #[cfg(target_os = "linux")]
    {
        ruleset::ruleset().map(drop)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(ConfineError::Unsupported {
            os: std::env::consts::OS,
        })
    }
}

/// A command that runs `program` confined by `confinement` (whose profile should be
/// [`Profile::Exec`]): `warden __confined-exec --policy <json> -- program`, where `warden`
/// is the path of Warden's binary. Add the program's arguments, environment and
/// standard streams to it. It exits with [`EXIT_NOT_CONFINED`] if it could not confine
/// itself, [`EXIT_NOT_EXECUTED`] if it could not execute `program`.
pub fn exec_command(
    warden: &Path,
    confinement: &Confinement,
    program: &Path,
) -> Result<Command, ConfineError> {
    let policy = serde_json::to_string(confinement).map_err(|e| ConfineError::Policy {
        reason: e.to_string(),
    })?;
    let mut cmd = Command::new(warden);
    cmd.arg(EXEC_SUBCOMMAND)
        .arg("--policy")
        .arg(policy)
        .arg("--")
        .arg(program);
    Ok(cmd)
}

/// The hidden subcommand's `main`: `None` unless the process was started as
/// `warden __confined-exec ...`; otherwise it confines itself and executes the program,
/// returning only the exit status of a failure. Call it first in `main`, before any
/// thread is started.
pub fn exec_main() -> Option<std::process::ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != EXEC_SUBCOMMAND {
        return None;
    }
    let (confinement, program, rest) = match parse_exec_args(args.collect()) {
        Ok(parsed) => parsed,
        Err(e) => return Some(fail(EXIT_NOT_CONFINED, &e)),
    };
    if let Err(e) = confinement.apply() {
        return Some(fail(EXIT_NOT_CONFINED, &e));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let e = Command::new(&program).args(rest).exec();
        Some(fail(
            EXIT_NOT_EXECUTED,
            &format!("cannot execute {}: {e}", program.display()),
        ))
    }
    #[cfg(not(unix))]
    {
        let _ = (program, rest);
        Some(fail(EXIT_NOT_EXECUTED, &"exec needs Unix"))
    }
}

fn fail(code: u8, error: &dyn std::fmt::Display) -> std::process::ExitCode {
    eprintln!("warden {EXEC_SUBCOMMAND}: {error}");
    std::process::ExitCode::from(code)
}

/// `--policy <json> -- PROGRAM ARGS...`.
fn parse_exec_args(
    args: Vec<OsString>,
) -> Result<(Confinement, PathBuf, Vec<OsString>), ConfineError> {
    let policy_error = |reason: &str| ConfineError::Policy {
        reason: reason.to_owned(),
    };
    let mut args = args.into_iter();
    if args.next().as_deref() != Some("--policy".as_ref()) {
        return Err(policy_error("expected --policy <json> -- PROGRAM ARGS..."));
    }
    let policy = args
        .next()
        .and_then(|p| p.into_string().ok())
        .ok_or_else(|| policy_error("--policy needs a UTF-8 JSON value"))?;
    let confinement: Confinement =
        serde_json::from_str(&policy).map_err(|e| policy_error(&e.to_string()))?;
    if args.next().as_deref() != Some("--".as_ref()) {
        return Err(policy_error("expected -- after the policy"));
    }
    let program = args
        .next()
        .map(PathBuf::from)
        .ok_or_else(|| policy_error("no program to execute"))?;
    Ok((confinement, program, args.collect()))
}

#[cfg(target_os = "linux")]
mod filters;
#[cfg(target_os = "linux")]
mod ruleset;
#[cfg(target_os = "linux")]
mod view;
#[cfg(target_os = "linux")]
pub use view::{INNER_ID, drop_capabilities, drop_capabilities_but, narrow};

/// The threads of this process, from `/proc/self/status`.
#[cfg(target_os = "linux")]
fn threads() -> Result<usize, ConfineError> {
    let error = |reason: String| ConfineError::ThreadCount { reason };
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| error(e.to_string()))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .ok_or_else(|| error("no Threads: line".into()))?
        .trim()
        .parse()
        .map_err(|e: std::num::ParseIntError| error(e.to_string()))
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests;
