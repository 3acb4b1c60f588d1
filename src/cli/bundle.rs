//! `warden bundle create|verify|install`: one signed file for an edge device.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Subcommand;

use warden::audit::PublicKey;
use warden::bundle::{self, CreateOptions, Verified};
use warden::sandbox::artifacts::Role;
use warden::sandbox::platform::{self, CpuLevel};
use warden::sandbox::{Flavour, Platform, RuntimeFiles, SandboxConfig};
use warden::worker::{Workers, WorkersConfig};

use super::args::PipArgs;
use super::{ExitCode, usage};

/// `warden bundle ...`.
#[derive(Debug, Subcommand)]
pub enum BundleCommand {
    /// Write `warden-<version>-<target>-<cpu>.tar.zst`: the binary, the runtime
    /// precompiled for the target and CPU level, optional tools, a systemd unit, and a
    /// signed manifest of every file. Compiles the runtime first if the home has none
    /// for that platform (minutes).
    Create {
        /// The device's target triple. Default: this host's.
        #[arg(long, value_name = "TRIPLE")]
        target: Option<String>,
        /// The device's CPU level: baseline, x86-64-v2, x86-64-v3 or x86-64-v4 on
        /// x86-64; baseline or neoverse-n1 on aarch64. Default: this host's level for
        /// this host's target, else baseline.
        #[arg(long, value_name = "LEVEL")]
        cpu: Option<String>,
        /// A folder of tools to ship in the bundle's `tools/`. The requirements their
        /// PEP 723 blocks declare are locked here (with pip) and shipped with their
        /// wheels in the bundle's `packages/`, so the device installs them without pip.
        /// For this host's own platform, each tool's warm state ships too.
        #[arg(long, value_name = "DIR")]
        tools: Option<PathBuf>,
        /// Where pip finds the tools' packages.
        #[command(flatten)]
        pip: PipArgs,
        /// The Warden binary to ship, built for the target (`make bundle` builds one
        /// without the compiler). Default: this binary.
        #[arg(long, value_name = "PATH")]
        binary: Option<PathBuf>,
        /// The signing key file (64 hex digits, an Ed25519 seed), as for audit exports.
        /// Default: $WARDEN_HOME/audit-signing.key, created (mode 0600) on first use.
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// The folder to write the bundle into.
        #[arg(long, value_name = "DIR", default_value = ".")]
        out: PathBuf,
    },
    /// Check a bundle's signature and every file's size and SHA-256, and that it is for
    /// this host's target and this wasmtime. Exit 0 when intact, 1 naming the first bad
    /// file.
    Verify {
        /// The bundle.
        file: PathBuf,
        /// The public key it must be signed with (64 hex digits, as `warden audit pubkey`
        /// prints it). Without it the key named in the manifest is used, which shows
        /// only that the file is consistent, not who made it.
        #[arg(long, value_name = "KEY")]
        key: Option<PublicKey>,
        /// Check it for this target instead of this host's.
        #[arg(long, value_name = "TRIPLE")]
        target: Option<String>,
    },
    /// Verify a bundle, then unpack it into DIR (new or empty). Then run DIR/bin/warden.
    Install {
        /// The bundle.
        file: PathBuf,
        /// The folder to install into.
        dir: PathBuf,
        /// The public key it must be signed with (see `verify`).
        #[arg(long, value_name = "KEY")]
        key: Option<PublicKey>,
    },
}

pub(super) fn bundle(config: &SandboxConfig, cmd: BundleCommand) -> Result<ExitCode> {
    match cmd {
        BundleCommand::Create {
            target,
            cpu,
            tools,
            pip,
            binary,
            key,
            out,
        } => {
            let target = target.unwrap_or_else(|| platform::host_target().to_owned());
            let cpu = match cpu {
                Some(cpu) => cpu,
                None if target == platform::host_target() => CpuLevel::host().name().to_owned(),
                None => "baseline".to_owned(),
            };
            let platform = Platform::new(&target, &cpu).map_err(|e| usage(e.to_string()))?;
            let binary = match binary {
                Some(b) => b,
                None => std::env::current_exe().context("cannot find this warden's binary")?,
            };
            if !binary.is_file() {
                return Err(usage(format!(
                    "the binary {} does not exist: build it, or leave out --binary",
                    binary.display()
                )));
            }
            if let Some(tools) = &tools
                && !tools.is_dir()
            {
                return Err(usage(format!(
                    "the tools folder {} does not exist",
                    tools.display()
                )));
            }
            let key = super::keys::audit_key(&config.home, key.as_deref())?;
            // Workers on this host's runtime, when there are tools: they compile the
            // package sites to bytecode and, when the bundle is for this host's own
            // platform, prepare the tools' warm states.
            let needs_packages = match &tools {
                Some(dir) => bundle::tool_requirements(dir)?
                    .iter()
                    .any(|(_, r)| !r.is_empty()),
                None => false,
            };
            let workers = if needs_packages || (tools.is_some() && platform == Platform::host()) {
                Some(Arc::new(Workers::open(&WorkersConfig::new(
                    config.clone(),
                )?)?))
            } else {
                None
            };
            let packages = match &workers {
                Some(workers) if needs_packages => Some(pip.store(config, workers)?),
                _ => None,
            };
            // The Pydantic runtime's store, when this home has that runtime built: tools
            // that need it are bundled with it.
            let pydantic = RuntimeFiles::of(&config.home, Flavour::Pydantic)
                .ok()
                .filter(RuntimeFiles::present);
            let pydantic_packages = match (&packages, pydantic) {
                (Some(store), Some(files)) => {
                    Some(store.sibling(&files.path(Role::Stdlib), Flavour::Pydantic)?)
                }
                _ => None,
            };
            let written = bundle::create(&CreateOptions {
                platform,
                binary: &binary,
                tools: tools.as_deref(),
                packages: packages.as_ref(),
                pydantic_packages: pydantic_packages.as_ref(),
                workers: workers.as_deref(),
                home: &config.home,
                key: &key,
                out_dir: &out,
                progress: config.progress,
            })?;
            let size = std::fs::metadata(&written).map_or(0, |m| m.len());
            println!("{}", written.display());
            eprintln!(
                "warden: wrote {} ({}), signed by {}",
                written.display(),
                warden::limits::ByteSize(size),
                key.public_key()
            );
            Ok(ExitCode::Ok)
        }
        BundleCommand::Verify { file, key, target } => {
            let verified = bundle::verify(&file, key.as_ref(), target.as_deref())?;
            println!("{}", summary(&file, &verified, key.is_some()));
            Ok(ExitCode::Ok)
        }
        BundleCommand::Install { file, dir, key } => {
            let verified = bundle::install(&file, &dir, key.as_ref())?;
            println!("{}", summary(&file, &verified, key.is_some()));
            println!(
                "installed into {}: run {}/bin/warden (state in $WARDEN_HOME or --home)",
                dir.display(),
                dir.display()
            );
            Ok(ExitCode::Ok)
        }
    }
}

fn summary(file: &std::path::Path, verified: &Verified, key_given: bool) -> String {
    let m = &verified.manifest;
    let who = if key_given {
        format!("signed by {}", verified.key)
    } else {
        format!(
            "signed by the key it names, {} (pass --key to check who signed it)",
            verified.key
        )
    };
    format!(
        "{} is intact: {} files, warden {}, wasmtime {}, for {} at CPU level {}; {who}",
        file.display(),
        m.files.len(),
        m.warden_version,
        m.wasmtime_version,
        m.target,
        m.cpu
    )
}
