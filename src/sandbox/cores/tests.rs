//! The scheduler's order and bookkeeping, polled by hand where the order matters.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::*;

fn cores(n: usize) -> Cores {
    Cores::new(NonZeroUsize::new(n).unwrap())
}

fn key(name: &str) -> ShareKey {
    ShareKey::new(name)
}

/// Polls once, with a waker that does nothing.
fn poll(acquire: &mut Acquire) -> Option<Core> {
    match Pin::new(acquire).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(core) => Some(core),
        Poll::Pending => None,
    }
}

/// A waiter per name, queued in order; a name is its key's letter and the call's
/// rank in that key (`a2`: key `a`'s second call).
fn queue(cores: &Cores, names: &[&str]) -> Vec<(String, Acquire)> {
    names
        .iter()
        .map(|name| {
            let mut waiter = cores.acquire(&key(&name[..1]));
            assert!(poll(&mut waiter).is_none(), "{name} should wait");
            (name.to_string(), waiter)
        })
        .collect()
}

/// Which waiter was served (it takes its core); exactly one must have been.
fn served(waiting: &mut Vec<(String, Acquire)>) -> (String, Core) {
    let mut served = Vec::new();
    for (i, (_, waiter)) in waiting.iter_mut().enumerate() {
        if let Some(core) = poll(waiter) {
            served.push((i, core));
        }
    }
    assert_eq!(served.len(), 1, "one core comes back, one waiter is served");
    let (i, core) = served.remove(0);
    (waiting.remove(i).0, core)
}

/// Gives `core` back; which waiter got it.
fn next_served(core: Core, waiting: &mut Vec<(String, Acquire)>) -> (String, Core) {
    drop(core);
    served(waiting)
}

#[test]
fn free_cores_are_taken_at_once_and_never_more_than_there_are() {
    let cores = cores(2);
    let a = poll(&mut cores.acquire(&key("a"))).unwrap();
    let b = poll(&mut cores.acquire(&key("b"))).unwrap();
    let mut third = cores.acquire(&key("c"));
    assert!(poll(&mut third).is_none());
    assert_eq!((cores.busy(), cores.waiting()), (2, 1));
    drop(a);
    // The core went to the waiter, not back to the free ones.
    assert_eq!((cores.busy(), cores.waiting()), (2, 0));
    assert!(poll(&mut cores.acquire(&key("d"))).is_none());
    let c = poll(&mut third).unwrap();
    drop((b, c));
    assert_eq!((cores.busy(), cores.waiting()), (0, 0));
}

#[test]
fn keys_are_served_in_turn_and_each_key_first_come_first_served() {
    let cores = cores(1);
    let mut core = poll(&mut cores.acquire(&key("x"))).unwrap();
    let mut waiting = queue(&cores, &["a1", "a2", "a3", "a4", "b1", "b2", "c1"]);
    let mut order = Vec::new();
    while !waiting.is_empty() {
        let (name, next) = next_served(core, &mut waiting);
        order.push(name);
        core = next;
    }
    assert_eq!(order, ["a1", "b1", "c1", "a2", "b2", "a3", "a4"]);
}

#[test]
fn a_call_giving_its_core_back_at_a_tick_queues_behind_the_other_keys() {
    let cores = cores(1);
    let core = poll(&mut cores.acquire(&key("a"))).unwrap();
    let mut waiting = queue(&cores, &["b1", "c1"]);
    // `a`'s guest at a tick: queues again, and gives its core to the next in turn.
    let mut again = cores.requeue(core);
    assert!(poll(&mut again).is_none());
    waiting.push(("a1".into(), again));
    let (first, core) = served(&mut waiting);
    let (second, core) = next_served(core, &mut waiting);
    let (third, _core) = next_served(core, &mut waiting);
    assert_eq!([first, second, third], ["b1", "c1", "a1"]);
}

#[test]
fn alone_a_call_giving_its_core_back_at_a_tick_gets_it_again() {
    let cores = cores(1);
    let core = poll(&mut cores.acquire(&key("a"))).unwrap();
    assert!(poll(&mut cores.requeue(core)).is_some());
    assert_eq!((cores.busy(), cores.waiting()), (0, 0));
}

/// Two cores, ticks of a guest running on each, and keys `a` and `b` with many calls
/// and `c` with one: how many ticks in `ticks` a call of each key held a core.
fn ticks_held(ticks: usize) -> [usize; 3] {
    let cores = cores(2);
    let mut waiting: Vec<(String, Acquire)> = Vec::new();
    let mut running: Vec<(String, Core)> = Vec::new();
    for name in ["a0", "b0"] {
        running.push((
            name.into(),
            poll(&mut cores.acquire(&key(&name[..1]))).unwrap(),
        ));
    }
    waiting.extend(queue(&cores, &["a1", "a2", "a3", "b1", "b2", "b3", "c1"]));
    let mut held = [0; 3];
    for _ in 0..ticks {
        // Each running guest, in turn, queues again and gives its core back.
        for (name, core) in std::mem::take(&mut running) {
            let mut again = cores.requeue(core);
            match poll(&mut again) {
                Some(core) => running.push((name, core)),
                None => waiting.push((name, again)),
            }
            let mut i = 0;
            while i < waiting.len() {
                match poll(&mut waiting[i].1) {
                    Some(core) => running.push((waiting.remove(i).0, core)),
                    None => i += 1,
                }
            }
        }
        assert_eq!(running.len(), 2, "both cores run a guest");
        for (name, _) in &running {
            held[usize::from(name.as_bytes()[0] - b'a')] += 1;
        }
    }
    held
}

#[test]
fn three_busy_keys_on_two_cores_each_hold_one_two_ticks_in_three() {
    let held = ticks_held(300);
    // 200 ticks each; the key with one call gets its share too.
    for (key, ticks) in ["a", "b", "c"].iter().zip(held) {
        assert!(
            (190..=210).contains(&ticks),
            "{key}: {ticks} ticks of 300: {held:?}"
        );
    }
}

#[test]
fn a_waiter_dropped_before_its_turn_gives_back_nothing_and_holds_up_no_one() {
    let cores = cores(1);
    let core = poll(&mut cores.acquire(&key("x"))).unwrap();
    let mut waiting = queue(&cores, &["a1", "b1", "a2", "c1"]);
    // a1 is cancelled: a2 moves up in a's turn; b1 is cancelled: b has no turn.
    drop(waiting.remove(0));
    drop(waiting.remove(0));
    assert_eq!((cores.busy(), cores.waiting()), (1, 2));
    let (first, core) = next_served(core, &mut waiting);
    let (second, core) = next_served(core, &mut waiting);
    assert_eq!([first, second], ["a2", "c1"]);
    drop(core);
    assert_eq!((cores.busy(), cores.waiting()), (0, 0));
}

#[test]
fn a_waiter_dropped_once_served_passes_its_core_on() {
    let cores = cores(1);
    let core = poll(&mut cores.acquire(&key("x"))).unwrap();
    let mut waiting = queue(&cores, &["a1", "b1"]);
    // a1 is served, then dropped before it runs (its deadline passed meanwhile).
    drop(core);
    drop(waiting.remove(0));
    let (next, core) = served(&mut waiting);
    assert_eq!(next, "b1");
    assert_eq!(cores.busy(), 1);
    drop(core);
    assert_eq!((cores.busy(), cores.waiting()), (0, 0));
    // Nothing is left set aside: the core is free for the next call.
    assert!(poll(&mut cores.acquire(&key("a"))).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_churn_and_cancellation_no_core_is_lost_or_doubled() {
    const SIZE: usize = 3;
    let cores = cores(SIZE);
    let holding = Arc::new(AtomicUsize::new(0));
    let too_many = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..48)
        .map(|i| {
            let (cores, holding, too_many) =
                (cores.clone(), Arc::clone(&holding), Arc::clone(&too_many));
            tokio::spawn(async move {
                let key = key(["a", "b", "c", "d"][i % 4]);
                for round in 0..40 {
                    let acquire = cores.acquire(&key);
                    // Every third wait gives up early, as a call cancelled or out of
                    // time does, sometimes just after being served.
                    let core = if (i + round) % 3 == 0 {
                        match tokio::time::timeout(Duration::from_micros(200), acquire).await {
                            Ok(core) => core,
                            Err(_) => continue,
                        }
                    } else {
                        acquire.await
                    };
                    if holding.fetch_add(1, Ordering::SeqCst) >= SIZE {
                        too_many.store(true, Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    holding.fetch_sub(1, Ordering::SeqCst);
                    drop(core);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(!too_many.load(Ordering::SeqCst), "more holders than cores");
    assert_eq!((cores.busy(), cores.waiting()), (0, 0));
}

#[tokio::test]
async fn a_seat_waiting_in_a_host_call_lets_another_call_run() {
    let cores = cores(1);
    let sleeper = Seat::new(&cores, key("a"));
    let worker = Seat::new(&cores, key("b"));
    sleeper.acquire().await;
    sleeper.acquire().await;
    assert_eq!(cores.busy(), 1, "a seat holds one core at most");
    let (woken, wake) = tokio::sync::oneshot::channel::<()>();
    // The worker can only run, and end the sleep, if the sleeper gave its core up.
    let sleeping = sleeper.without_core(wake);
    let working = async {
        worker.acquire().await;
        worker.release();
        woken.send(()).unwrap();
    };
    let (slept, ()) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(sleeping, working)
    })
    .await
    .expect("the worker ran while the sleeper slept");
    slept.unwrap();
    assert!(sleeper.holds_core() && !worker.holds_core());
    sleeper.release();
    assert_eq!(cores.busy(), 0);
}
