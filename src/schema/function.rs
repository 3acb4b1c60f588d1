//! Turning the chosen tool's signature and docstring into a [`ToolSchema`] (`choose` picks it).

use super::content;

use serde_json::{Value, json};

use super::annotation::Mapper;
use super::choose::{Chosen, select};
use super::diagnostic::{Code, Diagnostic, LineIndex, Severity};
use super::docstring::{self, Docstring};
use super::frameworks::{self, Framing};
use super::guard;
use super::module::{FunctionRef, Module};
use super::served;
use super::source::{self, span};
use super::{DeriveOptions, ToolSchema};

mod defs;
mod parameters;

use defs::attach_defs;
use parameters::{Params, missing_annotation, parameter};

/// Letta's description when a function has no docstring.
pub(crate) const NO_DESCRIPTION: &str = "No description available";

/// Parses and analyses `source`: the schema (when no error was found) and every diagnostic,
/// sorted by position. The work runs on the analysis thread of [`guard`], whose stack holds
/// any tree a file within the size cap can build.
pub(crate) fn analyse(source: &str, opts: &DeriveOptions) -> (Option<ToolSchema>, Vec<Diagnostic>) {
    guard::on_analysis_stack(|| analyse_here(source, opts)).unwrap_or_else(|what| {
        let d = LineIndex::new(source).diag(
            Severity::Error,
            Code::SourceTooComplex,
            (0, 0),
            format!("the file could not be analysed: {what}"),
            Some("retry; if it persists, report it with the file".into()),
        );
        (None, vec![d])
    })
}

fn analyse_here(source: &str, opts: &DeriveOptions) -> (Option<ToolSchema>, Vec<Diagnostic>) {
    let index = LineIndex::new(source);
    let body = match source::parse(source, &index) {
        Ok(body) => body,
        Err(d) => return (None, vec![d]),
    };
    let module = Module::new(&body);
    let chosen = match select(&module, opts, &index) {
        Ok(f) => f,
        Err(d) => return (None, vec![d]),
    };
    let mut mapper = Mapper::new(&module, &index);
    let (function, framing, decoration) = match chosen {
        Chosen::Function(f) => (
            f,
            frameworks::function_framing(&mut mapper, &f),
            f.tool_decoration(),
        ),
        Chosen::Class(c) => (c.method, c.framing(&mut mapper), c.decoration(&module)),
        Chosen::MembersOnly(f) => return members_only(&module, &index, &f),
    };
    let mut schema = build(&mut mapper, &function, &framing);
    // `@mcp.tool(annotations=..., output_schema=..., structured_output=...)`.
    schema.annotations = frameworks::declared_hints(&function);
    schema.task = frameworks::declared_task(&function);
    if let Some(output) = frameworks::declared_output(&mut mapper, &function) {
        schema.returns = output;
    }
    // A tool class is called by its name; the guest makes an instance and calls `method`.
    schema.name = decoration.function;
    // `@mcp.tool(description=...)`, a tool class's `description`: what the model is told,
    // as the framework tells it.
    let mut diags = mapper.diags;
    if let Some(description) = decoration.description {
        schema.description = description;
        diags.retain(|d| d.code != Code::MissingDocstring);
    }
    let (resources, prompts, left_out) = served::served(&module, &index);
    (schema.resources, schema.prompts) = (resources, prompts);
    diags.extend(left_out);
    let size =
        guard::json_len(&schema.parameters) + schema.returns.as_ref().map_or(0, guard::json_len);
    if size as u64 > guard::MAX_SCHEMA.as_u64() {
        diags.push(index.diag(
            Severity::Error,
            Code::SchemaTooLarge,
            (function.range.0, function.range.0 + 3),
            format!(
                "the schema of `{}` would be {size} bytes of JSON, more than {} bytes",
                function.name,
                guard::MAX_SCHEMA.as_u64()
            ),
            Some("use fewer or smaller parameters, models, unions or Literal values".into()),
        ));
    }
    diags.sort_by_key(|d| (d.line, d.column));
    let failed = diags.iter().any(|d| d.severity == Severity::Error);
    (if failed { None } else { Some(schema) }, diags)
}

/// The schema of a file that declares resources and prompts and no tool.
fn members_only(
    module: &Module<'_>,
    index: &LineIndex<'_>,
    first: &FunctionRef<'_>,
) -> (Option<ToolSchema>, Vec<Diagnostic>) {
    let (resources, prompts, mut diags) = served::served(module, index);
    if resources.is_empty() && prompts.is_empty() {
        // Every one was left out: nothing to serve.
        diags.push(
            index.diag(
                Severity::Error,
                Code::NoFunction,
                (first.range.0, first.range.0 + 3),
                "the file declares no tool, and none of its resources and prompts can be served"
                    .to_string(),
                Some("fix the warnings about them, or add a tool function".into()),
            ),
        );
    }
    diags.sort_by_key(|d| (d.line, d.column));
    if diags.iter().any(|d| d.severity == Severity::Error) {
        return (None, diags);
    }
    let schema = ToolSchema {
        name: first.name.to_string(),
        description: NO_DESCRIPTION.to_string(),
        parameters: json!({
            "type": "object",
            "properties": {},
            "required": [],
            "additionalProperties": false,
        }),
        returns: None,
        injected: Vec::new(),
        resources,
        prompts,
        members_only: true,
        annotations: None,
        task: None,
    };
    (Some(schema), diags)
}

pub(crate) fn build<'a>(
    mapper: &mut Mapper<'a, '_>,
    f: &FunctionRef<'a>,
    framing: &Framing<'a>,
) -> ToolSchema {
    let doc_text = source::docstring(f.body);
    let doc: Docstring = doc_text.map(docstring::parse).unwrap_or_default();
    let name_at = (f.range.0, f.range.0 + 3);
    if doc_text.is_none() {
        let d = mapper.index.diag(
            Severity::Warning,
            Code::MissingDocstring,
            name_at,
            format!(
                "function `{}` has no docstring, so the tool has no description",
                f.name
            ),
            Some("add a docstring with a summary and an `Args:` section".into()),
        );
        mapper.diags.push(d);
    }
    // `def f[T: int](x: T)`: the type parameters stand for their bound, constraints or
    // default (PEP 696) in the parameters and the return type.
    if let Some(params) = f.type_params {
        mapper.function_params(params);
    }
    let mut params = Params::default();
    let args = f.args;
    for (i, a) in args.posonlyargs.iter().enumerate() {
        if i == 0 && matches!(a.parameter.name.as_str(), "self" | "cls") {
            continue;
        }
        let d = mapper.index.diag(
            Severity::Error,
            Code::PositionalOnlyParameter,
            span(&a.parameter),
            format!(
                "parameter `{}` is positional-only, but tool arguments are passed by name",
                a.parameter.name
            ),
            Some("remove the `/` from the signature".into()),
        );
        mapper.diags.push(d);
    }
    for (i, a) in args.args.iter().enumerate() {
        if i == 0
            && args.posonlyargs.is_empty()
            && matches!(a.parameter.name.as_str(), "self" | "cls")
        {
            continue;
        }
        parameter(mapper, &doc, framing, a, &mut params);
    }
    // With `args_schema`, the model names the arguments and `**kwargs` takes them.
    let kwarg = args.kwarg.as_ref().filter(|_| framing.args_model.is_none());
    for (arg, star) in [(&args.vararg, "*"), (&kwarg.cloned(), "**")] {
        if let Some(arg) = arg {
            let d = mapper.index.diag(
                Severity::Error,
                Code::VariadicParameter,
                span(&**arg),
                format!("`{star}{}` cannot be described by a JSON Schema of named arguments", arg.name),
                Some("replace it with named parameters, or a `list[...]` / `dict[str, ...]` parameter".into()),
            );
            mapper.diags.push(d);
        }
    }
    for a in &args.kwonlyargs {
        parameter(mapper, &doc, framing, a, &mut params);
    }
    if let Some(text_expr) = f.body.first() {
        for p in &doc.params {
            if !params.names.contains(&p.name)
                && p.name != "agent_state"
                && !matches!(p.name.as_str(), "self" | "cls")
            {
                let d = mapper.index.diag(
                    Severity::Warning,
                    Code::UnknownDocumentedParameter,
                    span(text_expr),
                    format!(
                        "the docstring documents `{}`, which is not a parameter",
                        p.name
                    ),
                    Some("remove it from the docstring or fix its name".into()),
                );
                mapper.diags.push(d);
            }
        }
    }
    for name in framing.input_names() {
        if !params.names.contains(name) {
            let d = mapper.index.diag(
                Severity::Warning,
                Code::ArgumentsMismatch,
                name_at,
                format!(
                    "`inputs` names `{name}`, which is not a parameter of `{}`",
                    f.name
                ),
                Some("make `inputs` and the signature name the same arguments".into()),
            );
            mapper.diags.push(d);
        }
    }
    let returns = match (f.returns, &framing.output) {
        (None, Some(output)) => Some(output.clone()).filter(|o| o["type"] != "null"),
        _ => returns(mapper, f, &doc),
    };
    let model = framing
        .args_model
        .and_then(|m| frameworks::model_parameters(mapper, m, f, &params.callable));
    let mut parameters = model.unwrap_or_else(|| {
        json!({
            "type": "object",
            "properties": params.properties,
            "required": params.required,
            "additionalProperties": false,
        })
    });
    attach_defs(&mut parameters, &mapper.defs);
    ToolSchema {
        name: f.name.to_string(),
        description: doc
            .description
            .clone()
            .unwrap_or_else(|| NO_DESCRIPTION.to_string()),
        parameters,
        returns,
        injected: params.injected,
        resources: Vec::new(),
        prompts: Vec::new(),
        members_only: false,
        annotations: None,
        task: None,
    }
}

/// A function without a return annotation: the type its docstring gives (`Returns:` then
/// `int: ...`, `:rtype: int`, a NumPy `Returns` item), else no return schema (any value);
/// a warning either way.
fn untyped_returns(
    mapper: &mut Mapper<'_, '_>,
    f: &FunctionRef<'_>,
    doc: &Docstring,
) -> Option<Value> {
    let at = (f.range.0, f.range.0 + 3);
    let mapped = doc
        .returns_type
        .as_deref()
        .and_then(|text| Some((text, mapper.map_doc_type(text, at, |m, e| m.map(e, 0))?)));
    let (message, hint, schema) = match mapped {
        Some((text, schema)) => (
            format!(
                "function `{}` has no return annotation; its return type is taken from the docstring (`{text}`)",
                f.name
            ),
            format!(
                "annotate it (`-> {}`) so that Python and the schema agree",
                docstring::type_expression(text)
            ),
            Some(schema),
        ),
        None => (
            format!(
                "function `{}` has no return annotation, so its result may be any JSON value",
                f.name
            ),
            "annotate it, e.g. `-> str`, or `-> None` when it returns nothing".to_string(),
            None,
        ),
    };
    missing_annotation(mapper, at, message, hint);
    // `None` in the docstring: no result, as `-> None`.
    let mut schema = schema.filter(|s| s.get("type") != Some(&json!("null")))?;
    if let (Some(d), Value::Object(o)) = (&doc.returns, &mut schema) {
        o.insert("description".into(), Value::String(d.clone()));
    }
    attach_defs(&mut schema, &mapper.defs);
    Some(schema)
}

fn returns(mapper: &mut Mapper<'_, '_>, f: &FunctionRef<'_>, doc: &Docstring) -> Option<Value> {
    let Some(r) = f.returns else {
        return untyped_returns(mapper, f, doc);
    };
    if r.is_none_literal_expr() {
        return None;
    }
    // Images, audio, files and links are content blocks, not structured data.
    if content::is_content(mapper.module, r) {
        return None;
    }
    mapper.severity = Severity::Warning;
    let mapped = mapper.map(r, 0);
    mapper.severity = Severity::Error;
    let mut schema = mapped?;
    if let (Some(d), Value::Object(o)) = (&doc.returns, &mut schema) {
        o.insert("description".into(), Value::String(d.clone()));
    }
    attach_defs(&mut schema, &mapper.defs);
    Some(schema)
}
