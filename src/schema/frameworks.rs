//! What agent frameworks say about a tool beside its function's signature, read from the
//! source as each framework reads it at run time:
//!
//! - **Tool classes**: a smolagents `Tool` subclass (`name`, `description`, `inputs`,
//!   `output_type`, `forward`), a LangChain or CrewAI `BaseTool` subclass (`name`,
//!   `description`, `args_schema`, `_run`, else `_arun`). The class is the tool: the guest
//!   makes an instance and calls that method (runtime/bind.py's `tool_method` does the same).
//! - **`args_schema=Model`** (LangChain's `@tool(args_schema=...)`, a `BaseTool`'s class
//!   attribute): the model's fields are the arguments, described and constrained as the
//!   model says, and passed to the function by name.
//! - **smolagents' `inputs`**: each argument's description, and its type where the
//!   signature gives none; `output_type` likewise for the result.

use std::collections::HashMap;

use ruff_python_ast::{self as ast, Expr, Stmt};
use serde_json::{Map, Value, json};

use super::annotation::Mapper;
use super::decorators::annotation_entries;
use super::diagnostic::{Code, Severity};
use super::literal::{literal, scalar};
use super::models;
use super::module::{ClassKind, FunctionRef, Module, Resolved};
use super::source::{self, span};
use super::{DeclaredHints, DecoratedTool};

/// Deepest chain of local base classes followed to find a framework's tool class.
const MAX_BASES: u32 = 16;

/// The framework whose tool class a class extends, by what the class's bases resolve to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framework {
    /// smolagents: `forward`, `inputs`, `output_type`.
    Smolagents,
    /// LangChain and CrewAI: `_run` (else `_arun`), `args_schema`.
    BaseTool,
}

impl Framework {
    fn of(qualified: &str) -> Option<Framework> {
        match qualified {
            "smolagents.Tool" | "smolagents.tools.Tool" => Some(Framework::Smolagents),
            "langchain_core.tools.BaseTool"
            | "langchain_core.tools.base.BaseTool"
            | "langchain.tools.BaseTool"
            | "crewai.tools.BaseTool"
            | "crewai.tools.base_tool.BaseTool"
            | "crewai_tools.BaseTool" => Some(Framework::BaseTool),
            _ => None,
        }
    }

    /// The methods that run the tool, in the order the guest looks for them.
    fn methods(self) -> &'static [&'static str] {
        match self {
            Framework::Smolagents => &["forward"],
            Framework::BaseTool => &["_run", "_arun"],
        }
    }
}

/// A framework's tool class of the file.
#[derive(Clone, Copy)]
pub(crate) struct ClassTool<'a> {
    /// The class: what the guest instantiates, and the tool's function name.
    pub class: &'a ast::StmtClassDef,
    /// The method that runs the tool (from the class or a local base).
    pub method: FunctionRef<'a>,
    framework: Framework,
}

impl<'a> ClassTool<'a> {
    /// The class's name: what a call names as its function.
    pub(crate) fn name(&self) -> &'a str {
        self.class.name.as_str()
    }

    /// What the class attributes say: `name = "..."`, `description = "..."`.
    pub(crate) fn decoration(&self, module: &Module<'a>) -> DecoratedTool {
        let string = |attr| {
            class_attr(module, self.class, attr)
                .and_then(scalar)
                .and_then(|v| v.as_str().map(str::to_owned))
        };
        DecoratedTool {
            function: self.name().to_owned(),
            name: string("name"),
            title: None,
            description: string("description")
                .or_else(|| source::docstring(&self.class.body).map(|d| d.trim().to_owned())),
            tags: Vec::new(),
        }
    }

    /// What the class says about the arguments and result.
    pub(crate) fn framing(&self, mapper: &mut Mapper<'a, '_>) -> Framing<'a> {
        let module = mapper.module;
        match self.framework {
            Framework::Smolagents => {
                let mut framing = Framing::default();
                if let Some(inputs) = class_attr(module, self.class, "inputs") {
                    framing.inputs = smolagents_inputs(mapper, inputs);
                }
                framing.output = class_attr(module, self.class, "output_type")
                    .and_then(scalar)
                    .and_then(|v| v.as_str().and_then(smolagents_type));
                framing
            }
            Framework::BaseTool => Framing {
                args_model: class_attr(module, self.class, "args_schema")
                    .and_then(|e| model_class(mapper, e)),
                ..Framing::default()
            },
        }
    }
}

/// What a framework says about a tool beside its function's signature.
#[derive(Default)]
pub(crate) struct Framing<'a> {
    /// smolagents' `inputs`: a description, and a type, per argument.
    inputs: HashMap<String, Input>,
    /// `args_schema`: the model whose fields are the arguments.
    pub args_model: Option<(&'a ast::StmtClassDef, ClassKind)>,
    /// smolagents' `output_type`, for a `forward` without a return annotation.
    pub output: Option<Value>,
}

#[derive(Default)]
struct Input {
    schema: Option<Value>,
    description: Option<String>,
}

impl Framing<'_> {
    /// The schema `inputs` gives a parameter without an annotation.
    pub(crate) fn input_schema(&self, name: &str) -> Option<Value> {
        self.inputs.get(name).and_then(|i| i.schema.clone())
    }

    /// The description `inputs` gives a parameter.
    pub(crate) fn input_description(&self, name: &str) -> Option<&str> {
        self.inputs.get(name).and_then(|i| i.description.as_deref())
    }

    /// The names `inputs` lists, in no particular order.
    pub(crate) fn input_names(&self) -> impl Iterator<Item = &str> {
        self.inputs.keys().map(String::as_str)
    }
}

/// What a tool decorator says of the tool's effects: `@mcp.tool(annotations=
/// ToolAnnotations(readOnlyHint=True, ...))` or `annotations={"readOnlyHint": True}`.
pub(crate) fn declared_hints(f: &FunctionRef<'_>) -> Option<DeclaredHints> {
    let value = f.decorator_keyword("annotations")?;
    let mut hints = DeclaredHints::default();
    for (name, value) in annotation_entries(value) {
        let Some(Value::Bool(b)) = scalar(value) else {
            continue;
        };
        match name.as_str() {
            "readOnlyHint" | "read_only_hint" => hints.read_only = Some(b),
            "destructiveHint" | "destructive_hint" => hints.destructive = Some(b),
            "idempotentHint" | "idempotent_hint" => hints.idempotent = Some(b),
            "openWorldHint" | "open_world_hint" => hints.open_world = Some(b),
            _ => {}
        }
    }
    (hints != DeclaredHints::default()).then_some(hints)
}

/// Whether a tool decorator lets the tool run as an MCP task: FastMCP's `task=True`
/// (optional) or `task=False`, a mode's name (`task="required"`), or
/// `task=TaskConfig(mode="required")`. `None` when it says nothing readable.
pub(crate) fn declared_task(f: &FunctionRef<'_>) -> Option<super::TaskMode> {
    use super::TaskMode;
    let value = f.decorator_keyword("task")?;
    let mode = match value {
        Expr::Call(call) => {
            let keyword = call
                .arguments
                .keywords
                .iter()
                .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "mode"))?;
            scalar(&keyword.value)?
        }
        other => scalar(other)?,
    };
    match mode {
        Value::Bool(true) => Some(TaskMode::Optional),
        Value::Bool(false) => Some(TaskMode::Forbidden),
        Value::String(s) => match s.as_str() {
            "optional" => Some(TaskMode::Optional),
            "required" => Some(TaskMode::Required),
            "forbidden" => Some(TaskMode::Forbidden),
            _ => None,
        },
        _ => None,
    }
}

/// What a tool decorator says of its result's schema: `output_schema={...}` replaces
/// the derived one, `output_schema=None` or `structured_output=False` (the MCP SDK's)
/// gives none (the result is content, not data). `None` when it says nothing.
pub(crate) fn declared_output(
    mapper: &mut Mapper<'_, '_>,
    f: &FunctionRef<'_>,
) -> Option<Option<Value>> {
    if let Some(structured) = f.decorator_keyword("structured_output")
        && scalar(structured) == Some(Value::Bool(false))
    {
        return Some(None);
    }
    let value = f.decorator_keyword("output_schema")?;
    if value.is_none_literal_expr() {
        return Some(None);
    }
    match literal(value) {
        Some(schema @ Value::Object(_)) if schema.get("type") == Some(&json!("object")) => {
            Some(Some(schema))
        }
        _ => {
            mapper.warn(
                Code::ArgumentsMismatch,
                value,
                "`output_schema` is not a literal JSON Schema of an object, so the return annotation's schema is used".into(),
                Some("write it as a dict literal with \"type\": \"object\""),
            );
            None
        }
    }
}

/// A decorated function's framing: `@tool(args_schema=Model)`.
pub(crate) fn function_framing<'a>(
    mapper: &mut Mapper<'a, '_>,
    f: &FunctionRef<'a>,
) -> Framing<'a> {
    let model = f
        .decorator_keyword("args_schema")
        .and_then(|e| model_class(mapper, e));
    Framing {
        args_model: model,
        ..Framing::default()
    }
}

/// The framework tool classes of the file, in source order (a name bound twice: the last).
pub(crate) fn class_tools<'a>(module: &Module<'a>) -> Vec<ClassTool<'a>> {
    let mut found: Vec<ClassTool<'a>> = Vec::new();
    for class in &module.class_order {
        let Some(framework) = framework_of(module, class, 0) else {
            continue;
        };
        let Some(method) = framework
            .methods()
            .iter()
            .find_map(|m| method(module, class, m, 0))
        else {
            continue;
        };
        found.retain(|t| t.class.name != class.name);
        found.push(ClassTool {
            class,
            method,
            framework,
        });
    }
    found
}

fn framework_of(module: &Module<'_>, class: &ast::StmtClassDef, depth: u32) -> Option<Framework> {
    if depth > MAX_BASES {
        return None;
    }
    class
        .bases()
        .iter()
        .find_map(|base| match module.resolve(base)? {
            Resolved::Qualified(q) => Framework::of(&q),
            Resolved::Local(parent) if !std::ptr::eq(parent, class) => {
                framework_of(module, parent, depth + 1)
            }
            _ => None,
        })
}

/// `name` defined in the class's body, else in a local base's.
fn method<'a>(
    module: &Module<'a>,
    class: &'a ast::StmtClassDef,
    name: &str,
    depth: u32,
) -> Option<FunctionRef<'a>> {
    if depth > MAX_BASES {
        return None;
    }
    let own = class.body.iter().rev().find_map(|stmt| match stmt {
        Stmt::FunctionDef(f) if f.name.as_str() == name => Some(FunctionRef::new(f)),
        _ => None,
    });
    own.or_else(|| {
        module
            .local_bases(class)
            .into_iter()
            .rev()
            .find_map(|parent| method(module, parent, name, depth + 1))
    })
}

/// The value of a class attribute (`name = "..."`, `name: str = "..."`), from the class
/// or a local base.
fn class_attr<'a>(
    module: &Module<'a>,
    class: &'a ast::StmtClassDef,
    attr: &str,
) -> Option<&'a Expr> {
    let mut class = class;
    for _ in 0..MAX_BASES {
        let own = class.body.iter().rev().find_map(|stmt| match stmt {
            Stmt::Assign(a) => match a.targets.as_slice() {
                [Expr::Name(n)] if n.id.as_str() == attr => Some(&*a.value),
                _ => None,
            },
            Stmt::AnnAssign(a) => match (&*a.target, &a.value) {
                (Expr::Name(n), Some(value)) if n.id.as_str() == attr => Some(&**value),
                _ => None,
            },
            _ => None,
        });
        if own.is_some() {
            return own;
        }
        class = *module.local_bases(class).last()?;
    }
    None
}

/// The model class `args_schema` names: a pydantic model, dataclass or TypedDict of the file.
fn model_class<'a>(
    mapper: &mut Mapper<'a, '_>,
    expr: &Expr,
) -> Option<(&'a ast::StmtClassDef, ClassKind)> {
    let module = mapper.module;
    if let Some(Resolved::Local(class)) = module.resolve(expr) {
        let kind = module.class_kind(class);
        if matches!(
            kind,
            ClassKind::Pydantic | ClassKind::Dataclass | ClassKind::TypedDict
        ) {
            return Some((class, kind));
        }
    }
    mapper.warn(
        Code::ArgumentsMismatch,
        expr,
        "`args_schema` is not a pydantic model, dataclass or TypedDict of this file, so the arguments come from the function's signature".into(),
        Some("define the model in the tool's file"),
    );
    None
}

/// smolagents' `inputs = {"name": {"type": "string", "description": "..."}}`.
fn smolagents_inputs(mapper: &mut Mapper<'_, '_>, expr: &Expr) -> HashMap<String, Input> {
    let Some(Value::Object(inputs)) = literal(expr) else {
        mapper.warn(
            Code::ArgumentsMismatch,
            expr,
            "`inputs` is not a literal dict, so the arguments come from `forward`'s signature alone".into(),
            Some("write `inputs` as a dict literal of `{\"type\": ..., \"description\": ...}`"),
        );
        return HashMap::new();
    };
    inputs
        .into_iter()
        .map(|(name, spec)| {
            let input = Input {
                schema: spec
                    .get("type")
                    .and_then(Value::as_str)
                    .and_then(smolagents_type),
                description: spec
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            };
            (name, input)
        })
        .collect()
}

/// A smolagents type name as a schema (`image` and `audio` are objects of the framework's
/// own, with no JSON form).
fn smolagents_type(name: &str) -> Option<Value> {
    match name {
        "string" | "boolean" | "integer" | "number" | "array" | "object" | "null" => {
            Some(json!({ "type": name }))
        }
        "any" => Some(json!({})),
        _ => None,
    }
}

/// The parameters object of an `args_schema` model, checked against the function it calls:
/// each field must be a parameter (or the function takes `**kwargs`), each required
/// parameter a field. `names` are the function's parameters the caller may pass.
pub(crate) fn model_parameters(
    mapper: &mut Mapper<'_, '_>,
    (class, kind): (&ast::StmtClassDef, ClassKind),
    f: &FunctionRef<'_>,
    names: &[(String, bool)],
) -> Option<Value> {
    let schema = models::build(mapper, class, kind)?;
    let empty = Map::new();
    let fields = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let takes_any = f.args.kwarg.is_some();
    let at = span(class);
    let mut problems = Vec::new();
    for field in fields.keys() {
        if !takes_any && !names.iter().any(|(n, _)| n == field) {
            problems.push(format!(
                "field `{field}` of `{}` is not a parameter of `{}`",
                class.name, f.name
            ));
        }
    }
    for (name, required) in names {
        if *required && !fields.contains_key(name) {
            problems.push(format!(
                "parameter `{name}` of `{}` is required but not a field of `{}`",
                f.name, class.name
            ));
        }
    }
    for problem in problems {
        let d = mapper.index.diag(
            Severity::Error,
            Code::ArgumentsMismatch,
            at,
            problem,
            Some("make the model's fields and the function's parameters the same names".into()),
        );
        mapper.diags.push(d);
    }
    let mut schema = schema;
    if let Value::Object(o) = &mut schema {
        // The model's docstring describes the model, not the tool.
        o.remove("description");
    }
    Some(schema)
}

#[cfg(test)]
mod tests {
    use crate::schema::{DeriveOptions, derive, tool_functions};

    /// Classes whose bases go round in a circle (no Python would run the file, the parser
    /// takes it) and a chain of bases past the bound end with an answer, not a hang.
    #[test]
    fn circular_and_deep_bases_end() {
        let circle = "from smolagents import Tool\n\n\
                      class A(B):\n    pass\n\n\
                      class B(A, Tool):\n    name = 'b'\n    def forward(self, x: int) -> int:\n        \"\"\"Doubles.\"\"\"\n        return 2 * x\n";
        let found: Vec<String> = tool_functions(circle)
            .into_iter()
            .map(|d| d.function)
            .collect();
        assert_eq!(found, ["A", "B"]);
        let opts = DeriveOptions {
            function: Some("B".into()),
            ..DeriveOptions::default()
        };
        assert_eq!(derive(circle, &opts).unwrap().schema.name, "B");
        let mut deep = String::from("from smolagents import Tool\n\nclass C0(Tool):\n    pass\n");
        for n in 1..200 {
            deep.push_str(&format!("\nclass C{n}(C{}):\n    pass\n", n - 1));
        }
        deep.push_str(
            "\nclass Last(C199):\n    def forward(self, x: int) -> int:\n        return x\n",
        );
        // Past the bound, a class is not taken for a tool: nothing to find, no hang.
        assert!(tool_functions(&deep).iter().all(|d| d.function != "Last"));
    }
}
