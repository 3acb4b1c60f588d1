//! `warden audit capabilities` and `warden audit diff`: what a tool version can do, and
//! what changed between two versions, for security reviewers.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;

use warden::capabilities::{Capabilities, ChangeKind, Diff, Subject};
use warden::packages::{Lock, Requirement, script};
use warden::registry::ToolId;
use warden::schema::{self, DeriveOptions};
use warden::tenant::TenantId;

use super::args::GrantArgs;
use super::{ExitCode, file_stem, read_tool, usage};

/// `warden audit capabilities`.
#[derive(Debug, Args)]
pub struct CapabilitiesArgs {
    /// The tool's Python source file.
    pub tool: PathBuf,
    /// The tool's function. Default: as for `warden run`.
    #[arg(long, short, value_name = "NAME")]
    pub function: Option<String>,
    /// A package requirement besides the tool's PEP 723 block, as for `warden run`.
    #[arg(long = "requirement", short = 'r', value_name = "SPEC")]
    pub requirements: Vec<Requirement>,
    /// The grants and limits to review, as `warden run` takes them.
    #[command(flatten)]
    pub grant: GrantArgs,
    /// Print the document as JSON (format `warden.capabilities.v1`).
    #[arg(long)]
    pub json: bool,
}

/// `warden audit diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The tenant owning the tool (tnt_...).
    #[arg(long, value_name = "TENANT")]
    pub tenant: String,
    /// The tool (tool_...).
    pub tool: String,
    /// The older version: its number or id.
    pub from: String,
    /// The newer version: its number or id.
    pub to: String,
    /// Where the registry is.
    #[command(flatten)]
    pub db: super::args::DbArgs,
    /// Print the diff as JSON (format `warden.capabilities.diff.v1`).
    #[arg(long)]
    pub json: bool,
}

/// The capabilities of a local tool with the flags' grants and limits. Requirements are
/// listed as declared; wheels are resolved only by `warden run` or `warden packages lock`.
pub(super) fn capabilities(args: CapabilitiesArgs) -> Result<ExitCode> {
    let source = read_tool(&args.tool)?;
    let options = DeriveOptions {
        file_stem: file_stem(&args.tool),
        function: args.function.clone(),
    };
    let derived = schema::derive(&source, &options).map_err(|e| {
        usage(format!(
            "{}: {e}; `warden validate {}` shows every problem",
            args.tool.display(),
            args.tool.display()
        ))
    })?;
    let mut requirements = script::read(&source)
        .map_err(|e| usage(format!("{}: {e}", args.tool.display())))?
        .dependencies;
    requirements.extend(args.requirements.iter().cloned());
    let packages = Lock {
        requirements: warden::packages::lock::canonical(requirements),
        ..Lock::default()
    };
    let grants = args.grant.grants()?;
    let subject = Subject {
        name: derived.schema.name.clone(),
        function: derived.schema.name.clone(),
        tool: None,
        version: None,
        number: None,
        file: Some(args.tool.display().to_string()),
    };
    let document = Capabilities::describe(subject, &grants, &args.grant.limits(), &packages, None);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&document)?);
    } else {
        print!("{}", render(&document));
        for risk in warden::capabilities::warnings(&grants, &args.grant.limits(), None) {
            println!("warning: {}: {}", risk.code, risk.message);
        }
    }
    Ok(ExitCode::Ok)
}

/// What changed between two versions of a registered tool, read from the registry.
pub(super) fn diff(home: &Path, args: DiffArgs) -> Result<ExitCode> {
    let tenant: TenantId = args
        .tenant
        .parse()
        .map_err(|e| usage(format!("--tenant: {e}")))?;
    let tool: ToolId = args
        .tool
        .parse()
        .map_err(|e| usage(format!("{}: {e}", args.tool)))?;
    let (registry, _) = args.db.open(home)?;
    let diff = warden::app::version_diff(&registry, &tenant, &tool, &args.from, &args.to)
        .map_err(|e| usage(e.to_string()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&diff)?);
    } else {
        print!("{}", render_diff(&diff));
    }
    Ok(ExitCode::Ok)
}

fn subject_line(s: &Subject) -> String {
    let mut line = format!("{} ({}())", s.name, s.function);
    if let (Some(tool), Some(number)) = (&s.tool, s.number) {
        let _ = write!(line, ", {tool} version {number}");
    }
    if let Some(version) = &s.version {
        let _ = write!(line, " [{version}]");
    }
    if let Some(file) = &s.file {
        let _ = write!(line, ", {file}");
    }
    line
}

/// The document as a table for people.
pub fn render(c: &Capabilities) -> String {
    let mut out = String::new();
    let none = |list: &[String]| {
        if list.is_empty() {
            vec!["none".to_owned()]
        } else {
            list.to_vec()
        }
    };
    let mut section = |title: &str, lines: Vec<String>| {
        for (i, line) in lines.iter().enumerate() {
            let head = if i == 0 { title } else { "" };
            let _ = writeln!(out, "{head:<10} {line}");
        }
    };
    section("tool", vec![subject_line(&c.subject)]);
    section(
        "runtime",
        vec![format!(
            "{} (Python {}), snapshot sha256 {}, warden {}",
            c.runtime.package, c.runtime.python, c.runtime.snapshot_sha256, c.runtime.warden
        )],
    );
    section(
        "folders",
        none(
            &c.folders
                .iter()
                .map(|f| format!("{} -> {} ({})", f.host, f.guest, f.mode))
                .collect::<Vec<_>>(),
        ),
    );
    section("env", none(&c.env));
    section(
        "hosts",
        none(
            &c.hosts
                .iter()
                .map(|h| h.pattern.clone())
                .collect::<Vec<_>>(),
        ),
    );
    section(
        "secrets",
        none(
            &c.secrets
                .iter()
                .map(|s| format!("{} -> {}", s.name, s.hosts.join(", ")))
                .collect::<Vec<_>>(),
        ),
    );
    let mut packages: Vec<String> = c
        .packages
        .requirements
        .iter()
        .map(|r| format!("requires {r}"))
        .collect();
    packages.extend(
        c.packages
            .wheels
            .iter()
            .map(|w| format!("wheel {} {} (sha256 {})", w.name, w.version, w.sha256)),
    );
    packages.extend(c.packages.bundled.iter().map(|b| format!("bundled {b}")));
    section("packages", none(&packages));
    let mut limits = vec![format!(
        "{:<20} {:>14} {:>14} {:>14}",
        "", "requested", "effective", "ceiling"
    )];
    for l in &c.limits {
        let ceiling = l.ceiling.map_or("-".to_owned(), |c| c.to_string());
        let mark = if l.lowered {
            "  lowered by the ceiling"
        } else {
            ""
        };
        limits.push(format!(
            "{:<20} {:>14} {:>14} {:>14} {}{mark}",
            l.name, l.requested, l.effective, ceiling, l.unit
        ));
    }
    section("limits", limits);
    section("never", c.absent.clone());
    out
}

/// A diff for people: capability changes, widening ones marked, then the source.
pub fn render_diff(d: &Diff) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "from {}\nto   {}",
        subject_line(&d.from),
        subject_line(&d.to)
    );
    if d.changes.is_empty() {
        let _ = writeln!(out, "capabilities: unchanged");
    } else {
        let verdict = if d.widening { "WIDENED" } else { "not widened" };
        let _ = writeln!(out, "capabilities: {verdict}");
    }
    for c in &d.changes {
        let sign = match c.kind {
            ChangeKind::Added => "+",
            ChangeKind::Removed => "-",
            ChangeKind::Changed => "~",
        };
        let detail = match (&c.before, &c.after) {
            (Some(b), Some(a)) => format!("{b} -> {a}"),
            (None, Some(a)) => a.clone(),
            (Some(b), None) => b.clone(),
            (None, None) => String::new(),
        };
        let flag = if c.widening { "  [widening]" } else { "" };
        let _ = writeln!(out, "  {sign} {} {}: {detail}{flag}", c.area, c.item);
    }
    if d.source.is_empty() {
        let _ = writeln!(out, "source: unchanged");
    } else {
        let _ = writeln!(out, "source:");
        out.push_str(&d.source);
    }
    out
}
