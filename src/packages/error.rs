//! What can go wrong with a tool's packages ([`PackagesError`]), and whose fault each
//! is ([`Fault`]): the requirements', the index's or this machine's.

use std::path::PathBuf;

use super::MAX_REQUIREMENTS;
use crate::sandbox::Flavour;

/// Why requirements could not be declared, resolved or installed. Nothing is stored or
/// left half-written when one of these is returned.
#[derive(Debug, thiserror::Error)]
pub enum PackagesError {
    /// A requirement is not valid PEP 508, or is a direct URL.
    #[error("invalid requirement {requirement:?}: {reason}")]
    InvalidRequirement {
        /// As given.
        requirement: String,
        /// Why.
        reason: String,
    },
    /// More than [`MAX_REQUIREMENTS`] requirements.
    #[error("{count} requirements: at most {MAX_REQUIREMENTS} are accepted")]
    TooMany {
        /// How many were given.
        count: usize,
    },
    /// The source's `# /// script` block is malformed.
    #[error("the `# /// script` block (PEP 723) at line {line}: {reason}")]
    ScriptMetadata {
        /// Line of the block's opening.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A requirement names a bundled package at a version the runtime does not have.
    #[error(
        "{requirement} cannot be met: the runtime bundles {name} {bundled}, and bundled \
         packages cannot be replaced; ask for a range that includes {bundled}, or drop \
         the requirement"
    )]
    BundledConflict {
        /// The requirement.
        requirement: String,
        /// The package.
        name: String,
        /// The runtime's version of it.
        bundled: String,
    },
    /// A requirement names a package only the other runtime bundles.
    #[error(
        "{requirement} cannot be met on the {flavour} runtime, which this tool needs for \
         {why}: {name} is a native package bundled with the {other} runtime only, and no \
         runtime has both; split the tool in two, or drop one of the requirements"
    )]
    OtherRuntime {
        /// The requirement.
        requirement: String,
        /// The package.
        name: String,
        /// The runtime the tool runs on.
        flavour: Flavour,
        /// The runtime that bundles the package.
        other: Flavour,
        /// What made the tool need its runtime.
        why: String,
    },
    /// A requirement needs another runtime than the one the tool asks for.
    #[error(
        "{requirement} needs the {needs} runtime (it needs a native extension built into \
         that runtime only: pydantic-core, jiter, rpds-py, orjson or msgpack), not the {runs_on} \
         one it would run on here: let Warden choose the runtime (no --runtime, no \"runtime\" \
         in the spec), or drop the requirement (pydantic<2 stays on the standard runtime)"
    )]
    NeedsRuntime {
        /// The requirement.
        requirement: String,
        /// The runtime it needs.
        needs: Flavour,
        /// The runtime the tool asked for.
        runs_on: Flavour,
    },
    /// pip found no wheel the guest can load.
    #[error(
        "no pure-Python wheel matches {requirement}: the package (or this version of it) has \
         only native wheels, or none at all, and the guest (CPython on WASI) loads only \
         pure-Python wheels (py3-none-any) besides the native extensions its runtime has \
         built in (`warden runtime info`, `--runtime pydantic`); choose another version or \
         package"
    )]
    NoPureWheel {
        /// The requirement pip could not meet.
        requirement: String,
    },
    /// The only matching files are source distributions, which are never used.
    #[error(
        "{requirement} is published only as a source distribution ({}) and Warden refuses \
         source distributions: installing one runs its build code (setup.py or a build \
         backend) on this machine; ask for a version that ships a pure-Python wheel \
         (py3-none-any), or build the wheel elsewhere and pass its folder with --find-links",
        files.join(", ")
    )]
    SourceOnly {
        /// The requirement pip could not meet.
        requirement: String,
        /// The source distributions pip saw for it, by file name.
        files: Vec<String>,
    },
    /// pip could not be confined, and Warden does not run it unconfined.
    #[error(
        "pip cannot run confined on this machine ({reason}); Warden does not run pip \
         unconfined, so tools with packages cannot be installed here: run Warden on \
         Linux 6.12 or later, with Landlock enabled and seccomp"
    )]
    Unconfined {
        /// Why.
        reason: String,
    },
    /// A file pip produced is not a pure-Python wheel.
    #[error("{file} cannot be used: {reason}")]
    NotPure {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// A package the requirements need (not one they name) has no file the guest can
    /// load, so pip found no versions that fit and called it a conflict.
    #[error(
        "the requirements need {packages}, which has no pure-Python wheel (only native \
         wheels or a source distribution), and the guest (CPython on WASI) loads only \
         pure-Python wheels besides the native extensions its runtime has built in \
         (`warden runtime info`, `--runtime pydantic`); choose packages or versions that \
         do not need {packages}"
    )]
    NeedsNative {
        /// The packages (normalized names, comma-separated).
        packages: String,
    },
    /// The requirements conflict.
    #[error(
        "the requirements conflict with each other or with the runtime's bundled packages:\n{detail}"
    )]
    Conflict {
        /// pip's explanation.
        detail: String,
    },
    /// The index could not be reached.
    #[error(
        "the package index cannot be reached:\n{detail}\nto install offline, pass \
         --find-links DIR --no-index with a wheelhouse made by `warden packages fetch`"
    )]
    IndexUnreachable {
        /// pip's output.
        detail: String,
    },
    /// With no index, a locked wheel is in none of the `--find-links` folders.
    #[error(
        "the lock needs {wheel}, which none of the --find-links folders ({}) holds, and \
         --no-index allows no other source: add it to the wheelhouse (`warden packages \
         fetch` on a machine that reaches the index writes every wheel of a lock)",
        folders.join(", ")
    )]
    MissingWheel {
        /// The wheel's file name.
        wheel: String,
        /// The folders searched.
        folders: Vec<String>,
    },
    /// A wheel's bytes differ from the lock's SHA-256.
    #[error("a wheel does not match the SHA-256 in its lock; nothing was installed:\n{detail}")]
    HashMismatch {
        /// Which wheel, and the hashes.
        detail: String,
    },
    /// pip failed for another reason.
    #[error("pip failed while {action}:\n{detail}")]
    Pip {
        /// What pip was doing.
        action: String,
        /// The end of its error output.
        detail: String,
    },
    /// A requirement set is not among an installed bundle's shipped locks, and this
    /// machine cannot resolve it (no pip, or pip cannot run confined).
    #[error(
        "{requirements}: no lock for these requirements is shipped in {} (a bundle ships \
         the locks and wheels of the tools in its `tools/` folder), and this machine cannot \
         resolve them ({reason}): put the tool in the --tools folder of a new bundle \
         (`warden bundle create --tools DIR`), or drop the requirements",
        bundle.display()
    )]
    NotShipped {
        /// The requirements, comma-separated.
        requirements: String,
        /// The bundle's `packages` folder.
        bundle: PathBuf,
        /// Why this machine cannot resolve them.
        reason: String,
    },
    /// No pip on this machine.
    #[error(
        "`python3 -m pip` is not available, and Warden resolves packages with it: install \
         pip (e.g. `apt-get install python3-pip`)"
    )]
    NoPip,
    /// A wheel would write outside its folder, holds a symlink, fails its RECORD or
    /// passes a cap.
    #[error("refusing to install {wheel}: {reason}")]
    UnsafeWheel {
        /// The wheel's file name.
        wheel: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `--find-links` folder is unusable.
    #[error("--find-links {}: {reason}", path.display())]
    FindLinks {
        /// The folder.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The runtime's package list could not be read.
    #[error("cannot list the runtime's bundled packages in {}: {reason}; run `warden runtime verify`", path.display())]
    Runtime {
        /// The stdlib zip.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Whose fault a [`PackagesError`] is, for the surfaces that report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A requirement or the PEP 723 block is malformed, or there are too many.
    InvalidRequirements,
    /// The requirements cannot be met (bundled version, no pure wheel, conflict).
    Unresolvable,
    /// A wheel is unsafe or differs from its lock.
    UnsafePackage,
    /// The package index or pip failed.
    Index,
    /// This machine: no pip, an unusable folder, an I/O error.
    Host,
}

impl PackagesError {
    /// Whose fault this is.
    pub fn fault(&self) -> Fault {
        use PackagesError as P;
        match self {
            P::InvalidRequirement { .. } | P::ScriptMetadata { .. } | P::TooMany { .. } => {
                Fault::InvalidRequirements
            }
            P::BundledConflict { .. }
            | P::OtherRuntime { .. }
            | P::NeedsRuntime { .. }
            | P::NoPureWheel { .. }
            | P::NeedsNative { .. }
            | P::SourceOnly { .. }
            | P::NotPure { .. }
            | P::NotShipped { .. }
            | P::Conflict { .. } => Fault::Unresolvable,
            P::UnsafeWheel { .. } | P::HashMismatch { .. } => Fault::UnsafePackage,
            P::IndexUnreachable { .. } | P::Pip { .. } => Fault::Index,
            P::NoPip
            | P::Unconfined { .. }
            | P::FindLinks { .. }
            | P::MissingWheel { .. }
            | P::Runtime { .. }
            | P::Io { .. } => Fault::Host,
        }
    }

    /// Whether the requirements themselves are at fault (bad, unresolvable or unsafe),
    /// as opposed to this machine or the index.
    pub fn is_input_error(&self) -> bool {
        !matches!(self.fault(), Fault::Index | Fault::Host)
    }
}
