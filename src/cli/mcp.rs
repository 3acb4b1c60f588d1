//! `warden mcp`: serve a folder of tools (or some tool files) to one MCP client over
//! stdio. Stdout carries the protocol and nothing else; every note goes to stderr.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use rmcp::ServiceExt;

use warden::app::runtimes::Runtimes;
use warden::mcp::catalog::{Defaults, Problem, Sources};
use warden::mcp::{FolderSource, LocalTrail, McpServer, TRAIL_TENANT};
use warden::registry::Location;
use warden::sandbox::{Progress, Sandbox, SandboxConfig};
use warden::worker::{Workers, WorkersConfig};

use super::run::CallArgs;
use super::{ExitCode, usage};

/// `warden mcp`.
#[derive(Debug, Args)]
#[command(
    after_long_help = WARDEN_TOML,
    group = clap::ArgGroup::new("served").args(["tools", "files"]).required(true)
)]
pub struct McpArgs {
    /// A folder of tools: each `.py` file in it (not in sub-folders) is a tool, named by
    /// its function (the one named like the file, else the only public one). Its
    /// `warden.toml`, if any, sets grants and limits per tool (see below). Files added,
    /// changed or removed while serving change the tool list.
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "files",
        conflicts_with = "files"
    )]
    pub tools: Option<PathBuf>,

    /// Tool files to serve instead of a folder.
    #[arg(value_name = "FILE.py")]
    pub files: Vec<PathBuf>,

    /// Where every call is recorded: a SQLite file, or a postgresql:// URL. Calls are
    /// appended to the audit trail of the tenant `warden-mcp` there (made on first use),
    /// each tool file registered as a version; `warden audit export --db FILE --tenant
    /// ID` exports it signed.
    #[arg(
        long,
        value_name = "PATH|URL",
        default_value = "$WARDEN_HOME/mcp-audit.db"
    )]
    pub audit_db: String,

    /// Limits, grants and where calls start from, for every tool.
    #[command(flatten)]
    pub call: CallArgs,
}

const WARDEN_TOML: &str = "\
warden.toml in the tools folder (each key optional; a [tools.NAME] table replaces the
command line's grants for that tool and overrides the limits it names):

  [tools.summarize]
  mounts = [\"./reports:/data:ro\"]      # HOST:GUEST[:ro|rw], HOST relative to the folder
  env = [\"LANG=C\"]
  hosts = [\"api.example.com\"]          # as --allow-host
  secrets = [\"API_KEY@api.example.com\"] # as --secret; the value from Warden's environment
  limits = { fuel = \"5G\", timeout = \"30s\", memory = \"512MiB\" }  # any limit flag, _ for -
  idempotent = true                    # MCP's idempotentHint
  title = \"Summarize a report\"         # shown by clients instead of the name
  icon = \"https://example.com/s.png\"   # or data:image/png;base64,...

Point a client at it with the command `warden` and the arguments `mcp --tools DIR`.";

pub(super) fn mcp(config: &SandboxConfig, args: McpArgs) -> Result<ExitCode> {
    let sources = match args.tools {
        Some(dir) if dir.is_dir() => Sources::Folder(dir),
        Some(dir) => {
            return Err(usage(format!(
                "--tools {}: not a folder; give the folder holding the tools' .py files",
                dir.display()
            )));
        }
        None => {
            if let Some(missing) = args.files.iter().find(|f| !f.is_file()) {
                return Err(usage(format!(
                    "tool file {} does not exist: check the path",
                    missing.display()
                )));
            }
            Sources::Files(args.files)
        }
    };
    let grants = args.call.grants()?;
    let defaults = Defaults {
        outbound: args.call.outbound(&grants)?,
        limits: args.call.limits(),
        grants,
    };
    // Bars and spinners would only clutter a client's log of stderr: one line instead.
    let config = SandboxConfig {
        progress: Progress::Quiet,
        ..config.clone()
    };
    if !Sandbox::compiled_path(&config)?.exists() {
        eprintln!(
            "warden: preparing the runtime (fetched and compiled once, a few minutes) \
             before serving"
        );
    }
    let workers = Arc::new(Workers::open(&WorkersConfig::new(config.clone())?)?);
    let packages = args.call.pip.store(&config, &workers)?;
    // Tools needing Pydantic 2 (or another extension only it has) open the Pydantic
    // runtime while the catalog loads.
    let runtimes = Arc::new(Runtimes::new(workers, packages));
    let report = Arc::new(|problem: &Problem| eprintln!("warden: {problem}"));
    let source = FolderSource::load(runtimes, sources, defaults, !args.call.cold, report)
        .map_err(|e| usage(e.to_string()))?;
    let trail_at = if args.audit_db == "$WARDEN_HOME/mcp-audit.db" {
        Location::Sqlite(config.home.join("mcp-audit.db"))
    } else {
        Location::parse(&args.audit_db).map_err(|e| usage(format!("--audit-db: {e}")))?
    };
    let trail = LocalTrail::open(&trail_at).with_context(|| {
        format!("cannot open the local audit trail {trail_at}; check --audit-db")
    })?;
    eprintln!(
        "warden: every call is recorded in {trail_at} (the audit trail of tenant {TRAIL_TENANT}, {})",
        trail.tenant()
    );
    let source = source.with_trail(Arc::new(trail));
    let names = source
        .catalog()
        .names()
        .into_iter()
        .collect::<Vec<_>>()
        .join(", ");
    let members = match source.catalog().members() {
        0 => String::new(),
        n => format!(" (and {n} resource(s) and prompt(s))"),
    };
    eprintln!("warden: serving over stdio: {names}{members}");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = runtime.block_on(async {
        let source = Arc::new(source);
        source.warm_up();
        tokio::spawn(Arc::clone(&source).watch());
        let service = McpServer::new(source)
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP client did not open a session on stdin")?;
        service
            .waiting()
            .await
            .context("the MCP session ended abnormally")
    });
    // Warm-state preparations still running are abandoned with the process.
    runtime.shutdown_background();
    let reason = served?;
    tracing::info!(?reason, "the MCP session ended");
    Ok(ExitCode::Ok)
}
