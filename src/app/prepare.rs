//! One prepared shape for a call, shared by every surface: `warden run`, the service,
//! the benchmark and the tests build a [`PreparedTool`] once per tool version, check
//! each call's arguments with it, and borrow a [`sandbox::Call`](Call) from it.
//!
//! What it does for every call, in this order: a `null` sent for a parameter with a
//! Python default means "omitted" and is dropped; the arguments are validated against
//! the schema (every violation at once); parameters the schema's `Optional[T]` rule lets
//! a caller omit are named so that the guest passes them `None`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::grants::Grants;
use crate::limits::Limits;
use crate::outcome::{CallResult, RESULT_MISMATCH, Status, ToolError, Warning};
use crate::sandbox::{Call, Flavour, ToolFolder, WarmState, Warmth};
use crate::schema::{self, ArgumentValidator, ToolSchema, Violation};

/// Everything the calls of one tool version share, prepared once.
#[derive(Debug)]
pub struct PreparedTool {
    folder: ToolFolder,
    schema: ToolSchema,
    /// How the tool's own arguments are checked and passed.
    arguments: Arguments,
    /// The return annotation's schema, compiled (none without one, or when it does not
    /// compile: results are then not checked against it).
    returns: Option<jsonschema::Validator>,
    packages: Option<PathBuf>,
    /// Where calls start from, once known: the version's warm state, or cold with the
    /// reason. Until it is set (while the state is prepared), calls run cold.
    warmth: Mutex<Option<Warmth>>,
    /// Set once a preparation of the warm state has started.
    warming: AtomicBool,
    /// The functions of the file's resources and prompts, by name: each called like the
    /// tool, from the same warm state, its arguments checked against its own schema.
    members: HashMap<String, Member>,
    /// The runtime its calls run on.
    flavour: Flavour,
}

/// How one function's arguments are checked and passed: the tool's, or a resource's or
/// prompt's of its file.
#[derive(Debug)]
struct Arguments {
    validator: ArgumentValidator,
    none_if_omitted: Vec<String>,
}

impl Arguments {
    fn new(schema: &ToolSchema) -> Arguments {
        Arguments {
            validator: ArgumentValidator::new(schema),
            none_if_omitted: schema::none_if_omitted(schema),
        }
    }

    /// Checks `arguments` against `schema` (the one this was made from), returning them
    /// as the guest will receive them.
    fn check(&self, schema: &ToolSchema, arguments: Value) -> Result<Map<String, Value>, Refusal> {
        if let Some(reason) = self.validator.compile_error() {
            return Err(Refusal::BrokenSchema(reason.to_owned()));
        }
        let mut arguments = arguments;
        if let Value::Object(map) = &mut arguments {
            schema::drop_nulls_for_defaults(schema, map);
        }
        self.validator
            .validate(&arguments)
            .map_err(Refusal::Invalid)?;
        match arguments {
            Value::Object(map) => Ok(map),
            // The validator refuses anything but an object.
            _ => Err(Refusal::Invalid(Vec::new())),
        }
    }
}

/// A resource's or prompt's function, prepared for calls.
#[derive(Debug)]
struct Member {
    schema: ToolSchema,
    arguments: Arguments,
}

/// Why arguments were refused before any guest ran.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The stored schema does not compile: a server-side fault, not the caller's.
    BrokenSchema(String),
    /// The arguments break the schema: every violation.
    Invalid(Vec<Violation>),
}

impl PreparedTool {
    /// Prepares the tool whose source is in `folder`, described by `schema`, with its
    /// installed packages (a site folder) if it has any.
    pub fn new(folder: ToolFolder, schema: ToolSchema, packages: Option<PathBuf>) -> Self {
        PreparedTool {
            folder,
            arguments: Arguments::new(&schema),
            returns: schema
                .returns
                .as_ref()
                .and_then(|r| jsonschema::draft202012::new(r).ok()),
            members: members(&schema),
            schema,
            packages,
            warmth: Mutex::new(None),
            warming: AtomicBool::new(false),
            flavour: Flavour::Standard,
        }
    }

    /// The same tool, run on `flavour`'s runtime.
    pub fn on_runtime(mut self, flavour: Flavour) -> Self {
        self.flavour = flavour;
        self
    }

    /// The runtime its calls run on.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// True the first time only: the caller prepares the warm state.
    pub fn start_warming(&self) -> bool {
        !self.warming.swap(true, Ordering::AcqRel)
    }

    /// Records where calls start from.
    pub fn set_warmth(&self, warmth: Warmth) {
        *self.warmth() = Some(warmth);
    }

    /// The warm state calls start from, once it is ready (pass it to
    /// [`Sandbox::call_from`](crate::sandbox::Sandbox::call_from); each result says
    /// whether the call started from it).
    pub fn warm_state(&self) -> Option<Arc<WarmState>> {
        match &*self.warmth() {
            Some(Warmth::Warm(state)) => Some(Arc::clone(state)),
            _ => None,
        }
    }

    /// Forgets `state` after a call could not start from it (evicted from the warm
    /// folder, or refused): calls run cold, and the next [`PreparedTool::start_warming`]
    /// is true again, so the state is prepared again.
    pub fn forget_warm_state(&self, state: &WarmState) {
        let mut warmth = self.warmth();
        if matches!(&*warmth, Some(Warmth::Warm(s)) if s.key() == state.key()) {
            *warmth = None;
            self.warming.store(false, Ordering::Release);
        }
    }

    fn warmth(&self) -> std::sync::MutexGuard<'_, Option<Warmth>> {
        self.warmth
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The same tool with its installed packages (a site folder) mounted.
    pub fn with_packages(mut self, packages: Option<PathBuf>) -> Self {
        self.packages = packages;
        self
    }

    /// The schema calls are checked against.
    pub fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    /// The function the schema describes.
    pub fn function(&self) -> &str {
        &self.schema.name
    }

    /// The tool's installed packages (a site folder), if any.
    pub fn packages(&self) -> Option<&std::path::Path> {
        self.packages.as_deref()
    }

    /// The tool's folder.
    pub fn folder(&self) -> &ToolFolder {
        &self.folder
    }

    /// Checks one call's arguments (a JSON object), returning them as the guest will
    /// receive them.
    pub fn check(&self, arguments: Value) -> Result<Map<String, Value>, Refusal> {
        self.arguments.check(&self.schema, arguments)
    }

    /// Checks an `ok` result against the function's return annotation: rich content
    /// (an image, a file, ...) where the annotation describes data, or data that does not
    /// fit the annotation's schema. The result is delivered as the tool returned it, with
    /// a `result_mismatch` [`Warning`] naming both, as Letta and FastMCP deliver it;
    /// with `strict` (the tool's or its tenant's `strict_results`) it becomes a
    /// `tool_error` (`ResultMismatch`) instead. A truncated result is left alone (its
    /// text is no longer the value).
    pub fn check_result(&self, result: &mut CallResult, strict: bool) -> Option<Warning> {
        let returns = self.returns.as_ref()?;
        if result.status != Status::Ok || result.truncated.is_some() {
            return None;
        }
        let annotation = describe(self.schema.returns.as_ref());
        // A list of anything may hold images and files: FastMCP sends them as blocks.
        if !result.content.is_empty() && self.schema.returns.as_ref().is_some_and(any_list) {
            return None;
        }
        let message = if result.content.is_empty() {
            let value = result.value.as_ref().unwrap_or(&Value::Null);
            let e = returns.iter_errors(value).next()?;
            format!(
                "the tool returned {}, which does not match its return annotation ({annotation}): {} at {:?}; return what the annotation says, or change the annotation",
                json_kind(value),
                e,
                e.instance_path().to_string()
            )
        } else {
            format!(
                "the tool returned rich content (an image, audio, a file or a link), but its return annotation ({annotation}) describes data; annotate it with the content type (e.g. -> Image) or return the data"
            )
        };
        if !strict {
            return Some(Warning {
                code: RESULT_MISMATCH.into(),
                message,
            });
        }
        result.status = Status::ToolError;
        result.value = None;
        result.content = Vec::new();
        result.error = Some(ToolError {
            kind: "ResultMismatch".into(),
            message,
            traceback: String::new(),
            deliberate: false,
        });
        None
    }

    /// Checks the arguments of a call of `function`, one of the file's resource or
    /// prompt functions (the schema's `resources` and `prompts`), as [`PreparedTool::check`]
    /// checks the tool's. `None`: the file serves no such function.
    pub fn check_member(
        &self,
        function: &str,
        arguments: Value,
    ) -> Option<Result<Map<String, Value>, Refusal>> {
        let member = self.members.get(function)?;
        Some(member.arguments.check(&member.schema, arguments))
    }

    /// The sandbox call of `function`, one of the file's resource or prompt functions,
    /// for arguments checked by [`PreparedTool::check_member`]; `None` if the file serves
    /// no such function.
    pub fn call_member<'a>(
        &'a self,
        function: &str,
        arguments: &'a Map<String, Value>,
        grants: &'a Grants,
        limits: &'a Limits,
    ) -> Option<Call<'a>> {
        let (name, member) = self.members.get_key_value(function)?;
        Some(self.call_of(name, &member.arguments, arguments, grants, limits))
    }

    /// The sandbox call for checked `arguments` with `grants` and `limits`.
    pub fn call<'a>(
        &'a self,
        arguments: &'a Map<String, Value>,
        grants: &'a Grants,
        limits: &'a Limits,
    ) -> Call<'a> {
        self.call_of(
            &self.schema.name,
            &self.arguments,
            arguments,
            grants,
            limits,
        )
    }

    fn call_of<'a>(
        &'a self,
        function: &'a str,
        checked: &'a Arguments,
        arguments: &'a Map<String, Value>,
        grants: &'a Grants,
        limits: &'a Limits,
    ) -> Call<'a> {
        Call {
            tool: &self.folder,
            function,
            arguments,
            none_if_omitted: &checked.none_if_omitted,
            grants,
            limits,
            packages: self.packages.as_deref(),
        }
    }
}

/// The resource and prompt functions of `schema`'s file, by function name.
fn members(schema: &ToolSchema) -> HashMap<String, Member> {
    let functions = schema
        .resources
        .iter()
        .map(|r| &r.function)
        .chain(schema.prompts.iter().map(|p| &p.function));
    functions
        .map(|f| {
            let member = Member {
                arguments: Arguments::new(f),
                schema: f.clone(),
            };
            (f.name.clone(), member)
        })
        .collect()
}

/// A return schema in a few words: its type (`integer`, `object`, ...), or its `$ref`.
fn describe(returns: Option<&Value>) -> String {
    let Some(r) = returns else {
        return "none".into();
    };
    if let Some(t) = r.get("type") {
        return match t {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    if let Some(name) = r.get("$ref").and_then(Value::as_str) {
        return name.trim_start_matches("#/$defs/").to_owned();
    }
    if r.get("anyOf").is_some() {
        return "a union".into();
    }
    "a schema".into()
}

/// A JSON value's kind, in words.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Whether a return schema is a list of anything (`-> list`, `-> list[Any]`): such a
/// result may be rich content, one part per item, as well as data.
pub fn any_list(returns: &Value) -> bool {
    let anything = |items: &Value| match items {
        Value::Bool(b) => *b,
        Value::Object(o) => o.is_empty() || o.keys().all(|k| k == "description"),
        _ => false,
    };
    returns.get("type").is_some_and(|t| t == "array") && returns.get("items").is_none_or(anything)
}
