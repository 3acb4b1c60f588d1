//! Static tool schemas: Python source text in, JSON Schema (or diagnostics) out.
//!
//! Nothing here runs Python. The file is parsed once with Ruff's parser, and the chosen
//! function's signature, annotations and docstring are read from the syntax tree.
//!
//! # Which function
//! The `function` option if given; otherwise the function named like the file stem
//! (`csv_summary` for `csv_summary.py`); otherwise the one name of `__all__` when it lists
//! exactly one function; otherwise the one function a framework decorates as a tool (`@tool`,
//! `@tool(...)`, `@mcp.tool()`, `@function_tool`); otherwise the only public (no leading `_`)
//! top-level function; otherwise an error listing the candidates. When a name is defined
//! twice, the last definition wins, as in Python.
//!
//! # What is derived
//! - `name`: the function name. `description`: the docstring's first line, a blank line and the
//!   rest of its text before the first section (Letta's rule), plus any Google `Examples:`
//!   section; `"No description available"` without a docstring (as Letta).
//! - `parameters`: a JSON Schema object with `properties` in signature order, `required`,
//!   `additionalProperties: false` (Python rejects unknown keyword arguments) and `$defs` for
//!   the Enum, TypedDict, dataclass and pydantic classes of the file that are used.
//!   A parameter's description comes from the docstring (Google `Args:`, NumPy `Parameters`,
//!   Sphinx `:param x:`, Epydoc `@param x:`), else from `Annotated[T, "text"]` / `Annotated[T, Field(description=...)]`.
//!   Literal defaults appear as `default`.
//! - `returns`: the return annotation as a schema (with the docstring's `Returns` text as its
//!   description), or nothing for `-> None`.
//! - `injected`: the parameters the guest passes itself, left out of `parameters`: a
//!   FastMCP / MCP SDK `ctx: Context` (also `Context[ServerSession, None]`), and Letta's
//!   `agent_state` (the agent state the caller sends, else None).
//! - A parameter without an annotation takes the type its docstring gives (Google `x (int):`,
//!   NumPy `x : int`, Sphinx `:type x: int`, also prose such as `list of str, optional` or
//!   `{'csv', 'json'}`), else accepts any JSON value (`{}`); a missing return annotation
//!   likewise takes the docstring's (`Returns:` then `int: ...`, `:rtype:`, a NumPy `Returns`
//!   item), else gives no return schema (any value). Either way a `missing-annotation`
//!   warning says what was assumed.
//!
//! A FastMCP server file with resources or prompts and no tool (and no other public
//! function) gets a schema marked [`ToolSchema::members_only`]: its resources and
//! prompts are served, and there is nothing to call.
//!
//! # The rule for "required"
//! A parameter is required when it has no default **and** is not `Optional[T]` / `T | None` /
//! `Union[..., None]`. Such an optional parameter may be omitted and is then passed `None`
//! (Letta's convention, so that tools written for Letta keep their schemas); its schema is the
//! schema of `T` alone, as in Letta. Inside containers and model fields, `Optional[T]` is
//! "T or null" instead, and a model field is required exactly when it has no default (the
//! models' own rule; `TypedDict` fields unless `total=False` or `NotRequired`).
//!
//! # Types
//! `str`, `int`, `float`, `bool`, `None`, `bytes` (base64 string), `list[T]`/`List`/`Sequence`,
//! `set[T]` (`uniqueItems`), `tuple[A, B]` (`prefixItems`), `tuple[T, ...]`, `dict[str, T]`/
//! `Mapping`, `Optional`, `|`, `Union` (`anyOf`), `Literal` (`enum`, typed by its values), `Any`
//! (`{}`), `datetime`/`date`/`time`/`timedelta`/`UUID` (string formats), and classes of the
//! same file: `Enum`, `TypedDict`, `@dataclass`, pydantic `BaseModel` (with `Field(...)`
//! descriptions, defaults and `ge`/`le`/`gt`/`lt`/`multiple_of`/`min_length`/`max_length`/
//! `pattern`), also recursive ones, through `$defs`/`$ref`. String forward references and
//! `from __future__ import annotations` work; names resolve through imports and aliases
//! (`import typing as t`). Type aliases of the file stand for their value (`type Num = int |
//! float`, `Num = Annotated[float, Field(ge=0)]`, `Num: TypeAlias = ...`, generic ones as
//! `type Pair[T] = tuple[T, T]`). A type parameter (`def f[T: int](x: T)`, a `TypeVar`)
//! stands for its default (PEP 696), else its bound or constraints, else any value; a generic
//! model of the file used with arguments (`Page[Hit]`) gets a `$defs` entry per set of
//! arguments (`Page_Hit_`, Pydantic's naming). Classes nested in a class are types too: a
//! class body sees its own nested classes (`shrimp: list[Shrimp]` inside `Tank`), the rest
//! of the file names them `Tank.Shrimp`, and `Self` in a model is that model. Names from
//! `typing_extensions` are `typing`'s. `Annotated[T, Field(...)]` maps `ge`, `gt`, `le`,
//! `lt`, `multiple_of`, `min_length`, `max_length`, `pattern`, `description` and `examples` to
//! their JSON Schema keywords, and in a model field its `default` too (for a parameter, a
//! `Field` default inside `Annotated` is a warning: a call does not apply it). Anything else is
//! a diagnostic, never a guess.
//!
//! # Bounds
//! A tool file is untrusted input: analysing it ends with a schema or diagnostics, never a
//! crash. Files over [`MAX_SOURCE`] (1 MiB), nesting more than [`MAX_BRACKETS`] brackets or
//! [`MAX_INDENT`] indented blocks (CPython's own tokenizer limits), with more than
//! [`MAX_SYNTAX_DEPTH`] operators open at once, or whose syntax tree is deeper than that
//! (4000; CPython refuses about 3000) get a `source-too-complex` diagnostic; see the `guard`
//! module for how parsing is kept safe.
//!
//! # Health and strict mode
//! [`health`](fn@health) classifies a schema by OpenAI's structured-outputs rules (see the `health`
//! module); [`export`](fn@export) with `strict` emits the strict variant (see [`strict`]).

mod annotation;
mod arguments;
mod choose;
mod content;
mod decorators;
mod diagnostic;
mod docstring;
mod export;
mod frameworks;
mod function;
mod guard;
mod health;
mod literal;
mod models;
mod module;
mod served;
mod source;
pub mod strict;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use arguments::{
    ArgumentValidator, Violation, drop_nulls_for_defaults, none_if_omitted, validate_arguments,
};
pub use diagnostic::{Code, Diagnostic, Severity};
pub use export::{
    Format, LettaExtras, PipRequirement, export, inline_refs, mcp_output, mcp_output_wraps,
};
pub use guard::{MAX_BRACKETS, MAX_INDENT, MAX_SCHEMA, MAX_SOURCE, MAX_SYNTAX_DEPTH};
pub use health::{Health, HealthClass, classify, health};
pub use served::{PromptSchema, ResourceSchema, match_template, template_names};
pub use strict::strict_variant;

/// Options of [`derive()`] and [`check`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeriveOptions {
    /// The file name without `.py`, e.g. `csv_summary`.
    pub file_stem: String,
    /// The function to describe, if not the one named like the file.
    pub function: Option<String>,
}

/// A tool's schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolSchema {
    /// The function name.
    pub name: String,
    /// Summary and body of the docstring.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    /// JSON Schema of the return value, if annotated.
    pub returns: Option<Value>,
    /// The function's parameters that are not in `parameters` because the guest passes
    /// them itself, in signature order. Empty for most tools (and then not serialized, so
    /// stored schemas and their hashes are unchanged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injected: Vec<Injected>,
    /// The MCP resources the tool's file declares (`@mcp.resource`), each read by a call
    /// of its own function. Empty for most tools (and then not serialized).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceSchema>,
    /// The MCP prompts the tool's file declares (`@mcp.prompt`), each got by a call of
    /// its own function. Empty for most tools (and then not serialized).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<PromptSchema>,
    /// The file declares resources or prompts and no tool (a FastMCP server of resources
    /// alone): `name` is its first resource or prompt function, `parameters` take
    /// nothing, and there is no tool to call or list. False for most tools (and then not
    /// serialized).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub members_only: bool,
    /// What the tool's decorator says of its effects (`@mcp.tool(annotations=...)`),
    /// if anything. MCP clients are shown these only where the grants agree (see
    /// `crate::mcp::Hints`). Not serialized when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<DeclaredHints>,
    /// Whether the tool may run as an MCP task, as its decorator says (FastMCP's
    /// `@mcp.tool(task=True)`, `task=TaskConfig(mode="required")`); `None` when it says
    /// nothing. Not serialized when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskMode>,
}

/// Whether a tool runs as an MCP task (the Tasks extension) when its client can take one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskMode {
    /// Never: its calls are answered at once.
    Forbidden,
    /// When the client declared the Tasks extension; at once otherwise.
    Optional,
    /// Always: a client without the Tasks extension is refused (-32021).
    Required,
}

/// MCP tool annotations as a tool's author declared them (`readOnlyHint`,
/// `destructiveHint`, `idempotentHint`, `openWorldHint`), each `None` when not said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeclaredHints {
    /// `readOnlyHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// `destructiveHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// `idempotentHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// `openWorldHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

/// A parameter the guest passes itself: left out of the schema, never sent by the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Injected {
    /// The parameter's name.
    pub name: String,
    /// What the guest passes for it.
    pub kind: InjectedKind,
}

/// What the guest passes for an [`Injected`] parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InjectedKind {
    /// A FastMCP / MCP SDK context (`ctx: Context`, also the generic `Context[ServerSession,
    /// None]`): Warden's `Context` object.
    Context,
    /// Letta's `agent_state`: the agent state the caller sends (the request's `agent_state`
    /// field), else None.
    AgentState,
}

/// A derived schema and the warnings that did not prevent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Derived {
    /// The schema.
    pub schema: ToolSchema,
    /// Warnings, in source order.
    pub diagnostics: Vec<Diagnostic>,
}

/// Why no schema (or export) could be produced.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The source has errors; all diagnostics (errors and warnings) are kept.
    #[error("{}", derive_message(.0))]
    Derive(Vec<Diagnostic>),
    /// An unknown export format name.
    #[error("unknown export format `{0}`; use json-schema, openai, anthropic, mcp or letta")]
    UnknownFormat(String),
    /// Strict mode was asked for, but the schema has no strict variant.
    #[error("tool `{name}` has no strict-mode schema ({}); export without strict mode or change the types", .reasons.join("; "))]
    NoStrictVariant {
        /// The tool.
        name: String,
        /// Why.
        reasons: Vec<String>,
    },
    /// An export option is out of range.
    #[error("{0}; fix the option")]
    InvalidOption(String),
}

impl SchemaError {
    /// The diagnostics, for [`SchemaError::Derive`]; empty otherwise.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            SchemaError::Derive(d) => d,
            _ => &[],
        }
    }
}

fn derive_message(diags: &[Diagnostic]) -> String {
    let errors: Vec<&Diagnostic> = diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .collect();
    match errors.split_first() {
        Some((first, rest)) => {
            let more = if rest.is_empty() {
                String::new()
            } else {
                format!(" (and {} more error(s))", rest.len())
            };
            format!(
                "no schema can be derived: line {}: {}{more}; fix the reported errors and try again",
                first.line, first.message
            )
        }
        None => "no schema can be derived; fix the reported errors and try again".into(),
    }
}

/// Derives the schema of one function of a Python source file.
pub fn derive(source: &str, opts: &DeriveOptions) -> Result<Derived, SchemaError> {
    let (schema, diagnostics) = function::analyse(source, opts);
    match schema {
        Some(schema) => Ok(Derived {
            schema,
            diagnostics,
        }),
        None => Err(SchemaError::Derive(diagnostics)),
    }
}

/// A function an MCP server file (or any file) marks as a tool with a framework's
/// decorator, and what the decorator says about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecoratedTool {
    /// The function.
    pub function: String,
    /// The decorator's `name` (`@mcp.tool(name="...")`, `@tool("...")`), if given.
    pub name: Option<String>,
    /// The decorator's `title`, if given.
    pub title: Option<String>,
    /// The decorator's `description`, if given.
    pub description: Option<String>,
    /// The decorator's `tags` (FastMCP's `tags={"a", "b"}`), as written.
    pub tags: Vec<String>,
}

/// The functions a file marks as tools with a framework's decorator (`@mcp.tool()`,
/// `@tool`, `@function_tool`, ...), in source order, each once; empty when the file
/// does not parse. A file with several is served whole by `warden mcp`: each one a tool
/// (see [`derive()`] with its `function` for each).
pub fn tool_functions(source: &str) -> Vec<DecoratedTool> {
    choose::decorated_tools(source)
}

/// Everything `warden validate` reports: syntax, the function, annotations, docstring coverage
/// of every parameter, and the health of the schema; all problems at once, in source order.
pub fn check(source: &str, opts: &DeriveOptions) -> Vec<Diagnostic> {
    let (schema, mut diagnostics) = function::analyse(source, opts);
    let Some(schema) = schema else {
        return diagnostics;
    };
    let h = health(&schema);
    if h.class == HealthClass::StrictCompliant {
        return diagnostics;
    }
    let (line, column) = def_position(source, &schema.name);
    let strict = strict_variant(&schema.parameters).is_ok();
    let (severity, code, message, hint) = match h.class {
        HealthClass::Invalid => (
            Severity::Error,
            Code::InvalidSchema,
            format!("the schema is invalid: {}", h.reasons.join("; ")),
            "change the types named above".to_string(),
        ),
        _ => (
            Severity::Warning,
            Code::NotStrictCompliant,
            format!(
                "the schema is not strict-compliant: {}",
                h.reasons.join("; ")
            ),
            if strict {
                "export with strict mode to get the strict variant (optional parameters become required and nullable)".to_string()
            } else {
                "no strict variant exists; use it without strict mode, or replace the types named above".to_string()
            },
        ),
    };
    diagnostics.push(Diagnostic {
        severity,
        code,
        message,
        line,
        column,
        length: 3,
        hint: Some(hint),
    });
    diagnostics.sort_by_key(|d| (d.line, d.column));
    diagnostics
}

/// Position of `def NAME` (or `async def NAME`) at the top level, for whole-schema diagnostics.
fn def_position(source: &str, name: &str) -> (u32, u32) {
    for (i, line) in source.lines().enumerate() {
        let rest = line.strip_prefix("async ").unwrap_or(line);
        if let Some(after) = rest.strip_prefix("def ")
            && after.trim_start().starts_with(name)
            && after.trim_start()[name.len()..]
                .trim_start()
                .starts_with(['(', '['])
        {
            let col = line.len() - rest.len() + 1;
            return (
                u32::try_from(i + 1).unwrap_or(u32::MAX),
                u32::try_from(col).unwrap_or(1),
            );
        }
    }
    (1, 1)
}
