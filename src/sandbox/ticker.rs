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

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use wasmtime::Engine;

use super::SandboxError;

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
}

/// Advances the engine's epoch every [`TICK`] while any instance runs, until dropped.
#[derive(Debug)]
pub(super) struct Ticker {
    shared: Arc<Shared>,
}

/// Keeps the ticker ticking while alive: held around every run of guest code.
pub(super) struct Ticking<'a>(&'a Shared);

impl Drop for Ticking<'_> {
    fn drop(&mut self) {
        let mut busy = self.0.busy.lock().unwrap_or_else(PoisonError::into_inner);
        *busy -= 1;
        if *busy == 0 {
            self.0.set(Duration::ZERO, Duration::ZERO);
        }
    }
}

impl Ticker {
    pub(super) fn start(engine: Engine) -> Result<Ticker, SandboxError> {
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
    pub(super) fn ticking(&self) -> Ticking<'_> {
        let mut busy = self
            .shared
            .busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *busy == 0 {
            self.shared.set(TICK, TICK);
        }
        *busy += 1;
        Ticking(&self.shared)
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
