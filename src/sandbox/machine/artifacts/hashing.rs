//! A file's size and SHA-256, taken as it is copied, and checked against the manifest.

use std::fs::File;
use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};

use super::{Artifact, ArtifactError};

pub(super) fn check(a: &Artifact, size: u64, digest: &str) -> Result<(), ArtifactError> {
    if size != a.size || digest != a.sha256 {
        return Err(ArtifactError::Checksum {
            file: a.path.clone(),
            expected: format!("{} bytes, sha256 {}", a.size, a.sha256),
            actual: format!("{size} bytes, sha256 {digest}"),
        });
    }
    Ok(())
}

/// Size and SHA-256 of everything `from` yields, copied into `to` (then synced) when
/// given; `progress` hears the bytes read so far.
pub(crate) fn copy_hashing(
    from: &mut impl Read,
    mut to: Option<&mut File>,
    progress: impl Fn(u64),
) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        if let Some(out) = to.as_mut() {
            out.write_all(&buf[..n])?;
        }
        size += n as u64;
        progress(size);
    }
    if let Some(out) = to {
        out.sync_all()?;
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// Size and SHA-256 of everything `from` yields.
pub fn hash_reader(mut from: impl Read) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let size = io::copy(&mut from, &mut hasher)?;
    Ok((size, hex::encode(hasher.finalize())))
}

pub(super) fn make_read_only(file: &File) -> io::Result<()> {
    let mut perms = file.metadata()?.permissions();
    perms.set_readonly(true);
    file.set_permissions(perms)
}
