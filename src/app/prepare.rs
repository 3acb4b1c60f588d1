//! One prepared shape for a call, shared by every surface: `warden run`, the service,
//! the benchmark and the tests build a [`PreparedTool`] once per tool version, check
//! each call's arguments with it, and borrow a [`sandbox::Call`](Call) from it.
//!
//! What it does for every call, in this order: a `null` sent for a parameter with a
//! Python default means "omitted" and is dropped; the arguments are validated against
//! the schema (every violation at once); parameters the schema's `Optional[T]` rule lets
//! a caller omit are named so that the guest passes them `None`.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};

use crate::grants::Grants;
use crate::limits::Limits;
use crate::outcome::Start;
use crate::sandbox::{Call, ToolFolder, WarmState, Warmth};
use crate::schema::{self, ArgumentValidator, ToolSchema, Violation};

/// Everything the calls of one tool version share, prepared once.
#[derive(Debug)]
pub struct PreparedTool {
    folder: ToolFolder,
    schema: ToolSchema,
    validator: ArgumentValidator,
    none_if_omitted: Vec<String>,
    packages: Option<PathBuf>,
    /// Where calls start from, once known: the version's warm state, or cold with the
    /// reason. Until it is set (while the state is prepared), calls run cold.
    warmth: OnceLock<Warmth>,
    /// Set once a preparation of the warm state has started.
    warming: AtomicBool,
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
            validator: ArgumentValidator::new(&schema),
            none_if_omitted: schema::none_if_omitted(&schema),
            schema,
            packages,
            warmth: OnceLock::new(),
            warming: AtomicBool::new(false),
        }
    }

    /// True the first time only: the caller prepares the warm state.
    pub fn start_warming(&self) -> bool {
        !self.warming.swap(true, Ordering::AcqRel)
    }

    /// Records where calls start from (once; later values are ignored).
    pub fn set_warmth(&self, warmth: Warmth) {
        let _ = self.warmth.set(warmth);
    }

    /// The warm state calls start from, once it is ready (pass it to
    /// [`Sandbox::call_from`](crate::sandbox::Sandbox::call_from)), and the start a
    /// call then has.
    pub fn warm_state(&self) -> (Option<&WarmState>, Start) {
        match self.warmth.get() {
            Some(Warmth::Warm(state)) => (Some(state), Start::Warm),
            _ => (None, Start::Cold),
        }
    }

    /// The same tool with its installed packages (a site folder) mounted.
    pub fn with_packages(mut self, packages: Option<PathBuf>) -> Self {
        self.packages = packages;
        self
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
        if let Some(reason) = self.validator.compile_error() {
            return Err(Refusal::BrokenSchema(reason.to_owned()));
        }
        let mut arguments = arguments;
        if let Value::Object(map) = &mut arguments {
            schema::drop_nulls_for_defaults(&self.schema, map);
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

    /// The sandbox call for checked `arguments` with `grants` and `limits`.
    pub fn call<'a>(
        &'a self,
        arguments: &'a Map<String, Value>,
        grants: &'a Grants,
        limits: &'a Limits,
    ) -> Call<'a> {
        Call {
            tool: &self.folder,
            function: &self.schema.name,
            arguments,
            none_if_omitted: &self.none_if_omitted,
            grants,
            limits,
            packages: self.packages.as_deref(),
        }
    }
}
