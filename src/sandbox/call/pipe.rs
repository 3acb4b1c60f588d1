//! A capped in-memory stdout/stderr for the guest.
//!
//! wasmtime-wasi's `MemoryOutputPipe` reports a full pipe by refusing writes, which a
//! guest can catch and ignore. This pipe instead keeps what fits, records that the cap
//! was hit, and traps the guest with [`OutputLimitHit`], so a flood ends the call at
//! once and the host classifies it by type.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// The trap raised when the guest writes past an output cap.
#[derive(Debug, thiserror::Error)]
#[error("the guest wrote more than {cap} bytes to {stream}")]
pub struct OutputLimitHit {
    /// `stdout` or `stderr`.
    pub stream: &'static str,
    /// The cap in bytes.
    pub cap: usize,
}

#[derive(Debug)]
struct Inner {
    buf: Vec<u8>,
    cap: usize,
    overflowed: bool,
}

/// One output stream of one call. Clones share the buffer.
#[derive(Debug, Clone)]
pub struct CappedPipe {
    name: &'static str,
    inner: Arc<Mutex<Inner>>,
}

impl CappedPipe {
    /// A pipe named `stdout` or `stderr` that holds at most `cap` bytes.
    pub fn new(name: &'static str, cap: usize) -> Self {
        CappedPipe {
            name,
            inner: Arc::new(Mutex::new(Inner {
                buf: Vec::new(),
                cap,
                overflowed: false,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The buffer stays consistent even if a writer panicked mid-call.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What was written (up to the cap) and whether the guest tried to write more.
    pub fn take(&self) -> (Vec<u8>, bool) {
        let mut inner = self.lock();
        (std::mem::take(&mut inner.buf), inner.overflowed)
    }

    fn append(&self, bytes: &[u8]) -> Result<(), OutputLimitHit> {
        let mut inner = self.lock();
        let room = inner.cap - inner.buf.len();
        if bytes.len() > room {
            inner.buf.extend_from_slice(&bytes[..room]);
            inner.overflowed = true;
            return Err(OutputLimitHit {
                stream: self.name,
                cap: inner.cap,
            });
        }
        inner.buf.extend_from_slice(bytes);
        Ok(())
    }
}

/// Largest single write the guest is offered; the cap is enforced on every write.
const PERMIT: usize = 64 * 1024;

#[wasmtime_wasi::async_trait]
impl Pollable for CappedPipe {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.append(&bytes)
            .map_err(|hit| StreamError::Trap(wasmtime::Error::new(hit)))
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        // Always offer room: a write past the cap must reach `write` and trap, rather
        // than be refused with an error the guest could swallow.
        Ok(PERMIT)
    }
}

impl AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(
            self.append(buf)
                .map(|()| buf.len())
                .map_err(io::Error::other),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_fits_and_records_the_overflow() {
        let pipe = CappedPipe::new("stdout", 4);
        assert!(pipe.append(b"ab").is_ok());
        assert!(pipe.append(b"cdef").is_err());
        assert_eq!(pipe.take(), (b"abcd".to_vec(), true));
    }
}
