//! Waiting: `poll_oneoff` with a lone relative timer sleeps on the async runtime, within the call's deadline and without its core.

use super::*;

/// Shadows this file's WASI imports.
pub(super) fn add<T: Checked>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "poll_oneoff",
        |mut caller: Caller<'_, T>, (subs, events, count, ready): (i32, i32, i32, i32)| {
            Box::new(async move {
                // A poll waits on timers and descriptors, not on the CPU: the guest waits
                // without its core, and queues for one again before it resumes.
                let seat = caller.data().seat();
                let sleep = with_guest(&mut caller, async |_, _, mem| {
                    Ok(lone_relative_timer(mem, subs, count))
                })
                .await?;
                let Some((userdata, timeout)) = sleep else {
                    let poll = with_guest(&mut caller, async |ctx, _, mem| {
                        p1::poll_oneoff(ctx, mem, subs, events, count, ready).await
                    });
                    return cores::without_core(seat.as_deref(), || poll).await;
                };
                // Sleep here, outside the store, where the call's deadline can end it.
                cores::without_core(seat.as_deref(), || tokio::time::sleep(timeout)).await;
                with_guest(&mut caller, async |_, _, mem| {
                    let event = types::Event {
                        userdata,
                        error: Errno::Success,
                        type_: types::Eventtype::Clock,
                        fd_readwrite: types::EventFdReadwrite {
                            nbytes: 0,
                            flags: types::Eventrwflags::empty(),
                        },
                    };
                    mem.write(GuestPtr::<types::Event>::new(events as u32), event)?;
                    mem.write(GuestPtr::<u32>::new(ready as u32), 1)?;
                    Ok(0)
                })
                .await
            })
        },
    )?;
    Ok(())
}

/// The user data and duration of a `poll_oneoff` that waits on one relative timer and
/// nothing else; `None` for anything else.
fn lone_relative_timer(mem: &GuestMemory<'_>, subs: i32, count: i32) -> Option<(u64, Duration)> {
    if count != 1 {
        return None;
    }
    let sub = mem
        .read(GuestPtr::<types::Subscription>::new(subs as u32))
        .ok()?;
    let types::SubscriptionU::Clock(clock) = sub.u else {
        return None;
    };
    let relative = !clock
        .flags
        .contains(types::Subclockflags::SUBSCRIPTION_CLOCK_ABSTIME);
    let wall_or_monotonic = matches!(
        clock.id,
        types::Clockid::Monotonic | types::Clockid::Realtime
    );
    (relative && wall_or_monotonic).then(|| (sub.userdata, Duration::from_nanos(clock.timeout)))
}
