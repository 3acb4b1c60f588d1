//! A warm state's memory as its difference from the base image: the pages the tool's
//! imports changed, nothing else.
//!
//! The base is the memory image of Warden's compiled snapshot (every instance of the
//! snapshot starts from it). A state's memory, from where that image starts, is the
//! base with some host pages replaced; past the base, pages are zero unless replaced.
//! The delta lists those pages as runs, and holds each page XOR the base page under it
//! (zero past the base): bytes the imports left alone become zeros, so a page where a
//! few reference counts changed compresses to a few bytes. The whole delta is one
//! zstd frame with its content checksum.
//!
//! ```text
//! u32 LE run count | run count × (u32 LE first page, u32 LE page count) | pages
//! ```
//!
//! Loading rebuilds the full image into an anonymous memory file (a memfd): the base's
//! non-zero pages, then the delta's pages. wasmtime maps that file copy-on-write into
//! every instance, as it maps a compiled module's own image, so calls pay nothing for
//! the state being stored as a delta; the rebuild is paid once per process that loads
//! the state (a few ms: a copy of the base's ~19 MiB of non-zero pages).
//!
//! A delta is only right on top of the base it was taken from: [`BaseImage`] names
//! that base by the compiled snapshot's identity, the image's length and a CRC-32 of
//! its bytes, and a state naming another base is refused, never rebuilt on the wrong
//! one.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;

use serde::{Deserialize, Serialize};

use super::PAGE;

/// zstd level for deltas: level 3 (zstd's default) compresses a trivial tool's
/// delta (about a MiB of XORed pages) to tens of KiB in milliseconds; higher levels
/// gain little on mostly-zero pages and cost seconds on a pandas-sized delta.
const LEVEL: i32 = 3;

/// What a delta was taken against. Stored in each warm state's header and compared
/// with the running base before the delta is applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaseRef {
    /// The compiled snapshot's identity (its file name: runtime, harness, wasmtime and
    /// engine settings).
    pub identity: String,
    /// Bytes of the base's memory image.
    pub image_len: u64,
    /// CRC-32 of the image's bytes: a snapshot rebuilt under the same name but with
    /// different memory (the build is not guaranteed reproducible) differs here.
    pub crc32: u32,
}

/// The base image of this process's compiled snapshot, summarized once per process.
#[derive(Debug)]
pub struct BaseImage {
    /// What states taken against it record.
    pub reference: BaseRef,
    /// Byte ranges of its runs of non-zero pages: only those are copied when a state
    /// is rebuilt (the rest of the rebuilt file stays a hole, which reads as zero).
    non_zero: Vec<Range<usize>>,
}

impl BaseImage {
    /// Summarizes `image` (a page multiple), the snapshot named `identity`. Reads it
    /// once: ~5 ms for Warden's ~25 MiB image.
    pub fn of(identity: &str, image: &[u8]) -> BaseImage {
        let mut non_zero: Vec<Range<usize>> = Vec::new();
        for (i, page) in image.chunks(PAGE).enumerate() {
            // Slice equality is a memcmp, fast in unoptimized builds too.
            if page == &ZERO[..page.len()] {
                continue;
            }
            let (start, end) = (i * PAGE, i * PAGE + page.len());
            match non_zero.last_mut() {
                Some(run) if run.end == start => run.end = end,
                _ => non_zero.push(start..end),
            }
        }
        BaseImage {
            reference: BaseRef {
                identity: identity.to_owned(),
                image_len: image.len() as u64,
                crc32: crc32fast::hash(image),
            },
            non_zero,
        }
    }
}

/// Why a stored delta cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum DeltaError {
    /// It was taken against another base image.
    #[error(
        "it was taken against another snapshot ({stored}); this process runs {running}: \
         it is prepared again"
    )]
    OtherBase {
        /// The base the state names.
        stored: String,
        /// The base this process runs.
        running: String,
    },
    /// Its bytes do not decode to what its header says.
    #[error("it is corrupt ({0}): it is prepared again")]
    Corrupt(String),
    /// The anonymous file that holds the rebuilt image could not be made.
    #[error("cannot rebuild its image in memory: {0}; the host may be out of memory")]
    Rebuild(#[source] std::io::Error),
}

/// What a delta changes: its page runs and size, as recorded in a state's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeltaShape {
    /// Host pages it replaces.
    pub pages: u64,
    /// Runs of consecutive pages.
    pub runs: u64,
    /// Bytes of the compressed delta.
    pub compressed: u64,
}

/// A memory taken as a delta: how long the image is and the compressed pages.
pub struct Delta {
    /// Bytes of the rebuilt image: the base's, or up to the last changed page past it.
    pub memory_len: u64,
    /// What it changes.
    pub shape: DeltaShape,
    /// The zstd frame.
    pub compressed: Vec<u8>,
}

/// The pages of `memory` (from where the base image starts) that differ from `base`
/// (zero past it), as a compressed delta.
pub fn encode(base: &[u8], memory: &[u8]) -> Result<Delta, std::io::Error> {
    let zero = &ZERO;
    let mut runs: Vec<(u32, u32)> = Vec::new();
    let mut pages = 0u64;
    for (i, page) in memory.chunks(PAGE).enumerate() {
        let under = base
            .get(i * PAGE..)
            .map_or(&[][..], |b| &b[..b.len().min(page.len())]);
        let changed = if under.len() == page.len() {
            page != under
        } else {
            // Past the base (or a last partial page, which a wasm memory never has).
            page[..under.len()] != *under || page[under.len()..] != zero[..page.len() - under.len()]
        };
        if !changed {
            continue;
        }
        pages += 1;
        let i = u32::try_from(i).map_err(|_| std::io::Error::other("memory over 16 TiB"))?;
        match runs.last_mut() {
            Some((first, count)) if *first + *count == i => *count += 1,
            _ => runs.push((i, 1)),
        }
    }
    let end = runs
        .last()
        .map_or(0, |(first, count)| u64::from(first + count) * PAGE as u64);
    let memory_len = end.max(base.len() as u64);

    let mut encoder = zstd::stream::Encoder::new(Vec::new(), LEVEL)?;
    encoder.include_checksum(true)?;
    encoder.set_pledged_src_size(Some(4 + 8 * runs.len() as u64 + pages * PAGE as u64))?;
    use std::io::Write;
    encoder.write_all(&u32::try_from(runs.len()).unwrap_or(u32::MAX).to_le_bytes())?;
    for (first, count) in &runs {
        encoder.write_all(&first.to_le_bytes())?;
        encoder.write_all(&count.to_le_bytes())?;
    }
    let mut xored = [0u8; PAGE];
    for &(first, count) in &runs {
        for i in first..first + count {
            let at = i as usize * PAGE;
            let page = memory.get(at..at + PAGE).unwrap_or(zero);
            let under = base.get(at..at + PAGE).unwrap_or(zero);
            xor(&mut xored, page, under);
            encoder.write_all(&xored)?;
        }
    }
    let compressed = encoder.finish()?;
    Ok(Delta {
        memory_len,
        shape: DeltaShape {
            pages,
            runs: runs.len() as u64,
            compressed: compressed.len() as u64,
        },
        compressed,
    })
}

/// Rebuilds a state's image from `base` (this process's image, summarized in
/// `summary`) and its delta, into an anonymous memory file laid out as
/// [`wasmtime::Module::with_initial_state`] wants it: `memory_len` bytes of image, then
/// `trailer`. Refuses a delta taken against another base or that does not decode to
/// `shape`.
pub fn rebuild(
    base: &[u8],
    summary: &BaseImage,
    stored: &BaseRef,
    memory_len: u64,
    shape: DeltaShape,
    compressed: &[u8],
    trailer: &[u8],
) -> Result<File, DeltaError> {
    if *stored != summary.reference {
        return Err(DeltaError::OtherBase {
            stored: describe(stored),
            running: describe(&summary.reference),
        });
    }
    let corrupt = |what: &str| DeltaError::Corrupt(what.to_owned());
    // A 32-bit guest's memory is at most 4 GiB.
    if memory_len > 1 << 32
        || !memory_len.is_multiple_of(PAGE as u64)
        || memory_len < base.len() as u64
    {
        return Err(corrupt("its memory length is not one a state can have"));
    }
    if shape.pages > memory_len / PAGE as u64 || shape.runs > shape.pages {
        return Err(corrupt("it changes more pages than its memory has"));
    }
    let expected = 4 + 8 * shape.runs + shape.pages * PAGE as u64;
    let expected = usize::try_from(expected).map_err(|_| corrupt("too large"))?;
    let raw = zstd::bulk::decompress(compressed, expected)
        .map_err(|e| DeltaError::Corrupt(format!("its pages do not decompress: {e}")))?;
    if raw.len() != expected {
        return Err(corrupt("its pages are not as many as its header says"));
    }
    let word = |at: usize| {
        raw.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes)
    };
    if u64::from(word(0)) != shape.runs {
        return Err(corrupt("its runs are not as many as its header says"));
    }
    let runs_len = 4 + 8 * raw_usize(shape.runs);
    let mut runs = Vec::with_capacity(raw_usize(shape.runs));
    let mut next = 0u64;
    let mut pages = 0u64;
    for r in 0..raw_usize(shape.runs) {
        let (first, count) = (u64::from(word(4 + 8 * r)), u64::from(word(8 + 8 * r)));
        if first < next || count == 0 || (first + count) * PAGE as u64 > memory_len {
            return Err(corrupt(
                "its runs overlap, are out of order or end past its memory",
            ));
        }
        next = first + count;
        pages += count;
        runs.push((first, count));
    }
    if pages != shape.pages {
        return Err(corrupt("its runs do not add up to its pages"));
    }

    let file = memfd().map_err(DeltaError::Rebuild)?;
    let write = |bytes: &[u8], at: u64| file.write_all_at(bytes, at).map_err(DeltaError::Rebuild);
    file.set_len(memory_len + trailer.len() as u64)
        .map_err(DeltaError::Rebuild)?;
    for run in &summary.non_zero {
        write(&base[run.clone()], run.start as u64)?;
    }
    let mut page = [0u8; PAGE];
    let mut at = runs_len;
    for (first, count) in runs {
        for i in first..first + count {
            let offset = raw_usize(i) * PAGE;
            let under = base.get(offset..offset + PAGE).unwrap_or(&ZERO);
            xor(&mut page, &raw[at..at + PAGE], under);
            write(&page, i * PAGE as u64)?;
            at += PAGE;
        }
    }
    write(trailer, memory_len)?;
    Ok(file)
}

/// A zero page.
static ZERO: [u8; PAGE] = [0; PAGE];

/// `out = a ^ b`, eight bytes at a time (Warden's own code is unoptimized in tests).
fn xor(out: &mut [u8; PAGE], a: &[u8], b: &[u8]) {
    for ((o, a), b) in out
        .chunks_exact_mut(8)
        .zip(a.chunks_exact(8))
        .zip(b.chunks_exact(8))
    {
        let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
        o.copy_from_slice(&(word(a) ^ word(b)).to_ne_bytes());
    }
}

fn describe(base: &BaseRef) -> String {
    format!(
        "{}, image of {} bytes, CRC-32 {:08x}",
        base.identity, base.image_len, base.crc32
    )
}

/// A length already bounded by the delta's checked size.
fn raw_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// An anonymous memory file, closed on exec.
fn memfd() -> std::io::Result<File> {
    let fd = rustix::fs::memfd_create("warden-warm-state", rustix::fs::MemfdFlags::CLOEXEC)?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn base() -> Vec<u8> {
        let mut base = vec![0u8; 8 * PAGE];
        for (i, b) in base.iter_mut().enumerate().take(5 * PAGE) {
            *b = (i % 251) as u8 + 1;
        }
        base
    }

    fn rebuilt(base: &[u8], memory: &[u8]) -> (Delta, Vec<u8>) {
        let delta = encode(base, memory).unwrap();
        let summary = BaseImage::of("snapshot", base);
        let trailer = b"passive data";
        let mut file = rebuild(
            base,
            &summary,
            &summary.reference,
            delta.memory_len,
            delta.shape,
            &delta.compressed,
            trailer,
        )
        .unwrap();
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).unwrap();
        let at = delta.memory_len as usize;
        assert_eq!(&bytes[at..], trailer);
        bytes.truncate(at);
        (delta, bytes)
    }

    #[test]
    fn only_changed_pages_are_kept_and_the_image_is_rebuilt_exactly() {
        let base = base();
        // The memory grew past the base: 12 pages, of which the last is past the base.
        let mut memory = base.clone();
        memory.resize(12 * PAGE, 0);
        memory[PAGE + 7] ^= 0xff; // page 1
        memory[2 * PAGE] = 0; // page 2, same run
        memory[4 * PAGE..5 * PAGE].fill(0); // page 4: a base page zeroed
        memory[10 * PAGE + 1] = 9; // page 10, past the base
        let (delta, image) = rebuilt(&base, &memory);
        assert_eq!(delta.shape.pages, 4);
        assert_eq!(delta.shape.runs, 3);
        assert_eq!(delta.memory_len, 11 * PAGE as u64);
        assert_eq!(image, memory[..11 * PAGE]);
    }

    #[test]
    fn an_unchanged_memory_is_the_base() {
        let base = base();
        let (delta, image) = rebuilt(&base, &base);
        assert_eq!(delta.shape.pages, 0);
        assert_eq!(image, base);
        assert!(delta.compressed.len() < 64, "{}", delta.compressed.len());
    }

    #[test]
    fn a_page_with_a_few_changed_bytes_costs_a_few_bytes() {
        let base = base();
        let mut memory = base.clone();
        for page in 0..5 {
            memory[page * PAGE + 100] ^= 1;
        }
        let delta = encode(&base, &memory).unwrap();
        assert_eq!(delta.shape.pages, 5);
        assert!(delta.compressed.len() < 200, "{}", delta.compressed.len());
    }

    #[test]
    fn a_delta_taken_against_another_base_is_refused() {
        let base = base();
        let mut memory = base.clone();
        memory[0] ^= 1;
        let delta = encode(&base, &memory).unwrap();
        let mut other = base.clone();
        other[3 * PAGE + 5] ^= 1;
        let running = BaseImage::of("snapshot", &other);
        let taken = BaseImage::of("snapshot", &base).reference;
        let refused = rebuild(
            &other,
            &running,
            &taken,
            delta.memory_len,
            delta.shape,
            &delta.compressed,
            b"",
        );
        assert!(
            matches!(refused, Err(DeltaError::OtherBase { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn a_corrupt_delta_is_refused() {
        let base = base();
        let mut memory = base.clone();
        memory[PAGE] ^= 1;
        let delta = encode(&base, &memory).unwrap();
        let summary = BaseImage::of("snapshot", &base);
        let try_with = |compressed: &[u8], shape: DeltaShape| {
            rebuild(
                &base,
                &summary,
                &summary.reference,
                delta.memory_len,
                shape,
                compressed,
                b"",
            )
        };
        let mut flipped = delta.compressed.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x55;
        assert!(matches!(
            try_with(&flipped, delta.shape),
            Err(DeltaError::Corrupt(_))
        ));
        let cut = &delta.compressed[..delta.compressed.len() - 3];
        assert!(matches!(
            try_with(cut, delta.shape),
            Err(DeltaError::Corrupt(_))
        ));
        let more = DeltaShape {
            pages: 2,
            ..delta.shape
        };
        assert!(matches!(
            try_with(&delta.compressed, more),
            Err(DeltaError::Corrupt(_))
        ));
        assert!(try_with(&delta.compressed, delta.shape).is_ok());
    }
}
