//! A tool's parameters, one at a time: its annotation (or its docstring's type, or any
//! JSON value), its default, its description, or its place among the parameters a
//! framework or Letta injects.

use std::collections::HashSet;

use ruff_python_ast as ast;
use serde_json::{Map, Value, json};

use super::super::annotation::{Mapper, ParamType};
use super::super::diagnostic::{Code, Severity};
use super::super::docstring::{self, Docstring};
use super::super::frameworks::Framing;
use super::super::source::span;
use super::super::{Injected, InjectedKind, content};

/// What the parameters read so far add up to.
#[derive(Default)]
pub(super) struct Params {
    pub(super) properties: Map<String, Value>,
    pub(super) required: Vec<String>,
    /// Every parameter name, in or out of the schema.
    pub(super) names: HashSet<String>,
    /// The parameters a caller may pass, and whether each is required (for `args_schema`).
    pub(super) callable: Vec<(String, bool)>,
    pub(super) injected: Vec<Injected>,
}

pub(super) fn parameter(
    mapper: &mut Mapper<'_, '_>,
    doc: &Docstring,
    framing: &Framing<'_>,
    a: &ast::ParameterWithDefault,
    params: &mut Params,
) {
    let name = a.parameter.name.to_string();
    params.names.insert(name.clone());
    if name == "agent_state" {
        let d = mapper.index.diag(
            Severity::Warning,
            Code::ReservedParameter,
            span(&a.parameter),
            "`agent_state` is injected by Letta and is left out of the schema".to_string(),
            Some(
                "Warden passes the agent state the caller sends (the request's `agent_state` field), else None"
                    .into(),
            ),
        );
        mapper.diags.push(d);
        params.injected.push(Injected {
            name,
            kind: InjectedKind::AgentState,
        });
        return;
    }
    // A FastMCP-style `ctx: Context` is the guest's to pass, not the caller's.
    if a.parameter
        .annotation
        .as_deref()
        .is_some_and(|t| content::is_context(mapper.module, t))
    {
        params.injected.push(Injected {
            name,
            kind: InjectedKind::Context,
        });
        return;
    }
    // LangChain's `run_manager` (callbacks) keeps its default: not the caller's to pass.
    if name == "run_manager" && a.default.is_some() {
        return;
    }
    params.callable.push((name.clone(), a.default.is_none()));
    // `args_schema`: the model describes the arguments, not the signature.
    if framing.args_model.is_some() {
        return;
    }
    let pt = match (
        a.parameter.annotation.as_deref(),
        framing.input_schema(&name),
    ) {
        (Some(annotation), _) => {
            mapper.severity = Severity::Error;
            let Some(pt) = mapper.param(annotation) else {
                return;
            };
            pt
        }
        // smolagents' `inputs` gives the type the signature leaves out.
        (None, Some(schema)) => ParamType {
            schema,
            optional: false,
            description: None,
            field_default: false,
        },
        (None, None) => untyped_parameter(mapper, doc, &name, span(&a.parameter)),
    };
    if pt.field_default
        && a.default.is_none()
        && let Some(annotation) = a.parameter.annotation.as_deref()
    {
        mapper.warn(
            Code::UnsupportedFieldOption,
            annotation,
            format!("the `Field` default of `{name}` is inside `Annotated`, so a call without `{name}` gets no default"),
            Some("write the default after the annotation: `x: Annotated[T, Field(...)] = value`"),
        );
    }
    let mut schema = pt.schema;
    let description = framing
        .input_description(&name)
        .or(doc.param(&name))
        .map(str::to_string)
        .or(pt.description);
    if description.is_none() {
        let d = mapper.index.diag(
            Severity::Warning,
            Code::UndocumentedParameter,
            span(&a.parameter),
            format!("parameter `{name}` has no description"),
            Some(format!("document it in the docstring (`Args:` then `{name}: ...`) or with `Annotated[T, \"...\"]`")),
        );
        mapper.diags.push(d);
    }
    let default = a.default.as_deref().and_then(|d| {
        let v = mapper.default_value(d);
        if v.is_none() {
            mapper.warn(
                Code::UnsupportedDefault,
                d,
                format!("the default of `{name}` is not a literal, so the schema shows no default"),
                Some("use a literal default (string, number, bool, None, list, dict)"),
            );
        }
        v
    });
    if let Value::Object(o) = &mut schema {
        if let Some(d) = description {
            o.insert("description".into(), Value::String(d));
        }
        // `x: Optional[T] = None` is simply "may be omitted": no `default: null` on a `T` schema.
        if let Some(d) = default.filter(|d| !(pt.optional && d.is_null())) {
            o.insert("default".into(), d);
        }
    }
    if a.default.is_none() && !pt.optional {
        params.required.push(name.clone());
    }
    params.properties.insert(name, schema);
}

/// A parameter without an annotation: the type its docstring gives (`x (int): ...`,
/// `x : int`, `:type x: int`), else any JSON value; a warning either way, as Letta, OpenAI
/// Agents and hand-written tools allow such parameters.
fn untyped_parameter(
    mapper: &mut Mapper<'_, '_>,
    doc: &Docstring,
    name: &str,
    at: (usize, usize),
) -> ParamType {
    let from_doc = doc
        .param_type(name)
        .and_then(|text| Some((text, mapper.map_doc_type(text, at, |m, e| m.param(e))?)));
    let (message, hint, pt) = match from_doc {
        Some((text, pt)) => (
            format!(
                "parameter `{name}` has no type annotation; its type is taken from the docstring (`{text}`)"
            ),
            format!(
                "annotate it (`{name}: {}`) so that Python and the schema agree",
                docstring::type_expression(text)
            ),
            pt,
        ),
        None => (
            format!("parameter `{name}` has no type annotation, so it accepts any JSON value"),
            format!(
                "annotate it, e.g. `{name}: str`, or give its type in the docstring (`{name} (str): ...`)"
            ),
            ParamType {
                schema: json!({}),
                optional: false,
                description: None,
                field_default: false,
            },
        ),
    };
    missing_annotation(mapper, at, message, hint);
    pt
}

/// The `missing-annotation` warning at `at`.
pub(super) fn missing_annotation(
    mapper: &mut Mapper<'_, '_>,
    at: (usize, usize),
    message: String,
    hint: String,
) {
    let d = mapper.index.diag(
        Severity::Warning,
        Code::MissingAnnotation,
        at,
        message,
        Some(hint),
    );
    mapper.diags.push(d);
}
