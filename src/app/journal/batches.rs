//! The journal's thread: the records calls hand it, committed in groups; the flushes
//! and sweeps that come due.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Instant;

use super::flushes::Flushes;
use super::{Entry, FLUSH_AFTER, MAX_BATCH, Message, SWEEP_EVERY};
use crate::app::AppError;
use crate::registry::{Durability, Registry, RunRecord};

/// The journal's thread: waits for a record, takes every other one already waiting,
/// commits them together and answers their callers; flushes and sweeps when due. Ends
/// when every sender is gone.
pub(super) fn write_batches(
    registry: &Registry,
    messages: &mpsc::Receiver<Message>,
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
        let waiting = std::iter::once(first).chain(std::iter::from_fn(|| messages.try_recv().ok()));
        for message in waiting {
            match message {
                Message::Record(entry) => batch.push(entry),
                Message::Flush => flush_at = Some(Instant::now()),
            }
            if batch.len() == MAX_BATCH {
                break;
            }
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
        // Ends of calls recorded in flight commit without waiting for the disk.
        let relaxed = !ends.is_empty()
            && ends
                .iter()
                .all(|e| matches!(e.record, RunRecord::Ended { run: Some(_), .. }));
        let started = commit(registry, starts);
        let ended = commit(registry, ends);
        if started {
            // A durable commit makes every earlier commit durable too (a flush asked
            // for above among them: it was asked for before this commit began).
            flush_at = None;
        }
        if ended && relaxed {
            flush_at = flush_at.or(Some(Instant::now() + FLUSH_AFTER));
        }
    }
    if flush_at.is_some() || flushes.pending() {
        flushes.begin_durable();
        flush(registry);
    }
}

/// Which calls get an in-flight record (committed durably while the guest runs, so
/// that their ends need not wait for the disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::app) enum InFlightPolicy {
    /// Every call: on SQLite with commits that wait for the disk.
    Every,
    /// A call that starts with fewer than this many others running on the node (its
    /// cores): on PostgreSQL with commits that wait for the disk. There the record is
    /// a statement of its own, which a node with a core to spare runs while the guest
    /// does; a busy node's ends share commits through the journal instead (measured,
    /// 2026-11-28: recording every call made a node with 8 connections 20 % slower).
    FewerThan(usize),
    /// None: with commits that do not wait for the disk there is no flush to hide.
    Never,
}

impl InFlightPolicy {
    /// The policy for `registry`, by its database and durability.
    pub(in crate::app) fn of(registry: &Registry) -> InFlightPolicy {
        if matches!(registry.durability(), Ok(Durability::Relaxed)) {
            return InFlightPolicy::Never;
        }
        if registry.shared() {
            InFlightPolicy::FewerThan(std::thread::available_parallelism().map_or(1, |n| n.get()))
        } else {
            InFlightPolicy::Every
        }
    }
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
