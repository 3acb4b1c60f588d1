//! What an MCP server file serves beside its tool, read from the decorators: each
//! `@mcp.resource("uri", ...)` (a static resource, or a template such as
//! `"weather://{city}/current"` whose `{names}` are the function's parameters) and each
//! `@mcp.prompt` / `@mcp.prompt(...)`. Each is described by its function's schema, derived
//! as a tool's is, so reading a resource or getting a prompt is a call of that function.
//!
//! Nothing here refuses the file: a resource or prompt that cannot be described is left
//! out with a warning naming why.

use std::collections::HashSet;

use ruff_python_ast::{self as ast, Expr};
use serde::{Deserialize, Serialize};

use super::ToolSchema;
use super::annotation::Mapper;
use super::diagnostic::{Code, Diagnostic, LineIndex, Severity};
use super::function::build;
use super::literal::scalar;
use super::module::{FunctionRef, Module};

/// Most resources and prompts one file may declare (each is a schema kept with the tool).
pub const MAX_SERVED: usize = 64;

/// A resource an MCP server file declares with `@mcp.resource(...)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResourceSchema {
    /// The resource's URI, or its URI template (RFC 6570 `{name}` parts) when the function
    /// takes parameters.
    pub uri: String,
    /// The resource's name (the decorator's `name`, else the function's).
    pub name: String,
    /// A name for people (the decorator's `title`), if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The decorator's `description`, else the function's docstring.
    pub description: String,
    /// The decorator's `mime_type`, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The function that reads it: its name, and its parameters (the template's names).
    #[schema(no_recursion)]
    pub function: ToolSchema,
}

impl ResourceSchema {
    /// Whether the URI is a template (`{name}` parts filled from the URI read).
    pub fn is_template(&self) -> bool {
        !template_names(&self.uri).is_empty()
    }
}

/// A prompt an MCP server file declares with `@mcp.prompt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PromptSchema {
    /// The prompt's name (the decorator's `name`, else the function's).
    pub name: String,
    /// A name for people (the decorator's `title`), if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The decorator's `description`, else the function's docstring.
    pub description: String,
    /// The function that renders it: its parameters are the prompt's arguments.
    #[schema(no_recursion)]
    pub function: ToolSchema,
}

/// The `{name}` parts of a URI template, in order (`{+name}`, `{name*}` and the other
/// RFC 6570 operators are read as their plain name).
pub fn template_names(uri: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = uri;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let inner = &rest[open + 1..open + close];
        let name = inner
            .trim_start_matches(['+', '#', '.', '/', ';', '?', '&'])
            .trim_end_matches('*');
        if !name.is_empty() {
            names.push(name.to_owned());
        }
        rest = &rest[open + close + 1..];
    }
    names
}

/// The values a URI gives a template's names, if it matches the template: each `{name}`
/// matches one or more characters up to the literal text that follows it (a path
/// segment, unless the name is written `{name*}` or `{+name}`, which may span `/`).
pub fn match_template(template: &str, uri: &str) -> Option<Vec<(String, String)>> {
    let mut values = Vec::new();
    let mut t = template;
    let mut u = uri;
    loop {
        let Some(open) = t.find('{') else {
            return (t == u).then_some(values);
        };
        let literal = &t[..open];
        u = u.strip_prefix(literal)?;
        let close = open + t[open..].find('}')?;
        let inner = &t[open + 1..close];
        let spans_slashes = inner.starts_with('+') || inner.ends_with('*');
        let name = inner
            .trim_start_matches(['+', '#', '.', '/', ';', '?', '&'])
            .trim_end_matches('*');
        t = &t[close + 1..];
        // The literal text up to the next name (or the end) ends this value.
        let next = t.find('{').map_or(t, |i| &t[..i]);
        let end = if next.is_empty() {
            if t.is_empty() { u.len() } else { return None }
        } else if spans_slashes {
            u.rfind(next)?
        } else {
            u.find(next)?
        };
        let value = &u[..end];
        if value.is_empty() || (!spans_slashes && value.contains('/')) {
            return None;
        }
        values.push((name.to_owned(), percent_decode(value)?));
        u = &u[end..];
    }
}

/// `%XX` escapes decoded; `None` if they do not make UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What a decorator says about a resource or a prompt.
#[derive(Default)]
struct Declared {
    uri: Option<String>,
    name: Option<String>,
    title: Option<String>,
    description: Option<String>,
    mime_type: Option<String>,
}

/// Which member a decorator declares, with its arguments.
enum Member {
    Resource(Declared),
    Prompt(Declared),
}

/// `@x.resource("uri", ...)`, `@x.prompt`, `@x.prompt(...)`.
fn member(decorator: &ast::Decorator) -> Option<Member> {
    let (target, call) = match &decorator.expression {
        Expr::Call(call) => (&*call.func, Some(call)),
        other => (other, None),
    };
    let Expr::Attribute(attribute) = target else {
        return None;
    };
    let string = |e: &Expr| scalar(e).and_then(|v| v.as_str().map(str::to_owned));
    let mut declared = Declared::default();
    if let Some(call) = call {
        if let Some(first) = call.arguments.args.first() {
            declared.uri = string(first);
        }
        for keyword in &call.arguments.keywords {
            let value = string(&keyword.value);
            match keyword.arg.as_ref().map(|a| a.as_str()) {
                Some("uri") => declared.uri = value,
                Some("name") => declared.name = value,
                Some("title") => declared.title = value,
                Some("description") => declared.description = value,
                Some("mime_type") => declared.mime_type = value,
                _ => {}
            }
        }
    }
    match attribute.attr.as_str() {
        "resource" if call.is_some() => Some(Member::Resource(declared)),
        "prompt" => {
            // `@mcp.prompt("name")`: FastMCP's positional name.
            if declared.name.is_none() {
                declared.name = declared.uri.take();
            }
            Some(Member::Prompt(declared))
        }
        _ => None,
    }
}

/// Whether a function is a resource or prompt of a server (`@mcp.resource(...)`,
/// `@mcp.prompt`): never a tool candidate.
pub(crate) fn is_member(f: &FunctionRef<'_>) -> bool {
    f.decorators.iter().any(|d| member(d).is_some())
}

/// The resources and prompts of `module`, and a warning for each one left out.
pub(crate) fn served(
    module: &Module<'_>,
    index: &LineIndex<'_>,
) -> (Vec<ResourceSchema>, Vec<PromptSchema>, Vec<Diagnostic>) {
    let (mut resources, mut prompts, mut diags) = (Vec::new(), Vec::new(), Vec::new());
    let (mut uris, mut names) = (HashSet::new(), HashSet::new());
    for f in &module.functions {
        for decorator in f.decorators {
            let Some(member) = member(decorator) else {
                continue;
            };
            if resources.len() + prompts.len() >= MAX_SERVED {
                diags.push(left_out(
                    index,
                    f,
                    format!("the file declares more than {MAX_SERVED} resources and prompts"),
                ));
                return (resources, prompts, diags);
            }
            let function = match schema_of(module, index, f) {
                Ok(function) => function,
                Err(reason) => {
                    diags.push(left_out(index, f, reason));
                    continue;
                }
            };
            match member {
                Member::Resource(d) => {
                    let Some(uri) = d.uri else {
                        diags.push(left_out(index, f, "its decorator names no URI".into()));
                        continue;
                    };
                    if let Err(reason) = fits_template(&uri, &function) {
                        diags.push(left_out(index, f, reason));
                        continue;
                    }
                    if !uris.insert(uri.clone()) {
                        diags.push(left_out(index, f, format!("`{uri}` is declared twice")));
                        continue;
                    }
                    resources.push(ResourceSchema {
                        name: d.name.unwrap_or_else(|| f.name.to_owned()),
                        title: d.title,
                        description: d
                            .description
                            .unwrap_or_else(|| function.description.clone()),
                        mime_type: d.mime_type,
                        uri,
                        function,
                    });
                }
                Member::Prompt(d) => {
                    let name = d.name.unwrap_or_else(|| f.name.to_owned());
                    if !names.insert(name.clone()) {
                        diags.push(left_out(
                            index,
                            f,
                            format!("a prompt named `{name}` is declared twice"),
                        ));
                        continue;
                    }
                    prompts.push(PromptSchema {
                        name,
                        title: d.title,
                        description: d
                            .description
                            .unwrap_or_else(|| function.description.clone()),
                        function,
                    });
                }
            }
        }
    }
    (resources, prompts, diags)
}

/// The function's schema, or why it has none (its first error).
fn schema_of(
    module: &Module<'_>,
    index: &LineIndex<'_>,
    f: &FunctionRef<'_>,
) -> Result<ToolSchema, String> {
    let mut mapper = Mapper::new(module, index);
    let schema = build(&mut mapper, f, &Default::default());
    match mapper.diags.iter().find(|d| d.severity == Severity::Error) {
        Some(error) => Err(error.message.clone()),
        None => Ok(schema),
    }
}

/// A template's names must be the function's parameters, every required one among them
/// (FastMCP refuses the file otherwise); a static URI's function takes no required
/// parameter.
fn fits_template(uri: &str, function: &ToolSchema) -> Result<(), String> {
    let names = template_names(uri);
    let properties = function
        .parameters
        .get("properties")
        .and_then(|p| p.as_object());
    for name in &names {
        if !properties.is_some_and(|p| p.contains_key(name)) {
            return Err(format!(
                "its URI template names `{{{name}}}`, which is not a parameter of `{}`",
                function.name
            ));
        }
    }
    let required = function
        .parameters
        .get("required")
        .and_then(|r| r.as_array())
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str());
    for name in required {
        if !names.iter().any(|n| n == name) {
            return Err(format!(
                "`{}` requires `{name}`, which its URI does not name (write it as `{{{name}}}`)",
                function.name
            ));
        }
    }
    Ok(())
}

fn left_out(index: &LineIndex<'_>, f: &FunctionRef<'_>, reason: String) -> Diagnostic {
    index.diag(
        Severity::Warning,
        Code::MemberLeftOut,
        (f.range.0, f.range.0 + 3),
        format!("`{}` is not served: {reason}", f.name),
        Some("fix the decorator or the function; the tool itself is unaffected".into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{DeriveOptions, derive};

    const SERVER: &str = r#"
from fastmcp import FastMCP

server = FastMCP("s")

@server.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key

@server.resource("notes://{topic}")
def notes(topic: str, depth: int = 1) -> str:
    """Notes on a topic."""
    return topic

@server.resource("notes://{missing}")
def wrong_name(topic: str) -> str:
    return topic

@server.resource("notes://all")
def needs_one(topic: str) -> str:
    return topic

@server.resource(uri="data://raw", mime_type="application/octet-stream", description="Raw.")
async def raw() -> bytes:
    return b""

@server.prompt
def plain(text: str) -> str:
    return text

@server.prompt("named", title="A title")
def other() -> str:
    """Another."""
    return ""

@server.prompt(name="plain")
def twice() -> str:
    return ""
"#;

    #[test]
    fn a_server_files_members_are_read_and_bad_ones_left_out_with_a_warning() {
        let opts = DeriveOptions {
            file_stem: "server".into(),
            function: None,
        };
        let derived = derive(SERVER, &opts).expect("the tool derives");
        let schema = derived.schema;
        assert_eq!(schema.name, "lookup");
        let uris: Vec<&str> = schema.resources.iter().map(|r| r.uri.as_str()).collect();
        assert_eq!(uris, ["notes://{topic}", "data://raw"]);
        assert!(schema.resources[0].is_template());
        assert_eq!(schema.resources[0].description, "Notes on a topic.");
        assert_eq!(schema.resources[0].function.name, "notes");
        assert_eq!(schema.resources[1].description, "Raw.");
        assert_eq!(
            schema.resources[1].mime_type.as_deref(),
            Some("application/octet-stream")
        );
        let prompts: Vec<(&str, &str)> = schema
            .prompts
            .iter()
            .map(|p| (p.name.as_str(), p.function.name.as_str()))
            .collect();
        assert_eq!(prompts, [("plain", "plain"), ("named", "other")]);
        assert_eq!(schema.prompts[1].title.as_deref(), Some("A title"));
        let left_out: Vec<&str> = derived
            .diagnostics
            .iter()
            .filter(|d| d.code == Code::MemberLeftOut)
            .map(|d| d.message.as_str())
            .collect();
        assert_eq!(left_out.len(), 3, "{left_out:?}");
        assert!(left_out[0].contains("`{missing}`"), "{left_out:?}");
        assert!(left_out[1].contains("requires `topic`"), "{left_out:?}");
        assert!(
            left_out[2].contains("`plain` is declared twice"),
            "{left_out:?}"
        );
        // A file without members keeps its stored form: no new keys.
        let plain = derive("def f(x: int) -> int:\n    return x\n", &opts).unwrap();
        let stored = serde_json::to_value(&plain.schema).unwrap();
        assert!(stored.get("resources").is_none() && stored.get("prompts").is_none());
    }

    #[test]
    fn tool_decorators_name_title_and_describe_their_tools() {
        let source = r#"
from agents import function_tool
from langchain_core.tools import tool

@mcp.tool(name="lookup", title="Look up", description="Finds a key.")
def find(key: str) -> str:
    return key

@tool("search_web")
def search(q: str) -> str:
    return q

@function_tool(name_override="weather", description_override="The weather.")
def get_weather(city: str) -> str:
    return city

@mcp.tool
def plain() -> int:
    return 1

def helper() -> None:
    pass
"#;
        let found = crate::schema::tool_functions(source);
        let tool =
            |function: &str, name: Option<&str>, title: Option<&str>, about: Option<&str>| {
                crate::schema::DecoratedTool {
                    function: function.into(),
                    name: name.map(Into::into),
                    title: title.map(Into::into),
                    description: about.map(Into::into),
                    tags: Vec::new(),
                }
            };
        assert_eq!(
            found,
            [
                tool(
                    "find",
                    Some("lookup"),
                    Some("Look up"),
                    Some("Finds a key.")
                ),
                tool("search", Some("search_web"), None, None),
                tool("get_weather", Some("weather"), None, Some("The weather.")),
                tool("plain", None, None, None),
            ]
        );
        assert!(crate::schema::tool_functions("def broken(:\n").is_empty());
    }

    #[test]
    fn template_names_and_matches() {
        assert_eq!(template_names("weather://{city}/current"), ["city"]);
        assert_eq!(template_names("a://{x}/{+rest}"), ["x", "rest"]);
        assert!(template_names("config://app").is_empty());
        let m = |t, u| match_template(t, u);
        assert_eq!(
            m("weather://{city}/current", "weather://Oslo/current"),
            Some(vec![("city".into(), "Oslo".into())])
        );
        assert_eq!(
            m(
                "weather://{city}/current",
                "weather://S%C3%A3o%20Paulo/current"
            ),
            Some(vec![("city".into(), "São Paulo".into())])
        );
        assert_eq!(m("weather://{city}/current", "weather://a/b/current"), None);
        assert_eq!(m("weather://{city}/current", "weather:///current"), None);
        assert_eq!(m("weather://{city}/current", "weather://Oslo/later"), None);
        assert_eq!(
            m("users://{id}/posts/{post}", "users://7/posts/9"),
            Some(vec![("id".into(), "7".into()), ("post".into(), "9".into())])
        );
        assert_eq!(
            m("files://{+path}", "files://a/b/c.txt"),
            Some(vec![("path".into(), "a/b/c.txt".into())])
        );
        assert_eq!(m("config://app", "config://app"), Some(vec![]));
        // Hostile URIs: huge, unbalanced, invalid escapes; an answer, never a panic.
        let huge = format!("weather://{}/current", "a".repeat(1 << 20));
        assert_eq!(
            m("weather://{city}/current", &huge).map(|v| v[0].1.len()),
            Some(1 << 20)
        );
        assert_eq!(m("weather://{city", "weather://x"), None);
        assert_eq!(m("w://{a}{b}", "w://xy"), None);
        assert_eq!(m("w://{a}", "w://%ff%fe"), None);
        assert_eq!(
            m("w://{a}", "w://%zz"),
            Some(vec![("a".into(), "%zz".into())])
        );
        assert!(template_names(&"{".repeat(10_000)).is_empty());
        assert_eq!(m("config://app", "config://apps"), None);
    }
}
