//! What a framework's tool decorator says about a function: whether it is one
//! (`@tool`, `@tool(...)`, `@mcp.tool()`, `@server.tool`, `@function_tool`), and its
//! arguments (`name`, `title`, `description`, `tags`, `annotations`, and any keyword by
//! name, such as `args_schema` or `output_schema`).

use ruff_python_ast::{self as ast, Expr};

use super::module::FunctionRef;

/// The target of a decorator, called or not (`mcp.tool` in `@mcp.tool()`).
fn target(decorator: &ast::Decorator) -> &Expr {
    match &decorator.expression {
        Expr::Call(call) => &call.func,
        other => other,
    }
}

/// Whether a decorator's target names a tool decorator: LangChain's, smolagents',
/// CrewAI's and Strands' `tool`, FastMCP's and the MCP SDK's `.tool`, OpenAI Agents'
/// `function_tool`.
fn is_tool(target: &Expr) -> bool {
    let last = match target {
        Expr::Name(n) => n.id.as_str(),
        Expr::Attribute(a) => a.attr.as_str(),
        _ => return false,
    };
    matches!(last, "tool" | "function_tool")
}

impl<'a> FunctionRef<'a> {
    /// The plain names its decorators call or are (`retry` in `@retry(times=2)`, `log`
    /// in `@log`; nothing for `@mcp.tool()`).
    pub(crate) fn decorator_names(&self) -> impl Iterator<Item = &'a str> {
        self.decorators.iter().filter_map(|d| match target(d) {
            Expr::Name(n) => Some(n.id.as_str()),
            _ => None,
        })
    }

    /// Whether a framework's decorator marks the function as a tool.
    pub(crate) fn is_decorated_as_tool(&self) -> bool {
        self.decorators.iter().any(|d| is_tool(target(d)))
    }

    /// The function's tool decorators that are called with arguments.
    fn tool_calls(&self) -> impl Iterator<Item = &'a ast::ExprCall> {
        self.decorators.iter().filter_map(|d| match &d.expression {
            Expr::Call(call) if is_tool(&call.func) => Some(call),
            _ => None,
        })
    }

    /// The value of keyword `name` in the function's tool decorator
    /// (`@tool(args_schema=Model)`).
    pub(crate) fn decorator_keyword(&self, name: &str) -> Option<&'a Expr> {
        self.tool_calls().find_map(|call| {
            call.arguments
                .keywords
                .iter()
                .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == name))
                .map(|k| &k.value)
        })
    }

    /// What a tool decorator's arguments say: `@mcp.tool(name=..., title=...,
    /// description=..., tags=..., annotations=...)`, `@tool("name")` (a positional string
    /// is the name).
    pub(crate) fn tool_decoration(&self) -> super::DecoratedTool {
        let mut found = super::DecoratedTool {
            function: self.name.to_owned(),
            ..Default::default()
        };
        let string =
            |e: &Expr| super::literal::scalar(e).and_then(|v| v.as_str().map(str::to_owned));
        for call in self.tool_calls() {
            if let Some(first) = call.arguments.args.first() {
                found.name = found.name.or_else(|| string(first));
            }
            for keyword in &call.arguments.keywords {
                let value = string(&keyword.value);
                match keyword.arg.as_ref().map(|a| a.as_str()) {
                    Some("name" | "name_override") => found.name = value.or(found.name),
                    Some("title") => found.title = value,
                    Some("description" | "description_override") => found.description = value,
                    Some("tags") => found.tags = string_items(&keyword.value),
                    // `annotations=ToolAnnotations(title=...)`: a title for people.
                    Some("annotations") => {
                        found.title = found.title.or_else(|| annotation_title(&keyword.value));
                    }
                    _ => {}
                }
            }
        }
        found
    }
}

/// The strings of a literal set, list or tuple (`tags={"a", "b"}`), in source order.
fn string_items(value: &Expr) -> Vec<String> {
    let elts = match value {
        Expr::Set(s) => &s.elts,
        Expr::List(l) => &l.elts,
        Expr::Tuple(t) => &t.elts,
        _ => return Vec::new(),
    };
    elts.iter()
        .filter_map(|e| match e {
            Expr::StringLiteral(s) => Some(s.value.to_str().to_owned()),
            _ => None,
        })
        .collect()
}

/// The keyword arguments of `ToolAnnotations(...)` or the entries of a literal dict
/// (`{"readOnlyHint": True}`), as (name, value) pairs.
pub(crate) fn annotation_entries(value: &Expr) -> Vec<(String, &Expr)> {
    match value {
        Expr::Call(call) => call
            .arguments
            .keywords
            .iter()
            .filter_map(|k| Some((k.arg.as_ref()?.as_str().to_owned(), &k.value)))
            .collect(),
        Expr::Dict(d) => d
            .items
            .iter()
            .filter_map(|item| match item.key.as_ref()? {
                Expr::StringLiteral(s) => Some((s.value.to_str().to_owned(), &item.value)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `annotations=ToolAnnotations(title="...")`'s title.
fn annotation_title(value: &Expr) -> Option<String> {
    annotation_entries(value)
        .into_iter()
        .find(|(name, _)| name == "title")
        .and_then(|(_, v)| super::literal::scalar(v)?.as_str().map(str::to_owned))
}
