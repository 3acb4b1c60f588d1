//! The names that are not JSON data: a FastMCP `Context` parameter (left out of the
//! schema: the guest passes it) and the rich result types (`warden.Image`, `Audio`,
//! `File`, `Link`, the SDKs' `Image`/`Audio`/`File`, a matplotlib `Figure`, a PIL
//! image, and lists or unions of them), whose return annotation gives no `outputSchema`
//! (the result is content blocks, not structured data).

use ruff_python_ast::{self as ast, Expr};

use super::module::{Module, Resolved};

/// Where the MCP SDKs' and Warden's own names are importable from, in the guest.
const HOMES: &[&str] = &[
    "warden",
    "mcp.server.fastmcp",
    "mcp.server.mcpserver",
    "fastmcp",
    "fastmcp.utilities.types",
    "mcp.server.fastmcp.utilities.types",
];

/// Whether `annotation` names a FastMCP-style `Context` (imported from one of the SDKs'
/// paths or `warden`, also as a string, also generic: `Context[ServerSession, None]`).
pub(crate) fn is_context(module: &Module<'_>, annotation: &Expr) -> bool {
    // The generic form, `Context[ServerSession, None]`, is the same parameter.
    let mut annotation = annotation;
    while let Expr::Subscript(s) = annotation {
        annotation = &s.value;
    }
    match annotation {
        Expr::StringLiteral(s) => {
            let text = s.value.to_str();
            let head = text.split('[').next().unwrap_or(text).trim();
            head.rsplit('.').next() == Some("Context")
        }
        other => qualified(module, other).is_some_and(|q| {
            q.strip_suffix(".Context")
                .is_some_and(|home| HOMES.contains(&home))
                || q == "fastmcp.server.context.Context"
        }),
    }
}

/// Whether a return annotation is rich content: one of the content types, or a list,
/// tuple or union whose members are content types or `str`, with at least one content
/// type among them.
pub(crate) fn is_content(module: &Module<'_>, annotation: &Expr) -> bool {
    content_depth(module, annotation, 0) == Some(true)
}

/// `Some(true)`: content; `Some(false)`: `str` (allowed beside content); `None`: data.
fn content_depth(module: &Module<'_>, annotation: &Expr, depth: u32) -> Option<bool> {
    if depth > 8 {
        return None;
    }
    match annotation {
        Expr::Subscript(s) => {
            let outer = qualified(module, &s.value)?;
            if !matches!(
                outer.as_str(),
                "builtins.list"
                    | "builtins.tuple"
                    | "typing.List"
                    | "typing.Tuple"
                    | "typing.Sequence"
                    | "collections.abc.Sequence"
                    | "typing.Union"
            ) {
                return None;
            }
            let members: Vec<&Expr> = match &*s.slice {
                Expr::Tuple(t) => t.elts.iter().collect(),
                one => vec![one],
            };
            members_content(module, &members, depth)
        }
        Expr::BinOp(b) if matches!(b.op, ast::Operator::BitOr) => {
            members_content(module, &[&*b.left, &*b.right], depth)
        }
        Expr::EllipsisLiteral(_) => Some(false),
        other => {
            let q = qualified(module, other)?;
            if q == "builtins.str" {
                return Some(false);
            }
            let (home, name) = q.rsplit_once('.')?;
            let sdk = HOMES.contains(&home) && matches!(name, "Image" | "Audio" | "File" | "Link");
            let figure = matches!(
                q.as_str(),
                "matplotlib.figure.Figure" | "PIL.Image.Image" | "matplotlib.pyplot.Figure"
            );
            (sdk || figure).then_some(true)
        }
    }
}

fn members_content(module: &Module<'_>, members: &[&Expr], depth: u32) -> Option<bool> {
    let mut any = false;
    for member in members {
        any |= content_depth(module, member, depth + 1)?;
    }
    Some(any)
}

fn qualified(module: &Module<'_>, expr: &Expr) -> Option<String> {
    match module.resolve(expr)? {
        Resolved::Qualified(q) | Resolved::Unimported(q) => Some(q),
        Resolved::Local(_) | Resolved::Alias(_) | Resolved::Unknown(_) => None,
    }
}
