//! The epoch ticker: advances the engine's epoch every [`TICK`] while any guest code
//! runs, which drives every call's deadline and its turns at a shared core.
//!
//! The ticker's thread waits on a timer (a `timerfd`) that runs only while a call does:
//! the call that makes the sandbox busy arms it, the last one to finish disarms it, both
//! from their own thread without waking the ticker's. So a call shorter than a tick
//! wakes no other thread at all, and an idle sandbox (a pool of idle worker processes)
//! none either. (An earlier ticker was woken at each call's start and slept a tick
//! before parking again: two wake-ups of another thread per short call, which on a
//! virtual machine cost a worker process about a tenth of its calls per second.)
//!
//! A call waiting for a core, or without one in a host call (a sleep, an outbound
//! request), runs no guest code either, so it stops counting for the wait
//! ([`Ticking::pace`]). In a worker process, which runs one call at a time, the timer is
//! then disarmed. Before, fourteen workers waiting for two cores each woke its ticker
//! every tick: about 28,000 wake-ups a second (43,000 context switches a second on the
//! machine, 9,000-10,000 after) that took the cores from the calls holding them. The
//! fairness test's third tenant, whose fair share makes it 1.5 times slower than alone,
//! ran 2.6-6.0 times slower over twelve rounds, and 1.5-2.3 times after (2026-11-28).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use wasmtime::Engine;

use crate::sandbox::SandboxError;
use crate::sandbox::cores::{CoreSeat, SeatFuture};

/// How often the engine's epoch advances: the deadline's resolution and the longest a
/// guest runs without yielding to the executor.
pub const TICK: Duration = Duration::from_micros(500);

/// What the ticker's thread and the calls share.
#[derive(Debug)]
struct Shared {
    /// Expires every [`TICK`] while armed.
    timer: OwnedFd,
    /// How many runs of guest code are under way; the timer is armed exactly while this
    /// is not zero (changed and (dis)armed under the lock, so the two never disagree).
    busy: Mutex<usize>,
    stop: AtomicBool,
}

impl Shared {
    /// Arms the timer to expire after `first`, then every `every` (zero: once), or
    /// disarms it (`first` zero).
    fn set(&self, first: Duration, every: Duration) {
        let spec = |d: Duration| Timespec {
            tv_sec: d.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: d.subsec_nanos().into(),
        };
        let setting = Itimerspec {
            it_interval: spec(every),
            it_value: spec(first),
        };
        // Fails only for an invalid descriptor or setting, which this one never is.
        if let Err(e) = timerfd_settime(&self.timer, TimerfdTimerFlags::empty(), &setting) {
            tracing::error!("cannot set the epoch ticker's timer: {e}");
        }
    }

    /// A run of guest code starts (or resumes): the first one arms the timer, whose
    /// first tick comes [`TICK`] later.
    fn enter(&self) {
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        if *busy == 0 {
            self.set(TICK, TICK);
        }
        *busy += 1;
    }

    /// A run of guest code ends (or waits): the last one disarms the timer.
    fn leave(&self) {
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        *busy -= 1;
        if *busy == 0 {
            self.set(Duration::ZERO, Duration::ZERO);
        }
    }
}

/// Advances the engine's epoch every [`TICK`] while any instance runs, until dropped.
#[derive(Debug)]
pub(in crate::sandbox) struct Ticker {
    shared: Arc<Shared>,
}

/// Keeps the ticker ticking while alive: held around every run of guest code.
pub(in crate::sandbox) struct Ticking(Arc<Run>);

/// One run of guest code as the ticker counts it: counted from its start to its end,
/// except while it waits for a core or on something else ([`Waiting`]).
struct Run {
    ticks: Arc<Shared>,
    state: Mutex<RunState>,
}

#[derive(Default)]
struct RunState {
    /// Waits under way (a wait for a core inside a wait on a sleep counts once).
    waits: usize,
    /// The run is over: its count is gone, whatever a wait's guard does later (a wait's
    /// future may outlive the run in the store the caller drops).
    ended: bool,
}

impl Run {
    fn lock(&self) -> MutexGuard<'_, RunState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Ticking {
    /// `seat`, made to stop this run's count while it waits for a core or on a host
    /// call without one: the seat to give the run's store.
    pub(in crate::sandbox) fn pace(&self, seat: Arc<dyn CoreSeat>) -> Arc<dyn CoreSeat> {
        Arc::new(Paced {
            seat,
            run: Arc::clone(&self.0),
        })
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.ended = true;
        if state.waits == 0 {
            self.0.ticks.leave();
        }
    }
}

/// A seat whose waits do not count as guest code running.
struct Paced {
    seat: Arc<dyn CoreSeat>,
    run: Arc<Run>,
}

/// Holds a run's count off while alive: kept across one wait.
struct Waiting(Arc<Run>);

impl Waiting {
    fn new(run: &Arc<Run>) -> Waiting {
        let mut state = run.lock();
        if state.waits == 0 && !state.ended {
            run.ticks.leave();
        }
        state.waits += 1;
        Waiting(Arc::clone(run))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.waits -= 1;
        if state.waits == 0 && !state.ended {
            self.0.ticks.enter();
        }
    }
}

impl Paced {
    /// The wait `start` begins, with the run's count held off from before it begins
    /// (a worker's seat waits before it returns its future) to its end.
    fn wait<'a>(&self, start: impl FnOnce() -> SeatFuture<'a>) -> SeatFuture<'a> {
        let waiting = Waiting::new(&self.run);
        let wait = start();
        Box::pin(async move {
            wait.await;
            drop(waiting);
        })
    }
}

impl CoreSeat for Paced {
    fn acquire(&self) -> SeatFuture<'_> {
        self.wait(|| self.seat.acquire())
    }

    fn release(&self) {
        self.seat.release();
    }

    fn finish(&self) {
        self.seat.finish();
    }

    fn contended(&self) -> bool {
        self.seat.contended()
    }

    fn held_for(&self) -> Duration {
        self.seat.held_for()
    }

    fn yield_core(self: Arc<Self>) -> SeatFuture<'static> {
        self.wait(|| Arc::clone(&self.seat).yield_core())
    }

    fn idle(&self) -> Option<Box<dyn Send>> {
        Some(Box::new(Waiting::new(&self.run)))
    }
}

impl Ticker {
    pub(in crate::sandbox) fn start(engine: Engine) -> Result<Ticker, SandboxError> {
        let failed = |source| SandboxError::Start {
            what: "epoch ticker",
            source,
        };
        let timer = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::CLOEXEC)
            .map_err(|e| failed(e.into()))?;
        let shared = Arc::new(Shared {
            timer,
            busy: Mutex::new(0),
            stop: AtomicBool::new(false),
        });
        let ours = Arc::clone(&shared);
        thread::Builder::new()
            .name("warden-epoch".into())
            .spawn(move || {
                let mut expirations = [0u8; 8];
                loop {
                    // Blocks until the timer expires (never while it is disarmed).
                    let read = rustix::io::read(&ours.timer, &mut expirations);
                    if ours.stop.load(Ordering::Acquire) {
                        return;
                    }
                    match read {
                        Ok(_) => engine.increment_epoch(),
                        Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                        Err(e) => {
                            tracing::error!("the epoch ticker stopped: {e}");
                            return;
                        }
                    }
                }
            })
            .map_err(failed)?;
        Ok(Ticker { shared })
    }

    /// Ticks until the returned guard is dropped; the first tick comes [`TICK`] after
    /// the sandbox became busy.
    pub(in crate::sandbox) fn ticking(&self) -> Ticking {
        self.shared.enter();
        Ticking(Arc::new(Run {
            ticks: Arc::clone(&self.shared),
            state: Mutex::default(),
        }))
    }
}

impl Drop for Ticker {
    /// Stops the thread: the timer expires at once, and the thread sees why.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.set(Duration::from_nanos(1), Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::cores::{Cores, Seat, ShareKey};
    use std::num::NonZeroUsize;

    fn armed(ticker: &Ticker) -> bool {
        let setting = rustix::time::timerfd_gettime(&ticker.shared.timer).unwrap();
        setting.it_value.tv_sec != 0 || setting.it_value.tv_nsec != 0
    }

    #[test]
    fn the_timer_runs_exactly_while_guest_code_does() {
        let ticker = Ticker::start(Engine::default()).unwrap();
        assert!(!armed(&ticker), "an idle sandbox's timer is disarmed");
        let first = ticker.ticking();
        assert!(armed(&ticker));
        let second = ticker.ticking();
        drop(first);
        assert!(armed(&ticker), "a call still runs");
        // Expirations while busy leave the timer armed (it is periodic).
        thread::sleep(3 * TICK);
        assert!(armed(&ticker));
        drop(second);
        assert!(!armed(&ticker), "the last call ended");
        let again = ticker.ticking();
        assert!(armed(&ticker));
        drop(again);
    }

    #[tokio::test]
    async fn a_run_waiting_for_a_core_does_not_keep_the_timer_armed() {
        let ticker = Ticker::start(Engine::default()).unwrap();
        let cores = Cores::new(NonZeroUsize::MIN);
        let holder = Seat::new(&cores, ShareKey::new("holder"));
        holder.acquire().await;
        let ticking = ticker.ticking();
        let seat = ticking.pace(Arc::new(Seat::new(&cores, ShareKey::new("waiter"))));
        assert!(armed(&ticker));

        let mut acquiring = seat.acquire();
        assert!(futures_util::poll!(&mut acquiring).is_pending());
        assert!(!armed(&ticker), "the only run waits for a core");
        holder.release();
        acquiring.await;
        assert!(armed(&ticker), "the run has its core");

        // A sleep (without a core) with the wait for a core after it: one wait.
        let idle = seat.idle();
        seat.release();
        assert!(!armed(&ticker));
        seat.acquire().await;
        assert!(!armed(&ticker), "the sleep's wait is not over");
        drop(idle);
        assert!(armed(&ticker));

        let yielded = Arc::clone(&seat).yield_core();
        assert!(!armed(&ticker), "a worker's seat waits before its future");
        yielded.await;
        assert!(armed(&ticker));
        drop(ticking);
        assert!(!armed(&ticker), "the run ended");
    }

    #[tokio::test]
    async fn a_wait_outliving_its_run_leaves_the_count_alone() {
        let ticker = Ticker::start(Engine::default()).unwrap();
        let cores = Cores::new(NonZeroUsize::MIN);
        let ticking = ticker.ticking();
        let seat = ticking.pace(Arc::new(Seat::new(&cores, ShareKey::default())));
        let idle = seat.idle();
        // The run timed out in its sleep: it ends, and its wait's guard goes later with
        // the store.
        drop(ticking);
        drop(idle);
        assert!(!armed(&ticker), "the timer of an ended run stays disarmed");
        let next = ticker.ticking();
        assert!(armed(&ticker));
        drop(next);
        assert!(!armed(&ticker), "the next run's count is its own");
    }

    #[test]
    fn dropping_the_ticker_ends_its_thread() {
        let ticker = Ticker::start(Engine::default()).unwrap();
        let shared = Arc::downgrade(&ticker.shared);
        drop(ticker);
        // The thread holds the other reference until it returns.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while shared.upgrade().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the thread never ended"
            );
            thread::sleep(Duration::from_millis(1));
        }
    }
}
