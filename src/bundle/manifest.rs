//! The bundle's manifest: what every file must be, and what the bundle is for.

use serde::{Deserialize, Serialize};

use super::BundleError;
use crate::audit::PublicKey;

/// The manifest's name in the archive (its first entry).
pub const MANIFEST: &str = "MANIFEST";
/// The signature's name in the archive (its second entry).
pub const MANIFEST_SIG: &str = "MANIFEST.sig";
/// The manifest format written and read.
const FORMAT: u32 = 1;
/// The largest manifest read: a bundle lists a few thousand files.
pub(super) const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// What a bundle holds and is for, signed as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleManifest {
    /// The manifest format (1).
    pub format: u32,
    /// The Warden release of `bin/warden`.
    pub warden_version: String,
    /// The wasmtime release the runtime is compiled for.
    pub wasmtime_version: String,
    /// The target triple.
    pub target: String,
    /// The CPU level.
    pub cpu: String,
    /// The compiled runtime's identity: the pinned runtime and harness it is built from.
    pub runtime_identity: String,
    /// The public key of the signing key (64 hex digits).
    pub signer: String,
    /// Every folder, as a relative path with `/`.
    pub dirs: Vec<String>,
    /// Every file.
    pub files: Vec<FileEntry>,
}

/// One file of a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Relative path with `/`.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, lower-case hex.
    pub sha256: String,
    /// Whether it is installed executable (0555; else 0444).
    pub executable: bool,
}

impl BundleManifest {
    /// A new manifest for these files (format 1).
    pub(super) fn new(header: Header, dirs: Vec<String>, files: Vec<FileEntry>) -> Self {
        BundleManifest {
            format: FORMAT,
            warden_version: header.warden_version,
            wasmtime_version: header.wasmtime_version,
            target: header.target,
            cpu: header.cpu,
            runtime_identity: header.runtime_identity,
            signer: header.signer,
            dirs,
            files,
        }
    }

    /// The manifest's bytes, as signed.
    pub(super) fn to_bytes(&self) -> Result<Vec<u8>, BundleError> {
        let mut bytes =
            serde_json::to_vec_pretty(self).map_err(|e| BundleError::Manifest(e.to_string()))?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// Checks `signature` over `bytes` with `key` (default: the signer it names), then
    /// parses them.
    pub(super) fn from_signed(
        bytes: &[u8],
        signature: &str,
        key: Option<&PublicKey>,
    ) -> Result<(BundleManifest, PublicKey), BundleError> {
        let manifest: BundleManifest =
            serde_json::from_slice(bytes).map_err(|e| BundleError::Manifest(e.to_string()))?;
        if manifest.format != FORMAT {
            return Err(BundleError::Manifest(format!(
                "format {} is not {FORMAT}: use the warden that made the bundle",
                manifest.format
            )));
        }
        let key = match key {
            Some(key) => *key,
            None => manifest
                .signer
                .parse::<PublicKey>()
                .map_err(|e| BundleError::Manifest(e.to_string()))?,
        };
        if !key.verifies(bytes, signature.trim()) {
            return Err(BundleError::Signature {
                key: key.to_string(),
            });
        }
        Ok((manifest, key))
    }
}

/// What a manifest says besides its files.
pub(super) struct Header {
    pub warden_version: String,
    pub wasmtime_version: String,
    pub target: String,
    pub cpu: String,
    pub runtime_identity: String,
    pub signer: String,
}

/// Whether `path` is a plain relative path inside the bundle: `/`-separated names, none
/// empty, `.` or `..`, no leading `/`, no NUL or backslash.
pub(super) fn is_plain_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.contains(['\0', '\\'])
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditKey;

    fn manifest(signer: &AuditKey) -> BundleManifest {
        BundleManifest::new(
            Header {
                warden_version: "0.1.0".into(),
                wasmtime_version: "48.0.8".into(),
                target: "x86_64-unknown-linux-gnu".into(),
                cpu: "x86-64-v2".into(),
                runtime_identity: "abc".into(),
                signer: signer.public_key().to_string(),
            },
            vec!["bin".into()],
            vec![FileEntry {
                path: "bin/warden".into(),
                size: 3,
                sha256: "00".into(),
                executable: true,
            }],
        )
    }

    #[test]
    fn a_signed_manifest_reads_back_only_with_its_signature() {
        let key = AuditKey::generate();
        let m = manifest(&key);
        let bytes = m.to_bytes().unwrap();
        let signature = key.sign(&bytes);
        let (read, signer) = BundleManifest::from_signed(&bytes, &signature, None).unwrap();
        assert_eq!(read, m);
        assert_eq!(signer, key.public_key());

        let other = AuditKey::generate().public_key();
        let err = BundleManifest::from_signed(&bytes, &signature, Some(&other)).unwrap_err();
        assert!(matches!(err, BundleError::Signature { .. }), "{err}");
        let mut altered = bytes.clone();
        altered[10] ^= 1;
        assert!(BundleManifest::from_signed(&altered, &signature, None).is_err());
    }

    #[test]
    fn only_plain_relative_paths_pass() {
        for good in ["bin/warden", "runtime/empty", "a.b/c"] {
            assert!(is_plain_relative(good), "{good}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "a/../b",
            "..",
            "./a",
            "a//b",
            "a/",
            "a\\b",
        ] {
            assert!(!is_plain_relative(bad), "{bad}");
        }
    }
}
