//! Schema health: does a parameters schema pass OpenAI's structured-outputs ("strict") rules?
//!
//! The rules (OpenAI "Structured Outputs", supported schemas):
//! - the root is an object (not `anyOf`); every object sets `additionalProperties: false` and
//!   lists every property in `required` (optional values are expressed as a union with null);
//! - supported keywords only: `type`, `description`, `title`, `enum`, `const`, `properties`,
//!   `required`, `additionalProperties`, `items`, `anyOf`, `$ref`, `$defs`, and as constraints
//!   `pattern`, `format` (date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid),
//!   `multipleOf`, `maximum`, `exclusiveMaximum`, `minimum`, `exclusiveMinimum`, `minItems`,
//!   `maxItems`; `default`, `minLength`, `uniqueItems`, `prefixItems` and others are rejected;
//! - `$ref` may not have sibling keywords;
//! - limits: at most 5000 object properties in all, 10 levels of object nesting, 1000 enum values
//!   in all, 120,000 characters of property names, definition names, enum and const values, and
//!   for a string enum of more than 250 values at most 15,000 characters.
//!
//! Schemas breaking only those rules are `NON_STRICT_ONLY`; schemas OpenAI rejects even without
//! strict mode (root not an object, broken `$ref`, unknown type names, not a JSON Schema) are
//! `INVALID`.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ToolSchema;

/// The health class of a schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HealthClass {
    /// Usable with OpenAI strict mode as it is.
    StrictCompliant,
    /// Valid, but only without strict mode.
    NonStrictOnly,
    /// Rejected even without strict mode.
    Invalid,
}

/// A health class and the reasons for it (empty when strict-compliant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    /// The class.
    pub class: HealthClass,
    /// One line per problem, each starting with a JSON pointer such as `#/properties/x`.
    pub reasons: Vec<String>,
}

/// Classifies a tool's parameters schema.
pub fn health(schema: &ToolSchema) -> Health {
    classify(&schema.parameters)
}

const ALLOWED: &[&str] = &[
    "type",
    "description",
    "title",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "$ref",
    "$defs",
    "pattern",
    "format",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "minItems",
    "maxItems",
];
const FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];
const TYPES: &[&str] = &[
    "string", "number", "integer", "boolean", "object", "array", "null",
];

struct Walk<'v> {
    root: &'v Value,
    invalid: Vec<String>,
    loose: Vec<String>,
    properties: usize,
    enum_values: usize,
    text: usize,
    max_depth: usize,
}

/// Classifies any parameters schema (root object, `$defs` at the root).
pub fn classify(parameters: &Value) -> Health {
    let mut w = Walk {
        root: parameters,
        invalid: Vec::new(),
        loose: Vec::new(),
        properties: 0,
        enum_values: 0,
        text: 0,
        max_depth: 0,
    };
    if parameters.get("type").and_then(Value::as_str) != Some("object") {
        w.invalid
            .push("#: the root must have \"type\": \"object\"".into());
    }
    if parameters.get("anyOf").is_some() {
        w.invalid.push("#: the root must not be `anyOf`".into());
    }
    if jsonschema::draft202012::new(parameters).is_err() {
        w.invalid
            .push("#: not a valid JSON Schema (draft 2020-12)".into());
    }
    w.node(parameters, "#", 1, 0);
    if let Some(Value::Object(defs)) = parameters.get("$defs") {
        for (name, def) in defs {
            w.text += name.chars().count();
            w.node(def, &format!("#/$defs/{}", escape(name)), 1, 0);
        }
    }
    if w.properties > 5000 {
        w.loose.push(format!(
            "#: {} object properties in all; strict mode allows 5000",
            w.properties
        ));
    }
    if w.max_depth > 10 {
        w.loose.push(format!(
            "#: objects nest {} levels deep; strict mode allows 10",
            w.max_depth
        ));
    }
    if w.enum_values > 1000 {
        w.loose.push(format!(
            "#: {} enum values in all; strict mode allows 1000",
            w.enum_values
        ));
    }
    if w.text > 120_000 {
        w.loose.push(format!(
            "#: {} characters of names and enum values; strict mode allows 120000",
            w.text
        ));
    }
    let class = if !w.invalid.is_empty() {
        HealthClass::Invalid
    } else if !w.loose.is_empty() {
        HealthClass::NonStrictOnly
    } else {
        HealthClass::StrictCompliant
    };
    let mut reasons = w.invalid;
    reasons.extend(w.loose);
    Health { class, reasons }
}

/// JSON-pointer escaping of one segment.
pub(crate) fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

impl Walk<'_> {
    fn node(&mut self, v: &Value, path: &str, object_depth: usize, depth: usize) {
        if depth > 128 {
            self.invalid.push(format!("{path}: nested too deeply"));
            return;
        }
        let Value::Object(o) = v else {
            self.loose.push(format!(
                "{path}: a boolean schema is not supported in strict mode"
            ));
            return;
        };
        for key in o.keys() {
            if key == "$defs" && path != "#" {
                self.loose
                    .push(format!("{path}: `$defs` is only supported at the root"));
            } else if key == "default" {
                self.loose.push(format!("{path}: strict mode rejects `default` (optional values become required and nullable)"));
            } else if !ALLOWED.contains(&key.as_str()) {
                self.loose.push(format!(
                    "{path}: keyword `{key}` is not supported in strict mode"
                ));
            }
        }
        let types: Vec<&str> = match o.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            Some(_) => {
                self.invalid.push(format!(
                    "{path}: `type` must be a string or a list of strings"
                ));
                Vec::new()
            }
            None => Vec::new(),
        };
        for t in &types {
            if !TYPES.contains(t) {
                self.invalid.push(format!("{path}: unknown type `{t}`"));
            }
        }
        if o.get("type").is_none()
            && !["anyOf", "$ref", "enum", "const"]
                .iter()
                .any(|k| o.contains_key(*k))
        {
            self.loose.push(format!(
                "{path}: no `type`, so any value is accepted; strict mode needs a type"
            ));
        }
        if let Some(r) = o.get("$ref") {
            self.reference(r, path);
            if o.keys().any(|k| k != "$ref" && k != "$defs") {
                self.loose.push(format!(
                    "{path}: strict mode does not allow keywords beside `$ref`"
                ));
            }
        }
        if let Some(Value::String(f)) = o.get("format")
            && !FORMATS.contains(&f.as_str())
        {
            self.loose.push(format!(
                "{path}: format `{f}` is not supported in strict mode"
            ));
        }
        if let Some(values) = o.get("enum") {
            self.enumeration(values, path);
        }
        if let Some(c) = o.get("const") {
            self.text += c.as_str().map_or(0, |s| s.chars().count());
        }
        if types.contains(&"object") || o.contains_key("properties") {
            self.object(o, path, object_depth, depth);
        }
        if types.contains(&"array") {
            match o.get("items") {
                Some(items) => self.node(items, &format!("{path}/items"), object_depth, depth + 1),
                None => self.loose.push(format!(
                    "{path}: an array without `items` is not supported in strict mode"
                )),
            }
        } else if let Some(items) = o.get("items") {
            self.node(items, &format!("{path}/items"), object_depth, depth + 1);
        }
        if let Some(Value::Array(prefix)) = o.get("prefixItems") {
            for (i, p) in prefix.iter().enumerate() {
                self.node(
                    p,
                    &format!("{path}/prefixItems/{i}"),
                    object_depth,
                    depth + 1,
                );
            }
        }
        match o.get("anyOf") {
            Some(Value::Array(branches)) if !branches.is_empty() => {
                for (i, b) in branches.iter().enumerate() {
                    self.node(b, &format!("{path}/anyOf/{i}"), object_depth, depth + 1);
                }
            }
            Some(_) => self
                .invalid
                .push(format!("{path}: `anyOf` must be a non-empty list")),
            None => {}
        }
    }

    fn reference(&mut self, r: &Value, path: &str) {
        let target = r.as_str().unwrap_or("");
        let ok = target == "#"
            || target
                .strip_prefix("#/$defs/")
                .is_some_and(|name| self.root.get("$defs").and_then(|d| d.get(name)).is_some());
        if !ok {
            self.invalid
                .push(format!("{path}: `$ref` {r} does not point to a definition"));
        }
    }

    fn enumeration(&mut self, values: &Value, path: &str) {
        let Value::Array(values) = values else {
            self.invalid.push(format!("{path}: `enum` must be a list"));
            return;
        };
        self.enum_values += values.len();
        let chars: usize = values
            .iter()
            .filter_map(Value::as_str)
            .map(|s| s.chars().count())
            .sum();
        self.text += chars;
        if values.len() > 250 && chars > 15_000 {
            self.loose.push(format!(
                "{path}: an enum of more than 250 values may total at most 15000 characters in strict mode"
            ));
        }
    }

    fn object(
        &mut self,
        o: &serde_json::Map<String, Value>,
        path: &str,
        object_depth: usize,
        depth: usize,
    ) {
        self.max_depth = self.max_depth.max(object_depth);
        match o.get("additionalProperties") {
            Some(Value::Bool(false)) => {}
            None => self.loose.push(format!(
                "{path}: `additionalProperties` is not set to false"
            )),
            Some(Value::Bool(true)) => self.loose.push(format!(
                "{path}: `additionalProperties` is true (free-form object)"
            )),
            Some(extra) => {
                self.loose.push(format!(
                    "{path}: `additionalProperties` is a schema (a map with free keys)"
                ));
                self.node(
                    extra,
                    &format!("{path}/additionalProperties"),
                    object_depth + 1,
                    depth + 1,
                );
            }
        }
        let props = match o.get("properties") {
            Some(Value::Object(p)) => Some(p),
            Some(_) => {
                self.invalid
                    .push(format!("{path}: `properties` must be an object"));
                None
            }
            None => None,
        };
        let required: HashSet<&str> = match o.get("required") {
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            Some(_) => {
                self.invalid
                    .push(format!("{path}: `required` must be a list"));
                HashSet::new()
            }
            None => HashSet::new(),
        };
        let listed = o
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for r in listed.filter_map(Value::as_str) {
            if !props.is_some_and(|p| p.contains_key(r)) {
                self.invalid.push(format!(
                    "{path}: `required` names `{r}`, which is not a property"
                ));
            }
        }
        let Some(props) = props else { return };
        for (name, schema) in props {
            self.properties += 1;
            self.text += name.chars().count();
            let here = format!("{path}/properties/{}", escape(name));
            if !required.contains(&name.as_str()) {
                self.loose.push(format!(
                    "{here}: optional property; strict mode needs every property in `required`"
                ));
            }
            self.node(schema, &here, object_depth + 1, depth + 1);
        }
    }
}
