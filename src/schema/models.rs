//! Classes defined in the tool file: `Enum`, `TypedDict`, `@dataclass` and pydantic `BaseModel`.
//!
//! Each becomes one `$defs` entry. Model fields follow their library's rule for "required":
//! a field without a default is required (even when `Optional`); a `TypedDict` field is required
//! unless the class has `total=False` or the field is `NotRequired[...]`.

use std::collections::{HashMap, HashSet};

use ruff_python_ast::{self as ast, Expr, Stmt};
use serde_json::{Map, Value, json};

use super::annotation::{Mapper, slice_args};
use super::diagnostic::Code;
use super::docstring;
use super::literal::{literal, values_enum};
use super::module::{ClassKind, Resolved};
use super::source::docstring as body_docstring;

/// What a `Field(...)` / `field(...)` call says.
#[derive(Debug, Default)]
pub(crate) struct FieldCall {
    pub description: Option<String>,
    /// `Some(v)`: a literal default; `None` with `has_default`: a default we cannot show.
    pub default: Option<Value>,
    pub has_default: bool,
    pub constraints: Map<String, Value>,
}

/// Reads `Field(default, *, description=..., ge=..., ...)` or `dataclasses.field(...)`.
pub(crate) fn field_call(mapper: &mut Mapper<'_, '_>, call: &ast::ExprCall) -> FieldCall {
    let mut out = FieldCall::default();
    if let Some(first) = call.arguments.args.first() {
        set_default(mapper, &mut out, first);
    }
    for kw in &call.arguments.keywords {
        let Some(name) = kw.arg.as_ref().map(|a| a.as_str()) else {
            continue;
        };
        let value = literal(&kw.value);
        match (name, value) {
            ("default", _) => set_default(mapper, &mut out, &kw.value),
            ("default_factory", _) => out.has_default = true,
            ("description", Some(Value::String(s))) => out.description = Some(s),
            ("ge", Some(v @ Value::Number(_))) => put(&mut out, "minimum", v),
            ("le", Some(v @ Value::Number(_))) => put(&mut out, "maximum", v),
            ("gt", Some(v @ Value::Number(_))) => put(&mut out, "exclusiveMinimum", v),
            ("lt", Some(v @ Value::Number(_))) => put(&mut out, "exclusiveMaximum", v),
            ("multiple_of", Some(v @ Value::Number(_))) => put(&mut out, "multipleOf", v),
            ("min_length" | "min_items", Some(v @ Value::Number(_))) => put(&mut out, "minLength", v),
            ("max_length" | "max_items", Some(v @ Value::Number(_))) => put(&mut out, "maxLength", v),
            ("pattern" | "regex", Some(v @ Value::String(_))) => put(&mut out, "pattern", v),
            ("examples", Some(v @ Value::Array(_))) => put(&mut out, "examples", v),
            (
                "title" | "frozen" | "repr" | "init" | "compare" | "hash" | "kw_only" | "metadata"
                | "exclude" | "strict" | "validate_default" | "init_var",
                _,
            ) => {}
            (other, _) => mapper.warn(
                Code::UnsupportedFieldOption,
                &kw.value,
                format!("field option `{other}` is ignored by the schema (or its value is not a literal)"),
                Some("use description, default, default_factory, ge, le, gt, lt, multiple_of, min_length, max_length or pattern with literal values"),
            ),
        }
    }
    out
}

fn put(out: &mut FieldCall, key: &str, v: Value) {
    out.constraints.insert(key.into(), v);
}

fn set_default(mapper: &mut Mapper<'_, '_>, out: &mut FieldCall, expr: &Expr) {
    if expr.is_ellipsis_literal_expr() {
        return;
    }
    out.has_default = true;
    out.default = mapper.default_value(expr);
    if out.default.is_none() {
        mapper.warn(
            Code::UnsupportedDefault,
            expr,
            "the default is not a literal, so the schema shows no default".into(),
            Some(
                "use a literal default (string, number, bool, None, list, dict) or default_factory",
            ),
        );
    }
}

/// Puts length/number constraints on the right keywords for the schema's type(s).
pub(crate) fn apply_constraints(schema: &mut Value, constraints: &Map<String, Value>) {
    if constraints.is_empty() {
        return;
    }
    let Value::Object(o) = schema else { return };
    if let Some(Value::Array(branches)) = o.get_mut("anyOf") {
        for b in branches.iter_mut() {
            if b.get("type").is_some_and(|t| t != "null") {
                apply_constraints(b, constraints);
            }
        }
        return;
    }
    let types: Vec<String> = match o.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    let is = |t: &str| types.iter().any(|x| x == t);
    for (k, v) in constraints {
        let key = match k.as_str() {
            "minLength" if is("array") => "minItems",
            "maxLength" if is("array") => "maxItems",
            "minLength" if is("object") => "minProperties",
            "maxLength" if is("object") => "maxProperties",
            other => other,
        };
        o.insert(key.into(), v.clone());
    }
}

/// Builds the `$defs` entry of a class.
pub(crate) fn build(
    mapper: &mut Mapper<'_, '_>,
    class: &ast::StmtClassDef,
    kind: ClassKind,
) -> Option<Value> {
    let doc = body_docstring(&class.body)
        .map(docstring::parse)
        .unwrap_or_default();
    let mut schema = match kind {
        ClassKind::Enum => enum_schema(mapper, class)?,
        _ => object_schema(mapper, class, kind, &doc)?,
    };
    if let (Some(d), Value::Object(o)) = (doc.description, &mut schema) {
        o.insert("description".into(), Value::String(d));
    }
    Some(schema)
}

fn enum_schema(mapper: &mut Mapper<'_, '_>, class: &ast::StmtClassDef) -> Option<Value> {
    let mut values = Vec::new();
    let mut ok = true;
    for stmt in &class.body {
        let Stmt::Assign(assign) = stmt else { continue };
        let [Expr::Name(target)] = assign.targets.as_slice() else {
            continue;
        };
        if target.id.starts_with('_') {
            continue;
        }
        match literal(&assign.value) {
            Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => values.push(v),
            _ => {
                mapper.report(
                    Code::UnsupportedType,
                    &assign.value,
                    format!("enum member `{}` has no literal value (auto() and expressions are not supported)", target.id),
                    Some("give every member an explicit str or int value"),
                );
                ok = false;
            }
        }
    }
    if !ok {
        return None;
    }
    Some(values_enum(values))
}

struct Field {
    name: String,
    schema: Value,
    required: bool,
}

fn object_schema(
    mapper: &mut Mapper<'_, '_>,
    class: &ast::StmtClassDef,
    kind: ClassKind,
    doc: &docstring::Docstring,
) -> Option<Value> {
    let mut fields = Fields::default();
    let mut ok = true;
    collect_fields(mapper, class, kind, doc, &mut fields, &mut ok, 0);
    let fields = fields.slots.into_iter().flatten();
    if !ok {
        return None;
    }
    // `fields` holds each name once (the last definition), so `required` needs no dedup.
    let mut properties = Map::new();
    let mut required = Vec::new();
    for f in fields {
        if f.required {
            required.push(f.name.clone());
        }
        properties.insert(f.name, f.schema);
    }
    Some(json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    }))
}

/// The fields of a class and its local bases, each name once: a redefinition replaces the
/// earlier one and moves it last.
#[derive(Default)]
struct Fields {
    slots: Vec<Option<Field>>,
    at: HashMap<String, usize>,
    /// Classes already visited: a base reached twice (a diamond) is read once, as in Python's
    /// MRO, so that deep diamonds cost linear, not exponential, time.
    seen: HashSet<*const ast::StmtClassDef>,
}

impl Fields {
    fn push(&mut self, f: Field) {
        if let Some(old) = self.at.insert(f.name.clone(), self.slots.len())
            && let Some(slot) = self.slots.get_mut(old)
        {
            *slot = None;
        }
        self.slots.push(Some(f));
    }
}

fn collect_fields(
    mapper: &mut Mapper<'_, '_>,
    class: &ast::StmtClassDef,
    kind: ClassKind,
    doc: &docstring::Docstring,
    fields: &mut Fields,
    ok: &mut bool,
    depth: u32,
) {
    if depth > 16 || !fields.seen.insert(std::ptr::from_ref(class)) {
        return;
    }
    for base in mapper.module.local_bases(class) {
        let base_doc = body_docstring(&base.body)
            .map(docstring::parse)
            .unwrap_or_default();
        collect_fields(mapper, base, kind, &base_doc, fields, ok, depth + 1);
    }
    let total = !class.keywords().iter().any(|k| {
        k.arg.as_ref().is_some_and(|a| a.as_str() == "total")
            && matches!(&k.value, Expr::BooleanLiteral(b) if !b.value)
    });
    for stmt in &class.body {
        let Stmt::AnnAssign(ann) = stmt else { continue };
        let Expr::Name(target) = &*ann.target else {
            continue;
        };
        let name = target.id.to_string();
        if kind == ClassKind::Pydantic && name.starts_with('_') {
            continue;
        }
        match field(
            mapper,
            kind,
            total,
            doc,
            &name,
            &ann.annotation,
            ann.value.as_deref(),
        ) {
            Some(Some(f)) => fields.push(f),
            Some(None) => {}
            None => *ok = false,
        }
    }
}

/// One field; `Some(None)` for class variables.
fn field(
    mapper: &mut Mapper<'_, '_>,
    kind: ClassKind,
    total: bool,
    doc: &docstring::Docstring,
    name: &str,
    annotation: &Expr,
    value: Option<&Expr>,
) -> Option<Option<Field>> {
    let mut annotation = annotation;
    let mut required_override = None;
    if let Expr::Subscript(sub) = annotation {
        let q = match mapper.module.resolve(&sub.value) {
            Some(Resolved::Qualified(q) | Resolved::Unimported(q)) => q,
            _ => String::new(),
        };
        match q.as_str() {
            "typing.ClassVar" | "dataclasses.InitVar" => return Some(None),
            "typing.Required" | "typing.NotRequired" if kind == ClassKind::TypedDict => {
                required_override = Some(q == "typing.Required");
                annotation = slice_args(&sub.slice)
                    .first()
                    .copied()
                    .unwrap_or(annotation);
            }
            _ => {}
        }
    } else if let Some(Resolved::Qualified(q)) = mapper.module.resolve(annotation)
        && q == "typing.ClassVar"
    {
        return Some(None);
    }
    let unwrapped = mapper.unwrap_annotated(annotation, 0)?;
    let (inner, ann_desc, mut constraints) = (
        unwrapped.inner,
        unwrapped.description,
        unwrapped.constraints,
    );
    let mut schema = mapper.map(inner, 1)?;
    let mut call = FieldCall::default();
    match value {
        Some(Expr::Call(c)) if is_field_call(mapper, &c.func) => call = field_call(mapper, c),
        Some(v) => set_default(mapper, &mut call, v),
        // `x: Annotated[int, Field(default=3)]`: Pydantic applies that default.
        None => {
            if let Some(default) = unwrapped.default {
                call.has_default = true;
                call.default = default;
            }
        }
    }
    constraints.extend(std::mem::take(&mut call.constraints));
    apply_constraints(&mut schema, &constraints);
    let description = call
        .description
        .or(ann_desc)
        .or_else(|| doc.param(name).map(str::to_string));
    let required = match kind {
        ClassKind::TypedDict => required_override.unwrap_or(total),
        _ => !call.has_default,
    };
    if let Value::Object(o) = &mut schema {
        if let Some(d) = description {
            o.insert("description".into(), Value::String(d));
        }
        if let Some(d) = call.default {
            o.insert("default".into(), d);
        }
    }
    Some(Some(Field {
        name: name.to_string(),
        schema,
        required,
    }))
}

fn is_field_call(mapper: &Mapper<'_, '_>, func: &Expr) -> bool {
    matches!(
        mapper.module.resolve(func),
        Some(Resolved::Qualified(q)) if q == "pydantic.Field" || q == "pydantic.fields.Field" || q == "dataclasses.field"
    )
}
