//! A guest's run, cut into slices of fuel: every [`SLICE_FUEL`] it spends, the guest
//! stops and hands control back to the executor, and [`sliced`] looks at the clock and
//! at the cores before letting it go on. That is what stops it at its deadline, gives
//! its core to a waiting call, and keeps one busy guest from starving the executor's
//! other tasks.
//!
//! The fuel is metered anyway (a call's CPU budget), so a slice's end costs one check
//! the compiled code already makes. An earlier design interrupted guests by epoch: a
//! ticker thread advanced the engine's epoch every half millisecond and the compiled
//! code checked it at every loop head and function entry besides the fuel, which cost a
//! matplotlib chart 18 % of its wall time and the trivial call ~3 % (measured in
//! docs/performance.md). A host call that waits (a sleep, an outbound request) is
//! stopped at the deadline by the host's timer around the call, as before.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::limits::Fuel;
use crate::sandbox::cores::CoreSeat;
use crate::sandbox::guest::DeadlineHit;

/// Fuel a guest spends between two looks at the clock and the cores: about a third of
/// a millisecond of interpreter work (a matplotlib chart spends ~7 units a
/// nanosecond), so the deadline's resolution. One wasm instruction costs one unit; one
/// that runs long by itself (a `memory.fill` of many megabytes) is not cut.
pub const SLICE_FUEL: Fuel = Fuel(2_000_000);

/// How long a guest keeps a core that other calls wait for: at the first slice's end
/// after holding it this long, it offers it ([`CoreSeat::yield_core`]).
pub const SLICE: Duration = Duration::from_micros(500);

/// Why a slice ended without the guest's run ending.
enum Stop<'s, T> {
    Ended(wasmtime::Result<T>),
    Deadline,
    /// Offer this seat's core.
    OfferCore(&'s Arc<dyn CoreSeat>),
}

/// Runs `run` (a guest's turn, on a store that yields every [`SLICE_FUEL`]) to its end,
/// or until `deadline` has passed at a slice's end ([`DeadlineHit`]); while other calls
/// wait for a core, a guest that has held `seat`'s core a whole [`SLICE`] gives it to
/// the call whose turn it is and waits for one again before it goes on.
pub(in crate::sandbox) async fn sliced<T>(
    run: impl Future<Output = wasmtime::Result<T>>,
    deadline: Instant,
    seat: Option<&Arc<dyn CoreSeat>>,
) -> wasmtime::Result<T> {
    let mut run = pin!(run);
    loop {
        let stop = poll_fn(|cx| match run.as_mut().poll(cx) {
            Poll::Ready(ended) => Poll::Ready(Stop::Ended(ended)),
            // The guest yielded at a slice's end (it has woken its task already), or
            // waits in a host call.
            Poll::Pending if Instant::now() >= deadline => Poll::Ready(Stop::Deadline),
            // A seat holds no core while its guest waits in a host call
            // (`without_core`): only a running guest offers one.
            Poll::Pending => match seat {
                Some(seat) if seat.contended() && seat.held_for() >= SLICE => {
                    Poll::Ready(Stop::OfferCore(seat))
                }
                _ => Poll::Pending,
            },
        })
        .await;
        match stop {
            Stop::Ended(ended) => return ended,
            Stop::Deadline => return Err(wasmtime::Error::new(DeadlineHit)),
            Stop::OfferCore(seat) => Arc::clone(seat).yield_core().await,
        }
    }
}
