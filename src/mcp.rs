//! The MCP server: Warden's tools offered to any Model Context Protocol client.
//!
//! # Data flow
//! A [`ToolSource`] says which tools there are and runs one; [`McpServer`] (the rmcp
//! handler, `mcp/handler.rs`) turns that into the protocol: `tools/list` from
//! [`ListedTool`]s, `tools/call` through [`ToolSource::call`] and the result mapping of
//! `mcp/result.rs` (one table from [`Ran`] and [`SourceError`] to MCP results and
//! errors), progress notifications while a call runs, cancellation (the call's future is
//! dropped, which drops the guest's store), and `notifications/tools/list_changed`
//! whenever [`ToolSource::changes`] fires, to legacy sessions through their peer and to
//! 2026-07-28 clients through `subscriptions/listen`. The resources and prompts a tool's
//! file declares come with its [`ListedTool`] and are served by running their functions
//! through [`ToolSource::call_member`] (`mcp/served.rs`).
//!
//! [`FolderSource`] is the source of `warden mcp`: the `.py` files of a folder
//! ([`catalog`]), with per-tool grants and limits from its `warden.toml` ([`config`]),
//! watched for changes. The service's `/mcp` (`http/mcp.rs`) is another source: the
//! enabled tools of the tenant whose key the request carries, run through the app like
//! any REST call. The request's [`Extensions`] carry what the transport knows about the
//! caller (over Streamable HTTP, the request's `http::request::Parts`, where `/mcp`'s
//! authentication put the tenant).
//!
//! Nothing here writes to stdout: over stdio it belongs to the protocol.

pub mod catalog;
pub mod config;
mod folder;
mod handler;
mod result;
mod served;
mod tasks;
mod trail;
mod watch;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::Extensions;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use crate::events::Events;
use crate::grants::{Access, Grants};
use crate::outcome::{CallResult, Start};
use crate::schema::{
    DeclaredHints, PromptSchema, ResourceSchema, Violation, mcp_output, mcp_output_wraps,
};

pub use folder::FolderSource;
pub use handler::McpServer;
pub use tasks::{POLL_INTERVAL, TASK_KEPT, TASK_REQUIRED_ABOVE, TaskMode, task_mode};
pub use trail::{LocalTrail, TRAIL_TENANT};

/// Where an MCP server's tools come from, and how one of them runs.
pub trait ToolSource: Send + Sync + 'static {
    /// Every tool the caller may use, sorted by name.
    fn tools(
        &self,
        request: &Extensions,
    ) -> impl Future<Output = Result<Vec<ListedTool>, SourceError>> + Send;

    /// Runs the tool `name` with `arguments`, handing what it reports while it runs to
    /// `events`. Dropping the future stops the guest.
    fn call(
        &self,
        request: &Extensions,
        name: &str,
        arguments: Map<String, Value>,
        events: Arc<Events>,
    ) -> impl Future<Output = Result<Ran, SourceError>> + Send;

    /// Runs `function`, one of the resource or prompt functions the file of the tool
    /// `tool` declares (its [`ListedTool::resources`] and [`ListedTool::prompts`]), with
    /// `arguments`, as [`ToolSource::call`] runs the tool. A source without resources or
    /// prompts keeps the default: unknown.
    fn call_member(
        &self,
        request: &Extensions,
        tool: &str,
        function: &str,
        arguments: Map<String, Value>,
        events: Arc<Events>,
    ) -> impl Future<Output = Result<Ran, SourceError>> + Send {
        let _ = (request, function, arguments, events);
        std::future::ready(Err(SourceError::UnknownTool(tool.to_owned())))
    }

    /// The tool `name` as `tools/list` shows it to the caller of `request`, if it is
    /// one of theirs: what a call's task mode is read from. Default: from
    /// [`ToolSource::tools`].
    fn listed(
        &self,
        request: &Extensions,
        name: &str,
    ) -> impl Future<Output = Result<Option<ListedTool>, SourceError>> + Send {
        async move {
            let tools = self.tools(request).await?;
            Ok(tools.into_iter().find(|t| t.name == name))
        }
    }

    /// Fires whenever the tool list the caller of `request` sees may have changed.
    fn changes(&self, request: &Extensions) -> broadcast::Receiver<()>;

    /// How long a client may keep a tool list before asking again (MCP's `ttlMs`).
    /// Default: not at all.
    fn list_ttl(&self) -> Duration {
        Duration::ZERO
    }

    /// Whose the request is: tasks made for one caller are unknown to every other (a
    /// multi-tenant source answers the tenant). Default: one caller.
    fn owner(&self, request: &Extensions) -> String {
        let _ = request;
        "local".to_owned()
    }

    /// What the operator does to raise the limits named (as `warden.toml` and the
    /// command line name them: `timeout`, `fuel`, ...), for the message of a call
    /// that hit one.
    fn how_to_raise(&self, limits: &[&str]) -> String {
        format!("raise the tool's {} limit", limits.join(" or "))
    }
}

/// One tool as `tools/list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    /// The tool's name: its function's.
    pub name: String,
    /// The schema's description.
    pub description: String,
    /// The derived parameters schema (JSON Schema 2020-12, with its `$defs`).
    pub parameters: Map<String, Value>,
    /// The schema of the return value, if the function has a return annotation.
    pub returns: Option<Value>,
    /// What the tool's grants say about its effects.
    pub hints: Hints,
    /// A name for people (MCP's `title`), if the tool has one.
    pub title: Option<String>,
    /// An icon's `https:` URL or `data:` URI (MCP's `icons`), if the tool has one.
    pub icon: Option<String>,
    /// The resources the tool's file declares (`@mcp.resource`).
    pub resources: Vec<ResourceSchema>,
    /// The prompts the tool's file declares (`@mcp.prompt`).
    pub prompts: Vec<PromptSchema>,
    /// The file declares resources and prompts and no tool: it is not in `tools/list`
    /// and cannot be called; only its resources and prompts are served.
    pub members_only: bool,
    /// Whether its calls run as MCP tasks ([`task_mode`]).
    pub task: TaskMode,
    /// Its deadline: how long a task of it may run (its TTL is this and [`TASK_KEPT`]).
    pub deadline: Duration,
}

impl ListedTool {
    /// MCP's `outputSchema`: an object schema ([`mcp_output`]), if the function has a
    /// return annotation that describes JSON data other than a plain string (a `str`
    /// result is a text block; an image, audio, file or link result has no schema).
    pub fn output_schema(&self) -> Option<Map<String, Value>> {
        let returns = self
            .returns
            .as_ref()
            .filter(|r| !is_text(r) && !crate::app::any_list(r))?;
        match mcp_output(returns) {
            Value::Object(schema) => Some(schema),
            _ => None,
        }
    }

    /// How a value the tool returns appears as structured content.
    pub fn output(&self) -> Output {
        Output::of(self.returns.as_ref())
    }
}

/// MCP's tool annotations, derived from the grants (hints to clients, never a
/// guarantee to them; the grants are the guarantee).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    /// No read-write mount and no outbound host: the tool changes nothing outside.
    pub read_only: bool,
    /// A read-write mount: the tool may change or delete files.
    pub destructive: bool,
    /// The operator says a second identical call has no further effect.
    pub idempotent: bool,
    /// An outbound host: the tool talks to the world outside.
    pub open_world: bool,
}

impl Hints {
    /// The hints of a tool with `grants`; `idempotent` is the operator's word, and
    /// `declared` what the tool's decorator says (`@mcp.tool(annotations=...)`). The
    /// more cautious word wins: a declaration can add caution (destructive, open world,
    /// not read-only) but never take away what the grants allow, and a tool is
    /// idempotent when its operator or its author says so.
    pub fn of(grants: &Grants, idempotent: bool, declared: Option<&DeclaredHints>) -> Hints {
        let writes = grants.mounts.iter().any(|m| m.access == Access::Rw);
        let said = declared.copied().unwrap_or_default();
        Hints {
            read_only: !writes && !grants.has_outbound() && said.read_only != Some(false),
            destructive: writes || said.destructive == Some(true),
            idempotent: idempotent || said.idempotent == Some(true),
            open_world: grants.has_outbound() || said.open_world == Some(true),
        }
    }
}

/// How a tool's return value is sent as structured content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// No return annotation, so no `outputSchema`: the value as it is.
    NoSchema,
    /// The return type is an object schema: the value as it is.
    Object,
    /// Any other return type: `{"result": value}`, as [`mcp_output`] wraps its schema.
    Wrapped,
}

impl Output {
    /// The shape for a tool whose return schema is `returns`.
    pub fn of(returns: Option<&Value>) -> Output {
        match returns {
            None => Output::NoSchema,
            Some(r) if is_text(r) => Output::NoSchema,
            // A list of anything may be rich content: no outputSchema promises data.
            Some(r) if crate::app::any_list(r) => Output::NoSchema,
            Some(r) if mcp_output_wraps(r) => Output::Wrapped,
            Some(_) => Output::Object,
        }
    }
}

/// Whether a return schema is a plain string's: such a result is sent as a text block
/// holding the string itself, with no `outputSchema`.
fn is_text(returns: &Value) -> bool {
    returns.get("type").is_some_and(|t| t == "string")
}

/// A call that ran: how it ended, and what the caller needs to present it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    /// The sandbox's result.
    pub result: CallResult,
    /// How the value is sent.
    pub output: Output,
    /// Whether it started from the tool's warm state.
    pub start: Start,
    /// What the caller is warned of (`_meta.warden.warnings`): a result that does not
    /// fit its return annotation is then sent as text, never as `structuredContent`
    /// that contradicts the `outputSchema`.
    pub warnings: Vec<crate::outcome::Warning>,
}

/// Why a source did not run a call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SourceError {
    /// No tool of that name (a protocol error: the client should list the tools).
    #[error("unknown tool `{0}`: call tools/list for the tools this server offers")]
    UnknownTool(String),
    /// The arguments break the tool's schema: every violation.
    #[error("the arguments do not match the schema of {tool}()")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// Every violation.
        violations: Vec<Violation>,
    },
    /// The server could not run the call; the message is meant for the caller.
    #[error("{0}")]
    Failed(String),
}
