//! Reading a bundle: the signature first, then every file hashed as it streams past;
//! installing writes each file into a fresh staging folder while it is hashed, and moves
//! the result into place only when everything matched.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::manifest::{MAX_MANIFEST_BYTES, is_plain_relative};
use super::{BundleError, BundleManifest, FileEntry, MANIFEST, MANIFEST_SIG, io_error};
use crate::audit::PublicKey;
use crate::sandbox::{WASMTIME_VERSION, platform};

/// A bundle whose signature and every file checked out.
#[derive(Debug, Clone)]
pub struct Verified {
    /// Its manifest.
    pub manifest: BundleManifest,
    /// The key its signature verified with.
    pub key: PublicKey,
}

/// Checks `file`'s signature (with `key`, else the signer its manifest names), that it
/// is for `target` (default: this host's) and this wasmtime, and every file's size and
/// SHA-256. The first bad file is named in the error.
pub fn verify(
    file: &Path,
    key: Option<&PublicKey>,
    target: Option<&str>,
) -> Result<Verified, BundleError> {
    read(file, key, target.unwrap_or(platform::host_target()), None)
}

/// Verifies `file` for this host and unpacks it into `dir` (new or empty). Nothing is
/// left in `dir` unless every file matched: files are written into a staging folder
/// inside it and moved into place at the end. Only plain files and folders at plain
/// relative paths are accepted (no links, no absolute paths, no `..`).
pub fn install(file: &Path, dir: &Path, key: Option<&PublicKey>) -> Result<Verified, BundleError> {
    fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    if let Some(entry) = fs::read_dir(dir).map_err(|e| io_error(dir, e))?.next() {
        let entry = entry.map_err(|e| io_error(dir, e))?;
        return Err(BundleError::NotEmpty {
            dir: dir.to_owned(),
            name: entry.file_name().to_string_lossy().into_owned(),
        });
    }
    let staging = tempfile::Builder::new()
        .prefix(".warden-install-")
        .tempdir_in(dir)
        .map_err(|e| io_error(dir, e))?;
    let verified = read(file, key, platform::host_target(), Some(staging.path()))?;
    let mut top: BTreeSet<&str> = BTreeSet::new();
    for path in verified
        .manifest
        .dirs
        .iter()
        .chain(verified.manifest.files.iter().map(|f| &f.path))
    {
        top.insert(path.split('/').next().unwrap_or(path));
    }
    for name in top {
        let from = staging.path().join(name);
        let to = dir.join(name);
        fs::rename(&from, &to).map_err(|e| io_error(&to, e))?;
    }
    Ok(verified)
}

/// Reads the bundle; with `into`, writes each file under it as well.
fn read(
    file: &Path,
    key: Option<&PublicKey>,
    target: &str,
    into: Option<&Path>,
) -> Result<Verified, BundleError> {
    let opened = File::open(file).map_err(|e| io_error(file, e))?;
    let decoder = zstd::Decoder::new(opened).map_err(|e| io_error(file, e))?;
    let mut archive = tar::Archive::new(decoder);
    let mut entries = archive.entries().map_err(|e| io_error(file, e))?;
    let mut next_named = |name: &str| -> Result<Vec<u8>, BundleError> {
        let mut entry = entries
            .next()
            .ok_or_else(|| BundleError::Manifest(format!("the archive has no {name}")))?
            .map_err(|e| BundleError::Manifest(format!("{name}: {e}")))?;
        let path = entry_path(&entry)?;
        if path != name {
            return Err(BundleError::Manifest(format!(
                "the archive starts with {path:?}, not {name}"
            )));
        }
        let mut bytes = Vec::new();
        (&mut entry)
            .take(MAX_MANIFEST_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| BundleError::Manifest(format!("{name}: {e}")))?;
        Ok(bytes)
    };
    let manifest_bytes = next_named(MANIFEST)?;
    let signature = next_named(MANIFEST_SIG)?;
    let signature = String::from_utf8_lossy(&signature).into_owned();
    let (manifest, key) = BundleManifest::from_signed(&manifest_bytes, &signature, key)?;
    if manifest.target != target {
        return Err(BundleError::Target {
            bundle: manifest.target,
            host: target.to_owned(),
        });
    }
    if manifest.wasmtime_version != WASMTIME_VERSION {
        return Err(BundleError::Wasmtime {
            bundle: manifest.wasmtime_version,
            ours: WASMTIME_VERSION.to_owned(),
        });
    }

    let mut files: BTreeMap<&str, &FileEntry> = BTreeMap::new();
    for entry in &manifest.files {
        check_listed_path(&entry.path)?;
        if files.insert(&entry.path, entry).is_some() {
            return Err(bad(&entry.path, "it is listed twice in the manifest"));
        }
    }
    let mut dirs: BTreeSet<&str> = BTreeSet::new();
    for dir in &manifest.dirs {
        check_listed_path(dir)?;
        dirs.insert(dir);
    }
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for entry in entries {
        let mut entry =
            entry.map_err(|e| BundleError::Manifest(format!("reading the archive: {e}")))?;
        let path = entry_path(&entry)?;
        if !is_plain_relative(&path) {
            return Err(bad(&path, "its path is absolute, empty or has `..`"));
        }
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            if !dirs.contains(path.as_str()) {
                return Err(bad(&path, "the folder is not in the manifest"));
            }
            if let Some(root) = into {
                make_dir(&root.join(&path))?;
            }
            seen.insert(path);
            continue;
        }
        if !kind.is_file() {
            return Err(bad(
                &path,
                "it is a link or special file, which a bundle never holds",
            ));
        }
        let Some(listed) = files.get(path.as_str()) else {
            return Err(bad(&path, "the file is not in the manifest"));
        };
        if !seen.insert(path.clone()) {
            return Err(bad(&path, "it is in the archive twice"));
        }
        let mut out = match into {
            Some(root) => Some(create_file(root, &path, listed.executable)?),
            None => None,
        };
        let (size, digest) =
            crate::sandbox::artifacts::copy_hashing(&mut entry, out.as_mut(), |_| {})
                .map_err(|e| bad(&path, &format!("cannot read or write it: {e}")))?;
        if size != listed.size || digest != listed.sha256 {
            return Err(bad(
                &path,
                &format!(
                    "it is {size} bytes with sha256 {digest}, and the manifest says {} bytes \
                     with sha256 {}",
                    listed.size, listed.sha256
                ),
            ));
        }
    }
    for path in files.keys().chain(dirs.iter()) {
        if !seen.contains(*path) {
            return Err(bad(path, "it is in the manifest but not in the archive"));
        }
    }
    Ok(Verified { manifest, key })
}

fn entry_path<R: Read>(entry: &tar::Entry<'_, R>) -> Result<String, BundleError> {
    let path = entry.path_bytes().into_owned();
    let path = String::from_utf8(path)
        .map_err(|_| BundleError::Manifest("an entry's path is not UTF-8".into()))?;
    Ok(path.trim_end_matches('/').to_owned())
}

fn check_listed_path(path: &str) -> Result<(), BundleError> {
    if is_plain_relative(path) && path != MANIFEST && path != MANIFEST_SIG {
        Ok(())
    } else {
        Err(bad(path, "the manifest lists a path outside the bundle"))
    }
}

fn bad(path: &str, reason: &str) -> BundleError {
    BundleError::File {
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Makes a folder of the staging tree (and its parents: the tree is fresh, made only
/// of folders created here, so no link can be on the way).
fn make_dir(path: &Path) -> Result<(), BundleError> {
    fs::create_dir_all(path).map_err(|e| io_error(path, e))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).map_err(|e| io_error(path, e))
}

/// Creates a new file at `path` under `root`, read-only once written.
fn create_file(root: &Path, path: &str, executable: bool) -> Result<File, BundleError> {
    let target: PathBuf = root.join(path);
    if let Some(parent) = target.parent() {
        make_dir(parent)?;
    }
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if executable { 0o555 } else { 0o444 })
        .open(&target)
        .map_err(|e| io_error(&target, e))
}
