//! A call's place at the cores ([`Seat`]): the core its guest holds while it runs, given
//! back at a slice's end while others wait and during a host call's wait; and what a
//! guest needs of any seat, in this process or a worker's ([`CoreSeat`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{Core, Cores, ShareKey};

/// One call's place at the cores: the core its guest holds while it runs, if any.
/// Shared between the call, the slices of its run and its host calls.
pub struct Seat {
    cores: Cores,
    key: ShareKey,
    core: Mutex<Option<Core>>,
    /// When the seat was given the core it holds.
    granted: Mutex<Option<std::time::Instant>>,
}

impl Seat {
    /// A seat for a call on `key`'s share, holding no core yet.
    pub fn new(cores: &Cores, key: ShareKey) -> Seat {
        Seat {
            cores: cores.clone(),
            key,
            core: Mutex::new(None),
            granted: Mutex::new(None),
        }
    }

    /// Waits for a core in the key's turn, unless the seat holds one. Cancel-safe: a
    /// wait dropped leaves the queue.
    pub async fn acquire(&self) {
        if self.holds_core() {
            return;
        }
        let core = self.cores.acquire(&self.key).await;
        self.hold(core);
    }

    /// Gives the seat's core back, if it holds one.
    pub fn release(&self) {
        let core = self.slot().take();
        drop(core);
    }

    /// At a slice's end with calls waiting: queues for a core again and gives this one back
    /// (see [`Cores::requeue`]); the future waits for the new one.
    pub fn yield_core(self: &Arc<Self>) -> impl Future<Output = ()> + Send + 'static {
        let core = self.slot().take();
        let waiting = core.map(|core| self.cores.requeue(core));
        let seat = Arc::clone(self);
        async move {
            let core = match waiting {
                Some(waiting) => waiting.await,
                None => seat.cores.acquire(&seat.key).await,
            };
            seat.hold(core);
        }
    }

    /// Whether any call waits for a core, so a running guest should give its own back.
    pub fn contended(&self) -> bool {
        self.cores.waiting() > 0
    }

    /// Whether the seat holds a core.
    pub fn holds_core(&self) -> bool {
        self.slot().is_some()
    }

    /// Awaits `wait` (a host call waiting on something other than the CPU) without a
    /// core, then waits for one again before the guest resumes.
    pub async fn without_core<F: Future>(&self, wait: F) -> F::Output {
        self.release();
        let out = wait.await;
        self.acquire().await;
        out
    }

    fn hold(&self, core: Core) {
        *self.slot() = Some(core);
        *self.granted.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(std::time::Instant::now());
    }

    /// How long the seat has held its core (zero when it holds none).
    pub fn held_for(&self) -> std::time::Duration {
        if !self.holds_core() {
            return std::time::Duration::ZERO;
        }
        self.granted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map_or(std::time::Duration::ZERO, |at| at.elapsed())
    }

    fn slot(&self) -> MutexGuard<'_, Option<Core>> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Seat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Seat")
            .field("key", &self.key)
            .field("holds_core", &self.holds_core())
            .finish_non_exhaustive()
    }
}

/// A boxed future, as the seat trait's methods return.
pub type SeatFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What a running guest needs of its place at the cores. [`Seat`] is the seat of a call
/// run in this process; a worker process's seat asks the server's seat over its
/// channel (`crate::worker`), so every guest, wherever it runs, shares the same cores.
pub trait CoreSeat: Send + Sync + 'static {
    /// Waits for a core, unless the seat holds one.
    fn acquire(&self) -> SeatFuture<'_>;
    /// Gives the seat's core back, if it holds one.
    fn release(&self);
    /// The guest has stopped for good: gives the core back. A worker's seat leaves that
    /// to its server, which frees the core when the call's answer arrives (one message
    /// fewer per call).
    fn finish(&self) {
        self.release();
    }
    /// Whether the guest should offer its core at a slice's end
    /// ([`CoreSeat::yield_core`]).
    fn contended(&self) -> bool;
    /// How long the guest has held its current core (zero while it holds none). A
    /// guest offers its core only once it has held it a whole slice: a slice that ends
    /// just after a wait for a core must not give the core straight back.
    fn held_for(&self) -> std::time::Duration;
    /// Gives the core to the call whose turn it is and waits for one again.
    fn yield_core(self: Arc<Self>) -> SeatFuture<'static>;
}

impl CoreSeat for Seat {
    fn acquire(&self) -> SeatFuture<'_> {
        Box::pin(Seat::acquire(self))
    }

    fn release(&self) {
        Seat::release(self);
    }

    fn contended(&self) -> bool {
        Seat::contended(self)
    }

    fn held_for(&self) -> std::time::Duration {
        Seat::held_for(self)
    }

    fn yield_core(self: Arc<Self>) -> SeatFuture<'static> {
        Box::pin(Seat::yield_core(&self))
    }
}

/// Awaits the future `wait` makes (a host call waiting on something other than the
/// CPU) without a core, then waits for one again; for a call that has no seat (a warm
/// state being prepared), it is simply awaited. The future is made once the core is
/// given back: a worker's door asks its server while it makes its future.
pub async fn without_core<F: Future>(
    seat: Option<&dyn CoreSeat>,
    wait: impl FnOnce() -> F,
) -> F::Output {
    match seat {
        Some(seat) => {
            seat.release();
            let out = wait().await;
            seat.acquire().await;
            out
        }
        None => wait().await,
    }
}
