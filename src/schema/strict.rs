//! The OpenAI strict-mode variant of a parameters schema, where one exists.
//!
//! Optional properties become required and nullable (the caller then passes `null`, which the
//! tool receives as `None`, so a parameter with another default must treat `None` as "use the
//! default"); every object gets `additionalProperties: false`; annotation-only keywords that
//! strict mode rejects (`default`, `contentEncoding`, `examples`) are dropped; a `$ref` with
//! sibling keywords is inlined once. Anything else strict mode cannot express (free-form maps,
//! `Any`, `minLength`, `uniqueItems`, tuples as `prefixItems`, ...) means there is no strict variant.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

use super::annotation::nullable;
use super::guard::{MAX_SCHEMA, json_len};
use super::health::{HealthClass, classify, escape};

/// Annotation-only keywords dropped in strict mode.
const DROPPED: &[&str] = &["default", "contentEncoding", "examples"];

/// The definitions a `$ref` may be inlined from, and what inlining may still add.
struct Defs {
    schemas: Map<String, Value>,
    /// JSON length of each definition.
    sizes: HashMap<String, usize>,
    /// Bytes inlining may still add. Each inlined copy can hold further `$ref`s with
    /// siblings, so unbounded inlining doubles per level of models holding two of the next.
    budget: usize,
}

/// The strict variant of `parameters`, or the reasons none exists.
///
/// A `$ref` with sibling keywords (a described model field) is inlined while the result stays
/// within [`MAX_SCHEMA`]; past that it becomes `{"anyOf": [{"$ref": ...}], ...siblings}`, which
/// strict mode accepts too, so the variant grows at most by that budget.
pub fn strict_variant(parameters: &Value) -> Result<Value, Vec<String>> {
    let mut v = parameters.clone();
    let schemas = parameters
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let sizes = schemas
        .iter()
        .map(|(k, d)| (k.clone(), json_len(d)))
        .collect();
    let budget = usize::try_from(MAX_SCHEMA.as_u64())
        .unwrap_or(usize::MAX)
        .saturating_sub(json_len(parameters));
    let mut defs = Defs {
        schemas,
        sizes,
        budget,
    };
    let mut reasons = Vec::new();
    fix(&mut v, &mut defs, "#", &mut reasons, 0);
    if let Some(Value::Object(d)) = v.get_mut("$defs") {
        for (name, def) in d.iter_mut() {
            fix(
                def,
                &mut defs,
                &format!("#/$defs/{}", escape(name)),
                &mut reasons,
                0,
            );
        }
    }
    if !reasons.is_empty() {
        return Err(reasons);
    }
    let health = classify(&v);
    if health.class == HealthClass::StrictCompliant {
        Ok(v)
    } else {
        Err(health.reasons)
    }
}

fn fix(v: &mut Value, defs: &mut Defs, path: &str, reasons: &mut Vec<String>, depth: u32) {
    if depth > 128 {
        reasons.push(format!("{path}: nested too deeply"));
        return;
    }
    let Value::Object(o) = v else { return };
    for k in DROPPED {
        o.remove(*k);
    }
    if o.contains_key("$ref") && o.keys().any(|k| k != "$ref" && k != "$defs") {
        let name = o
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
            .map(str::to_string);
        let size = name
            .as_ref()
            .and_then(|n| defs.sizes.get(n))
            .copied()
            .unwrap_or(0);
        let target = name.and_then(|n| defs.schemas.get(&n)).cloned();
        if let Some(Value::Object(def)) = target {
            let reference = o.remove("$ref");
            let siblings = std::mem::take(o);
            if size <= defs.budget {
                defs.budget -= size;
                *o = def;
                for k in DROPPED {
                    o.remove(*k);
                }
            } else if let Some(reference) = reference {
                o.insert("anyOf".into(), json!([{ "$ref": reference }]));
            }
            for (k, x) in siblings {
                o.insert(k, x);
            }
        }
    }
    let is_object = o.get("type").is_some_and(|t| {
        t == "object"
            || t.as_array()
                .is_some_and(|a| a.contains(&Value::from("object")))
    }) || o.contains_key("properties");
    if o.get("type").is_none()
        && !["anyOf", "$ref", "enum", "const"]
            .iter()
            .any(|k| o.contains_key(*k))
    {
        reasons.push(format!(
            "{path}: accepts any value (`Any`), which strict mode cannot express"
        ));
    }
    if is_object {
        match (o.get("additionalProperties"), o.contains_key("properties")) {
            (Some(Value::Object(_)), _) => reasons.push(format!(
                "{path}: a map with free keys (`dict[str, T]`) has no strict form; use a TypedDict or model"
            )),
            (_, false) => reasons.push(format!(
                "{path}: a free-form object (`dict`) has no strict form; use a TypedDict or model"
            )),
            _ => {
                o.insert("additionalProperties".into(), Value::Bool(false));
            }
        }
        let mut required: Vec<Value> = o
            .get("required")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // A set beside the list: objects with thousands of properties stay linear.
        let mut listed: HashSet<String> = required
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        if let Some(Value::Object(props)) = o.get_mut("properties") {
            for (name, schema) in props.iter_mut() {
                fix(
                    schema,
                    defs,
                    &format!("{path}/properties/{}", escape(name)),
                    reasons,
                    depth + 1,
                );
                if listed.insert(name.clone()) {
                    required.push(Value::String(name.clone()));
                    *schema = nullable(std::mem::take(schema));
                }
            }
        }
        o.insert("required".into(), Value::Array(required));
    }
    if let Some(items) = o.get_mut("items") {
        fix(items, defs, &format!("{path}/items"), reasons, depth + 1);
    }
    if let Some(Value::Array(branches)) = o.get_mut("anyOf") {
        for (i, b) in branches.iter_mut().enumerate() {
            fix(b, defs, &format!("{path}/anyOf/{i}"), reasons, depth + 1);
        }
    }
}
