//! Checking the arguments of a tool call against the tool's parameters schema.

use std::collections::HashSet;
use std::fmt;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ToolSchema;
use super::literal::json_type;

/// One reason a set of arguments is rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Violation {
    /// JSON pointer into the arguments (`""` is the arguments object itself).
    pub pointer: String,
    /// Lower-case description, e.g. `expected number, got string`.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "(arguments): {}", self.message)
        } else {
            write!(f, "{}: {}", self.pointer, self.message)
        }
    }
}

/// A compiled validator, for checking many calls of one tool.
pub struct ArgumentValidator {
    validator: Result<jsonschema::Validator, String>,
}

impl std::fmt::Debug for ArgumentValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgumentValidator")
            .field("compiles", &self.validator.is_ok())
            .finish()
    }
}

impl ArgumentValidator {
    /// Compiles the parameters schema (draft 2020-12, `format` asserted).
    pub fn new(schema: &ToolSchema) -> Self {
        let validator = jsonschema::draft202012::options()
            .should_validate_formats(true)
            .build(&schema.parameters)
            .map_err(|e| e.to_string());
        ArgumentValidator { validator }
    }

    /// Why the tool's schema does not compile, if it does not. A stored schema that
    /// fails here is the server's fault, not the caller's: check this before
    /// [`ArgumentValidator::validate`] to tell the two apart.
    pub fn compile_error(&self) -> Option<&str> {
        self.validator.as_ref().err().map(String::as_str)
    }

    /// Checks one set of arguments; all violations at once.
    pub fn validate(&self, arguments: &Value) -> Result<(), Vec<Violation>> {
        if !arguments.is_object() {
            return Err(vec![Violation {
                pointer: String::new(),
                message: format!("expected object, got {}", json_type(arguments)),
            }]);
        }
        let validator = self.validator.as_ref().map_err(|e| {
            vec![Violation {
                pointer: String::new(),
                message: format!("the tool's schema cannot be compiled ({e}); re-derive it"),
            }]
        })?;
        let mut out = Vec::new();
        for error in validator.iter_errors(arguments) {
            let pointer = error.instance_path().as_str().to_string();
            let root = pointer.is_empty();
            let what = if root { "argument" } else { "property" };
            match error.kind() {
                ValidationErrorKind::Type { kind } => {
                    let expected = match kind {
                        TypeKind::Single(t) => t.as_str().to_string(),
                        TypeKind::Multiple(set) => set
                            .iter()
                            .map(|t| t.as_str())
                            .collect::<Vec<_>>()
                            .join(" or "),
                    };
                    out.push(Violation {
                        pointer,
                        message: format!(
                            "expected {expected}, got {}",
                            json_type(error.instance())
                        ),
                    });
                }
                ValidationErrorKind::AdditionalProperties { unexpected } => {
                    for name in unexpected {
                        out.push(Violation {
                            pointer: format!("{pointer}/{}", super::health::escape(name)),
                            message: format!("unknown {what}"),
                        });
                    }
                }
                ValidationErrorKind::Required { property } => {
                    let name = property.as_str().unwrap_or_default();
                    out.push(Violation {
                        pointer: format!("{pointer}/{}", super::health::escape(name)),
                        message: format!("missing required {what}"),
                    });
                }
                ValidationErrorKind::Enum { options } => out.push(Violation {
                    pointer,
                    message: format!("expected one of {options}, got {}", error.instance()),
                }),
                _ => out.push(Violation {
                    pointer,
                    message: error.to_string(),
                }),
            }
        }
        if out.is_empty() { Ok(()) } else { Err(out) }
    }
}

/// Checks a tool call's arguments: an object, no unknown arguments, every value of the right
/// type. Compiles the schema on each call; use [`ArgumentValidator`] for repeated checks.
pub fn validate_arguments(schema: &ToolSchema, arguments: &Value) -> Result<(), Vec<Violation>> {
    ArgumentValidator::new(schema).validate(arguments)
}

/// The parameters a caller may omit: those in `properties` but not in `required`. The
/// harness passes `None` for those that also have no Python default (the `Optional[T]`
/// rule).
pub fn none_if_omitted(schema: &ToolSchema) -> Vec<String> {
    let required: HashSet<&str> = schema.parameters["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    schema.parameters["properties"]
        .as_object()
        .map(|p| {
            p.keys()
                .filter(|k| !required.contains(&k.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Drops arguments that are `null` where the parameter is optional and does not accept
/// `null`, so that the Python default applies.
///
/// A model using the strict variant of a schema must send every parameter, and sends
/// `null` for one it means to leave out; this maps that back to "omitted".
pub fn drop_nulls_for_defaults(
    schema: &ToolSchema,
    arguments: &mut serde_json::Map<String, Value>,
) {
    let required: HashSet<&str> = schema.parameters["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties = &schema.parameters["properties"];
    arguments.retain(|name, value| {
        !(value.is_null()
            && !required.contains(&name.as_str())
            && !accepts_null(&properties[name.as_str()]))
    });
}

fn accepts_null(property: &Value) -> bool {
    match &property["type"] {
        Value::String(t) => t == "null",
        Value::Array(ts) => ts.iter().any(|t| t == "null"),
        _ => ["anyOf", "oneOf"].iter().any(|k| {
            property[*k]
                .as_array()
                .is_some_and(|alts| alts.iter().any(accepts_null))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn null_for_an_optional_non_nullable_parameter_means_omitted() {
        let schema = ToolSchema {
            name: "f".into(),
            description: String::new(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "a": {"type": "integer"},
                    "top": {"type": "integer", "default": 3},
                    "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]}
                },
                "required": ["a"]
            }),
            returns: None,
            injected: Vec::new(),
            resources: Vec::new(),
            prompts: Vec::new(),
            members_only: false,
            annotations: None,
            task: None,
        };
        let mut args = json!({"a": null, "top": null, "maybe": null})
            .as_object()
            .cloned()
            .unwrap_or_default();
        drop_nulls_for_defaults(&schema, &mut args);
        assert_eq!(Value::Object(args), json!({"a": null, "maybe": null}));
    }
}
