//! Making a bundle: gather the files ([`gather`]), hash them, sign the manifest, write
//! the archive.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

use super::manifest::Header;
use super::{BundleError, BundleManifest, FileEntry, MANIFEST, MANIFEST_SIG, io_error};
use crate::audit::AuditKey;
use crate::packages::Packages;
use crate::sandbox::artifacts::{PLATFORM_FILE, Role};
use crate::sandbox::{
    Flavour, Platform, Progress, RuntimeFiles, SHIPPED_WARM, WASMTIME_VERSION, compiled, snapshot,
};
use crate::worker::Workers;
pub use gather::tool_requirements;
use gather::{
    add_runtime, ancestors, compiled_runtime, dir_name, platform_file, ship_packages,
    ship_warm_states, walk,
};

mod gather;

/// zstd's level for bundles: close to the best ratio on machine code at a few seconds per
/// hundred megabytes on two cores.
const ZSTD_LEVEL: i32 = 12;

/// What goes into a bundle.
#[derive(Debug)]
pub struct CreateOptions<'a> {
    /// The platform the runtime is compiled for.
    pub platform: Platform,
    /// The Warden binary to ship (built for `platform`'s target).
    pub binary: &'a Path,
    /// A folder of tools to ship under `tools/`, if any.
    pub tools: Option<&'a Path>,
    /// The store that locks the tools' requirements and fetches their wheels into the
    /// bundle's `packages/`; needed when a tool declares requirements.
    pub packages: Option<&'a Packages>,
    /// The Pydantic runtime's store, when the home has that runtime built: a tool whose
    /// requirements need it has its packages locked there, and the bundle then carries
    /// that runtime too (compiled for the platform).
    pub pydantic_packages: Option<&'a Packages>,
    /// Workers running this host's compiled runtime, which prepare the tools' warm
    /// states when it is the bundle's (same target, CPU level and engine settings).
    pub workers: Option<&'a Workers>,
    /// The home whose runtime is bundled (and compiled, when it is not yet).
    pub home: &'a Path,
    /// The signing key.
    pub key: &'a AuditKey,
    /// The folder the bundle is written into.
    pub out_dir: &'a Path,
    /// Progress on stderr.
    pub progress: Progress,
}

/// `warden-<version>-<target>-<cpu>.tar.zst`.
pub fn file_name(platform: &Platform) -> String {
    format!(
        "warden-{}-{}-{}.tar.zst",
        env!("CARGO_PKG_VERSION"),
        platform.target(),
        platform.cpu()
    )
}

/// Where a bundle file's bytes come from.
pub(super) enum Source {
    File(PathBuf),
    Bytes(Vec<u8>),
}

pub(super) struct Item {
    pub(super) path: String,
    pub(super) source: Source,
    pub(super) executable: bool,
}

/// Makes the bundle and returns its path. Compiles the runtime for the platform first
/// when the home has no compiled runtime for it (minutes; needs the compiler).
pub fn create(options: &CreateOptions<'_>) -> Result<PathBuf, BundleError> {
    let home_files = RuntimeFiles::at(options.home).map_err(crate::sandbox::SandboxError::from)?;
    let files = home_files.for_platform(options.platform.clone());
    let cwasm = compiled_runtime(&files, options.progress)?;
    if !files.runnable() {
        files
            .ensure(options.progress)
            .map_err(crate::sandbox::SandboxError::from)?;
    }
    let runtime_dir = format!("runtime/{}", dir_name(&files.root)?);
    let mut items = vec![
        Item {
            path: "bin/warden".into(),
            source: Source::File(options.binary.to_owned()),
            executable: true,
        },
        Item {
            path: format!("runtime/{PLATFORM_FILE}"),
            source: Source::Bytes(platform_file(&options.platform)?),
            executable: false,
        },
        Item {
            path: format!("{runtime_dir}/lib/python315.zip"),
            source: Source::File(files.path(Role::Stdlib)),
            executable: false,
        },
        Item {
            path: format!("runtime/compiled/{}", compiled::name(&files)?),
            source: Source::File(cwasm),
            executable: false,
        },
        Item {
            path: "share/systemd/warden.service".into(),
            source: Source::Bytes(systemd_unit().into_bytes()),
            executable: false,
        },
    ];
    let mut dirs = vec!["runtime/empty".to_owned()];
    walk(
        &files.matplotlib_data_dir(),
        &format!("{runtime_dir}/matplotlib-data"),
        &mut items,
        &mut dirs,
    )?;
    // The tools' locks, wheels and warm states, staged until the archive is written.
    let staging = tempfile::tempdir().map_err(|e| io_error(&std::env::temp_dir(), e))?;
    if let Some(tools) = options.tools {
        walk(tools, "tools", &mut items, &mut dirs)?;
        let packages = staging.path().join("packages");
        let mut found = tool_requirements(tools)?;
        let flavours = ship_packages(&found, options, &packages)?;
        if packages.is_dir() {
            walk(&packages, "packages", &mut items, &mut dirs)?;
        }
        if flavours.contains(&Flavour::Pydantic) {
            add_runtime(options, Flavour::Pydantic, &mut items, &mut dirs)?;
        }
        // Warm states are shipped for the standard runtime's tools; the others prepare
        // theirs on the device's first call.
        found = found
            .into_iter()
            .zip(&flavours)
            .filter(|(_, f)| **f == Flavour::Standard)
            .map(|(tool, _)| tool)
            .collect();
        let warm = staging.path().join(SHIPPED_WARM);
        let identity = compiled::name(&files)?;
        match options.workers {
            Some(workers) if workers.warm_store().base_identity() == identity => {
                if ship_warm_states(&found, options.packages, workers, &warm)? > 0 {
                    walk(
                        &warm,
                        &format!("runtime/{SHIPPED_WARM}"),
                        &mut items,
                        &mut dirs,
                    )?;
                }
            }
            _ => tracing::info!(
                "no warm states shipped: this host does not run {identity}, the bundle's \
                 runtime; the device prepares each tool's on its first call"
            ),
        }
    }
    for path in ancestors(&items, &dirs) {
        if !dirs.contains(&path) {
            dirs.push(path);
        }
    }
    dirs.sort();

    let total: u64 = items.iter().map(|i| source_len(&i.source)).sum();
    let bar = bar(
        options.progress,
        total * 2,
        "hashing and packing the bundle",
    );
    let mut entries = Vec::with_capacity(items.len());
    for item in &items {
        let (size, sha256) = hash_source(&item.source, &bar)?;
        entries.push(FileEntry {
            path: item.path.clone(),
            size,
            sha256,
            executable: item.executable,
        });
    }
    let manifest = BundleManifest::new(
        Header {
            warden_version: env!("CARGO_PKG_VERSION").to_owned(),
            wasmtime_version: WASMTIME_VERSION.to_owned(),
            target: options.platform.target().to_owned(),
            cpu: options.platform.cpu().name().to_owned(),
            runtime_identity: snapshot::identity(&files)?,
            signer: options.key.public_key().to_string(),
        },
        dirs.clone(),
        entries,
    );
    let manifest_bytes = manifest.to_bytes()?;
    let signature = options.key.sign(&manifest_bytes);

    fs::create_dir_all(options.out_dir).map_err(|e| io_error(options.out_dir, e))?;
    let out = options.out_dir.join(file_name(&options.platform));
    let tmp = tempfile::NamedTempFile::new_in(options.out_dir)
        .map_err(|e| io_error(options.out_dir, e))?;
    let mut encoder =
        zstd::Encoder::new(tmp.as_file(), ZSTD_LEVEL).map_err(|e| io_error(&out, e))?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    encoder
        .multithread(threads)
        .map_err(|e| io_error(&out, e))?;
    encoder
        .long_distance_matching(true)
        .map_err(|e| io_error(&out, e))?;
    let mut archive = tar::Builder::new(encoder);
    append_bytes(&mut archive, MANIFEST, &manifest_bytes, &out)?;
    append_bytes(&mut archive, MANIFEST_SIG, signature.as_bytes(), &out)?;
    for dir in &dirs {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
        header.set_mtime(0);
        archive
            .append_data(&mut header, dir, io::empty())
            .map_err(|e| io_error(&out, e))?;
    }
    for (item, entry) in items.iter().zip(&manifest.files) {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(if item.executable { 0o555 } else { 0o444 });
        header.set_size(entry.size);
        header.set_mtime(0);
        let reader: Box<dyn Read> = match &item.source {
            Source::File(path) => Box::new(File::open(path).map_err(|e| io_error(path, e))?),
            Source::Bytes(bytes) => Box::new(io::Cursor::new(bytes.clone())),
        };
        let reader = bar.wrap_read(reader.take(entry.size));
        archive
            .append_data(&mut header, &item.path, reader)
            .map_err(|e| io_error(&out, e))?;
    }
    let encoder = archive.into_inner().map_err(|e| io_error(&out, e))?;
    let file = encoder.finish().map_err(|e| io_error(&out, e))?;
    file.sync_all().map_err(|e| io_error(&out, e))?;
    bar.finish_and_clear();
    tmp.persist(&out).map_err(|e| io_error(&out, e.error))?;
    Ok(out)
}

fn source_len(source: &Source) -> u64 {
    match source {
        Source::File(path) => fs::metadata(path).map_or(0, |m| m.len()),
        Source::Bytes(bytes) => bytes.len() as u64,
    }
}

fn hash_source(source: &Source, bar: &ProgressBar) -> Result<(u64, String), BundleError> {
    match source {
        Source::File(path) => {
            let file = File::open(path).map_err(|e| io_error(path, e))?;
            let mut hasher = Sha256::new();
            let size =
                io::copy(&mut bar.wrap_read(file), &mut hasher).map_err(|e| io_error(path, e))?;
            Ok((size, hex::encode(hasher.finalize())))
        }
        Source::Bytes(bytes) => {
            bar.inc(bytes.len() as u64);
            Ok((bytes.len() as u64, hex::encode(Sha256::digest(bytes))))
        }
    }
}

fn append_bytes<W: Write>(
    archive: &mut tar::Builder<W>,
    name: &str,
    bytes: &[u8],
    out: &Path,
) -> Result<(), BundleError> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o444);
    header.set_size(bytes.len() as u64);
    header.set_mtime(0);
    archive
        .append_data(&mut header, name, bytes)
        .map_err(|e| io_error(out, e))
}

fn bar(progress: Progress, len: u64, message: &str) -> ProgressBar {
    if progress == Progress::Quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if bar.is_hidden() {
        eprintln!("warden: {message}");
    }
    bar.set_style(
        ProgressStyle::with_template("{msg} {bar:30} {bytes}/{total_bytes} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(message.to_owned());
    bar
}

/// The systemd unit shipped in `share/systemd/`: `warden serve` from `/opt/warden`, its
/// state in `/var/lib/warden`, as an unprivileged dynamic user that cannot gain
/// privileges or write outside its state folder. Memory is capped with `MemoryMax`
/// (the cgroup's, counted in resident memory): never `LimitAS`, which would refuse the
/// address space wasmtime reserves for guards and pooled instances.
fn systemd_unit() -> String {
    "[Unit]\n\
Description=Warden: untrusted Python tools in WebAssembly sandboxes\n\
After=network.target\n\
\n\
[Service]\n\
Type=exec\n\
ExecStart=/opt/warden/bin/warden serve --listen 127.0.0.1:8080\n\
Environment=WARDEN_HOME=%S/warden\n\
EnvironmentFile=-/etc/warden/env\n\
StateDirectory=warden\n\
DynamicUser=yes\n\
NoNewPrivileges=yes\n\
ProtectSystem=strict\n\
ProtectHome=yes\n\
PrivateTmp=yes\n\
PrivateDevices=yes\n\
ProtectKernelTunables=yes\n\
ProtectControlGroups=yes\n\
RestrictSUIDSGID=yes\n\
MemoryMax=1G\n\
Restart=on-failure\n\
\n\
[Install]\n\
WantedBy=multi-user.target\n"
        .to_owned()
}
