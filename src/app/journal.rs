//! The calls' records, committed in groups by one thread.
//!
//! On SQLite with commits that wait for the disk, a call is recorded twice
//! ([`crate::registry`]'s `runs`): when it starts, its in-flight record, committed
//! durably while the guest runs; when it ends, its audit event (and the in-flight
//! record's removal), committed without waiting for the disk. Its answer waits for
//! both, so an answered call is on disk whatever happens next: in the trail with its
//! outcome, or in flight and later recorded as `run_interrupted`. Elsewhere a call's
//! event is committed once it ends, before its answer ([`records_in_flight`] says why).
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
//! [`Flushes`] has the thread make it durable within [`FLUSH_AFTER`].
//!
//! A batch that fails is retried record by record, so one record's error (its tenant
//! deleted meanwhile, say) is that record's caller's alone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::AppError;
use crate::registry::{AuditEvent, Dialect, Durability, InFlight, Registry, RunRecord};

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

/// What the journal's thread is handed.
enum Message {
    Record(Entry),
    /// Calls committed their own ends without waiting for the disk, and [`Flushes`]
    /// says no durable commit has covered them: flush now.
    Flush,
}

/// Makes each end a call committed itself ([`Running::end`]), which does not wait for
/// the disk, durable within about [`FLUSH_AFTER`], with no wake-up of the journal's
/// thread per call: the thread counts the durable commits it begins; a call that
/// committed its end notes the count it saw afterwards, and the first such call
/// schedules a check [`FLUSH_AFTER`] later, which asks for a flush only if no durable
/// commit has begun since. (A durable commit that begins after a call read the count
/// takes the database after that call's commit, so it makes it durable too.)
#[derive(Debug)]
struct Flushes {
    /// Durable commits the thread has begun, from 1.
    begun: AtomicU64,
    /// The highest `begun` a call read after committing its own end.
    ended_at: AtomicU64,
    /// A check is scheduled.
    scheduled: AtomicBool,
}

impl Flushes {
    fn new() -> Flushes {
        Flushes {
            begun: AtomicU64::new(1),
            ended_at: AtomicU64::new(0),
            scheduled: AtomicBool::new(false),
        }
    }

    /// The thread is about to begin a durable commit.
    fn begin_durable(&self) {
        self.begun.fetch_add(1, Ordering::SeqCst);
    }

    /// A call committed its own end: whether it is to schedule the check.
    fn ended(&self) -> bool {
        self.ended_at
            .fetch_max(self.begun.load(Ordering::SeqCst), Ordering::SeqCst);
        !self.scheduled.swap(true, Ordering::SeqCst)
    }

    /// The scheduled check: whether a flush is needed (the next end schedules another
    /// check).
    fn check(&self) -> bool {
        self.scheduled.store(false, Ordering::SeqCst);
        self.pending()
    }

    /// Whether an end a call committed may not be durable yet.
    fn pending(&self) -> bool {
        self.ended_at.load(Ordering::SeqCst) >= self.begun.load(Ordering::SeqCst)
    }
}

/// A scheduled check of [`Flushes`]: done when dropped (at its time, or early if its
/// task is dropped with its runtime).
struct Check {
    flushes: Arc<Flushes>,
    queue: mpsc::Sender<Message>,
}

impl Drop for Check {
    fn drop(&mut self) {
        if self.flushes.check() {
            // If the thread is gone, it flushed when it ended.
            let _ = self.queue.send(Message::Flush);
        }
    }
}

/// The journal: its thread runs from its creation until this is dropped.
#[derive(Debug)]
pub(super) struct Journal {
    registry: Arc<Registry>,
    queue: Mutex<Option<mpsc::Sender<Message>>>,
    flushes: Arc<Flushes>,
    /// Whether calls are recorded in flight (see [`records_in_flight`]).
    in_flight: bool,
}

impl Journal {
    /// A journal over `registry`, its thread started (it records the calls a stopped
    /// node left in flight at once).
    pub(super) fn new(registry: Arc<Registry>) -> Journal {
        let journal = Journal {
            in_flight: records_in_flight(&registry),
            registry,
            queue: Mutex::new(None),
            flushes: Arc::new(Flushes::new()),
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
        let (registry, in_flight) = (Arc::clone(&self.registry), self.in_flight);
        let flushes = Arc::clone(&self.flushes);
        thread::Builder::new()
            .name("warden-audit".into())
            .spawn(move || write_batches(&registry, &entries, in_flight, &flushes))
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

    /// Records that `run` starts (its record is committed durably meanwhile); what
    /// it returns records its end.
    pub(super) fn start(&self, run: InFlight) -> Result<Running, AppError> {
        let (queue, durable) = if self.in_flight {
            let (done, durable) = oneshot::channel();
            let queue = self.send(Entry {
                record: RunRecord::Started(run.clone()),
                done: Some(done),
            })?;
            (queue, Some(durable))
        } else {
            (self.queue()?, None)
        };
        Ok(Running {
            registry: Arc::clone(&self.registry),
            flushes: Arc::clone(&self.flushes),
            queue,
            recorded: durable.is_some(),
            run,
            started: Instant::now(),
            durable,
            ended: false,
        })
    }
}

/// A call the journal recorded as started: [`Running::end`] records its end. Dropped
/// before that (its request dropped while it ran), it records the call as cancelled.
pub(super) struct Running {
    registry: Arc<Registry>,
    flushes: Arc<Flushes>,
    queue: mpsc::Sender<Message>,
    /// The call.
    run: InFlight,
    /// Whether it has an in-flight record.
    recorded: bool,
    started: Instant,
    /// Says when the start is durable; taken by [`Running::end`].
    durable: Option<oneshot::Receiver<Result<(), AppError>>>,
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
        let record = self.end_record(event);
        if let Some(ended) = self.registry.try_record_ends(std::slice::from_ref(&record)) {
            if ended.is_ok() && self.recorded {
                self.flush_soon();
            }
            return started.and(ended.map_err(AppError::from));
        }
        // Somebody is writing: the thread commits it with whatever else is waiting.
        let (done, committed) = oneshot::channel();
        self.queue
            .send(Message::Record(Entry {
                record,
                done: Some(done),
            }))
            .map_err(|_| AppError::Task("the audit journal has stopped".into()))?;
        let ended = committed.await.map_err(|_| stopped()).and_then(|r| r);
        started.and(ended)
    }

    /// After the call committed its own end without waiting for the disk: makes sure
    /// it is durable within [`FLUSH_AFTER`] (see [`Flushes`]).
    fn flush_soon(&self) {
        if !self.flushes.ended() {
            return;
        }
        let check = Check {
            flushes: Arc::clone(&self.flushes),
            queue: self.queue.clone(),
        };
        // Outside a tokio runtime (not Warden's way of calling this), the check is done
        // now: a flush sooner than needed.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(FLUSH_AFTER).await;
                drop(check);
            });
        }
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
        if self.ended {
            return;
        }
        let entry = Entry {
            record: self.end_record(self.cancelled()),
            done: None,
        };
        // Nobody waits for it (the queue keeps it behind its start); if the journal is
        // gone, the record stays in flight and becomes `run_interrupted`.
        let _ = self.queue.send(Message::Record(entry));
    }
}

/// The journal's thread: waits for a record, takes every other one already waiting,
/// commits them together and answers their callers; flushes and sweeps when due. Ends
/// when every sender is gone.
/// `in_flight`: whether calls are recorded in flight, whose ends then commit without
/// waiting for the disk and need a flush.
fn write_batches(
    registry: &Registry,
    messages: &mpsc::Receiver<Message>,
    in_flight: bool,
    flushes: &Flushes,
) {
    // When commits that did not wait for the disk are to be flushed, if any are.
    let mut flush_at: Option<Instant> = None;
    let mut next_sweep = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next_sweep {
            sweep(registry);
            next_sweep = now + SWEEP_EVERY;
        }
        if flush_at.is_some_and(|at| at <= now) {
            flushes.begin_durable();
            flush(registry);
            flush_at = None;
            continue;
        }
        let wake = flush_at.map_or(next_sweep, |at| at.min(next_sweep));
        let first = match messages.recv_timeout(wake.saturating_duration_since(now)) {
            Ok(message) => message,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(message) = next {
            match message {
                Message::Record(entry) => batch.push(entry),
                Message::Flush => flush_at = Some(Instant::now()),
            }
            next = (batch.len() < MAX_BATCH)
                .then(|| messages.try_recv().ok())
                .flatten();
        }
        // Starts in one durable commit, ends in one that does not wait for the disk (on
        // PostgreSQL, one statement on the tenant's chain head).
        let (starts, ends): (Vec<Entry>, Vec<Entry>) = batch
            .into_iter()
            .partition(|e| matches!(e.record, RunRecord::Started(_)));
        // Starts first (a call's end never precedes its start in the queue).
        if !starts.is_empty() {
            flushes.begin_durable();
        }
        let started = commit(registry, starts);
        let ended = commit(registry, ends);
        if started {
            // A durable commit makes every earlier commit durable too (a flush asked
            // for above among them: it was asked for before this commit began).
            flush_at = None;
        }
        if ended && in_flight {
            flush_at = flush_at.or(Some(Instant::now() + FLUSH_AFTER));
        }
    }
    if flush_at.is_some() || flushes.pending() {
        flushes.begin_durable();
        flush(registry);
    }
}

/// Whether calls are recorded in flight on `registry`: on SQLite with commits that
/// wait for the disk. (With commits that do not, there is no flush to hide behind the
/// call. On PostgreSQL the record took a second statement per call, which cost more of
/// a node's throughput, 15 %, than it saved of a call's latency: there a call's event
/// is committed durably before its answer, in one statement.)
fn records_in_flight(registry: &Registry) -> bool {
    registry.dialect() == Dialect::Sqlite
        && !matches!(registry.durability(), Ok(Durability::Relaxed))
}

/// Commits `entries` together and answers their callers; a batch that fails is retried
/// entry by entry. Whether any was committed.
fn commit(registry: &Registry, entries: Vec<Entry>) -> bool {
    if entries.is_empty() {
        return false;
    }
    let (records, waiters): (Vec<RunRecord>, Vec<_>) =
        entries.into_iter().map(|e| (e.record, e.done)).unzip();
    match registry.record_runs(&records) {
        Ok(()) => {
            for done in waiters.into_iter().flatten() {
                let _ = done.send(Ok(()));
            }
            true
        }
        Err(e) if records.len() == 1 => {
            if let Some(done) = waiters.into_iter().next().flatten() {
                let _ = done.send(Err(AppError::from(e)));
            }
            false
        }
        Err(_) => {
            let mut any = false;
            for (record, done) in records.iter().zip(waiters) {
                let stored = registry.record_runs(std::slice::from_ref(record));
                any |= stored.is_ok();
                if let Some(done) = done {
                    let _ = done.send(stored.map_err(AppError::from));
                }
            }
            any
        }
    }
}

/// Makes the commits that did not wait for the disk durable.
fn flush(registry: &Registry) {
    if let Err(e) = registry.flush() {
        tracing::warn!("cannot flush the calls' audit events (the next commit will): {e}");
    }
}

/// Records the calls a stopped node left in flight.
fn sweep(registry: &Registry) {
    match registry.record_interrupted_runs(crate::registry::now_ms()) {
        Ok(records) if !records.is_empty() => tracing::warn!(
            calls = records.len(),
            "calls left in flight by a node that stopped recorded as run_interrupted"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot look for calls left in flight: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::VersionId;
    use crate::registry::{AuditRecord, ChainCheck, ToolId};
    use crate::tenant::TenantId;
    use crate::tenant::TenantPolicy;

    fn cancelled(n: u64) -> AuditEvent {
        AuditEvent::RunCancelled {
            tool: ToolId::generate(),
            version: VersionId::generate(),
            key_hint: None,
            wall_time_us: n,
        }
    }

    fn starting(tenant: &TenantId) -> InFlight {
        InFlight::starting(
            tenant.clone(),
            ToolId::generate(),
            VersionId::generate(),
            None,
            Duration::from_secs(1),
        )
    }

    /// A registry in memory with one tenant, `name`.
    fn with_tenant(name: &str) -> (Arc<Registry>, crate::registry::Tenant) {
        let registry = Arc::new(Registry::open_in_memory().unwrap());
        let (tenant, _) = registry
            .create_tenant(name, &TenantPolicy::default())
            .unwrap();
        (registry, tenant)
    }

    /// Waits up to 5 s for `done` (the journal's thread commits meanwhile).
    async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "{what} never happened");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The one call event `tenant`'s trail gets, once it is there (`what` names it).
    async fn the_one_run(registry: &Registry, tenant: &TenantId, what: &str) -> AuditEvent {
        eventually(what, || !runs(registry, tenant).is_empty()).await;
        let mut recorded = runs(registry, tenant);
        assert_eq!(recorded.len(), 1);
        recorded.remove(0).event
    }

    fn runs(registry: &Registry, tenant: &TenantId) -> Vec<AuditRecord> {
        let page = registry.audit(tenant, None, 500).unwrap();
        page.items
            .into_iter()
            .filter(|r| r.event.kind().starts_with("run"))
            .collect()
    }

    #[test]
    fn an_end_committed_by_its_call_is_flushed_unless_a_durable_commit_began_after_it() {
        let flushes = Flushes::new();
        assert!(!flushes.pending(), "nothing committed yet");
        // The first end schedules the check; the next ones do not.
        assert!(flushes.ended());
        assert!(!flushes.ended());
        // A durable commit that began after them covers them.
        flushes.begin_durable();
        assert!(!flushes.check());
        // An end after that durable commit began is not covered by it.
        assert!(
            flushes.ended(),
            "the check was done: the next end schedules one"
        );
        assert!(flushes.check());
        // The flush the check asked for is a durable commit: nothing is pending after it.
        flushes.begin_durable();
        assert!(!flushes.pending());
        // Ends on both sides of a durable commit's beginning: the later one decides.
        assert!(flushes.ended());
        flushes.begin_durable();
        assert!(!flushes.ended(), "the check is still scheduled");
        assert!(flushes.check());
    }

    #[test]
    fn a_check_asks_the_thread_for_a_flush_only_when_one_is_needed() {
        let flushes = Arc::new(Flushes::new());
        let (queue, messages) = mpsc::channel();
        let check = || Check {
            flushes: Arc::clone(&flushes),
            queue: queue.clone(),
        };
        assert!(flushes.ended());
        drop(check());
        assert!(matches!(messages.try_recv(), Ok(Message::Flush)));
        assert!(
            flushes.ended(),
            "a check done lets the next end schedule one"
        );
        flushes.begin_durable();
        drop(check());
        assert!(
            messages.try_recv().is_err(),
            "the durable commit covered the end"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_calls_are_all_recorded_and_leave_nothing_in_flight() {
        let (registry, a) = with_tenant("a");
        let (b, _) = registry
            .create_tenant("b", &TenantPolicy::default())
            .unwrap();
        let journal = Arc::new(Journal::new(Arc::clone(&registry)));
        let mut tasks = Vec::new();
        for n in 0..200u64 {
            let tenant = if n % 2 == 0 { &a.id } else { &b.id };
            let running = journal.start(starting(tenant)).unwrap();
            tasks.push(tokio::spawn(async move { running.end(cancelled(n)).await }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        for tenant in [&a.id, &b.id] {
            assert_eq!(runs(&registry, tenant).len(), 100);
            assert!(registry.runs_in_flight(tenant).unwrap().is_empty());
            assert!(matches!(
                registry.verify_chain(tenant).unwrap(),
                ChainCheck::Intact { .. }
            ));
        }
    }

    #[tokio::test]
    async fn a_call_is_in_flight_until_its_end_replaces_the_record_with_its_event() {
        let (registry, a) = with_tenant("a");
        let journal = Journal::new(Arc::clone(&registry));
        let run = starting(&a.id);
        let running = journal.start(run.clone()).unwrap();
        eventually("the start's record", || {
            !registry.runs_in_flight(&a.id).unwrap().is_empty()
        })
        .await;
        assert_eq!(registry.runs_in_flight(&a.id).unwrap(), vec![run]);
        assert!(runs(&registry, &a.id).is_empty());
        running.end(cancelled(7)).await.unwrap();
        assert!(registry.runs_in_flight(&a.id).unwrap().is_empty());
        let recorded = runs(&registry, &a.id);
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].event.kind(), "run_cancelled");
    }

    #[test]
    fn a_call_ended_outside_a_tokio_runtime_is_recorded() {
        let (registry, a) = with_tenant("a");
        let journal = Journal::new(Arc::clone(&registry));
        let running = journal.start(starting(&a.id)).unwrap();
        futures_executor::block_on(running.end(cancelled(3))).unwrap();
        assert_eq!(runs(&registry, &a.id).len(), 1);
        assert!(registry.runs_in_flight(&a.id).unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_call_dropped_while_it_runs_is_recorded_as_cancelled() {
        let (registry, a) = with_tenant("a");
        let journal = Journal::new(Arc::clone(&registry));
        let run = starting(&a.id);
        drop(journal.start(run.clone()).unwrap());
        let event = the_one_run(&registry, &a.id, "the cancelled call's record").await;
        assert!(
            matches!(&event, AuditEvent::RunCancelled { tool, version, .. }
                if *tool == run.tool && *version == run.version),
            "{event:?}"
        );
        assert!(registry.runs_in_flight(&a.id).unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_call_a_stopped_node_left_in_flight_is_recorded_as_interrupted_at_start() {
        let (registry, a) = with_tenant("a");
        // A call started by a node that died an hour ago, and one that may still run.
        let mut stale = starting(&a.id);
        stale.started_at_ms -= 3_600_000;
        stale.expires_at_ms -= 3_600_000;
        let running = starting(&a.id);
        registry
            .record_runs(&[
                RunRecord::Started(stale.clone()),
                RunRecord::Started(running.clone()),
            ])
            .unwrap();
        let _journal = Journal::new(Arc::clone(&registry));
        let event = the_one_run(&registry, &a.id, "the stale call's record").await;
        assert!(
            matches!(&event, AuditEvent::RunInterrupted { tool, started_at_ms, .. }
                if *tool == stale.tool && *started_at_ms == stale.started_at_ms),
            "{event:?}"
        );
        assert_eq!(registry.runs_in_flight(&a.id).unwrap(), vec![running]);
    }

    #[tokio::test]
    async fn a_call_of_a_tenant_that_does_not_exist_fails_alone() {
        let (registry, a) = with_tenant("a");
        let journal = Journal::new(Arc::clone(&registry));
        let ghost = TenantId::generate();
        let good = journal.start(starting(&a.id)).unwrap();
        let bad = journal.start(starting(&ghost)).unwrap();
        let (good, bad) = tokio::join!(good.end(cancelled(1)), bad.end(cancelled(2)));
        assert!(good.is_ok(), "{good:?}");
        assert!(matches!(bad, Err(AppError::Registry(_))), "{bad:?}");
        assert_eq!(runs(&registry, &a.id).len(), 1);
    }
}
