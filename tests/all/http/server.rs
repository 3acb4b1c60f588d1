//! A real server on loopback against slow, stalled and idle clients: none of them
//! holds a connection past its timeout, nor the shutdown past its grace.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use warden::http::{HttpConfig, serve};

use super::Service;

/// A server for `s` on 127.0.0.1:0; send on the sender to shut it down.
async fn start(
    s: &Service,
    config: HttpConfig,
) -> (
    SocketAddr,
    oneshot::Sender<()>,
    JoinHandle<std::io::Result<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, s.app.clone(), config, async {
        let _ = stopped.await;
    }));
    (addr, stop, server)
}

/// Reads until the server closes the connection (end of stream or reset), at most
/// `within`; what was read, or `None` if the connection is still open then.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok()
        .map(|()| String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_client_is_disconnected_after_the_header_read_timeout() {
    let s = Service::start();
    let config = HttpConfig {
        header_read_timeout: Duration::from_millis(500),
        ..HttpConfig::default()
    };
    let (addr, _stop, _server) = start(&s, config).await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let started = Instant::now();
    // One header line every 100 ms, for ever: the head never ends.
    let trickle = tokio::spawn(async move {
        writer
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: warden\r\n")
            .await?;
        for i in 0.. {
            tokio::time::sleep(Duration::from_millis(100)).await;
            writer.write_all(format!("X-{i}: a\r\n").as_bytes()).await?;
        }
        std::io::Result::Ok(())
    });
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), reader.read(&mut buf)).await;
    let elapsed = started.elapsed();
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the connection is still open after {elapsed:?}: {read:?}"
    );
    assert!(elapsed >= Duration::from_millis(450), "{elapsed:?}");
    // The writer fails soon after: the server is gone.
    let written = tokio::time::timeout(Duration::from_secs(5), trickle)
        .await
        .unwrap()
        .unwrap();
    assert!(written.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_read_timeout() {
    let s = Service::start();
    let config = HttpConfig {
        header_read_timeout: Duration::from_millis(500),
        ..HttpConfig::default()
    };
    let (addr, _stop, _server) = start(&s, config).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: warden\r\n\r\n")
        .await
        .unwrap();
    let answered = read_until_closed(&mut stream, Duration::from_secs(5))
        .await
        .expect("the idle connection was closed");
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_arrive_in_time_is_408_and_closes_the_connection() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let config = HttpConfig {
        body_read_timeout: Duration::from_millis(500),
        ..HttpConfig::default()
    };
    let (addr, _stop, _server) = start(&s, config).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/tools HTTP/1.1\r\nHost: warden\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"source\": "
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let answer = read_until_closed(&mut stream, Duration::from_secs(5))
        .await
        .expect("the connection was closed");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"body_timeout\""), "{answer}");
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_within_the_grace_despite_idle_and_half_sent_requests() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    // Timeouts far beyond the grace: only the grace can end these connections.
    let config = HttpConfig {
        header_read_timeout: Duration::from_secs(60),
        body_read_timeout: Duration::from_secs(60),
        shutdown_grace: Duration::from_secs(1),
        ..HttpConfig::default()
    };
    let (addr, stop, server) = start(&s, config).await;

    // Connected, nothing sent.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // One request answered, then idle on keep-alive.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: warden\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // Half a head.
    let mut half_head = TcpStream::connect(addr).await.unwrap();
    half_head
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: war")
        .await
        .unwrap();
    // A whole head, a tenth of the body: the handler waits for the rest.
    let mut half_body = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/tools HTTP/1.1\r\nHost: warden\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"source\": "
    );
    half_body.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server stopped")
        .unwrap()
        .unwrap();
    let elapsed = started.elapsed();
    // The half-sent body holds its connection until the grace ends it.
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(3)).contains(&elapsed),
        "shutdown took {elapsed:?}"
    );
    for stream in [&mut silent, &mut idle, &mut half_head, &mut half_body] {
        assert!(
            read_until_closed(stream, Duration::from_secs(2))
                .await
                .is_some(),
            "a connection outlived the server"
        );
    }
    assert!(TcpStream::connect(addr).await.is_err());
}
