//! The Landlock part of [`Confinement::apply`](super::Confinement::apply): which files
//! the process may open, create, remove or truncate, which TCP ports it may connect to,
//! and the scopes (signals, abstract Unix sockets) it is kept within.

use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
    Scope,
};

use super::{ConfineError, Confinement, Folders, Profile};

/// The Landlock ABI whose features Warden requires and has been tested with: files
/// (with truncate and device ioctl), TCP bind and connect, and the scopes.
const ABI_REQUIRED: ABI = ABI::V6;

/// A ruleset handling every right of [`ABI_REQUIRED`], or an error if the kernel
/// cannot enforce one of them.
pub(super) fn ruleset() -> Result<RulesetCreated, ConfineError> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI_REQUIRED))
        .and_then(|r| r.handle_access(AccessNet::from_all(ABI_REQUIRED)))
        .and_then(|r| r.scope(Scope::from_all(ABI_REQUIRED)))
        .and_then(|r| r.create())
        .map_err(landlock_error)
}

/// Applies the Landlock part and returns the ABI the kernel enforces.
pub(super) fn landlock(c: &Confinement, folders: &Folders<'_>) -> Result<u32, ConfineError> {
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    // Not MakeChar or MakeBlock: a process running as root could otherwise create a
    // device node of the host's disk in its writable folder and read the disk
    // through it. Not MakeFifo, MakeSock or IoctlDev either: none is needed.
    let write = read
        | AccessFs::WriteFile
        | AccessFs::RemoveDir
        | AccessFs::RemoveFile
        | AccessFs::MakeDir
        | AccessFs::MakeReg
        | AccessFs::MakeSym
        | AccessFs::Refer
        | AccessFs::Truncate;
    let (read, write) = match c.profile {
        Profile::Worker => (read, write),
        Profile::Exec => (read | AccessFs::Execute, write),
        // A build runs the programs it compiles, and make's jobserver may be a FIFO.
        Profile::Build => (
            read | AccessFs::Execute,
            write | AccessFs::Execute | AccessFs::MakeFifo,
        ),
    };
    let mut rules = ruleset()?;
    for path in &c.read_only {
        if path.exists() {
            rules = grant(rules, path, read)?;
        }
    }
    for path in &c.read_write {
        rules = grant(rules, path, write)?;
    }
    for (fds, access) in [(&folders.read_only, read), (&folders.read_write, write)] {
        for fd in fds {
            rules =
                rules
                    .add_rule(PathBeneath::new(*fd, access))
                    .map_err(|e| ConfineError::Path {
                        path: "an open folder".into(),
                        reason: e.to_string(),
                    })?;
        }
    }
    for port in &c.tcp_connect {
        rules = rules
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(landlock_error)?;
    }
    let status = rules.restrict_self().map_err(landlock_error)?;
    if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
        return Err(ConfineError::Landlock {
            reason: format!("not fully enforced: {status:?}"),
        });
    }
    match status.landlock {
        // The crate knows ABIs up to the kernel's (or a newer kernel's up to its own).
        LandlockStatus::Available { effective_abi, .. } => {
            Ok(effective_abi.to_string().parse().unwrap_or(6))
        }
        other => Err(ConfineError::Landlock {
            reason: format!("{other:?}"),
        }),
    }
}

/// Adds `access` beneath `path` (a file gets only the rights that apply to files).
fn grant(
    rules: RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<RulesetCreated, ConfineError> {
    let path_error = |reason: String| ConfineError::Path {
        path: path.to_owned(),
        reason,
    };
    let fd = PathFd::new(path).map_err(|e| path_error(e.to_string()))?;
    let access = if path.is_dir() {
        access
    } else {
        access & AccessFs::from_file(ABI_REQUIRED)
    };
    rules
        .add_rule(PathBeneath::new(fd, access))
        .map_err(|e| path_error(e.to_string()))
}

fn landlock_error(e: landlock::RulesetError) -> ConfineError {
    ConfineError::Landlock {
        reason: e.to_string(),
    }
}
