//! `warden run`: derive the schema, check the arguments, call the tool, print the result.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use serde_json::{Map, Value};

use warden::app::{MAX_VIOLATIONS, PreparedTool, Refusal};
use warden::grants::Grants;
use warden::limits::{ByteSize, Limits};
use warden::outcome::{CallResult, ContentPart, Start, Status};
use warden::packages::{Requirement, script};
use warden::sandbox::{Flavour, Outbound, SandboxConfig, ShareKey, ToolFolder, Warmth};
use warden::schema::{self, DeriveOptions};
use warden::worker::{Workers, WorkersConfig};

use super::args::GrantArgs;
use super::args::PipArgs;
use super::{
    ExitCode, InvalidArguments, file_stem, nothing_to_call, read_tool, render_failure, usage,
};

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

    /// A package the tool needs, as a PEP 508 requirement (e.g. 'pydantic<2'), besides
    /// those of its source's PEP 723 block. Repeatable. Resolved once per set of
    /// requirements and cached under $WARDEN_HOME/packages.
    #[arg(long = "requirement", short = 'r', value_name = "SPEC")]
    pub requirements: Vec<Requirement>,

    /// Limits, grants and where calls start from.
    #[command(flatten)]
    pub call: CallArgs,

    /// The runtime to run on: `standard` (CPython 3.15: numpy, pandas, matplotlib,
    /// Pydantic 1.10) or `pydantic` (CPython 3.13 with Pydantic 2, built by `warden
    /// runtime build pydantic`). Default: `pydantic` when the tool's requirements ask for
    /// Pydantic 2 (e.g. `pydantic>=2`), else `standard`.
    #[arg(long, value_name = "NAME")]
    pub runtime: Option<Flavour>,

    /// Print the full result as JSON.
    #[arg(long)]
    pub json: bool,

    /// What a Letta tool's `agent_state` parameter gets (it is never part of the
    /// schema; Letta passes the agent's state there), as JSON. Default: None.
    #[arg(long, value_name = "JSON")]
    pub agent_state: Option<String>,

    /// Write the binary parts of a rich result (images, audio, files) to this folder
    /// (created if missing) as part-N.EXT, and print their paths (under --json, in
    /// "files").
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Start a run of a tool registered on a Warden server instead, and print its id at
    /// once: TOOL is then the tool's id (`tool_...`), and --server and --key say where
    /// and as whom (`warden runs wait ID` waits for its result).
    #[arg(long, requires = "server", requires = "key")]
    pub detach: bool,

    /// The server, with --detach (e.g. http://127.0.0.1:8080).
    #[arg(long, env = "WARDEN_SERVER", value_name = "URL", requires = "detach")]
    pub server: Option<String>,

    /// The tenant's API key, with --detach.
    #[arg(
        long,
        env = "WARDEN_API_KEY",
        value_name = "KEY",
        hide_env_values = true,
        requires = "detach"
    )]
    pub key: Option<String>,
}

/// The limits, grants and start of every call: `warden run`'s flags, shared with
/// `warden mcp` (which applies them to every tool it serves).
#[derive(Debug, Args)]
pub struct CallArgs {
    /// Limits and grants.
    #[command(flatten)]
    pub grant: GrantArgs,

    /// Where packages come from.
    #[command(flatten)]
    pub pip: PipArgs,

    /// Start from Warden's snapshot and import the tool in the call itself, instead of
    /// from the tool's warm state (prepared once per tool version and cached under
    /// $WARDEN_HOME/warm).
    #[arg(long)]
    pub cold: bool,
}

impl CallArgs {
    /// The limits the flags give.
    pub fn limits(&self) -> Limits {
        self.grant.limits()
    }

    /// The grants the flags give; see [`GrantArgs::grants`].
    pub fn grants(&self) -> Result<Grants> {
        self.grant.grants()
    }

    /// See [`GrantArgs::outbound`].
    pub fn outbound(&self, grants: &Grants) -> Result<Outbound> {
        self.grant.outbound(grants)
    }
}

pub(super) fn run(config: &SandboxConfig, args: RunArgs) -> Result<ExitCode> {
    if args.detach {
        return detach(args);
    }
    let prepared = match Prepared::from_args(&args) {
        Ok(prepared) => prepared,
        // With --json, arguments refused before running are a result like any other,
        // so that scripts never parse stderr.
        Err(e) if args.json && e.downcast_ref::<InvalidArguments>().is_some() => {
            if let Some(invalid) = e.downcast_ref::<InvalidArguments>() {
                println!("{}", serde_json::to_string_pretty(&refused(invalid))?);
            }
            return Ok(ExitCode::InvalidRequest);
        }
        Err(e) => return Err(e),
    };
    let mut config = config.clone();
    config.flavour = args
        .runtime
        .unwrap_or_else(|| warden::packages::choice::flavour_for(&prepared.requirements));
    let mut workers = std::sync::Arc::new(Workers::open(&WorkersConfig::new(config.clone())?)?);
    let tool = if prepared.requirements.is_empty() {
        prepared.tool
    } else {
        // Requirements that cannot be met are the user's input: exit code 2.
        let input = |e: warden::packages::PackagesError| -> anyhow::Error {
            if e.is_input_error() {
                usage(e.to_string())
            } else {
                e.into()
            }
        };
        let resolved = args
            .call
            .pip
            .resolve(
                &config,
                std::sync::Arc::clone(&workers),
                &prepared.requirements,
                args.runtime.is_some(),
            )?
            .map_err(input)?;
        let (packages, lock) = (resolved.packages, resolved.lock);
        (workers, config) = (resolved.workers, resolved.config);
        prepared
            .tool
            .with_packages(packages.site(&lock).map_err(input)?)
    };
    let config = &config;
    if !args.call.cold {
        tool.set_warmth(warmth(config, &workers, &tool)?);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let warm = tool.warm_state();
    let mut result = runtime.block_on(workers.call_with(
        tool.call(&prepared.arguments, &prepared.grants, &prepared.limits),
        warm.as_deref(),
        &prepared.outbound,
    ))?;
    let warnings: Vec<_> = tool
        .check_result(&mut result, prepared.limits.strict_results)
        .into_iter()
        .collect();
    let files = match &args.out {
        Some(dir) => write_parts(dir, &result.content)?,
        None => Vec::new(),
    };
    if args.json {
        let mut json = serde_json::to_value(&result)?;
        if let Value::Object(map) = &mut json {
            if args.out.is_some() {
                map.insert("files".into(), serde_json::to_value(&files)?);
            }
            if !warnings.is_empty() {
                map.insert("warnings".into(), serde_json::to_value(&warnings)?);
            }
        }
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        for warning in &warnings {
            eprintln!("warning ({}): {}", warning.code, warning.message);
        }
        print_human(&result, result.start);
        for file in &files {
            println!("wrote {}", file.display());
        }
    }
    Ok(result.status.into())
}

/// Writes each binary or file part of `parts` to `dir` as `part-N.EXT` (N its index in
/// the result); the paths written.
fn write_parts(dir: &Path, parts: &[ContentPart]) -> Result<Vec<PathBuf>> {
    use base64::Engine as _;
    let mut written = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let (bytes, mime) = match part {
            ContentPart::Image { data, mime_type } | ContentPart::Audio { data, mime_type } => (
                base64::engine::general_purpose::STANDARD.decode(data)?,
                mime_type,
            ),
            ContentPart::Resource { resource } => match (&resource.text, &resource.blob) {
                (Some(text), _) => (text.clone().into_bytes(), &resource.mime_type),
                (None, Some(blob)) => (
                    base64::engine::general_purpose::STANDARD.decode(blob)?,
                    &resource.mime_type,
                ),
                (None, None) => continue,
            },
            ContentPart::Text { .. } | ContentPart::ResourceLink { .. } => continue,
        };
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create --out folder {}", dir.display()))?;
        let path = dir.join(format!("part-{i}.{}", extension(mime)));
        std::fs::write(&path, bytes)
            .with_context(|| format!("cannot write {}; check --out", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// A file extension for a mime type.
fn extension(mime: &str) -> &str {
    let essence = mime.split(';').next().unwrap_or("").trim();
    match essence {
        "image/jpeg" => "jpg",
        "image/svg+xml" => "svg",
        "audio/mpeg" => "mp3",
        "audio/wav" | "audio/x-wav" | "audio/wave" => "wav",
        "text/plain" => "txt",
        "text/markdown" => "md",
        "application/octet-stream" => "bin",
        other => other
            .rsplit_once('/')
            .map(|(_, sub)| sub)
            .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric()))
            .unwrap_or("bin"),
    }
}

/// The tool's warm state: cached, or prepared now (once per tool version, with
/// progress). A tool that cannot have one runs cold, and the first run says why.
fn warmth(config: &SandboxConfig, workers: &Workers, tool: &PreparedTool) -> Result<Warmth> {
    if let Some(known) =
        workers.cached_warm_state(tool.folder(), tool.packages(), &ShareKey::default())?
    {
        return Ok(known);
    }
    // Seconds at most: a spinner on a terminal, and nothing in logs or pipes.
    let spinner = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        config.progress.spinner(
            "preparing the tool's warm state: running its imports once, so that later \
             calls start with them done (once per tool version)"
                .to_owned(),
        )
    } else {
        indicatif::ProgressBar::hidden()
    };
    let prepared =
        workers.warm_state_blocking(tool.folder(), tool.packages(), &ShareKey::default());
    spinner.finish_and_clear();
    let prepared = prepared?;
    if let Warmth::Cold(reason) = &prepared {
        eprintln!(
            "warden: note: this tool runs cold (its imports are paid on every call): {reason}"
        );
    }
    Ok(prepared)
}

/// The `--json` result of a call refused before running: the fields of a
/// [`CallResult`], plus every violation.
fn refused(invalid: &InvalidArguments) -> Value {
    serde_json::json!({
        "status": Status::InvalidRequest,
        "value": null,
        "truncated": null,
        "error": null,
        "message": invalid.message,
        "violations": invalid.violations,
        "stdout": "",
        "stderr": "",
        "fuel_used": 0,
        "wall_time_us": 0,
        "peak_memory_bytes": 0,
        "start": Start::Cold,
    })
}

/// Everything `warden run` needs, checked before any sandbox starts.
struct Prepared {
    tool: PreparedTool,
    arguments: Map<String, Value>,
    requirements: Vec<Requirement>,
    grants: Grants,
    limits: Limits,
    outbound: Outbound,
}

impl Prepared {
    fn from_args(args: &RunArgs) -> Result<Prepared> {
        let source = read_tool(&args.tool)?;
        let options = DeriveOptions {
            file_stem: file_stem(&args.tool),
            function: args.function.clone(),
        };
        let derived = schema::derive(&source, &options).map_err(|e| {
            render_failure(
                &e,
                &source,
                &args.tool,
                Some("needed to check arguments before running"),
            )
        })?;
        if derived.schema.members_only {
            return Err(usage(nothing_to_call(&args.tool, &derived.schema)));
        }
        let function = derived.schema.name.clone();
        let mut requirements = script::read(&source)
            .map_err(|e| usage(format!("{}: {e}", args.tool.display())))?
            .dependencies;
        requirements.extend(args.requirements.iter().cloned());
        let file_name = args
            .tool
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or("tool.py");
        let tool = PreparedTool::new(
            ToolFolder::temporary(file_name, &source)?,
            derived.schema,
            None,
        );
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
        let arguments = match tool.check(Value::Object(arguments)) {
            Ok(arguments) => arguments,
            Err(Refusal::BrokenSchema(reason)) => {
                return Err(anyhow::anyhow!(
                    "the derived schema of {function}() does not compile ({reason}): please report it"
                ));
            }
            Err(Refusal::Invalid(violations)) => {
                // As the service does: the first MAX_VIOLATIONS, and how many in all.
                let total = violations.len();
                let violations: Vec<String> = violations
                    .iter()
                    .take(MAX_VIOLATIONS)
                    .map(ToString::to_string)
                    .collect();
                let mut lines: Vec<String> = violations.iter().map(|v| format!("  {v}")).collect();
                if total > MAX_VIOLATIONS {
                    lines.push(format!(
                        "  ... and {} more ({total} in all)",
                        total - MAX_VIOLATIONS
                    ));
                }
                return Err(InvalidArguments {
                message: format!(
                    "the arguments do not match the schema of {function}():\n{}\nsee `warden schema {}`",
                    lines.join("\n"),
                    args.tool.display()
                ),
                    violations,
                }
                .into());
            }
        };
        let mut arguments = arguments;
        if let Some(state) = &args.agent_state {
            let state = serde_json::from_str::<Value>(state)
                .map_err(|e| usage(format!("--agent-state is not valid JSON: {e}")))?;
            arguments.insert(warden::app::AGENT_STATE.into(), state);
        }
        let limits = args.call.limits();
        let grants = args.call.grants()?;
        let outbound = args.call.outbound(&grants)?;
        Ok(Prepared {
            tool,
            arguments,
            requirements,
            grants,
            limits,
            outbound,
        })
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

fn print_human(r: &CallResult, start: Start) {
    eprintln!(
        "{}  (fuel {} · {:.1} ms · peak memory {} · {} start)",
        r.status,
        r.fuel_used,
        r.wall_time.as_secs_f64() * 1000.0,
        ByteSize::b(r.peak_memory_bytes),
        start.as_str()
    );
    if let Some(message) = &r.message {
        eprintln!("{message}");
    }
    for q in &r.requests {
        let what = format!(
            "{} {}://{}:{}{}",
            q.method, q.scheme, q.host, q.port, q.path
        );
        match (&q.refused, &q.error, q.status) {
            (Some(why), _, _) => eprintln!("request {what}: refused: {why}"),
            (None, Some(why), _) => eprintln!("request {what}: failed: {why}"),
            (None, None, status) => eprintln!(
                "request {what}: {} ({} sent, {} received, {:.1} ms)",
                status.map_or_else(|| "-".to_owned(), |s| s.to_string()),
                ByteSize::b(q.request_bytes),
                ByteSize::b(q.response_bytes),
                q.duration_us as f64 / 1000.0
            ),
        }
    }
    if let Some(e) = &r.error {
        match e.traceback.trim_end() {
            // The tool's own words (warden.ToolError), or a result the host refused.
            "" if e.deliberate => eprintln!("{}", e.message),
            "" => eprintln!("{}: {}", e.kind, e.message),
            traceback => eprintln!("{traceback}"),
        }
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

/// `warden run --detach`: `warden runs start` of the tool id given as TOOL.
fn detach(args: RunArgs) -> Result<ExitCode> {
    let (Some(server), Some(key)) = (args.server, args.key) else {
        return Err(usage("--detach needs --server URL and --key KEY"));
    };
    let start = super::runs::StartArgs {
        tool: args.tool.to_string_lossy().into_owned(),
        args: args.args,
        version: None,
        queue_timeout: None,
        wait: false,
        server: super::runs::ServerArgs { server, key },
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(super::runs::start(start))
}
