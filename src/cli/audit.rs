//! `warden audit`: the security reviewer's commands. `export|verify|pubkey`: a tenant's
//! audit trail exported from the registry database with a signed head, checked offline,
//! and the public key to check it with; `capabilities|diff` (`cli/review.rs`): what a
//! tool version can do, and what changed between versions.

use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use warden::audit::{PublicKey, Verification};

use super::keys::audit_key;
use super::review::{self, CapabilitiesArgs, DiffArgs};
use super::tenant::tenant_id;
use super::{ExitCode, usage};

/// `warden audit`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Export a tenant's audit trail from the registry database as JSON Lines, oldest
    /// event first, ending with a head signed by the audit signing key.
    Export(ExportArgs),
    /// Check an exported audit trail offline, without the database: every hash, link
    /// and sequence number, and the signed head. Exit 0 when intact, 1 naming the first
    /// event that does not check.
    Verify(VerifyArgs),
    /// Print the public key (64 hex digits) that checks the heads this home's key signs,
    /// to publish for those who verify exports.
    Pubkey(KeyArgs),
    /// Everything a tool's guest could exercise with these flags: folders, variable
    /// names, hosts, secrets, packages, limits, the runtime, and what it can never do.
    Capabilities(Box<CapabilitiesArgs>),
    /// What changed between two versions of a registered tool: capabilities first
    /// (widening changes flagged), then the source.
    Diff(DiffArgs),
}

/// Where the audit signing key is.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// A file holding the audit signing key (64 hex digits, an Ed25519 seed). Default:
    /// $WARDEN_HOME/audit-signing.key, created (mode 0600) on first use.
    #[arg(long, value_name = "FILE")]
    pub audit_key_file: Option<PathBuf>,
}

/// `warden audit export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The tenant's id (tnt_...).
    #[arg(long, value_name = "ID")]
    pub tenant: String,
    /// Write the export to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Where the registry is.
    #[command(flatten)]
    pub db: super::args::DbArgs,
    /// The signing key.
    #[command(flatten)]
    pub key: KeyArgs,
}

/// `warden audit verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The export (`-` for standard input).
    pub file: PathBuf,
    /// The public key the head must be signed with (64 hex digits, as `warden audit
    /// pubkey` or `GET /v1/audit/pubkey` gives it). Without it the key named in the
    /// export is used, which shows only that the file is consistent, not who made it.
    #[arg(long, value_name = "KEY")]
    pub pubkey: Option<PublicKey>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn audit(home: &Path, cmd: AuditCommand) -> Result<ExitCode> {
    match cmd {
        AuditCommand::Export(args) => export(home, args),
        AuditCommand::Verify(args) => verify(args),
        AuditCommand::Capabilities(args) => review::capabilities(*args),
        AuditCommand::Diff(args) => review::diff(home, args),
        AuditCommand::Pubkey(args) => {
            println!(
                "{}",
                audit_key(home, args.audit_key_file.as_deref())?.public_key()
            );
            Ok(ExitCode::Ok)
        }
    }
}

fn export(home: &Path, args: ExportArgs) -> Result<ExitCode> {
    let tenant = tenant_id(&args.tenant)?;
    let key = audit_key(home, args.key.audit_key_file.as_deref())?;
    let registry = args.db.open_existing(home)?;
    match &args.out {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            let mut out = BufWriter::new(file);
            let events = registry.export_audit(&tenant, &key, &mut out)?;
            out.into_inner()
                .map_err(|e| e.into_error())
                .and_then(|f| f.sync_all())
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("exported {events} events of {tenant} to {}", path.display());
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            registry.export_audit(&tenant, &key, &mut out)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::Ok)
}

fn verify(args: VerifyArgs) -> Result<ExitCode> {
    let result = if args.file == Path::new("-") {
        warden::audit::verify(std::io::stdin().lock(), args.pubkey.as_ref())
    } else {
        let file = std::fs::File::open(&args.file).map_err(|e| {
            usage(format!(
                "cannot open the export {}: {e}; check the path",
                args.file.display()
            ))
        })?;
        warden::audit::verify(BufReader::new(file), args.pubkey.as_ref())
    }
    .with_context(|| format!("cannot read the export {}", args.file.display()))?;
    if args.json {
        println!("{}", serde_json::to_string(&result)?);
    } else {
        println!("{}", result.summary());
    }
    Ok(match result {
        Verification::Intact { .. } => ExitCode::Ok,
        Verification::Broken { .. } => ExitCode::Failure,
    })
}
