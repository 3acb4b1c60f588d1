//! `warden schema` and `warden validate`: the static view of a tool, never running it.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use warden::limits::DEFAULT_RETURN_CHARS;
use warden::manifest::ToolName;
use warden::schema::{self, DeriveOptions, Format, LettaExtras, Severity};

use super::args::GrantArgs;
use super::{ExitCode, file_stem, nothing_to_call, read_tool, render_failure, usage};

/// `warden schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// The tool's Python source file.
    pub tool: PathBuf,

    /// The function to describe. Default: the function named like the file, else the
    /// only public function.
    #[arg(long, short, value_name = "NAME")]
    pub function: Option<String>,

    /// Output format: json-schema, openai, anthropic, mcp or letta.
    #[arg(long, default_value = "json-schema", value_name = "FORMAT")]
    pub format: String,

    /// Emit the strict (OpenAI structured-outputs) variant: optional parameters become
    /// required nullable ones. Fails when the schema has no strict variant.
    #[arg(long)]
    pub strict: bool,

    /// For `--format letta`: a tag of the tool. Repeatable.
    #[arg(long, value_name = "TAG")]
    pub tag: Vec<String>,

    /// For `--format letta`: the tool's return_char_limit.
    #[arg(long, value_name = "CHARS", default_value_t = DEFAULT_RETURN_CHARS.0)]
    pub return_char_limit: u32,
}

/// `warden validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The tool's Python source file.
    pub tool: PathBuf,

    /// The function to check. Default: as for `warden schema`.
    #[arg(long, short, value_name = "NAME")]
    pub function: Option<String>,

    /// Grants and limits as `warden run` takes them: risky ones are reported as
    /// warnings (read-write folders, wildcard hosts, secrets bound to a wildcard or
    /// plain http).
    #[command(flatten)]
    pub grant: GrantArgs,
}

pub(super) fn schema(args: SchemaArgs) -> Result<ExitCode> {
    let source = read_tool(&args.tool)?;
    let format: Format = args
        .format
        .parse()
        .map_err(|e: schema::SchemaError| usage(e.to_string()))?;
    let options = DeriveOptions {
        file_stem: file_stem(&args.tool),
        function: args.function,
    };
    let derived = schema::derive(&source, &options)
        .map_err(|e| render_failure(&e, &source, &args.tool, None))?;
    let shown = args.tool.display().to_string();
    for d in &derived.diagnostics {
        eprintln!("{}", d.render(&source, &shown));
    }
    if derived.schema.members_only {
        return Err(usage(nothing_to_call(&args.tool, &derived.schema)));
    }
    let letta = LettaExtras {
        source_code: source.clone(),
        return_char_limit: args.return_char_limit,
        tags: args.tag,
        ..LettaExtras::default()
    };
    // A tool decorator's or tool class's own name (`@tool("multiply")`, smolagents'
    // `name = "get_weather"`) is the name an agent knows the tool by, as on registration.
    let mut shown_schema = derived.schema.clone();
    if let Some(name) = schema::tool_functions(&source)
        .into_iter()
        .find(|d| d.function == derived.schema.name)
        .and_then(|d| d.name)
        .filter(|n| n.parse::<ToolName>().is_ok())
    {
        shown_schema.name = name;
    }
    let exported = schema::export(&shown_schema, format, args.strict, &letta)
        .map_err(|e| usage(e.to_string()))?;
    println!("{}", serde_json::to_string_pretty(&exported)?);
    // Which runtime its calls get, on stderr beside the diagnostics: stdout stays the
    // schema alone, for scripts.
    if let Ok(meta) = warden::packages::script::read(&source) {
        let flavour = warden::packages::choice::flavour_for(&meta.dependencies);
        eprintln!("runtime: {flavour} ({})", flavour.summary());
    }
    Ok(ExitCode::Ok)
}

pub(super) fn validate(args: ValidateArgs) -> Result<ExitCode> {
    let source = read_tool(&args.tool)?;
    let options = DeriveOptions {
        file_stem: file_stem(&args.tool),
        function: args.function,
    };
    let diagnostics = schema::check(&source, &options);
    let shown = args.tool.display().to_string();
    for d in &diagnostics {
        println!("{}", d.render(&source, &shown));
    }
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    let warnings = diagnostics.len() - errors;
    if let Ok(derived) = schema::derive(&source, &options) {
        let health = schema::health(&derived.schema);
        println!(
            "{}: {}() schema health {}",
            shown,
            derived.schema.name,
            serde_json::to_value(health.class)?
                .as_str()
                .unwrap_or("unknown")
        );
        for reason in &health.reasons {
            println!("  - {reason}");
        }
    }
    // The PEP 723 block, read statically like the schema; resolved only by `run`,
    // `packages lock` or registration.
    let errors = match warden::packages::script::read(&source) {
        Ok(meta) => {
            if !meta.dependencies.is_empty() {
                let listed: Vec<String> =
                    meta.dependencies.iter().map(ToString::to_string).collect();
                println!("{shown}: requires {}", listed.join(", "));
            }
            let flavour = warden::packages::choice::flavour_for(&meta.dependencies);
            println!(
                "{shown}: runs on the {flavour} runtime ({})",
                flavour.summary()
            );
            errors
        }
        Err(e) => {
            println!("{shown}: error: {e}");
            errors + 1
        }
    };
    let grants = args.grant.grants()?;
    let risks = warden::capabilities::warnings(&grants, &args.grant.limits(), None);
    for risk in &risks {
        println!("{shown}: warning: {}: {}", risk.code, risk.message);
    }
    let warnings = warnings + risks.len();
    println!("{errors} error(s), {warnings} warning(s)");
    Ok(if errors > 0 {
        ExitCode::Failure
    } else {
        ExitCode::Ok
    })
}
