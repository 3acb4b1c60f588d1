//! [`McpServer`]: the rmcp handler over any [`ToolSource`].
//!
//! It serves tools only, on both protocol eras rmcp speaks: 2025-11-25 sessions (with
//! `initialize`; list changes reach them through their peer) and 2026-07-28 requests
//! (self-contained; list changes reach them through `subscriptions/listen`).

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, ErrorCode, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, SubscriptionFilter, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use tokio::sync::broadcast;

use super::{ListedTool, ToolSource, result};

/// How often a call that carries a progress token is reported on.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The MCP server of a [`ToolSource`]: serve it with rmcp, e.g.
/// `McpServer::new(source).serve(rmcp::transport::stdio())`.
#[derive(Debug)]
pub struct McpServer<S> {
    source: Arc<S>,
}

impl<S> Clone for McpServer<S> {
    fn clone(&self) -> Self {
        McpServer {
            source: Arc::clone(&self.source),
        }
    }
}

impl<S: ToolSource> McpServer<S> {
    /// The server of `source`.
    pub fn new(source: Arc<S>) -> McpServer<S> {
        McpServer { source }
    }
}

impl<S: ToolSource> ServerHandler for McpServer<S> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
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
        Ok(
            ListToolsResult::with_all_items(tools.iter().map(tool).collect())
                .with_ttl_ms(ttl_ms)
                // The list is this server's (and, for a multi-tenant source, this caller's).
                .with_cache_scope(CacheScope::Private),
        )
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let call = self
            .source
            .call(&context.extensions, &request.name, arguments);
        let Some(outcome) = watch_call(call, &context).await else {
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

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A 2025-11-25 session: list changes go to its peer for as long as it lasts.
        tokio::spawn(forward_changes(
            self.source.changes(&context.extensions),
            context.peer,
        ));
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.source.changes(&context.request_context().extensions);
        if context.accepted().tools_list_changed != Some(true) {
            context.cancelled().await;
            return Ok(());
        }
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    // A lagging receiver still learns that the list changed.
                    Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        if context.sink().notify_tool_list_changed().await.is_err() {
                            return Ok(());
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }
}

/// Sends `notifications/tools/list_changed` to a legacy session's peer on every change,
/// until the session or the source ends.
async fn forward_changes(mut changes: broadcast::Receiver<()>, peer: Peer<RoleServer>) {
    loop {
        match changes.recv().await {
            Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                if peer.is_transport_closed() || peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Drives `call` to its end, sending a progress notification every
/// [`PROGRESS_INTERVAL`] when the request carried a token; `None` when the client
/// cancelled first (the call's future, and with it the guest, is dropped).
async fn watch_call<T>(
    call: impl Future<Output = T>,
    context: &RequestContext<RoleServer>,
) -> Option<T> {
    let progress: Option<ProgressToken> = context.meta.get_progress_token();
    let started = Instant::now();
    let mut ticks =
        tokio::time::interval_at((started + PROGRESS_INTERVAL).into(), PROGRESS_INTERVAL);
    // A late tick is skipped rather than repeated: progress must keep increasing.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut reported = 0;
    let mut call = std::pin::pin!(call);
    loop {
        tokio::select! {
            outcome = &mut call => return Some(outcome),
            () = context.ct.cancelled() => return None,
            _ = ticks.tick(), if progress.is_some() => {
                let seconds = started.elapsed().as_secs();
                let Some(token) = progress.clone().filter(|_| seconds > reported) else {
                    continue;
                };
                reported = seconds;
                let note = ProgressNotificationParam::new(token, seconds as f64)
                    .with_message(format!("running, {seconds} s"));
                if let Err(e) = context.peer.notify_progress(note).await {
                    tracing::debug!("cannot send progress: {e}");
                }
            }
        }
    }
}

/// A listed tool in rmcp's terms.
fn tool(listed: &ListedTool) -> Tool {
    let mut tool = Tool::new_with_raw(
        listed.name.clone(),
        Some(Cow::Owned(listed.description.clone())),
        Arc::new(listed.parameters.clone()),
    )
    .with_annotations(
        ToolAnnotations::new()
            .read_only(listed.hints.read_only)
            .destructive(listed.hints.destructive)
            .idempotent(listed.hints.idempotent)
            .open_world(listed.hints.open_world),
    );
    if let Some(output) = listed.output_schema() {
        tool = tool.with_raw_output_schema(Arc::new(output));
    }
    tool
}
