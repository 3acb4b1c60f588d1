//! Writing a [`ToolSchema`] in the shape each consumer expects.
//!
//! - `json-schema`: the parameters schema with `$schema`, `title` and `description`.
//! - `openai`: `{"type": "function", "function": {name, description, parameters, strict}}`.
//! - `anthropic`: `{name, description, input_schema}` (plus `"strict": true` in strict mode).
//! - `mcp`: `{name, description, inputSchema, outputSchema}`. MCP requires `outputSchema` to be
//!   an object schema, so a non-object return type `R` is wrapped as
//!   `{"type": "object", "properties": {"result": R}, "required": ["result"]}` (the runtime must
//!   then return `{"result": value}` as structured content). No return annotation (or `-> None`)
//!   means no `outputSchema`.
//! - `letta`: a Letta `Tool` object; `json_schema` has every non-recursive `$ref` inlined, as
//!   Letta's own generator writes models inline, up to [`MAX_SCHEMA`] of output (see
//!   [`inline_refs`]).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::guard::{MAX_SCHEMA, json_len};
use super::strict::strict_variant;
use super::{SchemaError, ToolSchema};

/// An export format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Plain JSON Schema of the parameters.
    JsonSchema,
    /// OpenAI function tool.
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic tool.
    Anthropic,
    /// MCP tool.
    Mcp,
    /// Letta tool.
    Letta,
}

impl Format {
    /// The name accepted by [`FromStr`].
    pub fn as_str(self) -> &'static str {
        match self {
            Format::JsonSchema => "json-schema",
            Format::OpenAi => "openai",
            Format::Anthropic => "anthropic",
            Format::Mcp => "mcp",
            Format::Letta => "letta",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = SchemaError;
    fn from_str(s: &str) -> Result<Self, SchemaError> {
        Ok(match s {
            "json-schema" => Format::JsonSchema,
            "openai" => Format::OpenAi,
            "anthropic" => Format::Anthropic,
            "mcp" => Format::Mcp,
            "letta" => Format::Letta,
            other => return Err(SchemaError::UnknownFormat(other.to_string())),
        })
    }
}

/// A pip requirement of a Letta tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PipRequirement {
    /// Package name.
    pub name: String,
    /// Exact version, if pinned.
    pub version: Option<String>,
}

/// What a Letta `Tool` needs beyond the schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LettaExtras {
    /// The tool's Python source.
    pub source_code: String,
    /// Longest tool output Letta keeps, in characters (1 to 1,000,000; Letta's default 50,000).
    pub return_char_limit: u32,
    /// Metadata tags.
    pub tags: Vec<String>,
    /// Packages the tool needs.
    pub pip_requirements: Vec<PipRequirement>,
}

impl Default for LettaExtras {
    fn default() -> Self {
        LettaExtras {
            source_code: String::new(),
            return_char_limit: 50_000,
            tags: Vec::new(),
            pip_requirements: Vec::new(),
        }
    }
}

/// Exports `schema` as `format`; `strict` uses the strict variant of the parameters (an error
/// when none exists). `letta` is read by the Letta format only.
pub fn export(
    schema: &ToolSchema,
    format: Format,
    strict: bool,
    letta: &LettaExtras,
) -> Result<Value, SchemaError> {
    let parameters = if strict {
        strict_variant(&schema.parameters).map_err(|reasons| SchemaError::NoStrictVariant {
            name: schema.name.clone(),
            reasons,
        })?
    } else {
        schema.parameters.clone()
    };
    Ok(match format {
        Format::JsonSchema => {
            let mut out = Map::new();
            out.insert(
                "$schema".into(),
                json!("https://json-schema.org/draft/2020-12/schema"),
            );
            out.insert("title".into(), json!(schema.name));
            out.insert("description".into(), json!(schema.description));
            if let Value::Object(p) = parameters {
                out.extend(p);
            }
            Value::Object(out)
        }
        Format::OpenAi => json!({
            "type": "function",
            "function": {
                "name": schema.name,
                "description": schema.description,
                "parameters": parameters,
                "strict": strict,
            }
        }),
        Format::Anthropic => {
            let mut out = json!({
                "name": schema.name,
                "description": schema.description,
                "input_schema": parameters,
            });
            if strict {
                out["strict"] = json!(true);
            }
            out
        }
        Format::Mcp => {
            let mut out = json!({
                "name": schema.name,
                "description": schema.description,
                "inputSchema": parameters,
            });
            if let Some(r) = &schema.returns {
                out["outputSchema"] = mcp_output(r);
            }
            out
        }
        Format::Letta => letta_tool(schema, parameters, strict, letta)?,
    })
}

/// An object schema for MCP's `outputSchema`: `returns` itself when it is an object
/// schema (a `$ref` to an object definition also gets `"type": "object"` beside it, as
/// MCP requires the root to say so), else `returns` wrapped as `{"result": R}`
/// ([`mcp_output_wraps`]).
pub fn mcp_output(returns: &Value) -> Value {
    let defs = returns.get("$defs").cloned();
    if !mcp_output_wraps(returns) {
        let mut out = returns.clone();
        if let Value::Object(o) = &mut out {
            o.insert("type".into(), json!("object"));
        }
        return out;
    }
    let mut inner = returns.clone();
    if let Value::Object(o) = &mut inner {
        o.remove("$defs");
    }
    let mut out = json!({
        "type": "object",
        "properties": {"result": inner},
        "required": ["result"],
    });
    if let Some(d) = defs {
        out["$defs"] = d;
    }
    out
}

/// Whether [`mcp_output`] wraps a return schema as `{"result": R}`: unless it is an
/// object schema or a `$ref` to one, so the structured content of a call must then be
/// `{"result": value}`.
pub fn mcp_output_wraps(returns: &Value) -> bool {
    let is_object = |v: &Value| v.get("type").is_some_and(|t| t == "object");
    let target = returns
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|n| returns.get("$defs").and_then(|d| d.get(n)));
    !(is_object(returns) || target.is_some_and(is_object))
}

fn letta_tool(
    schema: &ToolSchema,
    parameters: Value,
    strict: bool,
    extras: &LettaExtras,
) -> Result<Value, SchemaError> {
    if !(1..=1_000_000).contains(&extras.return_char_limit) {
        return Err(SchemaError::InvalidOption(format!(
            "return_char_limit must be between 1 and 1000000 characters, got {}",
            extras.return_char_limit
        )));
    }
    let mut json_schema = json!({
        "name": schema.name,
        "description": schema.description,
        "parameters": inline_refs(&parameters),
    });
    if strict {
        json_schema["strict"] = json!(true);
    }
    let pip = if extras.pip_requirements.is_empty() {
        Value::Null
    } else {
        json!(extras.pip_requirements)
    };
    Ok(json!({
        "name": schema.name,
        "description": schema.description,
        "tool_type": "custom",
        "source_type": "python",
        "source_code": extras.source_code,
        "json_schema": json_schema,
        "args_json_schema": null,
        "return_char_limit": extras.return_char_limit,
        "tags": extras.tags,
        "pip_requirements": pip,
        "npm_requirements": null,
        "default_requires_approval": null,
        "enable_parallel_execution": false,
        "metadata_": {},
    }))
}

/// Replaces every `$ref` to a non-recursive definition by the definition (sibling keywords
/// such as `description` win); `$defs` keeps only the definitions still referenced.
///
/// Inlining copies a definition per use, so models holding two of the next double the output
/// per level. It stops once the output would pass [`MAX_SCHEMA`]: the remaining `$ref`s stay,
/// pointing into `$defs` (standard JSON Schema that OpenAI and Anthropic accept), so the result
/// is at most about the budget plus the input.
pub fn inline_refs(schema: &Value) -> Value {
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut inliner = Inliner {
        sizes: defs.iter().map(|(k, d)| (k.clone(), json_len(d))).collect(),
        budget: usize::try_from(MAX_SCHEMA.as_u64())
            .unwrap_or(usize::MAX)
            .saturating_sub(json_len(schema)),
        defs,
        keep: HashSet::new(),
    };
    let mut out = schema.clone();
    if let Value::Object(o) = &mut out {
        o.remove("$defs");
    }
    inliner.inline(&mut out, &mut Vec::new(), 0);
    if !inliner.keep.is_empty() {
        let mut kept = Map::new();
        let mut pending: Vec<String> = inliner.keep.iter().cloned().collect();
        while let Some(name) = pending.pop() {
            if kept.contains_key(&name) {
                continue;
            }
            let Some(def) = inliner.defs.get(&name) else {
                continue;
            };
            let mut def = def.clone();
            let before = std::mem::take(&mut inliner.keep);
            inliner.inline(&mut def, &mut vec![name.clone()], 0);
            let more = std::mem::replace(&mut inliner.keep, before);
            pending.extend(more.iter().filter(|n| !kept.contains_key(*n)).cloned());
            inliner.keep.extend(more);
            kept.insert(name, def);
        }
        let ordered: Map<String, Value> = inliner
            .defs
            .keys()
            .filter_map(|k| kept.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        if let Value::Object(o) = &mut out {
            o.insert("$defs".into(), Value::Object(ordered));
        }
    }
    out
}

struct Inliner {
    defs: Map<String, Value>,
    /// JSON length of each definition.
    sizes: HashMap<String, usize>,
    /// Bytes inlining may still add.
    budget: usize,
    /// Definitions left as `$ref` (recursive, or past the budget).
    keep: HashSet<String>,
}

impl Inliner {
    fn inline(&mut self, v: &mut Value, stack: &mut Vec<String>, depth: u32) {
        if depth > 128 {
            return;
        }
        match v {
            Value::Object(o) => {
                let target = o
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix("#/$defs/"))
                    .map(str::to_string);
                if let Some(name) = target {
                    let size = self.sizes.get(&name).copied().unwrap_or(0);
                    if stack.contains(&name) || size > self.budget {
                        self.keep.insert(name);
                        return;
                    }
                    if let Some(Value::Object(def)) = self.defs.get(&name) {
                        self.budget -= size;
                        let mut merged = def.clone();
                        o.remove("$ref");
                        for (k, x) in std::mem::take(o) {
                            merged.insert(k, x);
                        }
                        *o = merged;
                        stack.push(name);
                        for (_, x) in o.iter_mut() {
                            self.inline(x, stack, depth + 1);
                        }
                        stack.pop();
                        return;
                    }
                }
                for (_, x) in o.iter_mut() {
                    self.inline(x, stack, depth + 1);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| self.inline(x, stack, depth + 1)),
            _ => {}
        }
    }
}
