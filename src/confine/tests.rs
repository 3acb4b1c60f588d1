//! The confinement, tried in child processes. Landlock and seccomp are irreversible and
//! the test harness runs each test on a thread of its own, so every case re-executes this
//! test binary as a child that confines itself before the harness starts (a constructor
//! run while the process has one thread), tries one operation and prints what happened.
//! Every denial is paired with the same operation run unconfined, which must succeed, so
//! that a denial cannot come from a broken operation; with the confinement removed, every
//! denial test fails. The child's side is in [`child`].

use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Confinement, Profile, exec_command, parse_exec_args};

mod child;

use child::{CHILD, Feature, Line, Op, Probe};

/// What the parent saw.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// Confined (or not asked to be), and the operation worked.
    Worked,
    /// The operation failed with this error.
    Failed(String),
    /// The child was confined, then killed by this signal during the operation.
    Killed(i32),
    /// `apply` refused, with this error; the operation then gave `op`.
    Refused {
        error: String,
        op: Result<(), String>,
    },
}

/// Runs `op` in a child, confined by `confinement` if given.
fn child(confinement: Option<&Confinement>, op: &Op, second_thread: bool) -> Seen {
    child_on(confinement, op, second_thread, None)
}

/// As [`child`], on a kernel without `hide`.
fn child_on(
    confinement: Option<&Confinement>,
    op: &Op,
    second_thread: bool,
    hide: Option<Feature>,
) -> Seen {
    let probe = Probe {
        second_thread,
        hide,
        confinement: confinement.cloned(),
        op: op.clone(),
    };
    let out = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, serde_json::to_string(&probe).unwrap())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = || format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Line> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {}", context())))
        .collect();
    match (lines.as_slice(), out.status.signal()) {
        ([Line::Applied(None)], Some(signal)) => Seen::Killed(signal),
        ([Line::Applied(None), Line::Op(Ok(()))], None) => Seen::Worked,
        ([Line::Applied(None), Line::Op(Err(e))], None) => Seen::Failed(e.clone()),
        ([Line::Applied(Some(error)), Line::Op(op)], None) => Seen::Refused {
            error: error.clone(),
            op: op.clone(),
        },
        _ => panic!("the child ended with {}: {}", out.status, context()),
    }
}

/// Asserts that `op` works unconfined (the control) and is denied under `confinement`:
/// by Landlock or the socket filter (an error) or by the seccomp allow-list (SIGSYS).
fn assert_denied(confinement: &Confinement, op: Op) -> Seen {
    assert_eq!(child(None, &op, false), Seen::Worked, "control: {op:?}");
    let seen = child(Some(confinement), &op, false);
    assert!(
        matches!(seen, Seen::Failed(_) | Seen::Killed(libc::SIGSYS)),
        "{:?} under {:?}: {seen:?}",
        op,
        confinement.profile
    );
    seen
}

fn assert_works(confinement: &Confinement, op: Op) {
    assert_eq!(
        child(Some(confinement), &op, false),
        Seen::Worked,
        "{op:?} under {:?}",
        confinement.profile
    );
}

/// A folder with a read-only tree, a read-write tree and a secret outside both; a TCP
/// listener whose port is granted, one whose port is not, and a Unix socket listener.
struct Fixture {
    dir: tempfile::TempDir,
    granted: TcpListener,
    other: TcpListener,
    _unix: UnixListener,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["ro", "rw", "outside"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("ro/file.txt"), "read-only").unwrap();
        std::fs::write(dir.path().join("outside/secret.txt"), "secret").unwrap();
        let unix = UnixListener::bind(dir.path().join("outside/server.sock")).unwrap();
        Fixture {
            granted: TcpListener::bind("127.0.0.1:0").unwrap(),
            other: TcpListener::bind("127.0.0.1:0").unwrap(),
            _unix: unix,
            dir,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn port(listener: &TcpListener) -> u16 {
        listener.local_addr().unwrap().port()
    }

    /// The confinement of `profile`: `ro` read-only (with the system's programs and
    /// libraries for `Exec`, so that it can execute one), `rw` read-write, the granted
    /// port.
    fn confinement(&self, profile: Profile) -> Confinement {
        let mut read_only = vec![self.path("ro")];
        if profile != Profile::Worker {
            read_only
                .extend(["/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache"].map(PathBuf::from));
        }
        Confinement {
            read_only,
            read_write: vec![self.path("rw")],
            tcp_connect: vec![Fixture::port(&self.granted)],
            profile,
            narrow_view: false,
        }
    }
}

const PROFILES: [Profile; 3] = [Profile::Worker, Profile::Exec, Profile::Build];

#[test]
fn files_outside_the_granted_trees_cannot_be_read() {
    let f = Fixture::new();
    for profile in PROFILES {
        let c = f.confinement(profile);
        assert_works(&c, Op::Read(f.path("ro/file.txt")));
        assert_works(&c, Op::List(f.path("rw")));
        assert_denied(&c, Op::Read(f.path("outside/secret.txt")));
        assert_denied(&c, Op::List(f.path("outside")));
    }
}

#[test]
fn only_read_write_trees_can_be_written() {
    let f = Fixture::new();
    for profile in PROFILES {
        let c = f.confinement(profile);
        assert_works(&c, Op::Write(f.path("rw/new.txt")));
        assert_works(&c, Op::Write(f.path("rw/new.txt")));
        assert_works(&c, Op::MakeDir(f.path("rw/sub")));
        assert_denied(&c, Op::MakeDir(f.path("ro/sub")));
        // The controls write too: check the content after each denial.
        for target in ["ro/file.txt", "ro/new.txt", "outside/new.txt"] {
            let path = f.path(target);
            let before = std::fs::read(&path).ok();
            let _ = std::fs::remove_file(&path);
            assert_eq!(child(None, &Op::Write(path.clone()), false), Seen::Worked);
            match &before {
                Some(b) => std::fs::write(&path, b).unwrap(),
                None => std::fs::remove_file(&path).unwrap(),
            }
            let seen = child(Some(&c), &Op::Write(path.clone()), false);
            assert!(matches!(seen, Seen::Failed(_)), "{target}: {seen:?}");
            assert_eq!(std::fs::read(&path).ok(), before, "{target}");
        }
    }
}

/// Whether this process may change owners and create devices (the controls need it).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

#[test]
fn modes_owners_and_device_nodes_stay_as_they_are() {
    let f = Fixture::new();
    let secret = f.path("outside/secret.txt");
    let mode = |p: &Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o7777
    };
    let owner = |p: &Path| std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(p).unwrap());
    let before = (mode(&secret), owner(&secret));
    assert_eq!(child(None, &Op::Chmod(secret.clone()), false), Seen::Worked);
    assert_eq!(mode(&secret), 0o4777, "control");
    std::fs::set_permissions(
        &secret,
        std::os::unix::fs::PermissionsExt::from_mode(before.0),
    )
    .unwrap();
    if is_root() {
        assert_eq!(child(None, &Op::Chown(secret.clone()), false), Seen::Worked);
        std::os::unix::fs::chown(&secret, Some(before.1), None).unwrap();
        assert_eq!(
            child(None, &Op::MakeDevice(f.path("rw/null")), false),
            Seen::Worked
        );
        std::fs::remove_file(f.path("rw/null")).unwrap();
    }
    // Exec: a mode change is ignored (pip's copies set modes), an owner change refused,
    // a device node refused even in a writable folder.
    let exec = f.confinement(Profile::Exec);
    assert_eq!(
        child(Some(&exec), &Op::Chmod(secret.clone()), false),
        Seen::Worked
    );
    assert!(matches!(
        child(Some(&exec), &Op::Chown(secret.clone()), false),
        Seen::Failed(_)
    ));
    let seen = child(Some(&exec), &Op::MakeDevice(f.path("rw/null")), false);
    assert!(matches!(seen, Seen::Failed(_)), "{seen:?}");
    // Worker: none of these calls is allowed.
    let worker = f.confinement(Profile::Worker);
    for op in [
        Op::Chmod(secret.clone()),
        Op::Chown(secret.clone()),
        Op::MakeDevice(f.path("rw/null")),
    ] {
        assert_eq!(
            child(Some(&worker), &op, false),
            Seen::Killed(libc::SIGSYS),
            "{op:?}"
        );
    }
    assert_eq!((mode(&secret), owner(&secret)), before);
    assert!(!f.path("rw/null").exists());
}

#[test]
fn a_build_changes_modes_only_in_its_work_folder_and_runs_what_it_wrote() {
    let f = Fixture::new();
    let build = f.confinement(Profile::Build);
    let secret = f.path("outside/secret.txt");
    let ro = f.path("ro/file.txt");
    let before = |p: &Path| std::fs::metadata(p).unwrap();
    let (secret_before, ro_before) = (before(&secret), before(&ro));
    // Outside its work folder, through Landlock's gap (modes and owners by path): the
    // read-only view refuses, whether the file is granted for reading or not at all.
    for path in [&secret, &ro] {
        for op in [Op::Chmod(path.clone()), Op::Chown(path.clone())] {
            let seen = child(Some(&build), &op, false);
            assert!(
                matches!(&seen, Seen::Failed(e) if e.contains("Read-only file system") || e.contains("not permitted")),
                "{op:?}: {seen:?}"
            );
        }
    }
    for (path, was) in [(&secret, secret_before), (&ro, ro_before)] {
        let now = before(path);
        assert_eq!(
            (now.permissions(), std::os::unix::fs::MetadataExt::uid(&now)),
            (was.permissions(), std::os::unix::fs::MetadataExt::uid(&was))
        );
    }
    // In it, a mode changes (configure scripts `chmod +x` what they write), and what it
    // wrote runs; a device node is still refused.
    let script = f.path("rw/tool");
    std::fs::copy("/bin/true", &script).unwrap();
    assert_works(&build, Op::Chmod(script.clone()));
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&before(&script).permissions()) & 0o777,
        0o777
    );
    assert_works(&build, Op::Exec(script));
    let seen = child(Some(&build), &Op::MakeDevice(f.path("rw/null")), false);
    assert!(matches!(seen, Seen::Failed(_)), "{seen:?}");
    // The host's own view is unchanged: the namespaces were the build's.
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&f.path("rw").display().to_string())
    );
}

#[test]
fn tcp_connects_only_to_granted_ports_and_a_worker_opens_no_socket() {
    let f = Fixture::new();
    let granted = Op::TcpConnect(Fixture::port(&f.granted));
    let other = Op::TcpConnect(Fixture::port(&f.other));
    for profile in [Profile::Exec, Profile::Build] {
        let exec = f.confinement(profile);
        assert_works(&exec, granted.clone());
        assert!(matches!(
            assert_denied(&exec, other.clone()),
            Seen::Failed(_)
        ));
    }
    let worker = f.confinement(Profile::Worker);
    assert_eq!(assert_denied(&worker, granted), Seen::Killed(libc::SIGSYS));
    assert_eq!(assert_denied(&worker, other), Seen::Killed(libc::SIGSYS));
}

#[test]
fn unix_sockets_cannot_be_opened() {
    let f = Fixture::new();
    let op = Op::UnixConnect(f.path("outside/server.sock"));
    for profile in [Profile::Exec, Profile::Build] {
        let seen = assert_denied(&f.confinement(profile), op.clone());
        assert!(
            matches!(&seen, Seen::Failed(e) if e.contains("Permission denied")),
            "{seen:?}"
        );
    }
    assert_eq!(
        assert_denied(&f.confinement(Profile::Worker), op),
        Seen::Killed(libc::SIGSYS)
    );
}

#[test]
fn a_worker_cannot_exec_and_an_exec_helper_only_from_read_only_trees() {
    let f = Fixture::new();
    let program = PathBuf::from("/bin/true");
    assert_eq!(
        assert_denied(&f.confinement(Profile::Worker), Op::Exec(program.clone())),
        Seen::Killed(libc::SIGSYS)
    );
    let exec = f.confinement(Profile::Exec);
    assert_works(&exec, Op::Exec(program.clone()));
    // A program written into a read-write tree cannot be executed.
    let copy = f.path("rw/true");
    std::fs::copy(&program, &copy).unwrap();
    assert!(matches!(
        assert_denied(&exec, Op::Exec(copy)),
        Seen::Failed(_)
    ));
}

#[test]
fn the_parent_cannot_be_signalled() {
    let f = Fixture::new();
    for profile in [Profile::Exec, Profile::Build] {
        assert!(matches!(
            assert_denied(&f.confinement(profile), Op::SignalParent),
            Seen::Failed(_)
        ));
    }
    assert_eq!(
        assert_denied(&f.confinement(Profile::Worker), Op::SignalParent),
        Seen::Killed(libc::SIGSYS)
    );
}

#[test]
fn a_confined_worker_can_start_threads() {
    let f = Fixture::new();
    assert_works(&f.confinement(Profile::Worker), Op::Thread);
}

#[test]
fn a_confined_worker_runs_webassembly_as_the_sandbox_does() {
    let f = Fixture::new();
    assert_eq!(child(None, &Op::Wasmtime, false), Seen::Worked, "control");
    assert_works(&f.confinement(Profile::Worker), Op::Wasmtime);
}

#[test]
fn apply_refuses_a_multithreaded_process_and_leaves_it_unconfined() {
    let f = Fixture::new();
    for profile in PROFILES {
        let seen = child(
            Some(&f.confinement(profile)),
            &Op::Read(f.path("outside/secret.txt")),
            true,
        );
        let Seen::Refused { error, op } = seen else {
            panic!("{profile:?}: {seen:?}");
        };
        assert!(error.contains("2 threads"), "{error}");
        assert_eq!(op, Ok(()), "nothing was applied");
    }
}

#[test]
fn without_landlock_or_seccomp_apply_refuses_instead_of_confining_partly() {
    let f = Fixture::new();
    let op = Op::Read(f.path("outside/secret.txt"));
    for profile in PROFILES {
        let c = f.confinement(profile);
        let seen = child_on(Some(&c), &op, false, Some(Feature::Landlock));
        let Seen::Refused { error, op: result } = seen else {
            panic!("{profile:?}: {seen:?}");
        };
        assert!(error.contains("Landlock ABI 6"), "{error}");
        assert_eq!(result, Ok(()), "nothing was applied");
        let seen = child_on(Some(&c), &op, false, Some(Feature::Seccomp));
        let Seen::Refused { error, .. } = seen else {
            panic!("{profile:?}: {seen:?}");
        };
        assert!(error.contains("seccomp"), "{error}");
    }
}

#[test]
fn both_profiles_filters_compile() {
    let programs = super::filters::all_filters().unwrap();
    assert!(programs.iter().all(|p| !p.is_empty() && p.len() < 4096));
}

#[test]
fn the_exec_command_carries_the_policy() {
    let c = Confinement {
        read_only: vec!["/usr".into()],
        read_write: vec!["/tmp/x".into()],
        tcp_connect: vec![443],
        profile: Profile::Exec,
        narrow_view: false,
    };
    let cmd = exec_command(Path::new("/bin/warden"), &c, Path::new("/usr/bin/python3")).unwrap();
    let mut args: Vec<_> = cmd.get_args().map(ToOwned::to_owned).collect();
    assert_eq!(args.remove(0), super::EXEC_SUBCOMMAND);
    args.push("-V".into());
    let (parsed, program, rest) = parse_exec_args(args).unwrap();
    assert_eq!(parsed, c);
    assert_eq!(program, Path::new("/usr/bin/python3"));
    assert_eq!(rest, ["-V"]);
    assert!(parse_exec_args(vec!["--policy".into(), "{\"bogus\":1}".into()]).is_err());
}
