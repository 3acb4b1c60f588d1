//! One call in a worker, as the server serves it: the call sent, then the worker's
//! questions (cores, door frames) answered until its result, or its death turned into
//! the call's result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::key::WorkerKey;
use super::pool::{GRACE, Pool};
use super::process::Worker;
use super::wire::{CallId, Expect, ToServer, ToWorker, WireError, said};
use crate::events::Events;
use crate::outbound::{CallSecrets, Exchange, PrivateNetwork};
use crate::outcome::{CallResult, Start, Status, ToolError};
use crate::sandbox::cores::Seat;
use crate::sandbox::{CoreSeat, Job, SandboxError, ShareKey, WarmState};

/// How long after the call's deadline the server still waits for an outbound answer: the
/// worker's own deadline passes first, so the call ends as `timeout` there.
const DOOR_MARGIN: Duration = Duration::from_millis(100);

/// Sends the call and serves the worker's questions until its answer: `Ok(Ok)` the
/// result, `Ok(Err)` the worker's reason it could not run the call, `Err` a worker that
/// broke the protocol or died.
pub(super) async fn converse(
    worker: &mut Worker,
    run: &ToWorker,
    exchange: &Exchange,
    seat: &Arc<Seat>,
    deadline: Instant,
    expect: &Expect,
) -> Result<Result<CallResult, String>, WireError> {
    worker.send(run, &[]).await?;
    loop {
        let frame = worker.receive(expect).await?;
        let payload = &frame.payload;
        match frame.message {
            ToServer::Acquire => {
                // By the deadline at the latest: the guest then stops at its next slice's end.
                let _ = tokio::time::timeout_at(deadline.into(), seat.acquire()).await;
                worker.send(&ToWorker::Go, &[]).await?;
            }
            ToServer::Release => CoreSeat::release(&**seat),
            ToServer::Tick => {
                if seat.contended() {
                    let _ = tokio::time::timeout_at(deadline.into(), Arc::clone(seat).yield_core())
                        .await;
                }
                worker.send(&ToWorker::Go, &[]).await?;
            }
            ToServer::Door { len } => {
                let answer = if len > exchange.max_frame() || payload.len() as u64 != len {
                    exchange.oversized(len)
                } else {
                    exchange.answer(payload).await
                };
                worker.send(&ToWorker::DoorAnswer, &answer).await?;
            }
            ToServer::Done { result } => return Ok(result),
            other => {
                return Err(WireError::Io(std::io::Error::other(format!(
                    "unexpected message during a call: {other:?}"
                ))));
            }
        }
    }
}

/// Checks the figures a worker reports against what its call can have used: fuel within
/// the call's budget, memory within its cap, wall time within what the server itself
/// measured from sending the call. A worker that reports more is lying (its tool broke
/// out of WebAssembly): its figures must not reach the audit trail or the tenant's
/// usage.
pub(super) fn check_figures(
    result: &CallResult,
    limits: &crate::limits::Limits,
    measured: std::time::Duration,
) -> Result<(), String> {
    if result.fuel_used > limits.fuel {
        return Err(format!(
            "it reported {} fuel used, above the call's budget of {}",
            result.fuel_used, limits.fuel
        ));
    }
    if result.peak_memory_bytes > limits.memory.as_u64() {
        return Err(format!(
            "it reported a peak memory of {} bytes, above the call's cap of {}",
            result.peak_memory_bytes, limits.memory
        ));
    }
    if result.wall_time > measured {
        return Err(format!(
            "it reported a wall time of {:?}, longer than the {measured:?} the server saw",
            result.wall_time
        ));
    }
    Ok(())
}

/// The result of a call whose worker died under it.
/// (`warm`: it was sent to start from a warm state.)
pub(super) fn crashed(why: &str, started: Instant, warm: bool) -> CallResult {
    let message = format!("the worker process running the call died: {why}");
    let error = ToolError {
        kind: "WorkerCrashed".into(),
        message: message.clone(),
        traceback: String::new(),
        deliberate: false,
    };
    ended(Status::Crashed, message, Some(error), started, warm)
}

/// The result of a call whose worker did not answer by the deadline (and was killed).
pub(super) fn timed_out(started: Instant, warm: bool) -> CallResult {
    let message = "the call did not finish within its deadline".to_owned();
    ended(Status::Timeout, message, None, started, warm)
}

fn ended(
    status: Status,
    message: String,
    error: Option<ToolError>,
    started: Instant,
    warm: bool,
) -> CallResult {
    CallResult {
        status,
        value: None,
        truncated: None,
        content: Vec::new(),
        error,
        message: Some(message),
        stdout: String::new(),
        stderr: String::new(),
        fuel_used: crate::limits::Fuel(0),
        wall_time: started.elapsed(),
        peak_memory_bytes: 0,
        requests: Vec::new(),
        start: if warm { Start::Warm } else { Start::Cold },
    }
}

impl Pool {
    /// Runs `job` in a worker of `share`'s (started, or taken from the idle ones),
    /// serving its questions until its answer; a worker that breaks the protocol or
    /// outlives the deadline is ended and the call says why.
    pub(super) async fn call(
        self: &Arc<Self>,
        job: Job,
        secrets: CallSecrets,
        warm: Option<WarmState>,
        private: PrivateNetwork,
        share: ShareKey,
        events: Option<Arc<Events>>,
    ) -> Result<CallResult, SandboxError> {
        let key = WorkerKey::of(&share, &job.tool_dir, job.packages.as_deref(), Some(&job));
        let limits = job.limits;
        let _slot = self.slots.acquire().await;
        let started = Instant::now();
        let deadline = started + job.limits.deadline;
        let exchange = Exchange::new(
            &job.grants,
            secrets,
            &job.limits,
            private,
            Arc::clone(&self.clients),
            deadline + DOOR_MARGIN,
            events,
        );
        let seat = Arc::new(Seat::new(&self.cores, share));
        let mut worker = self.checkout(&key).await?;
        // The call is sent holding a core (by its deadline at the latest: the guest
        // then stops at its first slice's end), which saves the worker asking for one.
        let _ = tokio::time::timeout_at(deadline.into(), seat.acquire()).await;
        let budget = deadline.saturating_duration_since(Instant::now());
        // An evicted state is not sent: the call runs cold and says so, and its caller
        // prepares the state again.
        let warm = warm.filter(|state| self.warm.present(state));
        if let Some(state) = warm.as_ref().filter(|state| self.warm.touch_due(state)) {
            // Off the async runtime (file work for a worker never stalls the server),
            // and only when a write is due: at most once a minute per state.
            let (store, state) = (self.warm.clone(), state.clone());
            drop(tokio::task::spawn_blocking(move || store.mark_used(&state)));
        }
        let sent_warm = warm.as_ref().map(|s| s.key().to_owned());
        let run = ToWorker::Run {
            job: Box::new(job),
            warm,
            budget_us: u64::try_from(budget.as_micros()).unwrap_or(u64::MAX),
        };
        worker.call = CallId::draw();
        let expect = Expect::call(worker.call, &limits);
        let sent = Instant::now();
        let conversed = tokio::time::timeout_at(
            (deadline + GRACE).into(),
            converse(&mut worker, &run, &exchange, &seat, deadline, &expect),
        )
        .await;
        seat.release();
        let conversed = match conversed {
            Ok(Ok(Ok(result))) => match check_figures(&result, &limits, sent.elapsed()) {
                Ok(()) => Ok(Ok(Ok(result))),
                Err(lie) => Ok(Err(super::wire::WireError::Io(std::io::Error::other(lie)))),
            },
            other => other,
        };
        let mut result = match conversed {
            Ok(Ok(Ok(result))) => {
                self.give_back(key, worker);
                if let Some(state) = &sent_warm
                    && result.start == Start::Cold
                {
                    // The worker could not use the state (evicted, corrupt, another
                    // snapshot's) and ran the call cold: it is prepared again.
                    if let Err(e) = self.warm.remove(state) {
                        tracing::warn!("cannot remove the refused warm state {state}: {e}");
                    }
                }
                result
            }
            Ok(Ok(Err(reason))) => {
                self.give_back(key, worker);
                return Err(SandboxError::Harness(said(&reason)));
            }
            Ok(Err(e)) => {
                let why = worker.end().await;
                tracing::warn!("a worker failed its call: {e}; {why}");
                crashed(&why, started, sent_warm.is_some())
            }
            Err(_) => {
                let _ = worker.end().await;
                timed_out(started, sent_warm.is_some())
            }
        };
        result.requests = exchange.records();
        Ok(result)
    }
}
