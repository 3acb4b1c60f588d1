//! The service's path for `make bench`: a real `warden serve` on loopback (its registry
//! on SQLite or PostgreSQL, its calls in worker processes, each version from its warm
//! state), measured by sequential `POST /v1/tools/{id}/run` calls on one kept-alive
//! connection, and by calls per second with one kept-alive connection per core, and
//! with [`BUSY_PER_CORE`] per core (more calls than the tenant may run at once: the
//! node's cores and its database are never idle for want of a call).
//!
//! A [`Service`] stays up between blocks of calls, so that `main` can take turns
//! between it and the other paths it is compared with.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use warden::app::{App, AppConfig};
use warden::packages::Packages;
use warden::registry::{Durability, Location, Registry};
use warden::sandbox::artifacts::Role;
use warden::sandbox::{Progress, Sandbox, SandboxConfig};
use warden::tenant::TenantPolicy;
use warden::worker::{Workers, WorkersConfig};

use super::{TOOL, pip};

type Connection = BufReader<TcpStream>;

/// Calls made and not measured at the start of each block of calls: after the other
/// paths' turn, the service's first calls find its workers asleep and its cluster
/// slots released.
const WARM_UP: usize = 20;

/// Connections per core of a busy node's throughput ([`Service::throughput`]): 4, so
/// twice the tenant's 4 calls at once on two cores.
pub const BUSY_PER_CORE: usize = 4;

/// One HTTP/1.1 request on a kept-alive connection; returns the status and body.
async fn request(
    conn: &mut Connection,
    method: &str,
    path: &str,
    key: &str,
    body: &Value,
) -> anyhow::Result<(u16, Value)> {
    let body = serde_json::to_vec(body)?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut message = head.into_bytes();
    message.extend_from_slice(&body);
    conn.get_mut().write_all(&message).await?;
    let mut line = String::new();
    conn.read_line(&mut line).await?;
    let status: u16 = line.split(' ').nth(1).unwrap_or("0").parse()?;
    let mut length = 0;
    loop {
        line.clear();
        conn.read_line(&mut line).await?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse()?;
        }
    }
    let mut buf = vec![0; length];
    conn.read_exact(&mut buf).await?;
    Ok((status, serde_json::from_slice(&buf)?))
}

/// What [`Service::runs`] measured.
pub struct RunFigures {
    /// Each accept's round trip (`202`).
    pub accept: Vec<Duration>,
    /// Each read of an ended run.
    pub poll: Vec<Duration>,
    /// Runs queued at once, and how long from the first accept to the last end.
    pub queued: (usize, Duration),
}

/// Waits for run `id`'s end (a minute at a time); the run.
async fn wait_run(conn: &mut Connection, key: &str, id: &str) -> anyhow::Result<Value> {
    loop {
        let (status, reply) = request(
            conn,
            "GET",
            &format!("/v1/runs/{id}?wait=60s"),
            key,
            &Value::Null,
        )
        .await?;
        anyhow::ensure!(status == 200, "bad reply: {reply}");
        if !matches!(reply["status"].as_str(), Some("queued" | "running")) {
            return Ok(reply);
        }
    }
}

async fn connect(addr: std::net::SocketAddr) -> anyhow::Result<Connection> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(BufReader::new(stream))
}

/// A running service with `add` registered and warm, and its clients' connections.
pub struct Service {
    /// The server's address.
    addr: std::net::SocketAddr,
    key: String,
    /// `/v1/tools/{id}/run`.
    path: String,
    body: Value,
    /// The sequential calls' connection.
    conn: Connection,
    /// The throughput's connections, [`BUSY_PER_CORE`] per core.
    parallel: Vec<Connection>,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// The registry's file (SQLite), the tools' and packages' folders.
    _dir: tempfile::TempDir,
}

impl Service {
    /// Starts a service whose registry is at `database` (`None`: a SQLite file of its
    /// own), its commits as durable as `durability` says (`warden serve --durability`),
    /// and registers `add` through it; returns once its calls start warm.
    pub async fn start(
        sandbox: &Arc<Sandbox>,
        home: &Path,
        database: Option<Location>,
        durability: Durability,
    ) -> anyhow::Result<Service> {
        let dir = tempfile::tempdir()?;
        let location = database.unwrap_or_else(|| Location::Sqlite(dir.path().join("warden.db")));
        let registry = Arc::new(Registry::connect_with(&location, durability)?);
        let policy = TenantPolicy {
            calls_per_minute: 1_000_000,
            // The runs' throughput queues a thousand at once.
            max_queued_runs: 100_000,
            ..TenantPolicy::default()
        };
        let (_, key) = registry.create_tenant("bench", &policy)?;
        let key = key.expose().to_owned();
        let packages = Packages::new(
            dir.path(),
            &sandbox.runtime().path(Role::Stdlib),
            pip(),
            Progress::Quiet,
        )?;
        // As `warden serve` runs them: every call in a worker process.
        let workers = Arc::new(Workers::open(&WorkersConfig {
            sandbox: SandboxConfig::new(home.to_owned()),
            binary: std::path::PathBuf::from(env!("CARGO_BIN_EXE_warden")),
            frame_budget: warden::worker::wire::DEFAULT_FRAME_BUDGET,
            namespaces: warden::worker::NamespacePolicy::Auto,
        })?);
        let app = App::new(
            registry,
            workers,
            AppConfig {
                warm_start: true,
                ..AppConfig::new(dir.path().join("tools"), packages)
            },
        );
        // As `warden serve` runs it: each version from its warm state.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            warden::http::serve(listener, app, Default::default(), async {
                let _ = stopped.await;
            })
            .await?;
            anyhow::Ok(())
        });
        let mut conn = connect(addr).await?;
        let (status, created) = request(
            &mut conn,
            "POST",
            "/v1/tools",
            &key,
            &json!({"source": TOOL}),
        )
        .await?;
        anyhow::ensure!(status == 201, "registering the tool failed: {created}");
        let id = created["tool"]["id"].as_str().unwrap_or_default();
        let path = format!("/v1/tools/{id}/run");
        let body = json!({"arguments": {"a": 1, "b": 2}});
        // Calls start cold until the version's warm state is ready (prepared in the
        // background): wait for that, then 50 more calls before measuring.
        let mut warm = 0;
        for _ in 0..5_000 {
            let (status, reply) = request(&mut conn, "POST", &path, &key, &body).await?;
            anyhow::ensure!(status == 200, "bad reply: {reply}");
            if reply["start"] == json!("warm") {
                warm += 1;
                if warm == 50 {
                    break;
                }
            }
        }
        anyhow::ensure!(warm == 50, "the tool's calls never started warm");
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut parallel = Vec::with_capacity(cores * BUSY_PER_CORE);
        for _ in 0..cores * BUSY_PER_CORE {
            parallel.push(connect(addr).await?);
        }
        Ok(Service {
            addr,
            key,
            path,
            body,
            conn,
            parallel,
            stop,
            server,
            _dir: dir,
        })
    }

    /// `calls` sequential round trips on a new connection (see [`Service::throughput`]),
    /// after [`WARM_UP`] more; each measured one's time is added to `samples`.
    pub async fn round_trips(
        &mut self,
        calls: usize,
        samples: &mut Vec<Duration>,
    ) -> anyhow::Result<()> {
        self.conn = connect(self.addr).await?;
        for i in 0..WARM_UP + calls {
            let t = Instant::now();
            let (status, reply) =
                request(&mut self.conn, "POST", &self.path, &self.key, &self.body).await?;
            if i >= WARM_UP {
                samples.push(t.elapsed());
            }
            anyhow::ensure!(
                status == 200 && reply["value"] == json!(3) && reply["start"] == json!("warm"),
                "bad reply: {reply}"
            );
        }
        Ok(())
    }

    /// About `calls` calls on `connections` connections (one per core, or
    /// [`BUSY_PER_CORE`] per core at most), each sending its share in turn, all at once
    /// (after [`WARM_UP`] calls on each, which are not counted); how many were made and
    /// how long they took, from the first connection's start to the last one's end.
    pub async fn throughput(
        &mut self,
        calls: usize,
        connections: usize,
    ) -> anyhow::Result<(usize, Duration)> {
        anyhow::ensure!(
            (1..=self.parallel.len()).contains(&connections),
            "{connections} connections asked for, {} open",
            self.parallel.len()
        );
        let per_connection = calls / connections;
        for conn in &mut self.parallel[..connections] {
            // Afresh: kept alive but idle while other paths ran, a connection may have
            // passed the server's header timeout (10 s) on a slow host.
            *conn = connect(self.addr).await?;
            for _ in 0..WARM_UP {
                let (status, reply) =
                    request(conn, "POST", &self.path, &self.key, &self.body).await?;
                anyhow::ensure!(status == 200, "bad reply: {reply}");
            }
        }
        let mut clients = Vec::with_capacity(connections);
        let idle = self.parallel.split_off(connections);
        for mut conn in std::mem::take(&mut self.parallel) {
            let (path, key, body) = (self.path.clone(), self.key.clone(), self.body.clone());
            clients.push(tokio::spawn(async move {
                let started = Instant::now();
                for _ in 0..per_connection {
                    let (status, reply) = request(&mut conn, "POST", &path, &key, &body).await?;
                    anyhow::ensure!(status == 200, "bad reply: {reply}");
                }
                anyhow::Ok((conn, started, Instant::now()))
            }));
        }
        let (mut first, mut last) = (None::<Instant>, None::<Instant>);
        for client in clients {
            let (conn, started, ended) = client.await??;
            self.parallel.push(conn);
            first = Some(first.map_or(started, |t| t.min(started)));
            last = Some(last.map_or(ended, |t| t.max(ended)));
        }
        self.parallel.extend(idle);
        let took = match (first, last) {
            (Some(first), Some(last)) => last - first,
            _ => Duration::ZERO,
        };
        Ok((per_connection * connections, took))
    }

    /// Runs (`POST /v1/tools/{id}/runs`): `samples` accepted one at a time (each
    /// waited for before the next, unmeasured), each ended one read once
    /// (`GET /v1/runs/{id}`), then `queued` accepted at once on every connection and
    /// waited for.
    pub async fn runs(&mut self, samples: usize, queued: usize) -> anyhow::Result<RunFigures> {
        let runs_path = format!("{}s", self.path);
        self.conn = connect(self.addr).await?;
        let (mut accept, mut poll) = (Vec::new(), Vec::new());
        let mut ended = Vec::new();
        for i in 0..WARM_UP + samples {
            let t = Instant::now();
            let (status, reply) =
                request(&mut self.conn, "POST", &runs_path, &self.key, &self.body).await?;
            let took = t.elapsed();
            anyhow::ensure!(status == 202, "bad reply: {reply}");
            let id = reply["id"].as_str().unwrap_or_default().to_owned();
            let done = wait_run(&mut self.conn, &self.key, &id).await?;
            anyhow::ensure!(done["result"]["value"] == json!(3), "bad run: {done}");
            if i >= WARM_UP {
                accept.push(took);
                ended.push(id);
            }
        }
        for id in &ended {
            let t = Instant::now();
            let (status, reply) = request(
                &mut self.conn,
                "GET",
                &format!("/v1/runs/{id}"),
                &self.key,
                &Value::Null,
            )
            .await?;
            poll.push(t.elapsed());
            anyhow::ensure!(status == 200 && reply["status"] == "completed", "{reply}");
        }
        // A thousand at once, accepted on every connection, then waited for.
        let connections = self.parallel.len();
        let started = Instant::now();
        let mut submitters = Vec::new();
        for _ in 0..connections {
            let (addr, key, path, body) = (
                self.addr,
                self.key.clone(),
                runs_path.clone(),
                self.body.clone(),
            );
            let share = queued / connections;
            submitters.push(tokio::spawn(async move {
                let mut conn = connect(addr).await?;
                let mut ids = Vec::with_capacity(share);
                for _ in 0..share {
                    let (status, reply) = request(&mut conn, "POST", &path, &key, &body).await?;
                    anyhow::ensure!(status == 202, "bad reply: {reply}");
                    ids.push(reply["id"].as_str().unwrap_or_default().to_owned());
                }
                anyhow::Ok(ids)
            }));
        }
        let mut ids = Vec::new();
        for s in submitters {
            ids.extend(s.await??);
        }
        for id in &ids {
            let done = wait_run(&mut self.conn, &self.key, id).await?;
            anyhow::ensure!(done["status"] == "completed", "bad run: {done}");
        }
        Ok(RunFigures {
            accept,
            poll,
            queued: (ids.len(), started.elapsed()),
        })
    }

    /// Closes the connections and stops the server.
    pub async fn stop(self) -> anyhow::Result<()> {
        drop((self.conn, self.parallel));
        let _ = self.stop.send(());
        self.server.await?
    }
}
