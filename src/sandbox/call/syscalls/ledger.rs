//! What one call has used of its file limits: descriptors open, bytes written to its
//! read-write grants, files created, and what its scratch folder holds.
//!
//! Plain bookkeeping, kept by the checked WASI calls of [`super`]: this file decides
//! nothing about the guest's memory or the host's files, only whether a use fits.
//!
//! Two ways of counting bytes, for two kinds of folder:
//! - **Read-write grants** (host folders that outlive the call): every byte written
//!   counts against [`Limits::disk_write`], as does growth by truncate or allocate;
//!   refusals are `EDQUOT`. What the tool writes there is the host's to keep.
//! - **The scratch folder** (`/tmp`, private to the call, removed at its end): what its
//!   files *hold* counts against [`Limits::scratch`], growth added and space freed given
//!   back (a file truncated, or removed while no descriptor of the guest's holds it
//!   open), so a library that writes, deletes and writes again is not refused; a
//!   refusal is `ENOSPC`, as on a full disk. A rename or hard link between the scratch
//!   folder and anywhere else is refused with `EXDEV` (another file system), so bytes
//!   cannot move in or out uncounted: `shutil.move` copies instead.

use std::collections::HashSet;

use wasmtime_wasi::p1::types::Errno;

use crate::limits::Limits;

/// What one call has used of its file limits.
#[derive(Debug)]
pub struct FileLedger {
    /// Descriptors the guest opened with `path_open` and has not closed.
    pub(super) opened: HashSet<u32>,
    open_cap: usize,
    written: u64,
    write_cap: u64,
    created: u32,
    create_cap: u32,
    /// Descriptors in the scratch folder: its preopen and all opened beneath it.
    scratch: HashSet<u32>,
    /// Bytes the scratch folder's files hold, as far as the guest's calls tell.
    scratch_used: u64,
    scratch_cap: u64,
}

impl FileLedger {
    /// A ledger with nothing used, capped by `limits`; `scratch` is the descriptor of
    /// the call's scratch folder, if it has one.
    pub fn new(limits: &Limits, scratch: Option<u32>) -> FileLedger {
        FileLedger {
            opened: HashSet::new(),
            open_cap: usize::try_from(limits.open_files.0).unwrap_or(usize::MAX),
            written: 0,
            write_cap: limits.disk_write.as_u64(),
            created: 0,
            create_cap: limits.files_created.0,
            scratch: scratch.into_iter().collect(),
            scratch_used: 0,
            scratch_cap: limits.scratch.as_u64(),
        }
    }

    /// Whether the call created nothing: no file, folder or link anywhere, so its
    /// scratch folder is as empty as it was given.
    pub fn created_nothing(&self) -> bool {
        self.created == 0
    }

    /// Whether another descriptor may be opened.
    pub(super) fn may_open(&self) -> Result<(), Errno> {
        if self.opened.len() >= self.open_cap {
            return Err(Errno::Mfile);
        }
        Ok(())
    }

    /// Whether another file, folder or link may be created.
    pub(super) fn may_create(&self) -> Result<(), Errno> {
        if self.created >= self.create_cap {
            return Err(Errno::Dquot);
        }
        Ok(())
    }

    /// One more created.
    pub(super) fn create(&mut self) {
        self.created += 1;
    }

    /// `opened` was opened beneath the folder `dir`: it is in the scratch folder if
    /// `dir` is.
    pub(super) fn open(&mut self, dir: u32, opened: u32) {
        self.opened.insert(opened);
        if self.scratch.contains(&dir) {
            self.scratch.insert(opened);
        }
    }

    /// `fd` was closed.
    pub(super) fn close(&mut self, fd: u32) {
        self.opened.remove(&fd);
        self.scratch.remove(&fd);
    }

    /// `from` now lives under the number `to` (whatever `to` was is closed).
    pub(super) fn renumber(&mut self, from: u32, to: u32) {
        let (opened, scratch) = (self.opened.remove(&from), self.scratch.remove(&from));
        self.close(to);
        if opened {
            self.opened.insert(to);
        }
        if scratch {
            self.scratch.insert(to);
        }
    }

    /// Whether `fd` is in the scratch folder.
    pub(super) fn in_scratch(&self, fd: u32) -> bool {
        self.scratch.contains(&fd)
    }

    /// Whether `fd` counts at all: a file the guest opened (in a grant or the scratch
    /// folder), not one of the runtime's own descriptors.
    pub(super) fn counts(&self, fd: u32) -> bool {
        self.opened.contains(&fd)
    }

    /// Whether a write of `bytes` to `fd`, growing its file by at most `growth`, fits:
    /// in the scratch folder `growth` counts (`ENOSPC` past it); in a grant, `bytes`
    /// (`EDQUOT`).
    pub(super) fn may_write(&self, fd: u32, bytes: u64, growth: u64) -> Result<(), Errno> {
        if self.in_scratch(fd) {
            if self.scratch_used.saturating_add(growth) > self.scratch_cap {
                return Err(Errno::Nospc);
            }
        } else if self.written.saturating_add(bytes) > self.write_cap {
            return Err(Errno::Dquot);
        }
        Ok(())
    }

    /// A write of `bytes` to `fd` was made, and changed its file's size from `before`
    /// to `after`.
    pub(super) fn wrote(&mut self, fd: u32, bytes: u64, before: u64, after: u64) {
        if self.in_scratch(fd) {
            self.resized(before, after);
        } else {
            self.written = self.written.saturating_add(bytes);
        }
    }

    /// A scratch file's size went from `before` to `after`.
    pub(super) fn resized(&mut self, before: u64, after: u64) {
        if after >= before {
            self.scratch_used = self.scratch_used.saturating_add(after - before);
        } else {
            self.freed(before - after);
        }
    }

    /// A scratch file holding `bytes` is gone for good.
    pub(super) fn freed(&mut self, bytes: u64) {
        self.scratch_used = self.scratch_used.saturating_sub(bytes);
    }

    /// Descriptors of the scratch folder, for finding whether a file is open.
    pub(super) fn scratch_fds(&self) -> impl Iterator<Item = u32> + '_ {
        self.scratch.iter().copied()
    }

    /// Whether a rename or link from beneath `from` to beneath `to` stays on one side
    /// of the scratch folder's boundary (`EXDEV` otherwise).
    pub(super) fn same_side(&self, from: u32, to: u32) -> Result<(), Errno> {
        if self.in_scratch(from) != self.in_scratch(to) {
            return Err(Errno::Xdev);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use bytesize::ByteSize;

    use super::*;

    fn ledger(scratch: u64) -> FileLedger {
        let limits = Limits {
            scratch: ByteSize::b(scratch),
            disk_write: ByteSize::b(10),
            ..Limits::default()
        };
        FileLedger::new(&limits, Some(5))
    }

    #[test]
    fn scratch_space_is_what_its_files_hold() {
        let mut l = ledger(100);
        l.open(5, 9);
        assert!(l.in_scratch(9));
        l.may_write(9, 80, 80).unwrap();
        l.wrote(9, 80, 0, 80);
        assert_eq!(l.may_write(9, 30, 30), Err(Errno::Nospc));
        // Rewriting in place grows nothing.
        l.may_write(9, 30, 0).unwrap();
        // Truncated to 20: 60 bytes back.
        l.resized(80, 20);
        l.may_write(9, 80, 80).unwrap();
        l.freed(20);
        assert_eq!(l.scratch_used, 0);
    }

    #[test]
    fn grants_count_every_byte_written_and_stay_apart_from_scratch() {
        let mut l = ledger(0);
        l.open(3, 7);
        assert!(!l.in_scratch(7));
        l.may_write(7, 10, 10).unwrap();
        l.wrote(7, 10, 0, 10);
        assert_eq!(l.may_write(7, 1, 0), Err(Errno::Dquot));
        l.open(5, 8);
        assert_eq!(l.may_write(8, 1, 1), Err(Errno::Nospc));
        assert_eq!(l.same_side(8, 7), Err(Errno::Xdev));
        l.same_side(5, 8).unwrap();
    }

    #[test]
    fn a_renumbered_scratch_descriptor_stays_in_scratch() {
        let mut l = ledger(1);
        l.open(5, 9);
        l.open(3, 10);
        l.renumber(9, 10);
        assert!(l.in_scratch(10) && !l.in_scratch(9) && l.counts(10));
        l.renumber(5, 12);
        l.open(12, 13);
        assert!(l.in_scratch(13));
        l.close(13);
        assert!(!l.in_scratch(13) && !l.counts(13));
    }
}
