//! Who hears that a tenant's tools changed: one broadcast channel per tenant with
//! listeners (MCP sessions and subscriptions over `/mcp`), so a change in one tenant's
//! tools is never heard by another tenant's clients.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::broadcast;

use super::App;
use crate::tenant::TenantId;

/// Changes waiting for a slow listener before it only learns that it lagged (which
/// still tells it the list changed).
const BACKLOG: usize = 16;

/// The channels of the tenants that have listeners.
#[derive(Debug, Default)]
pub(super) struct ToolChanges {
    channels: Mutex<HashMap<TenantId, broadcast::Sender<()>>>,
}

impl ToolChanges {
    fn subscribe(&self, tenant: &TenantId) -> broadcast::Receiver<()> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        channels
            .entry(tenant.clone())
            .or_insert_with(|| broadcast::channel(BACKLOG).0)
            .subscribe()
    }

    /// Tells every tenant's listeners: after a gap in what this node heard.
    pub(super) fn notify_all(&self) {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        channels.retain(|_, sender| sender.send(()).is_ok());
    }

    pub(super) fn notify(&self, tenant: &TenantId) {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = channels.get(tenant) {
            // No listener left: forget the channel rather than keep one per tenant ever
            // heard of.
            if sender.send(()).is_err() {
                channels.remove(tenant);
            }
        }
    }
}

impl App {
    /// Fires whenever the tenant's tools may have changed: a tool registered, updated
    /// (its version, tags or description), enabled, disabled or deleted.
    pub fn tool_changes(&self, tenant: &TenantId) -> broadcast::Receiver<()> {
        self.inner.changes.subscribe(tenant)
    }

    /// Tells the tenant's listeners, and the cache, that its tools changed.
    pub(super) fn tools_changed(&self, tenant: &TenantId) {
        self.inner.cache.tools_changed(tenant);
        self.inner.changes.notify(tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_reaches_only_the_listeners_of_its_tenant() {
        let changes = ToolChanges::default();
        let (a, b): (TenantId, TenantId) = (TenantId::generate(), TenantId::generate());
        let mut hears_a = changes.subscribe(&a);
        let mut hears_b = changes.subscribe(&b);
        changes.notify(&a);
        assert_eq!(hears_a.try_recv(), Ok(()));
        assert!(hears_b.try_recv().is_err(), "tenant b heard a's change");
    }

    #[test]
    fn a_tenant_without_listeners_keeps_no_channel() {
        let changes = ToolChanges::default();
        let a = TenantId::generate();
        drop(changes.subscribe(&a));
        changes.notify(&a);
        assert!(changes.channels.lock().unwrap().is_empty());
    }
}
