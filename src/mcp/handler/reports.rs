//! What a running call reports ([`crate::events`]), sent as notifications on the call's
//! own stream: `notifications/progress` when the request carries a progress token,
//! `notifications/message` at the level asked for.

use std::future::Future;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::json;
use tokio::sync::mpsc;

use crate::events::CallEvent;

/// Drives `call` to its end, sending what it reports as notifications on the way (see
/// the module docs); `None` when the client cancelled first (the call's future, and with
/// it the guest, is dropped). Reports still queued when the call ends are sent before
/// its result.
pub(super) async fn watch_call<T>(
    call: impl Future<Output = T>,
    mut reports: mpsc::Receiver<CallEvent>,
    context: &RequestContext<RoleServer>,
) -> Option<T> {
    let token: Option<ProgressToken> = context.meta.get_progress_token();
    let mut call = std::pin::pin!(call);
    let outcome = loop {
        tokio::select! {
            outcome = &mut call => break outcome,
            () = context.ct.cancelled() => return None,
            Some(report) = reports.recv() => notify(report, token.as_ref(), &context.peer).await,
        }
    };
    while let Ok(report) = reports.try_recv() {
        notify(report, token.as_ref(), &context.peer).await;
    }
    Some(outcome)
}

/// Sends one report to the client.
#[expect(
    deprecated,
    reason = "MCP logging: SEP-2577 deprecates it for a later revision; 2025-11-25 has it"
)]
async fn notify(report: CallEvent, token: Option<&ProgressToken>, peer: &Peer<RoleServer>) {
    let sent = match report {
        CallEvent::Progress {
            progress,
            total,
            message,
        } => {
            let Some(token) = token else { return };
            let mut note = ProgressNotificationParam::new(token.clone(), progress);
            if let Some(total) = total {
                note = note.with_total(total);
            }
            if let Some(message) = message {
                note = note.with_message(message);
            }
            peer.notify_progress(note).await
        }
        CallEvent::Log {
            level,
            logger,
            message,
        } => {
            let Ok(level) = serde_json::from_value(json!(level)) else {
                return;
            };
            let mut note = rmcp::model::LoggingMessageNotificationParam::new(level, json!(message));
            if let Some(logger) = logger {
                note = note.with_logger(logger);
            }
            peer.notify_logging_message(note).await
        }
    };
    if let Err(e) = sent {
        tracing::debug!("cannot send a call's report: {e}");
    }
}
