//! Making a bundle: gather the files, hash them, sign the manifest, write the archive.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

use super::manifest::{Header, is_plain_relative};
use super::{BundleError, BundleManifest, FileEntry, MANIFEST, MANIFEST_SIG, io_error};
use crate::audit::AuditKey;
use crate::packages::{Packages, Requirement, choice, script};
use crate::sandbox::artifacts::{BUILT_MANIFEST, PLATFORM_FILE, PlatformFile, Role};
use crate::sandbox::{
    Flavour, Platform, Progress, RuntimeFiles, SHIPPED_WARM, ShareKey, ToolFolder,
    WASMTIME_VERSION, Warmth, compiled, snapshot,
};
use crate::worker::Workers;

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
enum Source {
    File(PathBuf),
    Bytes(Vec<u8>),
}

struct Item {
    path: String,
    source: Source,
    executable: bool,
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

/// Every Python file under `tools` (sorted, sub-folders included) with the requirements
/// its PEP 723 block declares (none for most).
pub fn tool_requirements(tools: &Path) -> Result<Vec<(PathBuf, Vec<Requirement>)>, BundleError> {
    let mut files = Vec::new();
    let mut todo = vec![tools.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).map_err(|e| io_error(&dir, e))? {
            let entry = entry.map_err(|e| io_error(&dir, e))?;
            let path = entry.path();
            // Links are not followed: the bundle refuses them (see `walk`).
            let kind = entry.file_type().map_err(|e| io_error(&path, e))?;
            if kind.is_dir() {
                todo.push(path);
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "py") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut out = Vec::with_capacity(files.len());
    for tool in files {
        let bytes = fs::read(&tool).map_err(|e| io_error(&tool, e))?;
        let Ok(source) = String::from_utf8(bytes) else {
            return Err(BundleError::Create(format!(
                "{} is not UTF-8 text: a tool's source must be UTF-8",
                tool.display()
            )));
        };
        match script::read(&source) {
            Ok(meta) => out.push((tool, meta.dependencies)),
            Err(error) => return Err(BundleError::ToolPackages { tool, error }),
        }
    }
    Ok(out)
}

/// Locks the requirements of every tool of `tools` (as [`tool_requirements`] found
/// them) on the runtime each needs ([`choice`]: the Pydantic one for Pydantic 2 and its
/// extensions, or when the standard one cannot meet them) and writes the locks and
/// wheels into `into` (the bundle's `packages/` being made). Each tool's runtime.
fn ship_packages(
    tools: &[(PathBuf, Vec<Requirement>)],
    options: &CreateOptions<'_>,
    into: &Path,
) -> Result<Vec<Flavour>, BundleError> {
    let mut flavours = Vec::with_capacity(tools.len());
    for (tool, requirements) in tools {
        if requirements.is_empty() {
            flavours.push(Flavour::Standard);
            continue;
        }
        let store = |flavour| {
            let store = match flavour {
                Flavour::Standard => options.packages,
                Flavour::Pydantic => options.pydantic_packages,
            };
            store.ok_or_else(|| {
                BundleError::Create(format!(
                    "the tool {} needs the {flavour} runtime's packages, and no store was \
                     given to lock them{}",
                    tool.display(),
                    if flavour.is_built() {
                        format!(": build that runtime first (`warden runtime build {flavour}`)")
                    } else {
                        String::new()
                    }
                ))
            })
        };
        let ship = |flavour| store(flavour).map(|s| s.ship(requirements.clone(), into));
        let chosen = choice::flavour_for(requirements);
        let flavour = match ship(chosen)? {
            Ok(_) => chosen,
            Err(first) => match choice::retry_on(chosen, false, &first) {
                Some(other) if store(other).is_ok() => match ship(other)? {
                    Ok(_) => other,
                    Err(_) => return Err(tool_packages(tool, first)),
                },
                _ => return Err(tool_packages(tool, first)),
            },
        };
        flavours.push(flavour);
    }
    Ok(flavours)
}

fn tool_packages(tool: &Path, error: crate::packages::PackagesError) -> BundleError {
    BundleError::ToolPackages {
        tool: tool.to_owned(),
        error,
    }
}

/// Adds `flavour`'s runtime (not the standard one, which every bundle has) to the
/// bundle: its standard library, its manifest and its runtime compiled for the
/// bundle's platform (compiled now when the home has none: minutes).
fn add_runtime(
    options: &CreateOptions<'_>,
    flavour: Flavour,
    items: &mut Vec<Item>,
    dirs: &mut Vec<String>,
) -> Result<(), BundleError> {
    let files = RuntimeFiles::of(options.home, flavour)
        .map_err(crate::sandbox::SandboxError::from)?
        .for_platform(options.platform.clone());
    let cwasm = compiled_runtime(&files, options.progress)?;
    let dir = format!("runtime/{}", dir_name(&files.root)?);
    let stdlib = files.path(Role::Stdlib);
    items.extend([
        Item {
            path: format!("{dir}/lib/{}", dir_name(&stdlib)?),
            source: Source::File(stdlib),
            executable: false,
        },
        Item {
            path: format!("{dir}/{BUILT_MANIFEST}"),
            source: Source::File(files.root.join(BUILT_MANIFEST)),
            executable: false,
        },
        Item {
            path: format!("runtime/compiled/{}", compiled::name(&files)?),
            source: Source::File(cwasm),
            executable: false,
        },
    ]);
    // CPython's start-up looks for lib-dynload; Warden's mounts look for matplotlib's
    // data folder (empty here).
    dirs.push(format!(
        "{dir}/lib/python{}/lib-dynload",
        files.flavour.python()
    ));
    dirs.push(format!("{dir}/matplotlib-data"));
    Ok(())
}

/// Prepares the warm state of every tool of `tools` (with its packages) in
/// `workers`, which run the bundle's compiled runtime, and copies each into `into` as
/// `<key>.warm`, keyed as the device keys it for `warden run` (the tool's file name and
/// source, its package site, no tenant). A tool that runs cold ships none. How many
/// were shipped.
fn ship_warm_states(
    tools: &[(PathBuf, Vec<Requirement>)],
    packages: Option<&Packages>,
    workers: &Workers,
    into: &Path,
) -> Result<usize, BundleError> {
    let store = workers.warm_store();
    let owner = ShareKey::default();
    let mut shipped = 0;
    for (tool, requirements) in tools {
        let source = fs::read_to_string(tool).map_err(|e| io_error(tool, e))?;
        let file_name = tool
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| BundleError::Create(format!("{} has no name", tool.display())))?;
        let site = match (requirements.is_empty(), packages) {
            (true, _) => None,
            (false, Some(packages)) => packages
                .lock(requirements.clone())
                .and_then(|lock| packages.site(&lock))
                .map_err(|error| BundleError::ToolPackages {
                    tool: tool.clone(),
                    error,
                })?,
            (false, None) => continue,
        };
        let folder = ToolFolder::temporary(file_name, &source)?;
        match workers.warm_state_blocking(&folder, site.as_deref(), &owner)? {
            Warmth::Warm(_) => {
                let key = store.key(&folder, site.as_deref(), &owner)?;
                // The key names the owner's folder too (`o.../<digest>`).
                let to = into.join(format!("{key}.warm"));
                if !to.exists() {
                    let folder = to.parent().unwrap_or(into);
                    fs::create_dir_all(folder).map_err(|e| io_error(folder, e))?;
                    let from = store.file(&key);
                    fs::copy(&from, &to).map_err(|e| io_error(&from, e))?;
                    shipped += 1;
                }
            }
            Warmth::Cold(reason) => tracing::info!(
                "no warm state shipped for {}: it runs cold ({reason})",
                tool.display()
            ),
        }
    }
    Ok(shipped)
}

/// The compiled runtime for `files`' platform, from the home's cache, or compiled now
/// and kept there (with the compiler only).
fn compiled_runtime(files: &RuntimeFiles, progress: Progress) -> Result<PathBuf, BundleError> {
    let path = compiled::path(files)?;
    if path.is_file() {
        return Ok(path);
    }
    #[cfg(feature = "compiler")]
    {
        if !files.present() {
            files
                .fetch(None, progress)
                .map_err(crate::sandbox::SandboxError::from)?;
        }
        let bytes = compiled::compile(files, progress)?;
        let dir = &files.compiled_dir;
        fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| io_error(dir, e))?;
        tmp.write_all(&bytes).map_err(|e| io_error(tmp.path(), e))?;
        compiled::persist_once(tmp, &path)?;
        Ok(path)
    }
    #[cfg(not(feature = "compiler"))]
    {
        let _ = progress;
        Err(BundleError::Create(format!(
            "{} is not compiled, and this warden is built without the compiler: make \
             bundles with a warden built with its default features",
            path.display()
        )))
    }
}

fn dir_name(path: &Path) -> Result<String, BundleError> {
    path.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .ok_or_else(|| BundleError::Create(format!("{} has no name", path.display())))
}

fn platform_file(platform: &Platform) -> Result<Vec<u8>, BundleError> {
    let file = PlatformFile {
        target: platform.target().to_owned(),
        cpu: platform.cpu().name().to_owned(),
    };
    toml::to_string(&file)
        .map(String::into_bytes)
        .map_err(|e| BundleError::Create(e.to_string()))
}

/// Adds every plain file and folder under `dir` at `prefix`; refuses links and names
/// that are not plain UTF-8 path components.
fn walk(
    dir: &Path,
    prefix: &str,
    items: &mut Vec<Item>,
    dirs: &mut Vec<String>,
) -> Result<(), BundleError> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .map_err(|e| io_error(dir, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| io_error(dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    dirs.push(prefix.to_owned());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|n| is_plain_relative(n)) else {
            return Err(BundleError::Create(format!(
                "{}: the name is not plain UTF-8",
                path.display()
            )));
        };
        let kind = entry.file_type().map_err(|e| io_error(&path, e))?;
        let inside = format!("{prefix}/{name}");
        if kind.is_dir() {
            walk(&path, &inside, items, dirs)?;
        } else if kind.is_file() {
            items.push(Item {
                path: inside,
                source: Source::File(path),
                executable: false,
            });
        } else {
            return Err(BundleError::Create(format!(
                "{} is a link or special file: a bundle holds only plain files",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Every folder above an item or a folder.
fn ancestors(items: &[Item], dirs: &[String]) -> Vec<String> {
    let mut all = Vec::new();
    for path in items.iter().map(|i| &i.path).chain(dirs) {
        let mut at = path.as_str();
        while let Some((parent, _)) = at.rsplit_once('/') {
            all.push(parent.to_owned());
            at = parent;
        }
    }
    all.sort();
    all.dedup();
    all
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
