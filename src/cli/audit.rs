//! `warden audit`: the security reviewer's commands.

use std::path::Path;

use anyhow::Result;
use clap::Subcommand;

use super::ExitCode;
use super::review::{self, CapabilitiesArgs, DiffArgs};

/// `warden audit`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Everything a tool's guest could exercise with these flags: folders, variable
    /// names, hosts, secrets, packages, limits, the runtime, and what it can never do.
    Capabilities(Box<CapabilitiesArgs>),
    /// What changed between two versions of a registered tool: capabilities first
    /// (widening changes flagged), then the source.
    Diff(DiffArgs),
}

pub(super) fn audit(home: &Path, command: AuditCommand) -> Result<ExitCode> {
    match command {
        AuditCommand::Capabilities(args) => review::capabilities(*args),
        AuditCommand::Diff(args) => review::diff(home, args),
    }
}
