//! The runs' writes, committed in groups by one thread.
//!
//! Each run writes three times (its acceptance, its start, its end). Made one by one on
//! the blocking pool, each was a thread woken and a transaction of its own; a node with
//! many runs spent about half its CPU on those wake-ups (measured with `perf`). Here one
//! thread takes every write waiting when it wakes (up to [`MAX_BATCH`]) and makes them in
//! one transaction ([`Registry::write_runs`]): N acceptances arriving together cost one
//! wait for the disk, and starts and ends ride along. A batch that fails is made again
//! write by write, so one write's error (its tenant deleted meanwhile, say) is its
//! caller's alone.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

use tokio::sync::oneshot;

use crate::app::AppError;
use crate::registry::{AsyncRun, Registry, RegistryError, RunWrite, RunWritten};

/// Most writes in one transaction.
const MAX_BATCH: usize = 128;

/// One write, and where its answer goes.
struct Pending {
    write: RunWrite,
    done: oneshot::Sender<Result<RunWritten, RegistryError>>,
}

/// The writer: its thread runs from the first write until this is dropped.
#[derive(Debug)]
pub(in crate::app) struct RunWriter {
    registry: Arc<Registry>,
    queue: Mutex<Option<mpsc::Sender<Pending>>>,
}

impl RunWriter {
    pub(in crate::app) fn new(registry: Arc<Registry>) -> RunWriter {
        RunWriter {
            registry,
            queue: Mutex::new(None),
        }
    }

    /// [`RunWrite::Accept`], with whatever else is waiting: the run as stored.
    pub(in crate::app) async fn accept(&self, write: RunWrite) -> Result<AsyncRun, AppError> {
        match self.write(write).await? {
            RunWritten::Accepted(run) => Ok(*run),
            _ => Err(answered_as_another()),
        }
    }

    /// [`RunWrite::Start`]: whether the run was still this node's to start.
    pub(in crate::app) async fn start(&self, write: RunWrite) -> Result<bool, AppError> {
        match self.write(write).await? {
            RunWritten::Started(started) => Ok(started),
            _ => Err(answered_as_another()),
        }
    }

    /// [`RunWrite::End`]: the run as it ended, `None` when it was not this node's.
    pub(in crate::app) async fn end(&self, write: RunWrite) -> Result<Option<AsyncRun>, AppError> {
        match self.write(write).await? {
            RunWritten::Ended(run) => Ok(run.map(|r| *r)),
            _ => Err(answered_as_another()),
        }
    }

    /// Makes `write` with whatever else is waiting; its answer.
    async fn write(&self, write: RunWrite) -> Result<RunWritten, AppError> {
        let (done, answer) = oneshot::channel();
        self.send(Pending { write, done })?;
        answer
            .await
            .map_err(|_| AppError::Task("the runs' writer stopped before the write".into()))?
            .map_err(AppError::from)
    }

    /// Hands `pending` to the thread, starting it (again, if it died) when needed.
    fn send(&self, pending: Pending) -> Result<(), AppError> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let pending = match queue.as_ref() {
            Some(running) => match running.send(pending) {
                Ok(()) => return Ok(()),
                // Its thread died (it panicked): another one takes over.
                Err(mpsc::SendError(pending)) => pending,
            },
            None => pending,
        };
        let (sender, writes) = mpsc::channel();
        let registry = Arc::clone(&self.registry);
        thread::Builder::new()
            .name("warden-runs".into())
            .spawn(move || write_batches(&registry, &writes))
            .map_err(|e| AppError::Task(format!("could not start the runs' writer: {e}")))?;
        sender
            .send(pending)
            .map_err(|_| AppError::Task("the runs' writer has stopped".into()))?;
        *queue = Some(sender);
        Ok(())
    }
}

/// The thread: every write waiting, in one transaction, until the writer is dropped.
fn write_batches(registry: &Registry, queue: &mpsc::Receiver<Pending>) {
    while let Ok(first) = queue.recv() {
        let (mut writes, mut dones) = (vec![first.write], vec![first.done]);
        while writes.len() < MAX_BATCH
            && let Ok(next) = queue.try_recv()
        {
            writes.push(next.write);
            dones.push(next.done);
        }
        match registry.write_runs(&writes) {
            Ok(answers) if answers.len() == dones.len() => {
                for (done, answer) in dones.into_iter().zip(answers) {
                    let _ = done.send(answer);
                }
            }
            // One by one: each write's own answer, its error included.
            _ => {
                for (write, done) in writes.iter().zip(dones) {
                    let _ = done.send(registry.write_run(write));
                }
            }
        }
    }
}

/// A write answered as another kind of write: a bug, said as one.
fn answered_as_another() -> AppError {
    AppError::Task("a run's write was answered as another kind of write".into())
}
