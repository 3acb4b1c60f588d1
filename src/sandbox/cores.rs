//! Fair shares of the host's cores: tenants share CPU, not calls.
//!
//! A guest runs WebAssembly only while it holds a [`Core`], one of the [`Cores`]' run
//! tokens (as many as the host has cores, by default). Calls waiting for a core queue
//! under their [`ShareKey`] (the tenant, in `warden serve`), first in, first out within
//! a key. When a core comes free and several keys wait, it goes to the waiting key that
//! was given the fewest cores so far, the longest waiting of those: round-robin while
//! the keys are served alike, however many calls each has waiting. A key counts from
//! the moment it has a call holding or waiting for a core, starting level with the
//! least served key then active, so an idle key banks no credit.
//!
//! A guest gives its core back after each slice of its run (half a millisecond held,
//! checked every slice of fuel: the sandbox's `slices`, with [`Seat::contended`] and
//! [`Seat::yield_core`]) while any call waits for one, queuing for the next one first,
//! so with three keys busy on two cores each holds a core two slices in three, whether
//! it has one call in flight or sixteen. Rotating by turns
//! alone would not do: a key with one call, holding a core when the others are served,
//! would miss its turns and get less. A guest waiting in a host call (a sleep, an
//! outbound request) gives its core back for the wait ([`Seat::without_core`]).
//! Uncontended, a call takes a core once and keeps it to its end: a slice's end then
//! costs one atomic load.
//!
//! A waiter dropped before it is served (a cancelled or timed-out call) leaves its
//! queue; one dropped after being served but before it ran passes its core on, so no
//! core is ever lost. This module knows nothing of wasmtime: it is a fair semaphore.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

/// Whose share of the cores a call runs on: the tenant in `warden serve`; one key for
/// every call of the CLI ([`ShareKey::default`]). Opaque to the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShareKey(Arc<str>);

impl ShareKey {
    /// The key named `name`.
    pub fn new(name: &str) -> ShareKey {
        ShareKey(Arc::from(name))
    }
}

/// The host's own key: calls made on no tenant's behalf (the CLI, installs).
impl Default for ShareKey {
    fn default() -> ShareKey {
        ShareKey::new("")
    }
}

impl fmt::Display for ShareKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The default number of cores: the host's available parallelism (1 if unknown).
pub fn host_cores() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

/// The run tokens and the queues of the calls waiting for one. Cheap to clone: clones
/// share the tokens.
#[derive(Clone)]
pub struct Cores {
    shared: Arc<Shared>,
}

struct Shared {
    size: NonZeroUsize,
    /// Waiters not yet served, mirrored from [`State::waiting`] so that a running guest
    /// can tell at each slice's end, without the lock, whether to give its core back.
    waiting: AtomicUsize,
    state: Mutex<State>,
}

struct State {
    /// Cores no one holds (always 0 while anyone waits).
    free: usize,
    /// Waiters not yet served (the sum of the keys' queues).
    waiting: usize,
    /// The keys with calls holding or waiting for a core; a key with neither is
    /// forgotten.
    keys: HashMap<ShareKey, Share>,
    /// The keys with waiters, longest waiting first: the order among keys served as
    /// often.
    turns: VecDeque<ShareKey>,
    /// Every waiter not yet gone, served or not.
    waiters: HashMap<u64, Waiter>,
    next_id: u64,
}

/// One key's calls at the cores.
#[derive(Default)]
struct Share {
    /// Its waiters, first come first.
    queue: VecDeque<u64>,
    /// Cores its calls hold (or that are set aside for its waiters).
    held: usize,
    /// Cores it was given while active: the next core goes to the waiting key given
    /// the fewest. A key joining starts level with the least served active key.
    served: u64,
}

struct Waiter {
    /// Served: a core is set aside for it, to be taken when it is polled.
    served: bool,
    /// Whom to wake when served; `None` until first polled.
    waker: Option<Waker>,
}

impl Cores {
    /// `size` cores, all free.
    pub fn new(size: NonZeroUsize) -> Cores {
        Cores {
            shared: Arc::new(Shared {
                size,
                waiting: AtomicUsize::new(0),
                state: Mutex::new(State {
                    free: size.get(),
                    waiting: 0,
                    keys: HashMap::new(),
                    turns: VecDeque::new(),
                    waiters: HashMap::new(),
                    next_id: 0,
                }),
            }),
        }
    }

    /// How many cores there are.
    pub fn size(&self) -> NonZeroUsize {
        self.shared.size
    }

    /// Waits for a core in `key`'s turn. Dropping the future gives up the wait, and the
    /// core too if it was served meanwhile.
    pub fn acquire(&self, key: &ShareKey) -> Acquire {
        Acquire {
            shared: Arc::clone(&self.shared),
            key: key.clone(),
            id: None,
        }
    }

    /// Gives `core` back to the next call in turn, its own key's new waiter queued
    /// first: what a running guest does at a slice's end when others wait. Queuing first keeps
    /// the key's count of cores served, so the key is not taken for a newcomer.
    pub fn requeue(&self, core: Core) -> Acquire {
        let key = core.key.clone();
        let id = self.shared.update(|state| {
            let id = state.enqueue(&key, None);
            (id, None)
        });
        // Dropping the core serves the next in turn, possibly this key's new waiter.
        drop(core);
        Acquire {
            shared: Arc::clone(&self.shared),
            key,
            id: Some(id),
        }
    }

    /// How many calls wait for a core.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Relaxed)
    }

    /// How many cores are taken: held, or set aside for a waiter just served. Never
    /// more than [`Cores::size`].
    pub fn busy(&self) -> usize {
        self.shared
            .size
            .get()
            .saturating_sub(self.shared.lock().free)
    }
}

impl fmt::Debug for Cores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cores")
            .field("size", &self.shared.size)
            .field("waiting", &self.waiting())
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `change` on the state, then wakes whoever it served, outside the lock.
    fn update<R>(&self, change: impl FnOnce(&mut State) -> (R, Option<Waker>)) -> R {
        let mut state = self.lock();
        let (result, served) = change(&mut state);
        self.waiting.store(state.waiting, Ordering::Relaxed);
        drop(state);
        if let Some(waker) = served {
            waker.wake();
        }
        result
    }
}

impl State {
    /// `key`'s share, created level with the least served active key.
    fn share(&mut self, key: &ShareKey) -> &mut Share {
        if !self.keys.contains_key(key) {
            let least = self.keys.values().map(|s| s.served).min().unwrap_or(0);
            self.keys.insert(
                key.clone(),
                Share {
                    served: least,
                    ..Share::default()
                },
            );
        }
        self.keys.entry(key.clone()).or_default()
    }

    /// Forgets `key` if it neither holds nor waits for a core.
    fn forget_if_idle(&mut self, key: &ShareKey) {
        if self
            .keys
            .get(key)
            .is_some_and(|s| s.held == 0 && s.queue.is_empty())
        {
            self.keys.remove(key);
        }
    }

    /// Takes a free core for `key`, if one is free and no one waits (no one does while
    /// a core is free): a newcomer never passes a waiter.
    fn take_free(&mut self, key: &ShareKey) -> bool {
        if self.free == 0 || !self.turns.is_empty() {
            return false;
        }
        self.free -= 1;
        let share = self.share(key);
        share.held += 1;
        share.served += 1;
        true
    }

    /// `key` gives a core back: it goes to the first waiter of the waiting key served
    /// the fewest cores (the longest waiting of those), or is free if no one waits.
    /// Returns the waker of the waiter served.
    fn give_back(&mut self, key: &ShareKey) -> Option<Waker> {
        if let Some(share) = self.keys.get_mut(key) {
            share.held = share.held.saturating_sub(1);
        }
        self.forget_if_idle(key);
        loop {
            let next = self
                .turns
                .iter()
                .enumerate()
                .min_by_key(|(at, k)| (self.keys.get(*k).map_or(0, |s| s.served), *at))
                .map(|(at, _)| at);
            let Some(key) = next.and_then(|at| self.turns.remove(at)) else {
                self.free += 1;
                return None;
            };
            let share = self.share(&key);
            let Some(id) = share.queue.pop_front() else {
                continue;
            };
            share.held += 1;
            share.served += 1;
            if !share.queue.is_empty() {
                self.turns.push_back(key);
            }
            self.waiting = self.waiting.saturating_sub(1);
            if let Some(waiter) = self.waiters.get_mut(&id) {
                waiter.served = true;
                return waiter.waker.take();
            }
        }
    }

    /// Queues a new waiter behind `key`'s others, and `key` behind the other waiting
    /// keys if it had no one waiting.
    fn enqueue(&mut self, key: &ShareKey, waker: Option<&Waker>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.waiters.insert(
            id,
            Waiter {
                served: false,
                waker: waker.cloned(),
            },
        );
        let share = self.share(key);
        let first = share.queue.is_empty();
        share.queue.push_back(id);
        if first {
            self.turns.push_back(key.clone());
        }
        self.waiting += 1;
        id
    }

    /// Takes a waiter not yet served out of its queue, and its key out of the turns if
    /// it was the key's last.
    fn leave(&mut self, key: &ShareKey, id: u64) {
        let Some(share) = self.keys.get_mut(key) else {
            return;
        };
        let before = share.queue.len();
        share.queue.retain(|&other| other != id);
        if share.queue.len() < before {
            self.waiting = self.waiting.saturating_sub(1);
        }
        if share.queue.is_empty() {
            self.turns.retain(|other| other != key);
        }
        self.forget_if_idle(key);
    }
}

/// The future of [`Cores::acquire`].
pub struct Acquire {
    shared: Arc<Shared>,
    key: ShareKey,
    /// Its place in the queues, once it waits.
    id: Option<u64>,
}

impl Future for Acquire {
    type Output = Core;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Core> {
        let this = self.get_mut();
        let shared = Arc::clone(&this.shared);
        let ready = shared.update(|state| {
            let Some(id) = this.id else {
                if state.take_free(&this.key) {
                    return (true, None);
                }
                this.id = Some(state.enqueue(&this.key, Some(cx.waker())));
                return (false, None);
            };
            match state.waiters.get_mut(&id) {
                Some(waiter) if waiter.served => {
                    state.waiters.remove(&id);
                    this.id = None;
                    (true, None)
                }
                Some(waiter) => {
                    if !waiter
                        .waker
                        .as_ref()
                        .is_some_and(|w| w.will_wake(cx.waker()))
                    {
                        waiter.waker = Some(cx.waker().clone());
                    }
                    (false, None)
                }
                // Never happens: only this future removes its waiter. Queue again
                // rather than wait for nothing.
                None => {
                    this.id = Some(state.enqueue(&this.key, Some(cx.waker())));
                    (false, None)
                }
            }
        });
        if ready {
            Poll::Ready(Core {
                shared: Arc::clone(&this.shared),
                key: this.key.clone(),
            })
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let key = &self.key;
        self.shared.update(|state| match state.waiters.remove(&id) {
            // Served but never taken: the core goes to the next in turn.
            Some(waiter) if waiter.served => ((), state.give_back(key)),
            Some(_) => {
                state.leave(key, id);
                ((), None)
            }
            None => ((), None),
        });
    }
}

/// One core, held by a call of its key: its guest may run. Dropping it gives it back
/// to the next waiter in turn.
pub struct Core {
    shared: Arc<Shared>,
    key: ShareKey,
}

impl Drop for Core {
    fn drop(&mut self) {
        let key = &self.key;
        self.shared.update(|state| ((), state.give_back(key)));
    }
}

impl fmt::Debug for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Core").field("key", &self.key).finish()
    }
}

mod seat;

pub use seat::{CoreSeat, Seat, SeatFuture, without_core};

#[cfg(test)]
mod tests;
