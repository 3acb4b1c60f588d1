//! One call in a worker, as the server serves it: the call sent, then the worker's
//! questions (cores, door frames) answered until its result, or its death turned into
//! the call's result.

use std::sync::Arc;
use std::time::Instant;

use super::process::Worker;
use super::wire::{Expect, ToServer, ToWorker, WireError};
use crate::outbound::Exchange;
use crate::outcome::{CallResult, Start, Status, ToolError};
use crate::sandbox::CoreSeat;
use crate::sandbox::cores::Seat;

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
