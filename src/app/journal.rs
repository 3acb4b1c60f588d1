//! The calls' records, committed in groups by one thread.
//!
//! With commits that wait for the disk, a call is recorded twice ([`crate::registry`]'s
//! `runs`): when it starts, its in-flight record, committed durably while the guest
//! runs; when it ends, its audit event (and the in-flight record's removal), committed
//! without waiting for the disk. Its answer waits for both, so an answered call is on
//! disk whatever happens next: in the trail with its outcome, or in flight and later
//! recorded as `run_interrupted`. The disk's flush overlaps the call instead of
//! following it. On SQLite every call is recorded so; on PostgreSQL a call that starts
//! while its node has a core to spare ([`InFlightPolicy`]): there the record costs a
//! statement of its own, and a busy node's ends share commits instead. A call not
//! recorded in flight has its event committed durably once it ends, before its answer.
//!
//! The journal's thread takes every record waiting when it wakes (up to
//! [`MAX_BATCH`]) and commits them in one transaction, durably when one of them is a
//! start: N calls starting together cost one `fsync`, not N. When the last commit did
//! not wait for the disk, the thread makes it durable after [`FLUSH_AFTER`] without
//! another; and every [`SWEEP_EVERY`] (and when it starts) it records the calls left
//! in flight by a node that stopped ([`Registry::record_interrupted_runs`]).
//!
//! On SQLite a call whose end finds nobody writing commits it itself, on its own
//! thread ([`Running::end`]): handing one record to the journal's thread and its
//! answer back costs two wake-ups of a sleeping thread, about 100 us on a virtual
//! machine, several times the commit. Such a commit does not wait for the disk either;
//! `flushes.rs` has the thread make it durable within [`FLUSH_AFTER`].
//!
//! On PostgreSQL a call's records are one statement each (its end on the chain head
//! the node wrote last), and a call's task awaits them itself, on its own runtime
//! ([`Registry::record_start_now`], [`Registry::record_end_now`]), instead of through
//! the journal's thread and the registry's runtime: four hand-overs fewer. Its start
//! runs in a task of its own while the guest runs ([`Journal::start_apart`]). The end
//! of a call not recorded in flight goes so only when the call is alone on its node;
//! with other calls running, such ends go to the journal, which commits those that meet
//! there in one transaction (measured: a busy node made 13 % fewer calls a second when
//! every end that could went its own way). Any record that finds the node's
//! connections for this all taken goes to the journal too.
//!
//! A batch that fails is retried record by record, so one record's error (its tenant
//! deleted meanwhile, say) is that record's caller's alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::AppError;
use crate::registry::{AuditEvent, InFlight, Registry, RunRecord};

mod batches;
mod flushes;

use batches::{InFlightPolicy, write_batches};
use flushes::Flushes;

/// Most records committed in one transaction.
pub(super) const MAX_BATCH: usize = 256;

/// How long a commit that did not wait for the disk stays so, at most, when no other
/// commit flushes it first: 50 ms.
pub const FLUSH_AFTER: Duration = Duration::from_millis(50);

/// How often calls left in flight are looked for: 10 s.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// One record to commit, and where to say it is committed (or why not).
struct Entry {
    record: RunRecord,
    done: Option<oneshot::Sender<Result<(), AppError>>>,
}

/// Says when a call's in-flight record is durable (or why it is not).
type Durable = oneshot::Receiver<Result<(), AppError>>;

/// What the journal's thread is handed.
enum Message {
    Record(Entry),
    /// Calls committed their own ends without waiting for the disk, and [`Flushes`]
    /// says no durable commit has covered them: flush now.
    Flush,
}

/// The journal: its thread runs from its creation until this is dropped.
#[derive(Debug)]
pub(super) struct Journal {
    registry: Arc<Registry>,
    queue: Mutex<Option<mpsc::Sender<Message>>>,
    flushes: Arc<Flushes>,
    /// Calls between [`Journal::start`] and their end, on this node.
    running: Arc<AtomicUsize>,
    /// Which calls are recorded in flight.
    policy: InFlightPolicy,
}

impl Journal {
    /// A journal over `registry`, its thread started (it records the calls a stopped
    /// node left in flight at once).
    pub(super) fn new(registry: Arc<Registry>) -> Journal {
        Journal::with_policy(InFlightPolicy::of(&registry), registry)
    }

    /// [`Journal::new`] recording in flight the calls `policy` says.
    fn with_policy(policy: InFlightPolicy, registry: Arc<Registry>) -> Journal {
        let journal = Journal {
            policy,
            registry,
            queue: Mutex::new(None),
            flushes: Arc::new(Flushes::new()),
            running: Arc::new(AtomicUsize::new(0)),
        };
        if let Err(e) = journal.queue() {
            tracing::error!("{e}");
        }
        journal
    }

    /// The queue of the journal's thread, started now if it is not running.
    fn queue(&self) -> Result<mpsc::Sender<Message>, AppError> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(q) = queue.as_ref() {
            return Ok(q.clone());
        }
        let (sender, entries) = mpsc::channel();
        let registry = Arc::clone(&self.registry);
        let flushes = Arc::clone(&self.flushes);
        thread::Builder::new()
            .name("warden-audit".into())
            .spawn(move || write_batches(&registry, &entries, &flushes))
            .map_err(|e| AppError::Task(format!("could not start the audit journal: {e}")))?;
        *queue = Some(sender.clone());
        Ok(sender)
    }

    /// Hands `entry` to the thread, starting another one if it died (it panicked);
    /// returns the thread's queue.
    fn send(&self, entry: Entry) -> Result<mpsc::Sender<Message>, AppError> {
        let queue = self.queue()?;
        let Err(mpsc::SendError(message)) = queue.send(Message::Record(entry)) else {
            return Ok(queue);
        };
        *self.queue.lock().unwrap_or_else(PoisonError::into_inner) = None;
        let queue = self.queue()?;
        queue
            .send(message)
            .map_err(|_| AppError::Task("the audit journal has stopped".into()))?;
        Ok(queue)
    }

    /// Records that `run` starts (its record is committed durably meanwhile, when it
    /// gets one: [`InFlightPolicy`]); what it returns records its end.
    pub(super) fn start(&self, run: InFlight) -> Result<Running, AppError> {
        let before = self.running.fetch_add(1, Ordering::AcqRel);
        let (queue, durable) = match self.record_start(&run, before) {
            Ok(started) => started,
            Err(e) => {
                self.running.fetch_sub(1, Ordering::AcqRel);
                return Err(e);
            }
        };
        Ok(Running {
            registry: Arc::clone(&self.registry),
            flushes: Arc::clone(&self.flushes),
            running: Arc::clone(&self.running),
            queue,
            recorded: durable.is_some(),
            // Only PostgreSQL's records are committed apart.
            apart: durable.is_some() && matches!(self.policy, InFlightPolicy::FewerThan(_)),
            run,
            started: Instant::now(),
            durable,
            ended: false,
        })
    }

    /// Records that `run` starts with no in-flight record of its own (a run's call,
    /// whose run row stands for it); its end is recorded as [`Journal::start`]'s is, or
    /// handed over ([`Running::hand_over`]).
    pub(super) fn start_unrecorded(&self, run: InFlight) -> Result<Running, AppError> {
        let queue = self.queue()?;
        self.running.fetch_add(1, Ordering::AcqRel);
        Ok(Running {
            registry: Arc::clone(&self.registry),
            flushes: Arc::clone(&self.flushes),
            running: Arc::clone(&self.running),
            queue,
            recorded: false,
            apart: false,
            run,
            started: Instant::now(),
            durable: None,
            ended: false,
        })
    }

    /// Commits `run`'s in-flight record if it gets one (`before`: calls running on the
    /// node when it started); the journal's queue, and what says when the record is
    /// durable.
    #[allow(
        clippy::type_complexity,
        reason = "a queue and a receiver, named above"
    )]
    fn record_start(
        &self,
        run: &InFlight,
        before: usize,
    ) -> Result<(mpsc::Sender<Message>, Option<Durable>), AppError> {
        match self.policy {
            InFlightPolicy::Every => {
                let (done, durable) = oneshot::channel();
                let queue = self.send(Entry {
                    record: RunRecord::Started(run.clone()),
                    done: Some(done),
                })?;
                Ok((queue, Some(durable)))
            }
            InFlightPolicy::FewerThan(cores) if before < cores => {
                let queue = self.queue()?;
                let durable = self.start_apart(run, &queue);
                Ok((queue, Some(durable)))
            }
            InFlightPolicy::FewerThan(_) | InFlightPolicy::Never => Ok((self.queue()?, None)),
        }
    }

    /// Commits `run`'s in-flight record on the caller's runtime, in a task of its own
    /// (through the journal when that cannot be done now); says when it is durable.
    fn start_apart(&self, run: &InFlight, queue: &mpsc::Sender<Message>) -> Durable {
        let (done, durable) = oneshot::channel();
        let (registry, queue, run) = (Arc::clone(&self.registry), queue.clone(), run.clone());
        let through_journal = move |run, done| {
            let record = RunRecord::Started(run);
            // Dropped with `done` if the journal is gone: the call's end says so.
            let _ = queue.send(Message::Record(Entry {
                record,
                done: Some(done),
            }));
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    match registry.record_start_now(&run).await {
                        Some(started) => {
                            let _ = done.send(started.map_err(AppError::from));
                        }
                        None => through_journal(run, done),
                    }
                });
            }
            Err(_) => through_journal(run, done),
        }
        durable
    }
}

/// A call the journal recorded as started: [`Running::end`] records its end. Dropped
/// before that (its request dropped while it ran), it records the call as cancelled.
pub(super) struct Running {
    registry: Arc<Registry>,
    flushes: Arc<Flushes>,
    /// The journal's count of calls running, this one's included until it is dropped.
    running: Arc<AtomicUsize>,
    queue: mpsc::Sender<Message>,
    /// The call.
    run: InFlight,
    /// Whether it has an in-flight record.
    recorded: bool,
    /// Whether that record is committed apart from the journal's queue
    /// ([`Journal::start_apart`]): its end must wait for it even when nobody does.
    apart: bool,
    started: Instant,
    /// Says when the start is durable; taken by [`Running::end`].
    durable: Option<Durable>,
    /// Whether [`Running::end`] took over.
    ended: bool,
}

impl Running {
    /// The record of the call's end with `event`.
    fn end_record(&self, event: AuditEvent) -> RunRecord {
        RunRecord::Ended {
            tenant: self.run.tenant.clone(),
            run: self.recorded.then(|| self.run.id.clone()),
            event: Box::new(event),
        }
    }

    /// Records the call's end with `event` (every call that started ends with one:
    /// `run`, `run_cancelled` or `run_failed`); returns once that is committed and the
    /// call's start is durable.
    pub(super) async fn end(mut self, event: AuditEvent) -> Result<(), AppError> {
        self.ended = true;
        let stopped =
            || AppError::Task("the audit journal stopped before the call was recorded".into());
        // Long committed, as a rule: the guest ran meanwhile.
        let started = match self.durable.take() {
            Some(durable) => durable.await.map_err(|_| stopped()).and_then(|r| r),
            None => Ok(()),
        };
        // A start that failed is the call's error even if its event went in: the call
        // was not on disk while it ran.
        let run = self.recorded.then_some(&self.run.id);
        if let Some(ended) = self.registry.try_record_end(&self.run.tenant, run, &event) {
            if ended.is_ok() && self.recorded {
                // Committed without waiting for the disk.
                self.flushes.ended(&self.queue);
            }
            return started.and(ended.map_err(AppError::from));
        }
        // Alone on the node, a call has nothing to share a commit with: no reason to
        // go through the journal's thread.
        let alone = self.running.load(Ordering::Acquire) == 1;
        if (self.recorded || alone)
            && let Some(ended) = self
                .registry
                .record_end_now(&self.run.tenant, run, &event)
                .await
        {
            if ended.is_ok() && self.recorded {
                self.flushes.ended(&self.queue);
            }
            return started.and(ended.map_err(AppError::from));
        }
        // Somebody is writing, or other calls run: the thread commits it with whatever
        // else is waiting.
        let (done, committed) = oneshot::channel();
        self.queue
            .send(Message::Record(Entry {
                record: self.end_record(event),
                done: Some(done),
            }))
            .map_err(|_| AppError::Task("the audit journal has stopped".into()))?;
        let ended = committed.await.map_err(|_| stopped()).and_then(|r| r);
        started.and(ended)
    }

    /// The call's end is recorded by whoever took its event (a run's end): nothing is
    /// written here, and nothing when this is dropped.
    pub(super) fn hand_over(mut self) {
        self.ended = true;
    }

    /// Records the call as cancelled (its guest stopped now); returns as [`Running::end`].
    pub(super) async fn cancel(self) -> Result<(), AppError> {
        let event = self.cancelled();
        self.end(event).await
    }

    /// Records that the host could not run the call to an outcome (`failure`: what
    /// failed, as [`crate::sandbox::SandboxError::category`] names it); returns as
    /// [`Running::end`].
    pub(super) async fn fail(self, failure: &str) -> Result<(), AppError> {
        let event = AuditEvent::RunFailed {
            tool: self.run.tool.clone(),
            version: self.run.version.clone(),
            key_hint: self.run.key_hint.clone(),
            failure: failure.to_owned(),
            wall_time_us: self.elapsed_us(),
        };
        self.end(event).await
    }

    /// The call's `run_cancelled` event, stopped now.
    fn cancelled(&self) -> AuditEvent {
        AuditEvent::RunCancelled {
            tool: self.run.tool.clone(),
            version: self.run.version.clone(),
            key_hint: self.run.key_hint.clone(),
            wall_time_us: self.elapsed_us(),
        }
    }

    /// How long the call has run, in microseconds.
    fn elapsed_us(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
        if self.ended {
            return;
        }
        let entry = Entry {
            record: self.end_record(self.cancelled()),
            done: None,
        };
        // Nobody waits for it (the queue keeps it behind its start, or a task waits for
        // a start made apart); if the journal is gone, the record stays in flight and
        // becomes `run_interrupted`.
        if self.apart
            && let Some(durable) = self.durable.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let queue = self.queue.clone();
            runtime.spawn(async move {
                let _ = durable.await;
                let _ = queue.send(Message::Record(entry));
            });
            return;
        }
        let _ = self.queue.send(Message::Record(entry));
    }
}

#[cfg(test)]
mod tests;
