//! Making durable, within [`FLUSH_AFTER`], the ends calls commit themselves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;

use super::{FLUSH_AFTER, Message};

/// Makes each end a call committed itself ([`Running::end`]), which does not wait for
/// the disk, durable within about [`FLUSH_AFTER`], with no wake-up of the journal's
/// thread per call: the thread counts the durable commits it begins; a call that
/// committed its end notes the count it saw afterwards, and the first such call
/// schedules a check [`FLUSH_AFTER`] later, which asks for a flush only if no durable
/// commit has begun since. (A durable commit that begins after a call read the count
/// takes the database after that call's commit, so it makes it durable too.)
///
/// [`Running::end`]: super::Running::end
#[derive(Debug)]
pub(super) struct Flushes {
    /// Durable commits the thread has begun, from 1.
    begun: AtomicU64,
    /// The highest `begun` a call read after committing its own end.
    ended_at: AtomicU64,
    /// A check is scheduled.
    scheduled: AtomicBool,
}

impl Flushes {
    pub(super) fn new() -> Flushes {
        Flushes {
            begun: AtomicU64::new(1),
            ended_at: AtomicU64::new(0),
            scheduled: AtomicBool::new(false),
        }
    }

    /// The thread is about to begin a durable commit.
    pub(super) fn begin_durable(&self) {
        self.begun.fetch_add(1, Ordering::SeqCst);
    }

    /// A call committed its own end without waiting for the disk: schedules the check
    /// (on `queue`, the thread's) unless one is scheduled. Outside a tokio runtime (not
    /// Warden's way of ending a call) the check is done at once: a flush sooner than
    /// needed.
    pub(super) fn ended(self: &Arc<Self>, queue: &mpsc::Sender<Message>) {
        if !self.note_end() {
            return;
        }
        let check = Check {
            flushes: Arc::clone(self),
            queue: queue.clone(),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(FLUSH_AFTER).await;
                drop(check);
            });
        }
    }

    /// Notes a call's end: whether it is to schedule the check.
    fn note_end(&self) -> bool {
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
    pub(super) fn pending(&self) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_committed_by_its_call_is_flushed_unless_a_durable_commit_began_after_it() {
        let flushes = Flushes::new();
        assert!(!flushes.pending(), "nothing committed yet");
        // The first end schedules the check; the next ones do not.
        assert!(flushes.note_end());
        assert!(!flushes.note_end());
        // A durable commit that began after them covers them.
        flushes.begin_durable();
        assert!(!flushes.check());
        // An end after that durable commit began is not covered by it.
        assert!(
            flushes.note_end(),
            "the check was done: the next end schedules one"
        );
        assert!(flushes.check());
        // The flush the check asked for is a durable commit: nothing is pending after it.
        flushes.begin_durable();
        assert!(!flushes.pending());
        // Ends on both sides of a durable commit's beginning: the later one decides.
        assert!(flushes.note_end());
        flushes.begin_durable();
        assert!(!flushes.note_end(), "the check is still scheduled");
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
        assert!(flushes.note_end());
        drop(check());
        assert!(matches!(messages.try_recv(), Ok(Message::Flush)));
        assert!(
            flushes.note_end(),
            "a check done lets the next end schedule one"
        );
        flushes.begin_durable();
        drop(check());
        assert!(
            messages.try_recv().is_err(),
            "the durable commit covered the end"
        );
    }
}
