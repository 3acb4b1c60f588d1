//! The `warden` command line: argument parsing and the commands it runs.
//!
//! The CLI is an edge: it parses human strings into typed values once, reports errors
//! with `anyhow`, and maps outcomes to exit codes ([`ExitCode`]). Each command lives in
//! its own file under `cli/`.

mod args;
mod audit;
mod bundle;
mod db;
#[cfg(test)]
mod examples;
mod keys;
mod mcp;
mod packages;
mod review;
mod run;
mod runs;
mod runtime;
mod schema;
mod serve;
mod tenant;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use warden::outcome::Status;
use warden::sandbox::{Progress, SandboxConfig};

/// Run untrusted Python tools in fresh CPython-on-WASI sandboxes.
#[derive(Debug, Parser)]
#[command(name = "warden", version, about, max_term_width = 100)]
pub struct Cli {
    /// Warden's home folder: the runtime and its compiled cache.
    /// Default: the per-user cache folder (e.g. ~/.cache/warden).
    #[arg(long, env = "WARDEN_HOME", global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// Show no progress while fetching or compiling the runtime.
    #[arg(long, short, global = true)]
    pub quiet: bool,

    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Call a function of a Python tool file in a fresh sandbox and print the result.
    Run(Box<run::RunArgs>),
    /// Print a tool's JSON Schema, derived from its source without running it.
    Schema(schema::SchemaArgs),
    /// Check a tool without running it: syntax, function, annotations, docstrings,
    /// schema health.
    Validate(schema::ValidateArgs),
    /// Runs on a Warden server: start one and leave, read it, wait for its result,
    /// cancel it, list them.
    #[command(subcommand)]
    Runs(runs::RunsCommand),
    /// Manage the pinned Python runtime (fetched and compiled on first use anyway).
    #[command(subcommand)]
    Runtime(runtime::RuntimeCommand),
    /// Serve the multi-tenant HTTP API (registry in $WARDEN_HOME/warden.db, or on a
    /// PostgreSQL server several nodes share: --db postgresql://...).
    Serve(serve::ServeArgs),
    /// Serve a folder of tools to an MCP client (Claude Desktop, Cursor, an agent) over
    /// stdio.
    Mcp(Box<mcp::McpArgs>),
    /// Manage tenants, their policies and their API keys in the registry database.
    Tenant(tenant::TenantArgs),
    /// For security reviewers: a tool's capabilities and what changed between versions;
    /// a tenant's audit trail exported with a signed head, checked offline, and the
    /// public key that checks it.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Resolve a tool's package requirements into a lock, or fetch a lock's wheels for
    /// an offline machine.
    #[command(subcommand)]
    Packages(packages::PackagesCommand),
    /// The registry database: migrate its schema, or copy it into PostgreSQL.
    #[command(subcommand)]
    Db(db::DbCommand),
    /// Edge bundles: one signed file with the binary and the runtime precompiled for a
    /// device; check one, or install it.
    #[command(subcommand)]
    Bundle(bundle::BundleCommand),
}

/// Exit codes: 0 for `ok`; one per other status; 1 when Warden could not run the call;
/// 2 for bad input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Success.
    Ok = 0,
    /// Warden itself failed (runtime missing and unobtainable, I/O error, ...).
    Failure = 1,
    /// The command line or its input was wrong.
    Usage = 2,
    /// `tool_error`.
    ToolError = 10,
    /// `invalid_request`.
    InvalidRequest = 11,
    /// `timeout`.
    Timeout = 12,
    /// `out_of_fuel`.
    OutOfFuel = 13,
    /// `memory_limit`.
    MemoryLimit = 14,
    /// `output_limit`.
    OutputLimit = 15,
    /// `crashed`.
    Crashed = 16,
}

impl From<Status> for ExitCode {
    fn from(status: Status) -> Self {
        match status {
            Status::Ok => ExitCode::Ok,
            Status::ToolError => ExitCode::ToolError,
            Status::InvalidRequest => ExitCode::InvalidRequest,
            Status::Timeout => ExitCode::Timeout,
            Status::OutOfFuel => ExitCode::OutOfFuel,
            Status::MemoryLimit => ExitCode::MemoryLimit,
            Status::OutputLimit => ExitCode::OutputLimit,
            Status::Crashed => ExitCode::Crashed,
        }
    }
}

/// An error caused by the user's input: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

pub(crate) fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// What `run` and `schema` say of a file that declares resources and prompts and no tool.
pub(crate) fn nothing_to_call(
    tool: &std::path::Path,
    schema: &warden::schema::ToolSchema,
) -> String {
    let functions: Vec<&str> = schema
        .resources
        .iter()
        .map(|r| r.function.name.as_str())
        .chain(schema.prompts.iter().map(|p| p.function.name.as_str()))
        .collect();
    format!(
        "{} declares no tool, only resources and prompts (functions {}): serve them with `warden mcp --tools DIR`, or choose one function with `--function NAME`",
        tool.display(),
        functions.join(", ")
    )
}

impl Cli {
    /// Runs the command.
    pub fn run(self) -> Result<ExitCode> {
        let home = match self.home {
            Some(h) => h,
            None => default_home()?,
        };
        let mut config = SandboxConfig::new(home);
        // An installed bundle's binary runs the runtime beside it (DIR/runtime).
        config.runtime = std::env::current_exe()
            .ok()
            .and_then(|exe| warden::bundle::installed_runtime(&exe));
        if let Some(dir) = &config.runtime {
            tracing::info!("using the bundled runtime in {}", dir.display());
        }
        config.progress = if self.quiet {
            Progress::Quiet
        } else {
            Progress::Show
        };
        match self.command {
            Command::Run(args) => run::run(&config, *args),
            Command::Schema(args) => schema::schema(args),
            Command::Validate(args) => schema::validate(args),
            Command::Runs(cmd) => runs::runs(cmd),
            Command::Runtime(cmd) => runtime::runtime(&config, cmd),
            Command::Serve(args) => serve::serve(&config, args),
            Command::Mcp(args) => mcp::mcp(&config, *args),
            Command::Tenant(args) => tenant::tenant(&config.home, &args.db, args.command),
            Command::Audit(cmd) => audit::audit(&config.home, cmd),
            Command::Packages(cmd) => packages::packages(&config, cmd),
            Command::Db(cmd) => db::db(&config.home, cmd, self.quiet),
            Command::Bundle(cmd) => bundle::bundle(&config, cmd),
        }
    }
}

/// The arguments do not match the tool's schema: exit code 11, as `invalid_request`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct InvalidArguments {
    /// The whole explanation, every violation included.
    pub message: String,
    /// Each violation, `/pointer: what is wrong`.
    pub violations: Vec<String>,
}

/// A usage error carrying every diagnostic of a tool whose schema cannot be derived.
/// `purpose` says why the schema was needed, when that is not the command's own job.
fn render_failure(
    e: &warden::schema::SchemaError,
    source: &str,
    path: &Path,
    purpose: Option<&str>,
) -> anyhow::Error {
    let shown = path.display().to_string();
    let rendered: Vec<String> = e
        .diagnostics()
        .iter()
        .map(|d| d.render(source, &shown))
        .collect();
    if rendered.is_empty() {
        return usage(e.to_string());
    }
    let purpose = purpose.map(|p| format!(" ({p})")).unwrap_or_default();
    usage(format!(
        "cannot derive the schema of {shown}{purpose}:\n\n{}",
        rendered.join("\n")
    ))
}

/// Parses a duration flag (`10s`, `500ms`): clap's value parser for every duration.
/// The field is a `humantime::Duration` because its `Display` (`10s`, `2m`) reads back
/// as it was, which clap needs to show and parse a typed default.
fn duration(s: &str) -> Result<humantime::Duration, warden::limits::LimitError> {
    warden::limits::parse_duration(s).map(Into::into)
}

/// Parses a deadline flag (`10s`, `500ms`), refusing less than the least deadline.
fn deadline(s: &str) -> Result<humantime::Duration, warden::limits::LimitError> {
    warden::limits::parse_deadline(s).map(Into::into)
}

fn default_home() -> Result<PathBuf> {
    dirs::cache_dir()
        .map(|d| d.join("warden"))
        .context("cannot find a per-user cache folder: set WARDEN_HOME or pass --home DIR")
}

/// Reads a tool's source file, with errors that say what to do.
fn read_tool(path: &Path) -> Result<String> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| {
            usage(format!(
                "{} is not UTF-8 text: save the tool as UTF-8",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(usage(format!(
            "tool file {} does not exist: check the path",
            path.display()
        ))),
        Err(e) => Err(usage(format!(
            "cannot read tool file {}: {e}",
            path.display()
        ))),
    }
}

/// The file name without `.py`.
fn file_stem(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("tool")
        .to_owned()
}
