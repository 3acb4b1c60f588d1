//! The folder holding one tool's source, mounted read-only at `/tool`.

use std::path::{Path, PathBuf};

use super::wasi;
use super::{SandboxError, io_error};

/// A folder holding one tool's source, mounted read-only at `/tool`.
#[derive(Debug)]
pub struct ToolFolder {
    dir: ToolDir,
    file_name: String,
}

#[derive(Debug)]
enum ToolDir {
    Owned(tempfile::TempDir),
    Borrowed(PathBuf),
}

impl ToolFolder {
    /// A private temporary folder holding `source` as `file_name`, removed on drop (a
    /// call that times out drops it too). Its name carries this process's id, so that
    /// folders left by a killed process are found and removed by the next
    /// [`Sandbox::open`](crate::sandbox::Sandbox::open).
    pub fn temporary(file_name: &str, source: &str) -> Result<ToolFolder, SandboxError> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{TEMP_PREFIX}{}-", std::process::id()))
            .tempdir()
            .map_err(|e| io_error(&std::env::temp_dir(), e))?;
        let file_name = sanitize_file_name(file_name);
        let path = dir.path().join(&file_name);
        std::fs::write(&path, source).map_err(|e| io_error(&path, e))?;
        Ok(ToolFolder {
            dir: ToolDir::Owned(dir),
            file_name,
        })
    }

    /// An existing folder that holds the tool as `file_name`.
    pub fn existing(dir: PathBuf, file_name: &str) -> ToolFolder {
        ToolFolder {
            dir: ToolDir::Borrowed(dir),
            file_name: sanitize_file_name(file_name),
        }
    }

    /// The folder on the host.
    pub fn host_dir(&self) -> &Path {
        match &self.dir {
            ToolDir::Owned(t) => t.path(),
            ToolDir::Borrowed(p) => p,
        }
    }

    /// The tool's file name in its folder.
    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    /// The tool's path as the guest sees it.
    pub fn guest_path(&self) -> String {
        format!("{}/{}", wasi::TOOL_GUEST, self.file_name)
    }
}

/// The start of a temporary tool folder's name; the owning process's id follows.
const TEMP_PREFIX: &str = "warden-tool-";

/// Removes temporary tool folders whose process is gone (killed before it could clean
/// up). Best effort: a folder that cannot be removed is logged and left.
pub(super) fn sweep_orphaned_tool_folders(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || process_alive(pid) {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => tracing::info!(
                "removed {} left by a process that died",
                entry.path().display()
            ),
            Err(e) => tracing::warn!("cannot remove {}: {e}", entry.path().display()),
        }
    }
}

/// Whether a process with this id runs. Where `/proc` is missing, every process counts
/// as alive, so nothing is removed.
fn process_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.is_dir() || proc.join(pid.to_string()).exists()
}

fn sanitize_file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let clean: String = base
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() || clean.starts_with('.') {
        format!("tool{clean}.py")
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_of_dead_processes_are_swept_and_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        // Above Linux's largest pid, so never alive.
        let orphan = tmp.path().join(format!("{TEMP_PREFIX}4294967295-abc"));
        let mine = tmp
            .path()
            .join(format!("{TEMP_PREFIX}{}-def", std::process::id()));
        let unrelated = tmp.path().join("something-else");
        for dir in [&orphan, &mine, &unrelated] {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join("tool.py"), "x = 1\n").unwrap();
        }
        sweep_orphaned_tool_folders(tmp.path());
        assert!(!orphan.exists() || !Path::new("/proc").is_dir());
        assert!(mine.exists());
        assert!(unrelated.exists());
    }
}
