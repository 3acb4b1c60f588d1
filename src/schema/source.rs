//! Parsing, once, behind the checks of [`guard`]: the only place that calls the parser, so
//! the rest of `schema` sees a syntax tree of sane size and depth (or a diagnostic).

use ruff_python_ast::{self as ast, AnyNodeRef, Expr, PythonVersion, Stmt};
use ruff_python_parser::{Mode, ParseOptions, parse_unchecked};
use ruff_text_size::Ranged;

use super::diagnostic::{Code, Diagnostic, LineIndex, Severity};
use super::guard::{self, TooComplex};

/// The newest Python the parser knows: a tool may use any syntax CPython accepts.
const PYTHON: PythonVersion = PythonVersion::PY315;

/// Parses `source` as a module behind the checks of [`guard`]: the size cap and the nesting
/// bounds before parsing, the depth of the tree after. Call it on the analysis thread
/// ([`guard::on_analysis_stack`]): the tree it returns must be dropped there too.
pub(crate) fn parse(source: &str, index: &LineIndex<'_>) -> Result<Vec<Stmt>, Diagnostic> {
    let too_complex = |refusal: TooComplex| {
        let offset = refusal.offset;
        index.diag(
            Severity::Error,
            Code::SourceTooComplex,
            (offset, offset + 1),
            format!(
                "the file is too complex to analyse safely: {}",
                refusal.what
            ),
            Some("split the expression or the file into smaller pieces".into()),
        )
    };
    if source.len() as u64 > guard::MAX_SOURCE.as_u64() {
        return Err(too_complex(TooComplex {
            offset: 0,
            what: format!(
                "it is {} bytes, more than {} bytes",
                source.len(),
                guard::MAX_SOURCE.as_u64()
            ),
        }));
    }
    guard::lexical_nesting(source, Mode::Module).map_err(too_complex)?;
    let parsed = parse_unchecked(source, options(Mode::Module));
    // The parser reads past an error to find more; the first one is the one to fix.
    if let Some(err) = parsed.errors().first() {
        let offset = err.location.start().to_usize();
        let message = lower_first(&err.error.to_string());
        return Err(index.diag(
            Severity::Error,
            Code::SyntaxError,
            (offset, offset + 1),
            format!("the file is not valid Python: {message}"),
            Some("fix the syntax; `python -m py_compile FILE` shows the same problem".into()),
        ));
    }
    let body = match parsed.into_syntax() {
        ast::Mod::Module(module) => module.body,
        ast::Mod::Expression(_) => Vec::new(),
    };
    guard::syntax_depth(body.iter().map(AnyNodeRef::from)).map_err(too_complex)?;
    Ok(body)
}

/// Parses the text of a string annotation (`"Optional[Item]"`) behind the same checks as
/// [`parse`]; `None` when it is not a valid expression or too complex.
pub(crate) fn parse_annotation(text: &str) -> Option<Expr> {
    guard::lexical_nesting(text, Mode::Expression).ok()?;
    let parsed = parse_unchecked(text, options(Mode::Expression));
    if !parsed.errors().is_empty() {
        return None;
    }
    match parsed.into_syntax() {
        ast::Mod::Expression(e) => {
            guard::syntax_depth([AnyNodeRef::from(&*e.body)]).ok()?;
            Some(*e.body)
        }
        ast::Mod::Module(_) => None,
    }
}

fn options(mode: Mode) -> ParseOptions {
    ParseOptions::from(mode).with_target_version(PYTHON)
}

fn lower_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Byte range of a node.
pub(crate) fn span<T: Ranged>(node: &T) -> (usize, usize) {
    let r = node.range();
    (r.start().to_usize(), r.end().to_usize())
}

/// The docstring of a body, if its first statement is a string literal.
pub(crate) fn docstring(body: &[Stmt]) -> Option<&str> {
    match body.first()? {
        Stmt::Expr(e) => match &*e.value {
            Expr::StringLiteral(s) => Some(s.value.to_str()),
            _ => None,
        },
        _ => None,
    }
}
