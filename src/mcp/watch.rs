//! What the tool files look like now, to tell when they changed: each file's name,
//! size, modification time and content hash. Polled (about once a second) rather than
//! watched through the OS, so it behaves the same everywhere, network folders included.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use super::catalog::{CatalogError, Sources};

/// Files larger than this are compared by size and time only (no tool is this big).
const MAX_HASHED: u64 = 8 * 1024 * 1024;

/// One file as it was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    sha256: Option<[u8; 32]>,
}

/// Every input file of a catalog as it was seen; a missing file is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Fingerprint(BTreeMap<PathBuf, Stamp>);

impl Fingerprint {
    /// The sources' tool files and `warden.toml`, now. Blocking.
    pub(super) fn of(sources: &Sources) -> Result<Fingerprint, CatalogError> {
        let mut files = sources.tool_files()?;
        files.extend(sources.config_file());
        let mut stamps = BTreeMap::new();
        for path in files {
            // A file removed between listing and reading is simply absent.
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let sha256 = (meta.len() <= MAX_HASHED)
                .then(|| std::fs::read(&path).ok())
                .flatten()
                .map(|bytes| Sha256::digest(&bytes).into());
            stamps.insert(
                path,
                Stamp {
                    len: meta.len(),
                    modified: meta.modified().ok(),
                    sha256,
                },
            );
        }
        Ok(Fingerprint(stamps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_or_changed_or_removed_file_changes_the_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let sources = Sources::Folder(dir.path().to_owned());
        let empty = Fingerprint::of(&sources).unwrap();
        assert_eq!(empty, Fingerprint::of(&sources).unwrap());

        std::fs::write(dir.path().join("a.py"), "def a(): pass\n").unwrap();
        let one = Fingerprint::of(&sources).unwrap();
        assert_ne!(one, empty);
        assert_eq!(one, Fingerprint::of(&sources).unwrap());

        // Same size, different content.
        std::fs::write(dir.path().join("a.py"), "def b(): pass\n").unwrap();
        assert_ne!(Fingerprint::of(&sources).unwrap(), one);

        std::fs::write(dir.path().join("warden.toml"), "").unwrap();
        let with_config = Fingerprint::of(&sources).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a tool").unwrap();
        assert_eq!(Fingerprint::of(&sources).unwrap(), with_config);

        std::fs::remove_file(dir.path().join("a.py")).unwrap();
        std::fs::remove_file(dir.path().join("warden.toml")).unwrap();
        assert_eq!(Fingerprint::of(&sources).unwrap(), empty);
    }
}
