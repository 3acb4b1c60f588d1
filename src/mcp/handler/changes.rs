//! List changes as notifications: to a 2025-11-25 session's peer for as long as it
//! lasts ([`forward_changes`]), and on a 2026-07-28 client's `subscriptions/listen`
//! stream ([`listen`]).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::SubscriptionContext;
use rmcp::{ErrorData, Peer, RoleServer};
use tokio::sync::broadcast;

use super::super::{ToolSource, served};

/// Serves one `subscriptions/listen` stream: the list changes the client accepted, and
/// `notifications/resources/updated` for the resources it watches, until it cancels or
/// the source ends.
pub(super) async fn listen<S: ToolSource>(
    source: &S,
    context: SubscriptionContext,
) -> Result<(), ErrorData> {
    let mut changes = source.changes(&context.request_context().extensions);
    let accepted = context.accepted();
    let wanted = |w: Option<bool>| w == Some(true);
    let (tools, resources, prompts) = (
        wanted(accepted.tools_list_changed),
        wanted(accepted.resources_list_changed),
        wanted(accepted.prompts_list_changed),
    );
    // Resources the client watches (`resourceSubscriptions`): announced as updated when
    // the tools change, as for a 2025-11-25 session's `resources/subscribe`.
    let watched = accepted.resource_subscriptions.clone().unwrap_or_default();
    if !(tools || resources || prompts || !watched.is_empty()) {
        context.cancelled().await;
        return Ok(());
    }
    loop {
        tokio::select! {
            () = context.cancelled() => return Ok(()),
            change = changes.recv() => match change {
                // A lagging receiver still learns that the list changed.
                Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    let sink = context.sink();
                    let sent = (!tools || sink.notify_tool_list_changed().await.is_ok())
                        && (!resources || sink.notify_resource_list_changed().await.is_ok())
                        && (!prompts || sink.notify_prompt_list_changed().await.is_ok());
                    if !sent {
                        return Ok(());
                    }
                    // Only resources the caller may still read.
                    let Ok(listed) = source.tools(&context.request_context().extensions).await else {
                        continue;
                    };
                    for uri in &watched {
                        if served::find_resource(&listed, uri).is_ok()
                            && sink.notify_resource_updated(uri.clone()).await.is_err()
                        {
                            return Ok(());
                        }
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
        }
    }
}

/// Sends `notifications/tools/list_changed` (and the resources' and prompts') to a legacy
/// session's peer on every change, and `notifications/resources/updated` for each
/// resource it subscribed to (a resource's content is its function's to make: what Warden
/// knows changes is the tool version that declares it), until the session or the source
/// ends.
pub(super) async fn forward_changes(
    mut changes: broadcast::Receiver<()>,
    peer: Peer<RoleServer>,
    subscribed: Arc<Mutex<BTreeSet<String>>>,
) {
    loop {
        match changes.recv().await {
            Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                // A tool's file also declares its resources and prompts.
                if peer.is_transport_closed()
                    || peer.notify_tool_list_changed().await.is_err()
                    || peer.notify_resource_list_changed().await.is_err()
                    || peer.notify_prompt_list_changed().await.is_err()
                {
                    return;
                }
                let uris: Vec<String> = subscribed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .cloned()
                    .collect();
                for uri in uris {
                    let note = ResourceUpdatedNotificationParam::new(uri);
                    if peer.notify_resource_updated(note).await.is_err() {
                        return;
                    }
                }
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
