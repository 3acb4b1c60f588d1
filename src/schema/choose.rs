//! Choosing the tool of a file: the function (or framework tool class) the options
//! name, else the one the file names (its stem, `__all__`, one decorated tool), else its
//! one public function; resources and prompts of a server, and decorators the file
//! applies to its own functions, are never candidates.

use std::collections::HashSet;

use super::DeriveOptions;
use super::diagnostic::{Code, Diagnostic, LineIndex, Severity};
use super::frameworks::{self, ClassTool};
use super::guard;
use super::module::{FunctionRef, Module};
use super::served;
use super::source::{self, span};

/// Most candidate functions named in a diagnostic.
const MAX_LISTED: usize = 20;

/// See [`super::tool_functions`].
pub(crate) fn decorated_tools(source: &str) -> Vec<super::DecoratedTool> {
    let found = guard::on_analysis_stack(|| {
        let index = LineIndex::new(source);
        let Ok(body) = source::parse(source, &index) else {
            return Vec::new();
        };
        let module = Module::new(&body);
        let mut seen = HashSet::new();
        let functions = module
            .functions
            .iter()
            .filter(|f| f.is_decorated_as_tool())
            .map(|f| (f.range.0, f.tool_decoration()));
        let classes = frameworks::class_tools(&module)
            .into_iter()
            .map(|c| (span(c.class).0, c.decoration(&module)));
        let mut all: Vec<_> = functions.chain(classes).collect();
        all.sort_by_key(|(at, _)| *at);
        all.into_iter()
            .map(|(_, d)| d)
            .filter(|d| seen.insert(d.function.clone()))
            .collect()
    });
    found.unwrap_or_default()
}

/// The tool a file holds: a function, or a framework's tool class.
#[derive(Clone, Copy)]
pub(crate) enum Chosen<'a> {
    Function(FunctionRef<'a>),
    Class(ClassTool<'a>),
    /// No tool: the file's first resource or prompt function.
    MembersOnly(FunctionRef<'a>),
}

pub(crate) fn select<'a>(
    module: &Module<'a>,
    opts: &DeriveOptions,
    index: &LineIndex<'_>,
) -> Result<Chosen<'a>, Diagnostic> {
    let classes = frameworks::class_tools(module);
    let class_named = |name: &str| {
        classes
            .iter()
            .find(|c| c.name() == name)
            .map(|c| Chosen::Class(*c))
    };
    // A server's resources and prompts are not tools.
    let public: Vec<&FunctionRef<'a>> = module
        .functions
        .iter()
        .filter(|f| !f.name.starts_with('_') && !served::is_member(f))
        .collect();
    // Nor is a decorator the file applies to its own functions (`def retry(times)` above
    // `@retry(times=2) def ping(...)`), while another public function remains.
    let decorators: HashSet<&str> = module
        .functions
        .iter()
        .flat_map(FunctionRef::decorator_names)
        .collect();
    let undecorating: Vec<&FunctionRef<'a>> = public
        .iter()
        .copied()
        .filter(|f| !decorators.contains(f.name))
        .collect();
    let public = if undecorating.is_empty() {
        public
    } else {
        undecorating
    };
    let names = |fs: &[&FunctionRef<'_>]| {
        let mut seen = HashSet::new();
        let distinct: Vec<&str> = fs
            .iter()
            .map(|f| f.name)
            .filter(|n| seen.insert(*n))
            .collect();
        // A file may define thousands of functions: name the first few.
        let mut listed = distinct
            .iter()
            .take(MAX_LISTED)
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        if distinct.len() > MAX_LISTED {
            listed.push_str(&format!(" and {} more", distinct.len() - MAX_LISTED));
        }
        listed
    };
    // The last definition wins, as in Python.
    if let Some(wanted) = &opts.function {
        return module
            .functions
            .iter()
            .rev()
            .find(|f| f.name == wanted.as_str())
            .map(|f| Chosen::Function(*f))
            .or_else(|| class_named(wanted))
            .ok_or_else(|| {
                let candidates = if public.is_empty() {
                    "none".into()
                } else {
                    names(&public)
                };
                index.diag(
                    Severity::Error,
                    Code::FunctionNotFound,
                    (0, 0),
                    format!(
                        "no top-level function named `{wanted}` (public functions: {candidates})"
                    ),
                    Some("pass the name of a top-level `def` in this file".into()),
                )
            });
    }
    let last_named = |name: &str| {
        module
            .functions
            .iter()
            .rev()
            .find(|f| f.name == name)
            .map(|f| Chosen::Function(*f))
            .or_else(|| class_named(name))
    };
    if let Some(f) = last_named(&opts.file_stem) {
        return Ok(f);
    }
    // `__all__ = ["tool"]`: the one name the file exports.
    if let Some([only]) = module.all.as_deref()
        && let Some(f) = last_named(only)
    {
        return Ok(f);
    }
    // The one function a framework's decorator marks as a tool (a FastMCP server's
    // `@mcp.tool()` beside its helpers and `@mcp.resource`s), or the one tool class.
    let decorated: HashSet<&str> = module
        .functions
        .iter()
        .filter(|f| f.is_decorated_as_tool())
        .map(|f| f.name)
        .chain(classes.iter().map(|c| c.name()))
        .collect();
    if let [only] = decorated.iter().collect::<Vec<_>>().as_slice()
        && let Some(f) = last_named(only)
    {
        return Ok(f);
    }
    let distinct: HashSet<&str> = public.iter().map(|f| f.name).collect();
    // Resources and prompts alone: the first of their functions stands for the file.
    if distinct.is_empty()
        && let Some(first) = module.functions.iter().find(|f| served::is_member(f))
    {
        return Ok(Chosen::MembersOnly(*first));
    }
    match distinct.len() {
        1 => public
            .last()
            .map(|f| Chosen::Function(**f))
            .ok_or_else(|| unreachable_diag(index)),
        0 => Err(index.diag(
            Severity::Error,
            Code::NoFunction,
            (0, 0),
            "the file defines no public top-level function".to_string(),
            Some("define the tool as a top-level `def` whose name does not start with `_`".into()),
        )),
        _ => Err(index.diag(
            Severity::Error,
            Code::AmbiguousFunction,
            (0, 0),
            format!(
                "cannot tell which function is the tool: none is named `{}` and there are several ({})",
                opts.file_stem,
                names(&public)
            ),
            Some("choose one with the `function` option, name the file after the tool, list it alone in `__all__`, or make helpers private with a leading `_`".into()),
        )),
    }
}

fn unreachable_diag(index: &LineIndex<'_>) -> Diagnostic {
    index.diag(
        Severity::Error,
        Code::NoFunction,
        (0, 0),
        "the file defines no public top-level function",
        None,
    )
}
