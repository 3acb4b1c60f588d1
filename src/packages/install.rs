//! Unpacking locked wheels into a read-only site folder, safely.
//!
//! A wheel is a zip someone else wrote. Every entry must have a relative name that stays
//! inside the folder (no `..`, no absolute path, no backslash), must not be a symlink,
//! and must be listed in the wheel's `RECORD` with the SHA-256 its bytes have; the
//! files of one site are capped in number and total size, counted on the bytes actually
//! written, not on what the zip claims. The site is built in a private staging folder
//! and renamed into place only when complete, then made read-only: a failed install
//! leaves nothing behind, and a site that exists is whole. Before it is made read-only,
//! an optional compiler writes the modules' bytecode (`__pycache__`) into it.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::PackagesError;
use super::resolve::Downloaded;

/// Most files one site may hold: 20,000.
pub const MAX_SITE_FILES: usize = 20_000;
/// Most bytes one site may hold once unpacked: 256 MiB.
pub const MAX_SITE_BYTES: u64 = 256 * 1024 * 1024;

/// Unpacks `wheels` into `sites/<id>` unless that site exists already; returns its path.
pub(super) fn install(
    sites: &Path,
    id: &str,
    wheels: &[Downloaded],
    compiler: Option<&super::Compiler>,
) -> Result<PathBuf, PackagesError> {
    let target = sites.join(id);
    if target.is_dir() {
        return Ok(target);
    }
    fs::create_dir_all(sites).map_err(|e| io(sites, e))?;
    let staging = tempfile::Builder::new()
        .prefix(&format!(".staging-{}-", std::process::id()))
        .tempdir_in(sites)
        .map_err(|e| io(sites, e))?;
    let mut budget = Budget::default();
    for wheel in wheels {
        unpack(
            &wheel.path,
            &wheel.locked.wheel,
            staging.path(),
            &mut budget,
        )?;
    }
    if let Some(compile) = compiler
        && let Err(e) = compile(staging.path())
    {
        tracing::warn!(
            site = id,
            "packages stay uncompiled (each call compiles what it imports): {e}"
        );
    }
    make_read_only(staging.path())?;
    let staged = staging.keep();
    match fs::rename(&staged, &target) {
        Ok(()) => Ok(target),
        // Another process installed the same site meanwhile: theirs is as good.
        Err(_) if target.is_dir() => {
            remove_tree(&staged);
            Ok(target)
        }
        Err(e) => {
            remove_tree(&staged);
            Err(io(&target, e))
        }
    }
}

#[derive(Default)]
struct Budget {
    files: usize,
    bytes: u64,
}

fn unpack(path: &Path, name: &str, into: &Path, budget: &mut Budget) -> Result<(), PackagesError> {
    let bad = |reason: String| PackagesError::UnsafeWheel {
        wheel: name.to_owned(),
        reason,
    };
    let file = fs::File::open(path).map_err(|e| io(path, e))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(format!("not a valid zip: {e}")))?;
    let record = read_record(&mut zip).map_err(bad)?;
    let mut seen = 0usize;
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| bad(format!("unreadable entry: {e}")))?;
        let raw = entry.name().to_owned();
        let Some(relative) = safe_relative(&raw) else {
            return Err(bad(format!(
                "entry {raw:?} would be written outside its folder"
            )));
        };
        if entry.is_symlink() {
            return Err(bad(format!("entry {raw:?} is a symbolic link")));
        }
        if entry.is_dir() {
            continue;
        }
        budget.files += 1;
        if budget.files > MAX_SITE_FILES {
            return Err(bad(format!(
                "the packages hold more than {MAX_SITE_FILES} files"
            )));
        }
        let is_record = raw.ends_with(".dist-info/RECORD")
            || raw.ends_with(".dist-info/RECORD.jws")
            || raw.ends_with(".dist-info/RECORD.p7s");
        let expected = record.get(raw.as_str());
        if !is_record && expected.is_none() {
            return Err(bad(format!(
                "entry {raw:?} is not listed in the wheel's RECORD"
            )));
        }
        let Some(dest) = destination(&relative) else {
            // `.data/scripts`, `.data/headers`, `.data/data`: nothing the guest imports.
            continue;
        };
        let dest = into.join(dest);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&dest)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => bad(format!(
                    "entry {raw:?} is written twice (by this or another wheel)"
                )),
                _ => io(&dest, e),
            })?;
        let room = MAX_SITE_BYTES - budget.bytes;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut limited = (&mut entry).take(room + 1);
        let mut written = 0u64;
        loop {
            let n = limited
                .read(&mut buf)
                .map_err(|e| bad(format!("entry {raw:?} cannot be read: {e}")))?;
            if n == 0 {
                break;
            }
            written += n as u64;
            if written > room {
                return Err(bad(format!(
                    "the packages unpack to more than {}",
                    bytesize::ByteSize::b(MAX_SITE_BYTES)
                )));
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(|e| io(&dest, e))?;
        }
        budget.bytes += written;
        if let Some(Some(want)) = expected {
            let got = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hasher.finalize());
            if &got != want {
                return Err(bad(format!(
                    "entry {raw:?} does not match its RECORD hash (sha256={want}, got {got})"
                )));
            }
        } else if !is_record {
            return Err(bad(format!(
                "entry {raw:?} has no sha256 in the wheel's RECORD"
            )));
        }
        seen += 1;
    }
    if seen == 0 {
        return Err(bad("the wheel holds no files".into()));
    }
    Ok(())
}

/// The wheel's RECORD: path to its `sha256=` digest (URL-safe base64, no padding), if
/// any.
fn read_record(
    zip: &mut zip::ZipArchive<fs::File>,
) -> Result<HashMap<String, Option<String>>, String> {
    let names: Vec<String> = zip
        .file_names()
        .filter(|n| n.ends_with(".dist-info/RECORD") && n.matches('/').count() == 1)
        .map(str::to_owned)
        .collect();
    let [name] = names.as_slice() else {
        return Err(format!(
            "it has {} .dist-info/RECORD files, not one",
            names.len()
        ));
    };
    let mut text = String::new();
    zip.by_name(name)
        .map_err(|e| e.to_string())?
        .take(16 * 1024 * 1024)
        .read_to_string(&mut text)
        .map_err(|e| format!("its RECORD is unreadable: {e}"))?;
    let mut record = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields = csv_fields(line);
        let Some(path) = fields.first() else { continue };
        let digest = fields
            .get(1)
            .and_then(|h| h.strip_prefix("sha256="))
            .map(str::to_owned);
        record.insert(path.clone(), digest);
    }
    Ok(record)
}

/// The fields of one CSV line (RECORD quotes paths holding commas).
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// `name` as a relative path of normal components only, or `None`.
fn safe_relative(name: &str) -> Option<PathBuf> {
    if name.is_empty() || name.starts_with('/') || name.contains('\\') || name.contains('\0') {
        return None;
    }
    let path = Path::new(name);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Where an entry goes in the site: `NAME.data/purelib|platlib/X` at `X`, other
/// `.data` folders nowhere, everything else as named.
fn destination(relative: &Path) -> Option<PathBuf> {
    let mut parts = relative.components();
    let first = parts.next()?.as_os_str().to_str()?;
    if !first.ends_with(".data") {
        return Some(relative.to_owned());
    }
    let scheme = parts.next()?.as_os_str().to_str()?;
    let rest: PathBuf = parts.collect();
    match scheme {
        "purelib" | "platlib" if !rest.as_os_str().is_empty() => Some(rest),
        _ => None,
    }
}

fn make_read_only(dir: &Path) -> Result<(), PackagesError> {
    use std::os::unix::fs::PermissionsExt;
    for entry in fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let path = entry.map_err(|e| io(dir, e))?.path();
        let meta = fs::symlink_metadata(&path).map_err(|e| io(&path, e))?;
        if meta.is_dir() {
            make_read_only(&path)?;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o555))
                .map_err(|e| io(&path, e))?;
        } else {
            fs::set_permissions(&path, fs::Permissions::from_mode(0o444))
                .map_err(|e| io(&path, e))?;
        }
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o555)).map_err(|e| io(dir, e))
}

/// Removes a folder made read-only by [`make_read_only`] (best effort).
pub(super) fn remove_tree(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fn writable(dir: &Path) {
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
        if let Ok(entries) = fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    writable(&e.path());
                }
            }
        }
    }
    writable(dir);
    let _ = fs::remove_dir_all(dir);
}

fn io(path: &Path, source: io::Error) -> PackagesError {
    PackagesError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_names_only() {
        assert_eq!(
            safe_relative("pkg/mod.py"),
            Some(PathBuf::from("pkg/mod.py"))
        );
        assert_eq!(
            safe_relative("./pkg/mod.py"),
            Some(PathBuf::from("pkg/mod.py"))
        );
        for bad in [
            "../evil.py",
            "pkg/../../evil.py",
            "/etc/passwd",
            "pkg\\..\\x",
            "",
            ".",
        ] {
            assert_eq!(safe_relative(bad), None, "{bad}");
        }
    }

    #[test]
    fn data_schemes() {
        assert_eq!(
            destination(Path::new("p-1.data/purelib/p/x.py")),
            Some(PathBuf::from("p/x.py"))
        );
        assert_eq!(destination(Path::new("p-1.data/scripts/run")), None);
        assert_eq!(
            destination(Path::new("p/x.py")),
            Some(PathBuf::from("p/x.py"))
        );
    }

    #[test]
    fn csv() {
        assert_eq!(csv_fields("a.py,sha256=x,3"), ["a.py", "sha256=x", "3"]);
        assert_eq!(
            csv_fields("\"a,b.py\",sha256=y,"),
            ["a,b.py", "sha256=y", ""]
        );
    }
}
