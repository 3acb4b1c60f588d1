//! Tool calls as MCP tasks (the Tasks extension, `io.modelcontextprotocol/tasks`):
//! a long call answered at once with a task the client polls (`tasks/get`) and may
//! cancel (`tasks/cancel`), instead of a request held open for minutes.
//!
//! Which calls become tasks is the server's choice (SEP-2663): a call of a tool whose
//! [`TaskMode`] is `optional` or `required`, from a client that declared the extension
//! (in its session, or in the request's `_meta`). A `required` tool called by a client
//! that did not is refused with `-32021` (missing required client capability); every
//! other call is answered at once, as without the extension.
//!
//! A tool's mode is its decorator's word (FastMCP's `@mcp.tool(task=True)`,
//! `task=TaskConfig(mode="required")`), else `required` when its deadline is above
//! [`TASK_REQUIRED_ABOVE`], else `forbidden`.
//!
//! Tasks live in this process (rmcp's [`TaskManager`]), each visible only to the
//! caller that made it ([`ToolSource::owner`]): another caller's task id is unknown
//! (`-32602`), word for word. A task's call runs exactly as a synchronous one (same
//! admission, limits, audit); `tasks/cancel` stops its guest at once; what the tool
//! reports while it runs (progress, log records) is the task's `statusMessage`. A tool
//! that ran and failed is `completed` with `isError`; a call the host could not run to
//! an outcome (the guest crashed, the worker failed) is `failed` with its error.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::ErrorData;
use rmcp::RoleServer;
use rmcp::model::{ClientCapabilities, DetailedTask, ErrorCode};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::{ListedTool, SourceError, ToolSource, result};
use crate::events::{CallEvent, Events, Wants};
use crate::outcome::Status;
pub use crate::schema::TaskMode;

/// A tool whose deadline is longer than this must run as a task: 60 s. A request held
/// open longer than a minute is what tasks exist to avoid.
pub const TASK_REQUIRED_ABOVE: Duration = Duration::from_secs(60);

/// How long a task stays readable after it was created, beyond its tool's deadline: 1 h.
pub const TASK_KEPT: Duration = Duration::from_secs(3600);

/// How often a client is told to poll: 1 s.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// A tool's task mode: its decorator's word, else required above
/// [`TASK_REQUIRED_ABOVE`], else forbidden.
pub fn task_mode(declared: Option<TaskMode>, deadline: Duration) -> TaskMode {
    match declared {
        Some(mode) => mode,
        None if deadline > TASK_REQUIRED_ABOVE => TaskMode::Required,
        None => TaskMode::Forbidden,
    }
}

/// The tasks of one server (shared by its sessions), and whose each is.
#[derive(Default)]
pub(super) struct Tasks {
    manager: TaskManager,
    owners: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks").finish_non_exhaustive()
    }
}

/// Whether the client of `context` declared the Tasks extension (for its session, or
/// in this request's `_meta`).
pub(super) fn client_takes_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

/// The refusal of a `required` tool's call from a client without the extension.
pub(super) fn task_required(tool: &str) -> ErrorData {
    let mut error = ErrorData::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    );
    error.message = format!(
        "{tool} runs only as a task (its deadline is long, or its author said so): declare \
         the io.modelcontextprotocol/tasks extension and call it again"
    )
    .into();
    error
}

fn unknown(task_id: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown task {task_id}"), None)
}

impl Tasks {
    /// Starts `tool`'s call with `arguments` as a task of `owner`'s; the task as created.
    pub(super) fn start<S: ToolSource>(
        &self,
        source: Arc<S>,
        request: rmcp::model::Extensions,
        tool: &ListedTool,
        arguments: Map<String, Value>,
        owner: String,
        deadline: Duration,
    ) -> rmcp::model::Task {
        let ttl = u64::try_from((deadline + TASK_KEPT).as_millis()).unwrap_or(u64::MAX);
        let poll = u64::try_from(POLL_INTERVAL.as_millis()).unwrap_or(1000);
        let options = TaskOptions::new()
            .with_ttl_ms(ttl)
            .with_poll_interval_ms(poll);
        let name = tool.name.clone();
        let task = self.manager.spawn(options, move |context| {
            Box::pin(async move {
                // What the tool reports becomes the task's status message.
                let wants = Wants {
                    progress: true,
                    log_level: Some(crate::events::LogLevel::Info),
                };
                let (events, mut reports) = Events::channel(wants);
                let call = source.call(&request, &name, arguments, Arc::new(events));
                let mut call = std::pin::pin!(call);
                let outcome = loop {
                    tokio::select! {
                        outcome = &mut call => break outcome,
                        // Dropping the call stops its guest.
                        () = context.cancelled() => return Err(TaskExit::Cancelled),
                        Some(report) = reports.recv() => {
                            if let Some(message) = status_message(report) {
                                context.set_status_message(message);
                            }
                        }
                    }
                };
                drain(&mut reports);
                let how = |limits: &[&str]| source.how_to_raise(limits);
                match outcome {
                    Ok(ran) if ran.result.status == Status::Crashed => {
                        let message = ran
                            .result
                            .message
                            .clone()
                            .unwrap_or_else(|| "the tool's sandbox crashed".to_owned());
                        Err(TaskExit::Error(ErrorData::new(
                            ErrorCode::INTERNAL_ERROR,
                            format!("crashed: {message}"),
                            None,
                        )))
                    }
                    Ok(ran) => Ok(result::ran(ran, how)),
                    Err(SourceError::Failed(message)) => {
                        Err(TaskExit::Error(ErrorData::internal_error(message, None)))
                    }
                    Err(e) => result::refused(e).map_err(TaskExit::Error),
                }
            })
        });
        self.owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(task.task_id.clone(), owner);
        task
    }

    fn check_owner(&self, task_id: &str, owner: &str) -> Result<(), ErrorData> {
        let owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        match owners.get(task_id) {
            Some(o) if o == owner => Ok(()),
            _ => Err(unknown(task_id)),
        }
    }

    /// `tasks/get`.
    pub(super) fn get(&self, task_id: &str, owner: &str) -> Result<DetailedTask, ErrorData> {
        self.check_owner(task_id, owner)?;
        self.manager
            .get_task(task_id)
            .inspect_err(|_| self.forget(task_id))
    }

    /// `tasks/cancel`: the guest stops at once; a task that ended stays as it ended.
    pub(super) fn cancel(&self, task_id: &str, owner: &str) -> Result<(), ErrorData> {
        self.check_owner(task_id, owner)?;
        self.manager.cancel_task(task_id)
    }

    /// `tasks/update`: Warden's tools never ask their client for input, so there is
    /// nothing to answer; the ack is given for a known task.
    pub(super) fn update(&self, task_id: &str, owner: &str) -> Result<(), ErrorData> {
        self.check_owner(task_id, owner)?;
        self.manager.update_task(task_id, std::iter::empty())
    }

    /// Drops the owner of a task the manager no longer has (expired).
    fn forget(&self, task_id: &str) {
        self.owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(task_id);
    }
}

/// A report as a task's status message.
fn status_message(report: CallEvent) -> Option<String> {
    match report {
        CallEvent::Progress {
            progress,
            total,
            message,
        } => {
            let done = match total {
                Some(total) => format!("{progress}/{total}"),
                None => format!("{progress}"),
            };
            Some(match message {
                Some(m) => format!("{done}: {m}"),
                None => done,
            })
        }
        CallEvent::Log { message, .. } => Some(message),
    }
}

fn drain(reports: &mut mpsc::Receiver<CallEvent>) {
    while reports.try_recv().is_ok() {}
}
