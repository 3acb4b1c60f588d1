//! The runtime's door for host functions, `host.call(ptr, len, out_ptr, out_len) -> i32`:
//! the guest passes a frame in its memory; the host answers with bytes it writes into
//! memory the guest's `host_alloc` gives it, and stores their address and length at
//! `out_ptr` and `out_len` (little-endian u32). Returns 0 when answered, -1 when no host
//! is bound (a warm state being prepared: no grants, so no requests), -2 on a fault.
//!
//! The only frames served are outbound HTTP requests ([`crate::outbound`]). Everything
//! that comes through the door is the tool's own, untrusted: bounds are checked before
//! memory is read, and a frame longer than the call could use is answered unread. While
//! the request is under way the guest holds no core ([`crate::sandbox::cores`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use wasmtime::{Caller, Extern, Linker};

use crate::outbound::Exchange;
use crate::sandbox::cores;
use crate::sandbox::guest::Guest;

/// Who answers a call's frames: its [`Exchange`] when the call runs in this process; in
/// a worker process, the server, asked over the worker's channel (`crate::worker`), so
/// secrets and the network stay with the server.
pub trait Door: Send + Sync + 'static {
    /// The largest frame worth reading; a longer one is answered without being read.
    fn max_frame(&self) -> u64;
    /// The answer to a frame of `len` bytes, longer than [`Door::max_frame`].
    fn oversized(&self, len: u64) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send + '_>>;
    /// The answer to one frame.
    fn answer<'a>(&'a self, frame: &'a [u8]) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send + 'a>>;
}

impl Door for Exchange {
    fn max_frame(&self) -> u64 {
        Exchange::max_frame(self)
    }

    fn oversized(&self, len: u64) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send + '_>> {
        let answer = Exchange::oversized(self, len);
        Box::pin(async move { answer })
    }

    fn answer<'a>(&'a self, frame: &'a [u8]) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send + 'a>> {
        Box::pin(Exchange::answer(self, frame))
    }
}

const ANSWERED: i32 = 0;
const NO_HOST: i32 = -1;
const FAULT: i32 = -2;

/// Defines `host.call` in `linker`.
pub(in crate::sandbox) fn add_to_linker(linker: &mut Linker<Guest>) -> wasmtime::Result<()> {
    linker.func_wrap_async(
        "host",
        "call",
        |mut caller: Caller<'_, Guest>, (ptr, len, out_ptr, out_len): (i32, i32, i32, i32)| {
            Box::new(async move {
                let Some(exchange) = caller.data().door.clone() else {
                    return Ok(NO_HOST);
                };
                call(&mut caller, &exchange, [ptr, len, out_ptr, out_len]).await
            })
        },
    )?;
    Ok(())
}

/// i32 arguments are addresses and lengths: unsigned.
fn unsigned(n: i32) -> usize {
    n as u32 as usize
}

fn fits(size: usize, at: usize, n: usize) -> bool {
    at.checked_add(n).is_some_and(|end| end <= size)
}

async fn call(
    caller: &mut Caller<'_, Guest>,
    exchange: &Arc<dyn Door>,
    [ptr, len, out_ptr, out_len]: [i32; 4],
) -> wasmtime::Result<i32> {
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        return Ok(FAULT);
    };
    let Some(Extern::Func(alloc)) = caller.get_export("host_alloc") else {
        return Ok(FAULT);
    };
    let (ptr, len, out_ptr, out_len) = (
        unsigned(ptr),
        unsigned(len),
        unsigned(out_ptr),
        unsigned(out_len),
    );
    let size = memory.data_size(&*caller);
    if !fits(size, ptr, len) || !fits(size, out_ptr, 4) || !fits(size, out_len, 4) {
        return Ok(FAULT);
    }
    let answer = if len as u64 > exchange.max_frame() {
        exchange.oversized(len as u64).await
    } else {
        let frame = memory.data(&*caller)[ptr..ptr + len].to_vec();
        // The request waits on the network: the guest waits without its core.
        let seat = caller.data().seat.clone();
        cores::without_core(seat.as_deref(), || exchange.answer(&frame)).await
    };
    // The deadline passed while the host answered (a worker learns the answer from its
    // server, which stops waiting at about the same time): the call ends here, not with
    // the guest carrying on past its deadline.
    if std::time::Instant::now() >= caller.data().deadline {
        return Err(wasmtime::Error::new(crate::sandbox::guest::DeadlineHit));
    }
    let Ok(answer_len) = i32::try_from(answer.len()) else {
        return Ok(FAULT);
    };
    let alloc = alloc.typed::<i32, i32>(&*caller)?;
    let at = unsigned(alloc.call_async(&mut *caller, answer_len).await?);
    // `host_alloc` may have grown the memory.
    if at == 0 || !fits(memory.data_size(&*caller), at, answer.len()) {
        return Ok(FAULT);
    }
    memory.write(&mut *caller, at, &answer)?;
    memory.write(&mut *caller, out_ptr, &(at as u32).to_le_bytes())?;
    memory.write(&mut *caller, out_len, &(answer.len() as u32).to_le_bytes())?;
    Ok(ANSWERED)
}
