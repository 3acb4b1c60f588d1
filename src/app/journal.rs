//! Group commit of the runs' audit events.
//!
//! Every call is audited before its result is answered, and the registry commits with
//! `synchronous = FULL`: each commit waits for an `fsync`. Committed one by one,
//! concurrent calls queue behind each other's `fsync`. The journal's thread takes every
//! event waiting when it wakes (up to [`MAX_BATCH`]), appends them in one transaction
//! and answers each caller once that transaction is durable; so a call's answer still
//! never goes out before its event is on disk, and N calls finishing together cost one
//! `fsync` rather than N. A lone call pays what it paid before.
//!
//! A batch that fails is retried event by event, so one event's error (its tenant
//! deleted meanwhile, say) is that event's caller's alone.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

use tokio::sync::oneshot;

use super::AppError;
use crate::registry::{AuditEvent, Registry};
use crate::tenant::TenantId;

/// Most events committed in one transaction.
pub(super) const MAX_BATCH: usize = 256;

/// One event to append, and where to say it is durable (or why not).
struct Entry {
    tenant: TenantId,
    event: AuditEvent,
    done: oneshot::Sender<Result<(), AppError>>,
}

/// The journal: its thread is started by the first event and ends when this is dropped.
#[derive(Debug)]
pub(super) struct Journal {
    registry: Arc<Registry>,
    queue: Mutex<Option<mpsc::Sender<Entry>>>,
}

impl Journal {
    /// A journal over `registry`.
    pub(super) fn new(registry: Arc<Registry>) -> Journal {
        Journal {
            registry,
            queue: Mutex::new(None),
        }
    }

    /// The queue of the journal's thread, started now if it is not running.
    fn queue(&self) -> Result<mpsc::Sender<Entry>, AppError> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(q) = queue.as_ref() {
            return Ok(q.clone());
        }
        let (sender, entries) = mpsc::channel();
        let registry = Arc::clone(&self.registry);
        thread::Builder::new()
            .name("warden-audit".into())
            .spawn(move || write_batches(&registry, &entries))
            .map_err(|e| AppError::Task(format!("could not start the audit journal: {e}")))?;
        *queue = Some(sender.clone());
        Ok(sender)
    }

    /// Appends `event` to `tenant`'s trail; returns once it is durable.
    pub(super) async fn append(&self, tenant: TenantId, event: AuditEvent) -> Result<(), AppError> {
        let (done, durable) = oneshot::channel();
        let entry = Entry {
            tenant,
            event,
            done,
        };
        if let Err(mpsc::SendError(entry)) = self.queue()?.send(entry) {
            // The thread is gone (it panicked): start another one for this event on.
            *self.queue.lock().unwrap_or_else(PoisonError::into_inner) = None;
            self.queue()?
                .send(entry)
                .map_err(|_| AppError::Task("the audit journal has stopped".into()))?;
        }
        durable.await.map_err(|_| {
            AppError::Task("the audit journal stopped before the event was stored".into())
        })?
    }
}

/// The journal's thread: waits for an event, takes every other one already waiting,
/// commits them together and answers their callers. Ends when every sender is gone.
fn write_batches(registry: &Registry, entries: &mpsc::Receiver<Entry>) {
    while let Ok(first) = entries.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match entries.try_recv() {
                Ok(entry) => batch.push(entry),
                Err(_) => break,
            }
        }
        let (events, waiters): (Vec<(TenantId, AuditEvent)>, Vec<_>) = batch
            .into_iter()
            .map(|e| ((e.tenant, e.event), e.done))
            .unzip();
        match registry.append_audit_batch(&events) {
            Ok(_) => {
                for done in waiters {
                    let _ = done.send(Ok(()));
                }
            }
            Err(_) if events.len() > 1 => {
                for ((tenant, event), done) in events.iter().zip(waiters) {
                    let stored = registry
                        .append_audit(tenant, event)
                        .map(|_| ())
                        .map_err(AppError::from);
                    let _ = done.send(stored);
                }
            }
            Err(e) => {
                // A batch of one: the error is its caller's.
                if let Some(done) = waiters.into_iter().next() {
                    let _ = done.send(Err(AppError::from(e)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::VersionId;
    use crate::registry::{ChainCheck, ToolId};
    use crate::tenant::TenantPolicy;

    fn event(n: u64) -> AuditEvent {
        AuditEvent::RunCancelled {
            tool: ToolId::generate(),
            version: VersionId::generate(),
            key_hint: None,
            wall_time_us: n,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_events_are_all_stored_in_order_per_caller_and_the_chains_verify() {
        let registry = Arc::new(Registry::open_in_memory().unwrap());
        let (a, _) = registry
            .create_tenant("a", &TenantPolicy::default())
            .unwrap();
        let (b, _) = registry
            .create_tenant("b", &TenantPolicy::default())
            .unwrap();
        let journal = Arc::new(Journal::new(Arc::clone(&registry)));
        let mut tasks = Vec::new();
        for n in 0..200u64 {
            let (journal, tenant) = (
                Arc::clone(&journal),
                if n % 2 == 0 {
                    a.id.clone()
                } else {
                    b.id.clone()
                },
            );
            tasks.push(tokio::spawn(async move {
                journal.append(tenant, event(n)).await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        for tenant in [&a.id, &b.id] {
            let page = registry.audit(tenant, None, 500).unwrap();
            let runs = page
                .items
                .iter()
                .filter(|r| matches!(r.event, AuditEvent::RunCancelled { .. }))
                .count();
            assert_eq!(runs, 100);
            assert!(matches!(
                registry.verify_chain(tenant).unwrap(),
                ChainCheck::Intact { .. }
            ));
        }
    }

    #[tokio::test]
    async fn an_event_for_a_tenant_that_does_not_exist_fails_alone() {
        let registry = Arc::new(Registry::open_in_memory().unwrap());
        let (a, _) = registry
            .create_tenant("a", &TenantPolicy::default())
            .unwrap();
        let journal = Journal::new(Arc::clone(&registry));
        let ghost = TenantId::generate();
        let (good, bad) = tokio::join!(
            journal.append(a.id.clone(), event(1)),
            journal.append(ghost, event(2))
        );
        assert!(good.is_ok());
        assert!(matches!(bad, Err(AppError::Registry(_))), "{bad:?}");
    }
}
