//! The server loop, and what keeps a client from holding the service: a header-read
//! timeout, a body-read deadline and a bounded graceful shutdown.
//!
//! What lives here: accepting connections, serving each with hyper's HTTP/1.1 connection
//! (axum's `serve` does not expose hyper's timer or `header_read_timeout`), the
//! [`body_deadline`] middleware, and shutdown. Routing and errors live elsewhere.
//!
//! # What a slow or stalled client gets
//! - **Headers**: hyper starts a timer ([`HttpConfig::header_read_timeout`]) when it
//!   waits for a request's head, on a fresh connection and between requests of a
//!   keep-alive one; when it fires the connection is closed without an answer. So a
//!   client trickling header bytes (slowloris), and an idle keep-alive connection, hold
//!   a connection for at most that long.
//! - **Body**: a request's body must arrive within [`HttpConfig::body_read_timeout`] of
//!   its head; past it, reading fails and the answer is 408 `body_timeout` with
//!   `Connection: close`.
//! - **Shutdown**: when the shutdown future completes the listener closes at once, idle
//!   connections close, and requests in flight get up to
//!   [`HttpConfig::shutdown_grace`] to be answered. Connections still open then are
//!   dropped: their handlers are cancelled (a guest already running goes on in its own
//!   task until the process exits).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{ApiError, HttpConfig};

/// Serves `router` on `listener` until `shutdown` completes, then shuts down within
/// `config.shutdown_grace` (see the [module docs](self)).
pub(super) async fn run(
    listener: TcpListener,
    router: Router,
    config: HttpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (closing, closed) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to be freed
                    // rather than spin.
                    tracing::error!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        connections.spawn(connection(
            stream,
            router.clone(),
            config.header_read_timeout,
            closed.clone(),
        ));
        // Reap the connections that ended, so the set does not grow for ever.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    // Receivers are still held by the connections; a send error means there are none.
    let _ = closing.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(config.shutdown_grace, drained)
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "the shutdown grace of {} passed: closing the connections still open",
            humantime::format_duration(config.shutdown_grace)
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// Errors of one connection that `accept` reports; the listener itself is fine.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionRefused | K::ConnectionAborted | K::ConnectionReset
    )
}

/// Serves one connection until it ends, or until `closing` is set: then finishes the
/// request in flight, if any, and closes.
async fn connection(
    stream: TcpStream,
    router: Router,
    header_read_timeout: Duration,
    mut closing: watch::Receiver<bool>,
) {
    let service = TowerToHyperService::new(router);
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!("connection closed: {e}");
            }
            return;
        }
        // A closed channel (the server is gone) means closing too.
        _ = closing.wait_for(|closing| *closing) => {}
    }
    conn.as_mut().graceful_shutdown();
    if let Err(e) = conn.await {
        tracing::debug!("connection closed while shutting down: {e}");
    }
}

/// Middleware: the request's body must arrive within `limit` of the request's head,
/// else the answer is 408 `body_timeout` and the connection is closed.
pub(super) async fn body_deadline(
    State(limit): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    let expired = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&expired);
    let request = request.map(|inner| {
        Body::new(DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(limit)),
            expired: flag,
        })
    });
    let response = next.run(request).await;
    if !expired.load(Ordering::Relaxed) {
        return response;
    }
    // Whatever the handler made of the failed read (a malformed body, most likely), the
    // cause is the deadline. The rest of the body may still be on its way: close.
    let mut response = ApiError::BodyTimeout { limit }.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request body that fails once its deadline has passed.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// Set when the deadline failed a read, for [`body_deadline`] to answer 408.
    expired: Arc<AtomicBool>,
}

/// The body of a request did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
struct BodyTimedOut;

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
