//! [`McpServer`]: the rmcp handler over any [`ToolSource`].
//!
//! It serves tools, and the resources and prompts their files declare (`mcp/served.rs`),
//! on both protocol eras rmcp speaks: 2025-11-25 sessions (with
//! `initialize`; list changes reach them through their peer) and 2026-07-28 requests
//! (self-contained; list changes reach them through `subscriptions/listen`).
//!
//! While a call runs, what the tool reports ([`crate::events`]) becomes
//! `notifications/progress` (when the request carries a progress token) and
//! `notifications/message` (at the level the session set with `logging/setLevel`, or
//! the request's own `io.modelcontextprotocol/logLevel`; none when neither was given),
//! on the call's own stream.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, CreateTaskResult, ErrorCode, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, Icon, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, Tool, ToolAnnotations, UnsubscribeRequestParams,
    UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use super::{ListedTool, Ran, SourceError, ToolSource, result, served, tasks};

mod changes;
mod reports;

use crate::events::{Events, LogLevel, Wants};
use crate::manifest::check_icon;
use changes::forward_changes;
use reports::watch_call;

/// The JSON Schema dialect of every listed `inputSchema` and `outputSchema`.
pub const JSON_SCHEMA_DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// The MCP server of a [`ToolSource`]: serve it with rmcp, e.g.
/// `McpServer::new(source).serve(rmcp::transport::stdio())`.
///
/// rmcp makes one handler per session (Streamable HTTP calls the factory for each), so
/// a clone starts with no log level of its own: `logging/setLevel` sets the level of
/// the session it came in, not of every session.
#[derive(Debug)]
pub struct McpServer<S> {
    source: Arc<S>,
    /// Calls run as MCP tasks, shared by every session of the server.
    tasks: Arc<tasks::Tasks>,
    log_level: Arc<Mutex<Option<LogLevel>>>,
    /// The resource URIs the session subscribed to (`resources/subscribe`).
    subscribed: Arc<Mutex<BTreeSet<String>>>,
}

impl<S> Clone for McpServer<S> {
    fn clone(&self) -> Self {
        McpServer {
            source: Arc::clone(&self.source),
            tasks: Arc::clone(&self.tasks),
            log_level: Arc::default(),
            subscribed: Arc::default(),
        }
    }
}

impl<S: ToolSource> McpServer<S> {
    /// The server of `source`.
    pub fn new(source: Arc<S>) -> McpServer<S> {
        McpServer {
            source,
            tasks: Arc::default(),
            log_level: Arc::default(),
            subscribed: Arc::default(),
        }
    }

    /// What the caller of a request wants to hear while its call runs: progress when it
    /// carries a token; log records at the request's own level (2026-07-28) or else the
    /// session's (2025-11-25 `logging/setLevel`), none when neither was given.
    fn wants(&self, context: &RequestContext<RoleServer>) -> Wants {
        let per_request = context
            .meta
            .0
            .get("io.modelcontextprotocol/logLevel")
            .and_then(|v| serde_json::from_value::<LogLevel>(v.clone()).ok());
        let session = *self
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Wants {
            progress: context.meta.get_progress_token().is_some(),
            log_level: per_request.or(session),
        }
    }
}

impl<S: ToolSource> McpServer<S> {
    /// The tools the caller of `context` may use, with their files' resources and prompts.
    async fn listed(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Vec<ListedTool>, ErrorData> {
        self.source
            .tools(&context.extensions)
            .await
            .map_err(result::list_failed)
    }

    /// How long a client may keep a list (MCP's `ttlMs`).
    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.source.list_ttl().as_millis()).unwrap_or(u64::MAX)
    }

    /// Runs a resource's or prompt's function, with progress and logs as for a call.
    async fn run_member(
        &self,
        target: served::Target,
        context: &RequestContext<RoleServer>,
    ) -> Result<Ran, ErrorData> {
        let (events, reports) = Events::channel(self.wants(context));
        let call = self.source.call_member(
            &context.extensions,
            &target.tool,
            &target.function.name,
            target.arguments,
            Arc::new(events),
        );
        let Some(outcome) = watch_call(call, reports, context).await else {
            return Err(ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                "the request was cancelled",
                None,
            ));
        };
        outcome.map_err(|e| match e {
            SourceError::InvalidArguments { tool, violations } => ErrorData::invalid_params(
                format!("the arguments do not match the parameters of {tool}()"),
                Some(json!({ "violations": violations })),
            ),
            SourceError::UnknownTool(name) => {
                ErrorData::invalid_params(format!("`{name}` is no longer served: list again"), None)
            }
            SourceError::Failed(message) => ErrorData::internal_error(message, None),
        })
    }
}

impl<S: ToolSource> ServerHandler for McpServer<S> {
    #[expect(
        deprecated,
        reason = "MCP logging: SEP-2577 deprecates it for a later revision; 2025-11-25 has it"
    )]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_completions()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build(),
        )
        .with_server_info(
            Implementation::new("warden", env!("CARGO_PKG_VERSION"))
                .with_title("Warden: Python tools in WebAssembly sandboxes"),
        )
        .with_instructions(
            "Each tool is a Python function run in a fresh sandbox per call, with only the \
             folders, variables and hosts it was granted.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .source
            .tools(&context.extensions)
            .await
            .map_err(result::list_failed)?;
        let ttl_ms = u64::try_from(self.source.list_ttl().as_millis()).unwrap_or(u64::MAX);
        Ok(ListToolsResult::with_all_items(
            tools.iter().filter(|t| !t.members_only).map(tool).collect(),
        )
        .with_ttl_ms(ttl_ms)
        // The list is this server's (and, for a multi-tenant source, this caller's).
        .with_cache_scope(CacheScope::Private))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        // A task when the tool may be one and the client takes them (`tasks.rs`).
        let listed = self
            .source
            .listed(&context.extensions, &request.name)
            .await
            .map_err(result::list_failed)?;
        if let Some(tool) = listed.filter(|t| t.task != tasks::TaskMode::Forbidden) {
            if tasks::client_takes_tasks(&context) {
                let owner = self.source.owner(&context.extensions);
                let task = self.tasks.start(
                    Arc::clone(&self.source),
                    context.extensions.clone(),
                    &tool,
                    arguments,
                    owner,
                    tool.deadline,
                );
                return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
            }
            if tool.task == tasks::TaskMode::Required {
                return Err(tasks::task_required(&tool.name));
            }
        }
        let (events, reports) = Events::channel(self.wants(&context));
        let events = Arc::new(events);
        let call = self.source.call(
            &context.extensions,
            &request.name,
            arguments,
            Arc::clone(&events),
        );
        let Some(outcome) = watch_call(call, reports, &context).await else {
            // The client cancelled: the guest is gone with the call's future, and rmcp
            // sends no answer to a cancelled request.
            tracing::info!(tool = %request.name, "the client cancelled the call");
            return Err(ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                "the call was cancelled",
                None,
            ));
        };
        let answer = match outcome {
            Ok(ran) => result::ran(ran, |limits| self.source.how_to_raise(limits)),
            Err(e) => result::refused(e)?,
        };
        Ok(answer.into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let owner = self.source.owner(&context.extensions);
        Ok(GetTaskResult::new(
            self.tasks.get(&request.task_id, &owner)?,
        ))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let owner = self.source.owner(&context.extensions);
        self.tasks.cancel(&request.task_id, &owner)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let owner = self.source.owner(&context.extensions);
        self.tasks.update(&request.task_id, &owner)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let tools = self.listed(&context).await?;
        Ok(served::resources(&tools)
            .with_ttl_ms(self.ttl_ms())
            .with_cache_scope(CacheScope::Private))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let tools = self.listed(&context).await?;
        Ok(served::templates(&tools)
            .with_ttl_ms(self.ttl_ms())
            .with_cache_scope(CacheScope::Private))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let tools = self.listed(&context).await?;
        let (target, resource) = served::find_resource(&tools, &request.uri)?;
        let ran = self.run_member(target, &context).await?;
        Ok(ReadResourceResponse::Complete(served::read(
            ran,
            &request.uri,
            &resource,
        )?))
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Only a resource the caller may read (another tenant's URI is unknown).
        let tools = self.listed(&context).await?;
        served::find_resource(&tools, &request.uri)?;
        self.subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&request.uri);
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let tools = self.listed(&context).await?;
        Ok(served::prompts(&tools)
            .with_ttl_ms(self.ttl_ms())
            .with_cache_scope(CacheScope::Private))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let tools = self.listed(&context).await?;
        let arguments = request.arguments.unwrap_or_default();
        let (target, prompt) = served::find_prompt(&tools, &request.name, arguments)?;
        let ran = self.run_member(target, &context).await?;
        Ok(GetPromptResponse::Complete(served::got(ran, &prompt)?))
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let tools = self.listed(&context).await?;
        served::complete(
            &tools,
            &request.r#ref,
            &request.argument.name,
            &request.argument.value,
        )
    }

    #[expect(
        deprecated,
        reason = "MCP logging: SEP-2577 deprecates it for a later revision; 2025-11-25 has it"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let level = serde_json::to_value(request.level)
            .ok()
            .and_then(|v| serde_json::from_value::<LogLevel>(v).ok())
            .ok_or_else(|| ErrorData::invalid_params("unknown log level", None))?;
        *self
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(level);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A 2025-11-25 session: list changes go to its peer for as long as it lasts.
        tokio::spawn(forward_changes(
            self.source.changes(&context.extensions),
            context.peer,
            Arc::clone(&self.subscribed),
        ));
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        changes::listen(&*self.source, context).await
    }
}

/// A listed tool in rmcp's terms.
fn tool(listed: &ListedTool) -> Tool {
    let mut parameters = listed.parameters.clone();
    parameters.insert("$schema".into(), json!(JSON_SCHEMA_DIALECT));
    let mut tool = Tool::new_with_raw(
        listed.name.clone(),
        Some(Cow::Owned(listed.description.clone())),
        Arc::new(parameters),
    )
    .with_annotations(
        ToolAnnotations::new()
            .read_only(listed.hints.read_only)
            .destructive(listed.hints.destructive)
            .idempotent(listed.hints.idempotent)
            .open_world(listed.hints.open_world),
    );
    if let Some(mut output) = listed.output_schema() {
        output.insert("$schema".into(), json!(JSON_SCHEMA_DIALECT));
        tool = tool.with_raw_output_schema(Arc::new(output));
    }
    tool.title.clone_from(&listed.title);
    tool.icons = listed.icon.as_ref().map(|src| {
        let mut icon = Icon::new(src.clone());
        icon.mime_type = check_icon(src).ok().flatten().map(str::to_owned);
        vec![icon]
    });
    tool
}
