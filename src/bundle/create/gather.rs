//! Gathering what a bundle carries: the tools and the packages their requirements lock
//! (on the runtime each needs), the runtimes (the Pydantic one when a tool needs it),
//! compiled for the bundle's platform, and the tools' warm states.

use std::fs;
use std::path::{Path, PathBuf};

use super::super::manifest::is_plain_relative;
use super::super::{BundleError, io_error};
use crate::packages::{Packages, Requirement, choice, script};
use crate::sandbox::artifacts::{BUILT_MANIFEST, PlatformFile, Role};
use crate::sandbox::{
    Flavour, Platform, Progress, RuntimeFiles, ShareKey, ToolFolder, Warmth, compiled,
};
use crate::worker::Workers;

use super::{CreateOptions, Item, Source};

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
pub(super) fn ship_packages(
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

pub(super) fn tool_packages(tool: &Path, error: crate::packages::PackagesError) -> BundleError {
    BundleError::ToolPackages {
        tool: tool.to_owned(),
        error,
    }
}

/// Adds `flavour`'s runtime (not the standard one, which every bundle has) to the
/// bundle: its standard library, its manifest and its runtime compiled for the
/// bundle's platform (compiled now when the home has none: minutes).
pub(super) fn add_runtime(
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
pub(super) fn ship_warm_states(
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
pub(super) fn compiled_runtime(
    files: &RuntimeFiles,
    progress: Progress,
) -> Result<PathBuf, BundleError> {
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
        let dir = &files.compiled_dir;
        fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        // As a sandbox compiles: one process of the home at a time.
        let _compiling = compiled::lock_compiling(dir, progress)?;
        if path.is_file() {
            return Ok(path);
        }
        let bytes = compiled::compile(files, progress)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| io_error(dir, e))?;
        std::io::Write::write_all(&mut tmp, &bytes).map_err(|e| io_error(tmp.path(), e))?;
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

pub(super) fn dir_name(path: &Path) -> Result<String, BundleError> {
    path.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .ok_or_else(|| BundleError::Create(format!("{} has no name", path.display())))
}

pub(super) fn platform_file(platform: &Platform) -> Result<Vec<u8>, BundleError> {
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
pub(super) fn walk(
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
pub(super) fn ancestors(items: &[Item], dirs: &[String]) -> Vec<String> {
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
