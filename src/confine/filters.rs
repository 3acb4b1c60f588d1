//! The seccomp part of [`Confinement::apply`](super::Confinement::apply): the system
//! calls each [`Profile`] may make, as BPF filters stacked on the process.

use std::collections::BTreeMap;

use libc::*;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

use super::{ConfineError, Profile};

/// [`Profile::Worker`]: the calls a wasmtime process on a tokio current-thread runtime
/// (plus its blocking-pool threads) makes once it runs guest code.
/// Any other call kills the process. Calls allowed only with some arguments are in
/// [`worker_conditional`].
#[rustfmt::skip]
const WORKER_ALLOWED: &[&[c_long]] = &[
    // Memory: wasmtime reserves, maps, protects and releases linear memories, tables,
    // stacks and code; the allocator grows the heap.
    &[
        SYS_mmap, SYS_munmap, SYS_mprotect, SYS_madvise, SYS_mremap, SYS_brk,
    ],
    // Copy-on-write memory images: wasmtime backs module images with memfds (it falls
    // back only on ENOSYS; an EPERM breaks instantiation). `memfd_create` is in
    // `worker_conditional`.
    &[SYS_ftruncate],
    // Threads: thread set-up and exit (waiting and waking, `futex`, is in
    // `worker_conditional`); clone3 is answered ENOSYS by a second filter.
    &[
        SYS_sched_yield, SYS_sched_getaffinity, SYS_set_robust_list,
        SYS_rseq, SYS_clone3, SYS_exit, SYS_exit_group,
    ],
    // Signals: wasmtime turns faults in guest code into traps with its own handlers on
    // an alternate stack.
    &[
        SYS_rt_sigaction, SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_sigaltstack,
        SYS_restart_syscall,
    ],
    // Time and randomness: deadlines, sleeps, WASI clocks and random_get.
    &[
        SYS_clock_gettime, SYS_clock_getres, SYS_gettimeofday, SYS_nanosleep,
        SYS_clock_nanosleep, SYS_getrandom,
    ],
    // Files, only those Landlock lets it open: the runtime, modules, packages (read)
    // and the folders granted to a call (read and write).
    &[
        SYS_read, SYS_write, SYS_pread64, SYS_pwrite64, SYS_readv, SYS_writev,
        SYS_preadv, SYS_pwritev, SYS_preadv2, SYS_pwritev2, SYS_lseek, SYS_openat,
        SYS_openat2, SYS_close,
        SYS_close_range, SYS_fstat, SYS_newfstatat, SYS_statx, SYS_fstatfs,
        SYS_getdents64, SYS_dup, SYS_dup3, SYS_readlinkat, SYS_fsync,
        SYS_fdatasync, SYS_fadvise64, SYS_fallocate, SYS_mkdirat, SYS_unlinkat,
        SYS_renameat2, SYS_linkat, SYS_symlinkat, SYS_faccessat,
        SYS_faccessat2,
    ],
    // Tokio's event loop: epoll, its waker, pipes.
    &[
        SYS_epoll_create1, SYS_epoll_ctl, SYS_epoll_pwait, SYS_epoll_pwait2, SYS_ppoll,
        SYS_eventfd2, SYS_pipe2,
    ],
    // Sockets inherited before confinement (the line to the server): bytes and
    // shutdown, never a new socket, bind, listen, connect or accept, and no `sendmsg`
    // (no descriptor passed to the server with SCM_RIGHTS).
    &[
        SYS_recvmsg, SYS_sendto, SYS_recvfrom, SYS_shutdown, SYS_getsockopt,
    ],
    // Identity: harmless reads glibc and std make.
    &[
        SYS_getpid, SYS_gettid, SYS_getppid, SYS_getuid, SYS_geteuid, SYS_getgid,
        SYS_getegid, SYS_uname,
    ],
    // x86-64's older spellings of calls above, which glibc's wrappers still make
    // (std's fs::create_dir is `mkdir`, for one). Landlock governs the paths.
    #[cfg(target_arch = "x86_64")]
    &[
        SYS_poll, SYS_epoll_wait, SYS_pipe, SYS_dup2, SYS_renameat, SYS_rename,
        SYS_mkdir, SYS_rmdir, SYS_unlink, SYS_readlink, SYS_access,
    ],
];

/// `PAGEMAP_SCAN` (`_IOWR('f', 16, struct pm_scan_arg)`, Linux 6.7), absent from
/// libc: wasmtime's pooling allocator finds a reused slot's dirty pages with it, on
/// the `/proc/self/pagemap` it opened when the engine was made (before confinement).
const PAGEMAP_SCAN: u64 = 0xC060_6610;

/// The futex operations a worker may make: the plain ones (`FUTEX_WAIT`, `FUTEX_WAKE`,
/// `FUTEX_REQUEUE`, `FUTEX_CMP_REQUEUE`, `FUTEX_WAKE_OP`, `FUTEX_WAIT_BITSET`,
/// `FUTEX_WAKE_BITSET`), with or without `FUTEX_PRIVATE_FLAG` and
/// `FUTEX_CLOCK_REALTIME` ([`FUTEX_CMD_MASK`] takes them off).
const FUTEX_OPS: [c_int; 7] = [
    FUTEX_WAIT,
    FUTEX_WAKE,
    FUTEX_REQUEUE,
    FUTEX_CMP_REQUEUE,
    FUTEX_WAKE_OP,
    FUTEX_WAIT_BITSET,
    FUTEX_WAKE_BITSET,
];
/// The bits of a futex operation that name it, without its flags.
const FUTEX_CMD_MASK: u64 = !((FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME) as u64) & 0xffff_ffff;

// Membarrier commands (linux/membarrier.h), absent from libc.
const MEMBARRIER_CMD_QUERY: c_int = 0;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: c_int = 1 << 4;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: c_int = 1 << 5;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: c_int = 1 << 6;

/// [`Profile::Worker`]'s calls allowed with some arguments only.
fn worker_conditional(pid: u32) -> Result<Vec<(c_long, Vec<SeccompRule>)>, ConfineError> {
    Ok(vec![
        // Threads only: CLONE_THREAD set and no CLONE_NEW* flag (no fork, so no exec
        // through a child, and no new namespace).
        (
            SYS_clone,
            vec![rule(&[
                masked(0, CLONE_THREAD as u64, CLONE_THREAD as u64)?,
                masked(0, clone_new_flags(), 0)?,
            ])?],
        ),
        // Signals to itself only (abort, and std's and wasmtime's own use): the
        // thread group id must be this process's, taken when the filter is built.
        (SYS_tgkill, vec![rule(&[eq(0, u64::from(pid))?])?]),
        // Non-blocking mode, close-on-exec, "is this a terminal", and the pooling
        // allocator's scan of dirty pages; nothing else (no TIOCSTI, no device
        // control).
        (
            SYS_ioctl,
            [FIONBIO, FIOCLEX, FIONCLEX, TCGETS, PAGEMAP_SCAN]
                .iter()
                .map(|request| rule(&[eq(1, *request)?]))
                .collect::<Result<_, _>>()?,
        ),
        // Thread names (std names the threads it spawns).
        (
            SYS_prctl,
            vec![
                rule(&[eq(0, PR_SET_NAME as u64)?])?,
                rule(&[eq(0, PR_GET_NAME as u64)?])?,
            ],
        ),
        // Descriptor flags, duplicates, and seals on its own memfds; nothing that
        // reaches beyond the process: no lease (whose break would stall whoever opens
        // the file next, the server included), no directory notification, no signal
        // sent to another process on I/O, no pipe resizing, no lock.
        (
            SYS_fcntl,
            [
                F_GETFD,
                F_SETFD,
                F_GETFL,
                F_SETFL,
                F_DUPFD,
                F_DUPFD_CLOEXEC,
                F_ADD_SEALS,
                F_GET_SEALS,
            ]
            .iter()
            .map(|command| rule(&[eq(1, *command as u64)?]))
            .collect::<Result<_, _>>()?,
        ),
        // Waiting and waking (tokio, std's and glibc's locks): the
        // plain operations, private or shared, any clock; no priority-inheritance
        // operation (the kernel code behind them has held exploitable bugs, and
        // nothing in a worker takes a PI lock).
        (
            SYS_futex,
            FUTEX_OPS
                .iter()
                .map(|op| rule(&[masked(1, FUTEX_CMD_MASK, *op as u64)?]))
                .collect::<Result<_, _>>()?,
        ),
        // Memory barriers for this process only (wasmtime syncs instruction caches
        // with them), never the global ones that interrupt every CPU of the machine.
        (
            SYS_membarrier,
            [
                MEMBARRIER_CMD_QUERY,
                MEMBARRIER_CMD_PRIVATE_EXPEDITED,
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE,
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE,
            ]
            .iter()
            .map(|command| rule(&[eq(0, *command as u64)?]))
            .collect::<Result<_, _>>()?,
        ),
        // Memory files of ordinary pages, never huge pages (a pool the whole machine
        // shares).
        (
            SYS_memfd_create,
            vec![rule(&[masked(1, libc::MFD_HUGETLB as u64, 0)?])?],
        ),
        // Reading its own limits (glibc's getrlimit): pid 0, no new limit.
        (SYS_prlimit64, vec![rule(&[eq(0, 0)?, eq64(2, 0)?])?]),
        // File times through a descriptor only (`futimens`: a NULL path). Landlock does
        // not govern times; by path they could be set on any file the worker can name
        // (the sandbox sets a guest's times through a descriptor it opens).
        (SYS_utimensat, vec![rule(&[eq64(1, 0)?])?]),
    ])
}

/// [`Profile::Exec`]: calls that kill the process. Everything else passes this
/// filter (Landlock confines files and TCP; the socket filter, sockets).
#[rustfmt::skip]
const EXEC_KILLED: &[&[c_long]] = &[
    // Reading or steering other processes.
    &[
        SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev, SYS_kcmp,
        SYS_pidfd_getfd, SYS_process_madvise,
    ],
    // Kernel attack surface a package manager never needs.
    &[
        SYS_bpf, SYS_perf_event_open, SYS_userfaultfd, SYS_io_uring_setup,
        SYS_io_uring_enter, SYS_io_uring_register, SYS_add_key, SYS_request_key,
        SYS_keyctl,
    ],
    // Namespaces and mounts: ways to change the file tree Landlock sees, or open files
    // by handle around it.
    &[
        SYS_unshare, SYS_setns, SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot,
        SYS_fsopen, SYS_fsconfig, SYS_fsmount, SYS_fspick, SYS_move_mount,
        SYS_open_tree, SYS_mount_setattr, SYS_name_to_handle_at, SYS_open_by_handle_at,
        SYS_OPEN_TREE_ATTR, SYS_fanotify_init, SYS_fanotify_mark,
    ],
    // The machine itself: modules, kexec, reboot, swap, clocks, names, logs.
    &[
        SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_kexec_load,
        SYS_kexec_file_load, SYS_reboot, SYS_swapon, SYS_swapoff, SYS_acct,
        SYS_quotactl, SYS_settimeofday, SYS_clock_settime, SYS_clock_adjtime,
        SYS_adjtimex, SYS_sethostname, SYS_setdomainname, SYS_syslog, SYS_vhangup,
    ],
    // x86 port I/O.
    #[cfg(target_arch = "x86_64")]
    &[SYS_iopl, SYS_ioperm],
];

/// [`Profile::Exec`]: calls that change a file's metadata by path, which Landlock
/// does not govern (it governs opening, creating, removing and truncating): run as
/// root, they could make any file on the host world-readable, set-user-id, or give it
/// capabilities. Changing ownership or extended attributes fails with EPERM;
/// changing a mode is ignored (answered 0, changing nothing), because pip copies
/// files from a local --find-links folder with Python's `shutil.copy`, which sets
/// the copy's mode by path and fails on an error.
/// (arm64 has only the `*at` forms; x86-64 also the older calls by path.)
#[rustfmt::skip]
const EXEC_METADATA_REFUSED: &[c_long] = &[
    SYS_fchownat, SYS_setxattr, SYS_lsetxattr, SYS_removexattr, SYS_lremovexattr,
    SYS_SETXATTRAT, SYS_REMOVEXATTRAT,
    #[cfg(target_arch = "x86_64")] SYS_chown,
    #[cfg(target_arch = "x86_64")] SYS_lchown,
];
#[rustfmt::skip]
const EXEC_MODE_IGNORED: &[c_long] = &[
    SYS_fchmodat, SYS_FCHMODAT2,
    #[cfg(target_arch = "x86_64")] SYS_chmod,
];

// Calls newer than the libc crate's tables (the same number on every architecture).
const SYS_FCHMODAT2: c_long = 452;
const SYS_SETXATTRAT: c_long = 463;
const SYS_REMOVEXATTRAT: c_long = 466;
const SYS_OPEN_TREE_ATTR: c_long = 467;

/// [`Profile::Exec`]'s calls that kill with some arguments only.
fn exec_conditional() -> Result<Vec<(c_long, Vec<SeccompRule>)>, ConfineError> {
    Ok(vec![
        // Processes may be started, never in a new namespace.
        (
            SYS_clone,
            CLONE_NEW
                .iter()
                .map(|flag| rule(&[masked(0, *flag as u64, *flag as u64)?]))
                .collect::<Result<_, _>>()?,
        ),
        // Typing into the terminal of whoever started Warden.
        (SYS_ioctl, vec![rule(&[eq(1, TIOCSTI)?])?]),
    ])
}

/// [`Profile::Exec`]'s new sockets: TCP or UDP over IPv4 or IPv6 (Landlock checks
/// TCP ports; raw, SCTP, MPTCP and other protocols would go around it). Any other
/// family fails with EACCES: notably Unix sockets (the server's, a database's, a
/// container runtime's) and netlink (as root, it changes routes and addresses;
/// glibc's resolver, which asks it which addresses exist, does without).
fn exec_sockets() -> Result<Vec<SeccompRule>, ConfineError> {
    let mut allowed = Vec::new();
    for family in [AF_INET, AF_INET6] {
        for (kind, protocol) in [
            (SOCK_STREAM, 0),
            (SOCK_STREAM, IPPROTO_TCP),
            (SOCK_DGRAM, 0),
            (SOCK_DGRAM, IPPROTO_UDP),
        ] {
            allowed.push(rule(&[
                eq(0, family as u64)?,
                masked(1, 0xf, kind as u64)?,
                eq(2, protocol as u64)?,
            ])?);
        }
    }
    Ok(allowed)
}

/// Every `CLONE_NEW*` flag `clone` takes (`CLONE_NEWTIME` only exists for `clone3`
/// and `unshare`; in `clone` its bit is part of the exit signal).
const CLONE_NEW: [c_int; 7] = [
    CLONE_NEWNS,
    CLONE_NEWCGROUP,
    CLONE_NEWUTS,
    CLONE_NEWIPC,
    CLONE_NEWUSER,
    CLONE_NEWPID,
    CLONE_NEWNET,
];

fn clone_new_flags() -> u64 {
    CLONE_NEW.iter().fold(0, |all, flag| all | *flag as u64)
}

/// Builds and installs the filters of `profile`. Several filters stack: the kernel
/// runs them all and takes the strictest answer (kill, then errno, then allow).
/// Everything is built before the first is installed.
pub(super) fn seccomp(profile: Profile) -> Result<(), ConfineError> {
    for program in filters(profile, std::process::id())? {
        seccompiler::apply_filter_all_threads(&program).map_err(seccomp_error)?;
    }
    Ok(())
}

/// The BPF programs of `profile`, for a process whose id is `pid`.
fn filters(profile: Profile, pid: u32) -> Result<Vec<BpfProgram>, ConfineError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(seccomp_error)?;
    let table = |groups: &[&[c_long]], conditional: Vec<(c_long, Vec<SeccompRule>)>| {
        let mut rules: BTreeMap<c_long, Vec<SeccompRule>> = groups
            .iter()
            .flat_map(|calls| calls.iter().map(|nr| (*nr, Vec::new())))
            .collect();
        for (nr, conditions) in conditional {
            // A call both in a table and in its conditional list would lose one.
            if rules.insert(nr, conditions).is_some() {
                return Err(seccomp_error(format!("call {nr} is listed twice")));
            }
        }
        Ok(rules)
    };
    let main = match profile {
        Profile::Worker => SeccompFilter::new(
            table(WORKER_ALLOWED, worker_conditional(pid)?)?,
            SeccompAction::KillProcess,
            SeccompAction::Allow,
            arch,
        ),
        Profile::Exec | Profile::Build => SeccompFilter::new(
            table(EXEC_KILLED, exec_conditional()?)?,
            SeccompAction::Allow,
            SeccompAction::KillProcess,
            arch,
        ),
    };
    // clone3's flags are behind a pointer: ENOSYS makes glibc use clone instead.
    let mut programs = vec![compile(SeccompFilter::new(
        [(SYS_clone3, Vec::new())].into(),
        SeccompAction::Allow,
        SeccompAction::Errno(ENOSYS as u32),
        arch,
    ))?];
    if profile != Profile::Worker {
        let answered = |calls: &[c_long], errno: i32| {
            compile(SeccompFilter::new(
                calls.iter().map(|nr| (*nr, Vec::new())).collect(),
                SeccompAction::Allow,
                SeccompAction::Errno(errno as u32),
                arch,
            ))
        };
        // A build's view of the machine is read-only but its work folder (`view`).
        if profile == Profile::Exec {
            programs.push(answered(EXEC_METADATA_REFUSED, EPERM)?);
            programs.push(answered(EXEC_MODE_IGNORED, 0)?);
        }
        programs.push(only_for(
            SYS_socket,
            compile(SeccompFilter::new(
                [(SYS_socket, exec_sockets()?)].into(),
                SeccompAction::Errno(EACCES as u32),
                SeccompAction::Allow,
                arch,
            ))?,
        ));
    }
    // Last, because installing a filter is itself a call (prctl, seccomp) that the
    // worker's allow-list does not allow.
    programs.push(other_abis_killed(compile(main)?));
    Ok(programs)
}

fn compile(
    filter: Result<SeccompFilter, seccompiler::BackendError>,
) -> Result<BpfProgram, ConfineError> {
    let filter = filter.map_err(seccomp_error)?;
    BpfProgram::try_from(filter).map_err(seccomp_error)
}

// Classic BPF, for the two checks seccompiler does not write.
const BPF_LOAD_NR: u16 = (BPF_LD | BPF_W | BPF_ABS) as u16;
const BPF_JUMP_EQ: u16 = (BPF_JMP | BPF_JEQ | BPF_K) as u16;
const BPF_JUMP_GE: u16 = (BPF_JMP | BPF_JGE | BPF_K) as u16;
const BPF_RETURN: u16 = (BPF_RET | BPF_K) as u16;
/// Offset of the call number in `struct seccomp_data`.
const NR_OFFSET: u32 = 0;
/// x86-64's x32 ABI marks its call numbers with this bit; they reach the same
/// kernel functions under other numbers, so a filter must not let them through.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `program`, preceded by: a call number with the x32 bit kills the process.
/// (Calls of another architecture, e.g. i386's `int 0x80`, are killed by the
/// architecture check seccompiler puts at the start of every program.)
fn other_abis_killed(program: BpfProgram) -> BpfProgram {
    let mut out = vec![
        stmt(BPF_LOAD_NR, NR_OFFSET),
        jump(BPF_JUMP_GE, X32_SYSCALL_BIT, 0, 1),
        stmt(BPF_RETURN, SECCOMP_RET_KILL_PROCESS),
    ];
    out.extend(program);
    out
}

/// `program`, applied to call `nr` only: every other call is allowed by it, so it can
/// be written as an allow-list of `nr`'s arguments.
fn only_for(nr: c_long, program: BpfProgram) -> BpfProgram {
    let mut out = vec![
        stmt(BPF_LOAD_NR, NR_OFFSET),
        jump(BPF_JUMP_EQ, nr as u32, 1, 0),
        stmt(BPF_RETURN, SECCOMP_RET_ALLOW),
    ];
    out.extend(program);
    out
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn rule(conditions: &[SeccompCondition]) -> Result<SeccompRule, ConfineError> {
    SeccompRule::new(conditions.to_vec()).map_err(seccomp_error)
}

/// Argument `arg` (32 bits) equals `value`.
fn eq(arg: u8, value: u64) -> Result<SeccompCondition, ConfineError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
        .map_err(seccomp_error)
}

/// Argument `arg` (64 bits, a pointer) equals `value`.
fn eq64(arg: u8, value: u64) -> Result<SeccompCondition, ConfineError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, SeccompCmpOp::Eq, value)
        .map_err(seccomp_error)
}

/// Argument `arg` (64 bits), masked with `mask`, equals `value`.
fn masked(arg: u8, mask: u64, value: u64) -> Result<SeccompCondition, ConfineError> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(mask),
        value,
    )
    .map_err(seccomp_error)
}

fn seccomp_error(e: impl std::fmt::Display) -> ConfineError {
    ConfineError::Seccomp {
        reason: e.to_string(),
    }
}

/// The programs of every profile, for the tests: they must compile.
#[cfg(test)]
pub(super) fn all_filters() -> Result<Vec<BpfProgram>, ConfineError> {
    let mut all = filters(Profile::Worker, std::process::id())?;
    all.extend(filters(Profile::Exec, std::process::id())?);
    all.extend(filters(Profile::Build, std::process::id())?);
    Ok(all)
}
