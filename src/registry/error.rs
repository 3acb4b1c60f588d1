//! What a registry operation can fail with ([`RegistryError`]), and what was not found
//! ([`Kind`]).

use std::fmt;

use super::{ReviewError, ToolId};
use crate::manifest::{ManifestError, ToolName};
use crate::tenant::TenantError;

/// What was not found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A tenant.
    Tenant,
    /// A tool (of this tenant).
    Tool,
    /// A version of a tool.
    Version,
    /// A tenant's secret.
    Secret,
    /// A tenant's reviewer key.
    ReviewerKey,
    /// A run (`POST /v1/tools/{id}/runs`).
    Run,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Tenant => "tenant",
            Kind::Tool => "tool",
            Kind::Version => "version",
            Kind::Secret => "secret",
            Kind::ReviewerKey => "reviewer key",
            Kind::Run => "run",
        })
    }
}

/// A registry operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No such tenant, tool or version, or one that belongs to another tenant.
    #[error("{kind} {id} not found: check the id, or list what exists")]
    NotFound {
        /// What was looked for.
        kind: Kind,
        /// The id given.
        id: String,
    },
    /// The tenant already has a tool of that name.
    #[error("a tool named {name} already exists: update that tool, or choose another name")]
    Conflict {
        /// The name.
        name: ToolName,
    },
    /// An update tried to change the tool's name.
    #[error(
        "tool {tool} is named {current}, not {requested}: a name is fixed; register a new tool to use another"
    )]
    Rename {
        /// The tool.
        tool: ToolId,
        /// Its name.
        current: ToolName,
        /// The name in the update.
        requested: ToolName,
    },
    /// The manifest is not a valid tool version.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A tenant's name or policy is not valid.
    #[error(transparent)]
    Tenant(#[from] TenantError),
    /// The review gate refused a decision or a submission.
    #[error(transparent)]
    Review(#[from] ReviewError),
    /// The database file could not be opened.
    #[error("cannot open the registry database {}: {source}; check the path and its permissions", .path.display())]
    Open {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// The database was written by a newer Warden.
    #[error(
        "the registry database has schema version {found}, newer than the {supported} this warden knows: upgrade warden"
    )]
    TooNew {
        /// The database's `user_version`.
        found: u32,
        /// The newest this build applies.
        supported: u32,
    },
    /// Stored data does not read back as it was written.
    #[error("stored {what} is corrupt ({detail}): restore the registry database from a backup")]
    Corrupt {
        /// Which record.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
    /// An audit export could not be written out (its reader went away, or the disk
    /// is full).
    #[error("cannot write the audit export: {0}; check where it goes, and export again")]
    Export(std::io::Error),
    /// SQLite failed.
    #[error("the registry database failed: {0}; retry, and check the disk if it persists")]
    Sqlite(#[from] rusqlite::Error),
    /// `--db` names something that is neither a file nor a PostgreSQL URL, or a URL that
    /// does not parse.
    #[error("cannot use {url} as the registry database: {reason}")]
    BadUrl {
        /// The value given (its password hidden).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The PostgreSQL server cannot be reached or went away: nothing was written.
    #[error(
        "the registry database is unreachable ({reason}): retry shortly; if it persists, check that PostgreSQL is running and reachable from this node"
    )]
    Unavailable {
        /// What the client saw.
        reason: String,
    },
    /// This node was started with another key than the one the database's first node
    /// recorded.
    #[error(
        "this node's {key} (fingerprint {given}) is not the one this registry was first used with (fingerprint {recorded}): start every node with the same {key} (the same file or environment variable)"
    )]
    KeyMismatch {
        /// Which key.
        key: String,
        /// The fingerprint the database records.
        recorded: String,
        /// This node's key's fingerprint.
        given: String,
    },
    /// The tenant already has as many runs queued as its policy allows.
    #[error(
        "the tenant already has {max} runs queued (its max_queued_runs): wait for some to \
         start or end, cancel some, or raise the policy's max_queued_runs"
    )]
    QueueFull {
        /// The tenant's `max_queued_runs`.
        max: u32,
    },
    /// A copy's target already holds a registry.
    #[error(
        "the target database already holds tenants: copy into an empty database (a new one, or drop its tables first)"
    )]
    NotEmpty,
    /// PostgreSQL refused a statement.
    #[error(
        "the registry database failed: {message}; retry, and check the server's log if it persists"
    )]
    Postgres {
        /// The SQLSTATE, when the server sent one.
        code: Option<String>,
        /// The server's message.
        message: String,
    },
}

impl RegistryError {
    pub(crate) fn corrupt(what: impl fmt::Display, detail: impl fmt::Display) -> RegistryError {
        RegistryError::Corrupt {
            what: what.to_string(),
            detail: detail.to_string(),
        }
    }
}

/// Whether `e` is a violated UNIQUE or PRIMARY KEY constraint.
pub(super) fn is_unique_violation(e: &RegistryError) -> bool {
    match e {
        RegistryError::Sqlite(rusqlite::Error::SqliteFailure(f, _)) => {
            f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
        }
        RegistryError::Postgres { code, .. } => code.as_deref() == Some("23505"),
        _ => false,
    }
}
