//! Resources and prompts: what a tool's file declares besides the tool
//! (`@mcp.resource`, `@mcp.prompt`, read statically into its schema), listed from the
//! tools the caller may use and served by calling their functions in the sandbox, like
//! the tool (same grants, limits, worker, warm state and, on the service, the same
//! tenant ceilings and audit).
//!
//! | request | answer |
//! |---|---|
//! | `resources/list`, `resources/templates/list`, `prompts/list` | from the listed tools' schemas: no guest runs |
//! | `resources/read` of a URI no listed tool declares (or whose template it does not fit) | `-32602` with `data.uri` |
//! | `resources/read`, the function returned `str` | one text content |
//! | `resources/read`, `bytes` (annotated `-> bytes`), an image, audio or a file | one blob content (base64), with the decorator's MIME type, else the part's |
//! | `resources/read`, other data | its JSON as text, `application/json` unless the decorator names a type |
//! | `prompts/get` of an unknown prompt | `-32602` |
//! | `prompts/get`, the function returned `str` | one user message |
//! | `prompts/get`, a list | one message per item: a string is a user message, `{"role", "content"}` is kept (a string content becomes a text block) |
//! | `prompts/get`, rich content (an image, a file, ...) | one user message per part |
//! | `completion/complete` | a `Literal`'s or `Enum`'s values that start with what was typed; none for other parameters |
//! | the function failed (an exception, a limit) | `-32603` with the error's message and `data.status` |
//!
//! Arguments arrive as strings (a URI's `{names}`, `prompts/get`'s `arguments`): each is
//! turned into the type its parameter's schema names (integer, number, boolean, or JSON
//! for arrays and objects) before the usual check.

use rmcp::ErrorData;
use rmcp::model::{
    CompleteResult, CompletionInfo, GetPromptResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Reference,
};
use serde_json::{Map, Value, json};

use super::{ListedTool, Ran};
use crate::outcome::{ContentPart, Status};
use crate::schema::{PromptSchema, ResourceSchema, ToolSchema, match_template};

/// What a read or a get runs: the tool whose file declares it, and its function.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Target {
    /// The tool's name (as `tools/list` shows it).
    pub tool: String,
    /// The function's schema (its name, parameters and return annotation).
    pub function: ToolSchema,
    /// The arguments, typed as the function's schema says.
    pub arguments: Map<String, Value>,
}

/// `resources/list`: the static resources of every listed tool.
pub(super) fn resources(tools: &[ListedTool]) -> ListResourcesResult {
    let items = all_resources(tools)
        .filter(|(_, r)| !r.is_template())
        .filter_map(|(_, r)| serde_json::from_value(described(r, "uri")).ok())
        .collect();
    ListResourcesResult::with_all_items(items)
}

/// `resources/templates/list`: the templated resources of every listed tool.
pub(super) fn templates(tools: &[ListedTool]) -> ListResourceTemplatesResult {
    let items = all_resources(tools)
        .filter(|(_, r)| r.is_template())
        .filter_map(|(_, r)| serde_json::from_value(described(r, "uriTemplate")).ok())
        .collect();
    ListResourceTemplatesResult::with_all_items(items)
}

/// A resource as its list shows it, its URI under `uri_key`.
fn described(r: &ResourceSchema, uri_key: &str) -> Value {
    json!({
        uri_key: r.uri,
        "name": r.name,
        "title": r.title,
        "description": r.description,
        "mimeType": r.mime_type,
    })
}

/// `prompts/list`: the prompts of every listed tool, each argument with its
/// description and whether it is required.
pub(super) fn prompts(tools: &[ListedTool]) -> ListPromptsResult {
    let items = all_prompts(tools)
        .filter_map(|(_, p)| {
            let arguments: Vec<Value> = properties(&p.function)
                .map(|(name, schema, required)| {
                    json!({
                        "name": name,
                        "description": schema.get("description"),
                        "required": required,
                    })
                })
                .collect();
            serde_json::from_value(json!({
                "name": p.name,
                "title": p.title,
                "description": p.description,
                "arguments": arguments,
            }))
            .ok()
        })
        .collect();
    ListPromptsResult::with_all_items(items)
}

/// Every tool's resources, each URI once (the first tool's, in list order: two tools
/// registered from one server file both carry its resources).
fn all_resources(tools: &[ListedTool]) -> impl Iterator<Item = (&ListedTool, &ResourceSchema)> {
    let mut seen = std::collections::HashSet::new();
    tools
        .iter()
        .flat_map(|t| t.resources.iter().map(move |r| (t, r)))
        .filter(move |(_, r)| seen.insert(r.uri.as_str()))
}

/// Every tool's prompts, each name once (as for resources).
fn all_prompts(tools: &[ListedTool]) -> impl Iterator<Item = (&ListedTool, &PromptSchema)> {
    let mut seen = std::collections::HashSet::new();
    tools
        .iter()
        .flat_map(|t| t.prompts.iter().map(move |p| (t, p)))
        .filter(move |(_, p)| seen.insert(p.name.as_str()))
}

/// A function's parameters: name, schema and whether it is required.
fn properties(function: &ToolSchema) -> impl Iterator<Item = (&String, &Value, bool)> {
    let required: Vec<&str> = function
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    function
        .parameters
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(move |(name, schema)| (name, schema, required.contains(&name.as_str())))
}

/// The resource `uri` names among the listed tools' (a static URI first, then the first
/// template it fits), with its arguments; `-32602` with `data.uri` when none.
pub(super) fn find_resource(
    tools: &[ListedTool],
    uri: &str,
) -> Result<(Target, ResourceSchema), ErrorData> {
    let exact = all_resources(tools).find(|(_, r)| !r.is_template() && r.uri == uri);
    let found = exact.map(|(t, r)| (t, r, Vec::new())).or_else(|| {
        all_resources(tools)
            .filter(|(_, r)| r.is_template())
            .find_map(|(t, r)| match_template(&r.uri, uri).map(|values| (t, r, values)))
    });
    let Some((tool, resource, values)) = found else {
        return Err(ErrorData::invalid_params(
            format!(
                "unknown resource `{uri}`: call resources/list and resources/templates/list for the resources this server offers"
            ),
            Some(json!({"uri": uri})),
        ));
    };
    let strings: Map<String, Value> = values
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let target = Target {
        tool: tool.name.clone(),
        arguments: typed(&resource.function, strings),
        function: resource.function.clone(),
    };
    Ok((target, resource.clone()))
}

/// The prompt `name` among the listed tools', with `arguments` typed; `-32602` when none.
pub(super) fn find_prompt(
    tools: &[ListedTool],
    name: &str,
    arguments: Map<String, Value>,
) -> Result<(Target, PromptSchema), ErrorData> {
    let Some((tool, prompt)) = all_prompts(tools).find(|(_, p)| p.name == name) else {
        return Err(ErrorData::invalid_params(
            format!(
                "unknown prompt `{name}`: call prompts/list for the prompts this server offers"
            ),
            Some(json!({"name": name})),
        ));
    };
    let target = Target {
        tool: tool.name.clone(),
        arguments: typed(&prompt.function, arguments),
        function: prompt.function.clone(),
    };
    Ok((target, prompt.clone()))
}

/// String arguments turned into what their parameters' schemas name; anything that does
/// not parse is left as sent, for the schema check to refuse with its reason.
fn typed(function: &ToolSchema, arguments: Map<String, Value>) -> Map<String, Value> {
    let schemas: Vec<(&String, &Value, bool)> = properties(function).collect();
    arguments
        .into_iter()
        .map(|(name, value)| {
            let schema = schemas
                .iter()
                .find(|(n, ..)| **n == name)
                .map(|(_, s, _)| *s);
            let value = match (value, schema) {
                (Value::String(text), Some(schema)) => from_text(text, schema),
                (value, _) => value,
            };
            (name, value)
        })
        .collect()
}

fn from_text(text: String, schema: &Value) -> Value {
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if types.is_empty() || types.contains(&"string") {
        return Value::String(text);
    }
    let parsed = match serde_json::from_str::<Value>(&text) {
        Ok(v) => v,
        Err(_) => return Value::String(text),
    };
    let fits = match &parsed {
        Value::Number(n) => {
            types.contains(&"number") || (types.contains(&"integer") && (n.is_i64() || n.is_u64()))
        }
        Value::Bool(_) => types.contains(&"boolean"),
        Value::Array(_) => types.contains(&"array"),
        Value::Object(_) => types.contains(&"object"),
        Value::Null => types.contains(&"null"),
        Value::String(_) => false,
    };
    if fits { parsed } else { Value::String(text) }
}

/// `completion/complete` for a prompt's argument or a resource template's `{name}`:
/// the values its parameter's schema allows (a `Literal`'s or an `Enum`'s) that start
/// with what the client typed, from the source alone; none for any other parameter.
/// An unknown prompt, template or argument is `-32602`.
pub(super) fn complete(
    tools: &[ListedTool],
    reference: &Reference,
    argument: &str,
    typed: &str,
) -> Result<CompleteResult, ErrorData> {
    let function = match reference {
        Reference::Prompt(p) => all_prompts(tools)
            .find(|(_, prompt)| prompt.name == p.name)
            .map(|(_, prompt)| &prompt.function),
        Reference::Resource(r) => all_resources(tools)
            .find(|(_, resource)| resource.uri == r.uri)
            .map(|(_, resource)| &resource.function),
        // A kind of reference a later MCP revision adds: nothing of Warden's.
        _ => None,
    };
    let Some(function) = function else {
        return Err(ErrorData::invalid_params(
            "no prompt or resource template of that name: list them first",
            Some(json!({"ref": reference})),
        ));
    };
    let Some((_, schema, _)) = properties(function).find(|(name, ..)| *name == argument) else {
        return Err(ErrorData::invalid_params(
            format!("`{}` takes no argument `{argument}`", function.name),
            Some(json!({"argument": argument})),
        ));
    };
    let allowed: Vec<&str> = schema
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|v| v.starts_with(typed))
        .collect();
    let total = allowed.len();
    let values: Vec<String> = allowed
        .into_iter()
        .take(CompletionInfo::MAX_VALUES)
        .map(str::to_owned)
        .collect();
    let mut completion = CompletionInfo::new(values).map_err(|e| {
        ErrorData::internal_error(format!("a completion MCP cannot carry: {e}"), None)
    })?;
    completion.total = Some(u32::try_from(total).unwrap_or(u32::MAX));
    completion.has_more = Some(total > CompletionInfo::MAX_VALUES);
    // The constructor sets the result type the 2026-07-28 wire requires.
    Ok(CompleteResult::new(completion))
}

/// The answer of a read that ran.
pub(super) fn read(
    ran: Ran,
    uri: &str,
    resource: &ResourceSchema,
) -> Result<ReadResourceResult, ErrorData> {
    let result = succeeded(ran)?;
    let mime = resource.mime_type.clone();
    let contents = if let Some(part) = result.content.first() {
        // An image, audio or a file: its bytes, with its own type unless declared.
        match part {
            ContentPart::Image { data, mime_type } | ContentPart::Audio { data, mime_type } => {
                json!({"uri": uri, "mimeType": mime.unwrap_or(mime_type.clone()), "blob": data})
            }
            ContentPart::Resource { resource: file } => {
                let mut v = serde_json::to_value(file).unwrap_or_default();
                v["uri"] = json!(uri);
                if let Some(m) = mime {
                    v["mimeType"] = json!(m);
                }
                v
            }
            _ => text_contents(uri, mime, result.value.unwrap_or_default()),
        }
    } else {
        let value = result.value.unwrap_or_default();
        let bytes = resource
            .function
            .returns
            .as_ref()
            .is_some_and(|r| r.get("contentEncoding").is_some_and(|e| e == "base64"));
        match value {
            Value::String(blob) if bytes => json!({
                "uri": uri,
                "mimeType": mime.unwrap_or_else(|| "application/octet-stream".into()),
                "blob": blob,
            }),
            value => text_contents(uri, mime, value),
        }
    };
    let contents = serde_json::from_value(contents).map_err(|e| {
        ErrorData::internal_error(format!("the resource's contents are malformed: {e}"), None)
    })?;
    Ok(ReadResourceResult::new(vec![contents]))
}

fn text_contents(uri: &str, mime: Option<String>, value: Value) -> Value {
    match value {
        Value::String(text) => json!({
            "uri": uri,
            "mimeType": mime.unwrap_or_else(|| "text/plain".into()),
            "text": text,
        }),
        other => json!({
            "uri": uri,
            "mimeType": mime.unwrap_or_else(|| "application/json".into()),
            "text": other.to_string(),
        }),
    }
}

/// The answer of a get that ran.
pub(super) fn got(ran: Ran, prompt: &PromptSchema) -> Result<GetPromptResult, ErrorData> {
    let result = succeeded(ran)?;
    if !result.content.is_empty() {
        // Rich content (an image, a file, ...): one user message per part.
        let messages = result
            .content
            .iter()
            .map(|part| serde_json::from_value(json!({"role": "user", "content": part})))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                ErrorData::internal_error(format!("a prompt part MCP cannot carry: {e}"), None)
            })?;
        return Ok(GetPromptResult::new(messages).with_description(prompt.description.clone()));
    }
    let items = match result.value.unwrap_or_default() {
        Value::Array(items) => items,
        one => vec![one],
    };
    let mut messages = Vec::with_capacity(items.len());
    for item in items {
        let message = match item {
            Value::String(text) => {
                json!({"role": "user", "content": {"type": "text", "text": text}})
            }
            Value::Object(mut m) if m.contains_key("role") && m.contains_key("content") => {
                if let Some(Value::String(text)) = m.get("content") {
                    let text = text.clone();
                    m.insert("content".into(), json!({"type": "text", "text": text}));
                }
                Value::Object(m)
            }
            other => {
                json!({"role": "user", "content": {"type": "text", "text": other.to_string()}})
            }
        };
        let message = serde_json::from_value(message).map_err(|e| {
            ErrorData::internal_error(
                format!(
                    "prompt `{}` returned a message MCP cannot carry ({e}): return a string, or a list of strings and {{\"role\": \"user\"|\"assistant\", \"content\": str}}",
                    prompt.name
                ),
                None,
            )
        })?;
        messages.push(message);
    }
    Ok(GetPromptResult::new(messages).with_description(prompt.description.clone()))
}

/// The result of a call that ended `ok` (not cut short), else the error MCP answers.
fn succeeded(ran: Ran) -> Result<crate::outcome::CallResult, ErrorData> {
    let result = ran.result;
    if result.status == Status::Ok && result.truncated.is_none() {
        return Ok(result);
    }
    let message = match (&result.error, &result.message, &result.truncated) {
        (Some(e), ..) => format!("{}: {}", e.kind, e.message),
        (None, _, Some(_)) => {
            "the result is longer than the tool's return_char_limit: raise it, or return less"
                .to_owned()
        }
        (None, Some(m), None) => m.clone(),
        (None, None, None) => format!("the call ended {:?}", result.status),
    };
    Err(ErrorData::internal_error(
        message,
        Some(json!({"status": result.status})),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_become_what_their_parameters_name() {
        let function = ToolSchema {
            name: "f".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {
                "n": {"type": "integer"}, "x": {"type": "number"}, "b": {"type": "boolean"},
                "s": {"type": "string"}, "l": {"type": "array"}, "any": {}
            }, "required": ["n"]}),
            returns: None,
            injected: Vec::new(),
            resources: Vec::new(),
            prompts: Vec::new(),
            members_only: false,
            annotations: None,
            task: None,
        };
        let sent = json!({"n": "7", "x": "2.5", "b": "true", "s": "7", "l": "[1, 2]", "any": "7"});
        let Value::Object(sent) = sent else {
            unreachable!()
        };
        let converted = typed(&function, sent);
        assert_eq!(
            Value::Object(converted),
            json!({"n": 7, "x": 2.5, "b": true, "s": "7", "l": [1, 2], "any": "7"})
        );
        // What does not parse is left for the schema check to refuse.
        let Value::Object(bad) = json!({"n": "seven", "x": "1.5"}) else {
            unreachable!()
        };
        let mut bad = typed(&function, bad);
        assert_eq!(bad.remove("n"), Some(json!("seven")));
        // Nested past serde_json's depth: left as the string it was, for the check.
        let deep = "[".repeat(100_000);
        let Value::Object(nested) = json!({"l": deep.clone()}) else {
            unreachable!()
        };
        assert_eq!(typed(&function, nested).remove("l"), Some(json!(deep)));
        let Value::Object(frac) = json!({"n": "1.5"}) else {
            unreachable!()
        };
        assert_eq!(typed(&function, frac).remove("n"), Some(json!("1.5")));
    }
}
