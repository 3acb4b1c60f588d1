//! Diagnostics: what went wrong (or looks doubtful) in a tool file, where, and what to do.

use serde::{Deserialize, Serialize};

/// How serious a [`Diagnostic`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// No schema can be derived (or the file fails `warden validate`).
    Error,
    /// A schema was derived, but something in it deserves a look.
    Warning,
}

impl Severity {
    /// The lower-case word used in rendered diagnostics.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// Stable machine-readable diagnostic codes (rendered in kebab case, e.g. `unknown-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Code {
    /// The file is not valid Python.
    SyntaxError,
    /// The file nests expressions too deeply (or is too large) to analyse safely.
    SourceTooComplex,
    /// The derived schema is larger than [`MAX_SCHEMA`](super::MAX_SCHEMA).
    SchemaTooLarge,
    /// The file has no public top-level function.
    NoFunction,
    /// The requested function is not a top-level function of the file.
    FunctionNotFound,
    /// Several public functions and none is named after the file.
    AmbiguousFunction,
    /// `*args` or `**kwargs`: a JSON object of arguments cannot describe them.
    VariadicParameter,
    /// A positional-only parameter (before `/`) cannot be passed by name.
    PositionalOnlyParameter,
    /// A parameter or return value without a type annotation (a warning: the type comes from
    /// the docstring, else any JSON value).
    MissingAnnotation,
    /// A name in an annotation that is neither imported, built in nor defined in the file.
    UnknownType,
    /// A type that is understood but has no JSON Schema mapping here.
    UnsupportedType,
    /// A malformed annotation (wrong number of arguments, bad forward reference, ...).
    InvalidAnnotation,
    /// A well-known `typing` name used without an import.
    UnimportedName,
    /// A parameter injected by the runtime (`agent_state`), left out of the schema.
    ReservedParameter,
    /// A resource or prompt of an MCP server file that cannot be served (left out).
    MemberLeftOut,
    /// A framework's own list of a tool's arguments (LangChain's and CrewAI's
    /// `args_schema`, smolagents' `inputs`) does not fit the function it calls.
    ArgumentsMismatch,
    /// The function has no docstring.
    MissingDocstring,
    /// A parameter has no description (docstring or `Annotated`).
    UndocumentedParameter,
    /// The docstring documents a parameter the function does not have.
    UnknownDocumentedParameter,
    /// A default value that is not a literal; the parameter stays optional but no `default` is emitted.
    UnsupportedDefault,
    /// A `Field(...)`/`field(...)` option that is ignored.
    UnsupportedFieldOption,
    /// The derived schema works only without OpenAI strict mode.
    NotStrictCompliant,
    /// The derived schema is rejected by OpenAI even without strict mode.
    InvalidSchema,
}

impl Code {
    /// The kebab-case name shown in `error[name]`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::SyntaxError => "syntax-error",
            Code::SourceTooComplex => "source-too-complex",
            Code::SchemaTooLarge => "schema-too-large",
            Code::NoFunction => "no-function",
            Code::FunctionNotFound => "function-not-found",
            Code::AmbiguousFunction => "ambiguous-function",
            Code::VariadicParameter => "variadic-parameter",
            Code::PositionalOnlyParameter => "positional-only-parameter",
            Code::MissingAnnotation => "missing-annotation",
            Code::UnknownType => "unknown-type",
            Code::UnsupportedType => "unsupported-type",
            Code::InvalidAnnotation => "invalid-annotation",
            Code::UnimportedName => "unimported-name",
            Code::ReservedParameter => "reserved-parameter",
            Code::MemberLeftOut => "member-left-out",
            Code::ArgumentsMismatch => "arguments-mismatch",
            Code::MissingDocstring => "missing-docstring",
            Code::UndocumentedParameter => "undocumented-parameter",
            Code::UnknownDocumentedParameter => "unknown-documented-parameter",
            Code::UnsupportedDefault => "unsupported-default",
            Code::UnsupportedFieldOption => "unsupported-field-option",
            Code::NotStrictCompliant => "not-strict-compliant",
            Code::InvalidSchema => "invalid-schema",
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Characters of a long source line quoted before the column of a diagnostic.
const QUOTE_BEFORE: usize = 200;
/// Most characters of a source line quoted.
const QUOTE_WIDTH: usize = 400;

/// One problem found in a tool file, with a 1-based position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Stable code.
    pub code: Code,
    /// Lower-case, one-line statement of the problem.
    pub message: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    /// Number of characters to underline on that line (at least 1 when rendered).
    pub length: u32,
    /// What to do about it.
    pub hint: Option<String>,
}

impl Diagnostic {
    /// Renders the diagnostic in compiler style, quoting the source line:
    ///
    /// ```text
    /// error[unknown-type]: unknown type `Foo` in parameter `x`
    ///   --> tools/x.py:3:10
    ///    |
    ///  3 | def f(x: Foo):
    ///    |          ^^^
    ///    = hint: define `Foo` in this file or import it
    /// ```
    pub fn render(&self, source: &str, path: &str) -> String {
        let gutter = self.line.max(1).to_string().len();
        let pad = " ".repeat(gutter);
        let mut out = format!(
            "{}[{}]: {}\n{pad}--> {path}:{}:{}\n",
            self.severity.as_str(),
            self.code.as_str(),
            self.message,
            self.line,
            self.column
        );
        let text = source
            .lines()
            .nth((self.line as usize).saturating_sub(1))
            .map(|l| l.trim_end_matches('\r'));
        if let Some(text) = text.filter(|_| self.line > 0) {
            let chars: Vec<char> = text
                .chars()
                .map(|c| if c == '\t' { ' ' } else { c })
                .collect();
            let col = (self.column as usize).saturating_sub(1);
            // A hostile file can put a megabyte on one line: quote a window around the column.
            let start = col.saturating_sub(QUOTE_BEFORE);
            let end = chars.len().min(start + QUOTE_WIDTH);
            let mut shown: String = chars.get(start..end).unwrap_or_default().iter().collect();
            let mut col = col - start;
            if start > 0 {
                shown.insert_str(0, "...");
                col += 3;
            }
            if end < chars.len() {
                shown.push_str("...");
            }
            let avail = shown.chars().count().saturating_sub(col).max(1);
            let len = (self.length as usize).clamp(1, avail);
            out.push_str(&format!("{pad} |\n{:>gutter$} | {shown}\n", self.line));
            out.push_str(&format!("{pad} | {}{}\n", " ".repeat(col), "^".repeat(len)));
        }
        if let Some(hint) = &self.hint {
            out.push_str(&format!("{pad} = hint: {hint}\n"));
        }
        out
    }
}

/// Maps byte offsets of a source text to 1-based line and character column.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex<'s> {
    source: &'s str,
    starts: Vec<usize>,
}

impl<'s> LineIndex<'s> {
    pub(crate) fn new(source: &'s str) -> Self {
        let mut starts = vec![0];
        starts.extend(source.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { source, starts }
    }

    /// (line, column), both 1-based; the column counts characters.
    pub(crate) fn position(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.source.len());
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        let start = self.starts.get(line - 1).copied().unwrap_or(0);
        let col = self
            .source
            .get(start..offset)
            .map_or(0, |s| s.chars().count());
        (to_u32(line), to_u32(col + 1))
    }

    /// Length in characters of `start..end`, cut at the end of the line.
    pub(crate) fn length(&self, start: usize, end: usize) -> u32 {
        let text = self.source.get(start..end.max(start)).unwrap_or("");
        to_u32(text.split('\n').next().unwrap_or("").chars().count())
    }

    /// A diagnostic at the byte range `start..end`.
    pub(crate) fn diag(
        &self,
        severity: Severity,
        code: Code,
        range: (usize, usize),
        message: impl Into<String>,
        hint: Option<String>,
    ) -> Diagnostic {
        let (line, column) = self.position(range.0);
        Diagnostic {
            severity,
            code,
            message: message.into(),
            line,
            column,
            length: self.length(range.0, range.1).max(1),
            hint,
        }
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
