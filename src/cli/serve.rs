//! `warden serve`: the multi-tenant HTTP service on one box, with the registry under
//! `$WARDEN_HOME/warden.db` and tool files under `$WARDEN_HOME/tools`.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;

/// `eprintln!` that cannot panic: the server keeps SIGPIPE ignored (a client gone is an
/// error to handle, not a signal), so a closed stderr pipe (`warden serve 2>&1 | head`)
/// would make `eprintln!` panic; a line that cannot be written is dropped instead.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

use anyhow::{Context, Result};
use clap::Args;

use warden::app::{App, AppConfig};
use warden::http::{self, HttpConfig, McpAccess};
use warden::limits::{self, ByteSize};
use warden::outbound::PrivateNetwork;
use warden::registry::Durability;
use warden::sandbox::{DEFAULT_MAX_INSTANCES, DEFAULT_WARM_BUDGET, SandboxConfig};
use warden::worker::{Workers, WorkersConfig};

use super::args::PipArgs;
use super::keys;
use super::{ExitCode, duration};

/// `warden serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (printed at start).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Also serve `GET /metrics` here, without a key, for a scraper (bind it to an
    /// address only the scraper can reach). On `--listen`, /metrics needs the
    /// operator key.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Where tools' packages come from (resolved at registration).
    #[command(flatten)]
    pub pip: PipArgs,
    /// The environment variable holding the operator key, which manages tenants and
    /// reads /metrics over HTTP. Unset or empty: those endpoints are disabled.
    #[arg(long, value_name = "VAR", default_value = "WARDEN_OPERATOR_KEY")]
    pub operator_key_env: String,
    /// Where the registry is.
    #[command(flatten)]
    pub db: super::args::DbArgs,
    /// Longest a request may take (e.g. 120s).
    #[arg(long, value_name = "DURATION", default_value_t = http::DEFAULT_REQUEST_TIMEOUT.into(), value_parser = duration)]
    pub request_timeout: humantime::Duration,
    /// Longest to wait for a request's head, on a new connection or between requests
    /// of a kept-alive one; then the connection is closed (slowloris, idle clients).
    #[arg(long, value_name = "DURATION", default_value_t = http::DEFAULT_HEADER_READ_TIMEOUT.into(), value_parser = duration)]
    pub header_read_timeout: humantime::Duration,
    /// Longest a request's body may take to arrive; then the answer is 408.
    #[arg(long, value_name = "DURATION", default_value_t = http::DEFAULT_BODY_READ_TIMEOUT.into(), value_parser = duration)]
    pub body_read_timeout: humantime::Duration,
    /// On SIGTERM or Ctrl-C, longest the requests in flight get to finish; connections
    /// still open then are closed and the server exits.
    /// /readyz answers 503 `draining` from the signal on, so a load balancer sends new
    /// requests to other nodes. (`--shutdown-grace` is the same flag's older name.)
    #[arg(long, alias = "shutdown-grace", value_name = "DURATION", default_value_t = http::DEFAULT_SHUTDOWN_GRACE.into(), value_parser = duration)]
    pub drain_timeout: humantime::Duration,
    /// Most sandbox instances alive at once, over all tenants.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_INSTANCES)]
    pub max_instances: u32,
    /// Most calls running WebAssembly at once, over all tenants. Tenants with calls
    /// waiting are served in turn, so each gets an equal share of these cores however
    /// many calls it has in flight. Default: the machine's available parallelism.
    #[arg(long, value_name = "N")]
    pub cores: Option<NonZeroUsize>,
    /// Refuse to start unless workers can run in namespaces of their own (user,
    /// network, IPC, UTS, mount, PID). Without it, where the kernel does not allow
    /// unprivileged user namespaces, workers run without that layer (Landlock and
    /// seccomp still hold) and /readyz's `layers` leaves `namespaces` out.
    #[arg(long)]
    pub require_namespaces: bool,
    /// Run every call from Warden's snapshot: do not prepare tool versions' warm states
    /// (by default each version's imports are done once, in the background, at
    /// registration or first call; see docs/warm-start.md).
    #[arg(long)]
    pub cold: bool,
    /// Most disk the tools' warm states may take together under $WARDEN_HOME/warm (e.g.
    /// 1GiB, 500MB). Beyond it the least recently used states are evicted and prepared
    /// again on their next call; a state larger than the whole budget is not kept (its
    /// tool runs cold). A trivial tool's state takes ~33 KiB, a pandas tool's ~10 MiB.
    #[arg(long, value_name = "SIZE", default_value_t = DEFAULT_WARM_BUDGET, value_parser = limits::parse_size)]
    pub warm_budget: ByteSize,
    /// Whether a commit waits for the disk. `strict`: a registration, a change or an
    /// answered call survives a power cut (on SQLite a call is on disk as in flight,
    /// flushed while it runs, and its event follows within 50 ms: `run_interrupted`
    /// after a power cut in between). `relaxed`: they survive a crash of Warden, the database stays consistent
    /// and every audit chain whole, but a power cut or an operating-system crash (or a
    /// PostgreSQL server's crash) may lose the last moments' commits; for disks whose
    /// flush is slow (SD cards, network volumes).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = Durability::Strict)]
    pub durability: Durability,
    /// Let every tenant's tools reach loopback, private and link-local addresses of the
    /// hosts they are granted (refused by default: a granted name that resolves to
    /// 127.0.0.1 or 169.254.169.254 is refused).
    #[arg(long)]
    pub allow_private_network: bool,
    /// A file holding the key (64 hex digits) that seals tenants' secrets at rest. Default:
    /// the variable named by --secret-key-env, else $WARDEN_HOME/secret.key, created
    /// (mode 0600) on first start. Keep the key apart from the database's backups.
    #[arg(long, value_name = "FILE")]
    pub secret_key_file: Option<PathBuf>,
    /// The environment variable that may hold the secrets key (64 hex digits) instead of
    /// a file.
    #[arg(long, value_name = "VAR", default_value = "WARDEN_SECRET_KEY")]
    pub secret_key_env: String,
    /// A file holding the key (64 hex digits, an Ed25519 seed) that signs audit exports.
    /// Default: $WARDEN_HOME/audit-signing.key, created (mode 0600) on first start;
    /// `warden audit pubkey` prints its public key.
    #[arg(long, value_name = "FILE")]
    pub audit_key_file: Option<PathBuf>,
    /// A `Host` that /mcp accepts besides localhost, 127.0.0.1, ::1 and --listen's
    /// address: a name (any port) or name:port; `*` accepts any. Repeatable. Other hosts
    /// are refused (403), against DNS rebinding.
    #[arg(long = "mcp-allow-host", value_name = "HOST", value_parser = mcp_host)]
    pub mcp_allow_hosts: Vec<String>,
    /// A browser `Origin` that /mcp accepts besides loopback ones, with its scheme
    /// (`https://app.example.com`, `http://host:*` for any port). Repeatable. Requests
    /// without an Origin (not from a browser) always pass.
    #[arg(long = "mcp-allow-origin", value_name = "ORIGIN", value_parser = mcp_origin)]
    pub mcp_allow_origins: Vec<String>,
}

/// A `--mcp-allow-host` value: a host name or `host:port`, or `*`.
fn mcp_host(text: &str) -> Result<String, String> {
    let ok = text == "*"
        || (!text.is_empty()
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c)));
    if ok {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(format!(
            "{text:?} is not a host: give a name or address, optionally with :PORT (e.g. \
             warden.example.com or 10.0.0.5:8080), or * for any"
        ))
    }
}

/// A `--mcp-allow-origin` value: `scheme://host[:port]`, or `null`.
fn mcp_origin(text: &str) -> Result<String, String> {
    let valid = text == "null"
        || url::Url::parse(&text.replace(":*", ""))
            .is_ok_and(|u| u.has_host() && u.path() == "/" && !text.ends_with('/'));
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not an origin: give scheme://host[:port] with no path (e.g. \
             https://app.example.com or http://localhost:*)"
        ))
    }
}

/// What /mcp accepts: the defaults, --listen's address, and the operator's additions.
fn mcp_access(args: &ServeArgs) -> McpAccess {
    let mut access = McpAccess::default();
    if args.mcp_allow_hosts.iter().any(|h| h == "*") {
        access.allowed_hosts.clear();
    } else {
        let ip = args.listen.ip();
        if !ip.is_unspecified() && !ip.is_loopback() {
            access.allowed_hosts.push(ip.to_string());
        }
        access
            .allowed_hosts
            .extend(args.mcp_allow_hosts.iter().cloned());
    }
    access
        .allowed_origins
        .extend(args.mcp_allow_origins.iter().cloned());
    access
}

pub(super) fn serve(config: &SandboxConfig, args: ServeArgs) -> Result<ExitCode> {
    // A fresh home (a device's first start) holds nothing yet, not even its keys.
    std::fs::create_dir_all(&config.home)
        .with_context(|| format!("cannot create Warden's home {}", config.home.display()))?;
    let http_config = HttpConfig {
        request_timeout: args.request_timeout.into(),
        header_read_timeout: args.header_read_timeout.into(),
        body_read_timeout: args.body_read_timeout.into(),
        shutdown_grace: args.drain_timeout.into(),
        ..HttpConfig::default()
    };
    let operator_key = std::env::var(&args.operator_key_env)
        .ok()
        .filter(|k| !k.is_empty());
    if operator_key.is_none() {
        say!(
            "note: ${} is not set: the admin endpoints and /metrics are disabled (use `warden tenant`, --metrics-listen)",
            args.operator_key_env
        );
    }
    let secret_key = keys::secret_key(
        args.secret_key_file.as_deref(),
        &args.secret_key_env,
        &config.home,
    )?;
    let mcp = mcp_access(&args);
    let audit_key = keys::audit_key(&config.home, args.audit_key_file.as_deref())?;
    let (registry, db) = args.db.open_with(&config.home, args.durability)?;
    // Every node of a cluster seals and signs with the same keys, or secrets sealed by
    // one would not open on another: the database records them on first use.
    registry.check_key("secret-sealing key", secret_key.fingerprint())?;
    registry.check_key("audit signing key", &audit_key.public_key().to_string())?;
    let registry = Arc::new(registry);
    let mut sandbox_config = config.clone();
    sandbox_config.max_instances = args.max_instances;
    sandbox_config.warm_budget = args.warm_budget;
    if let Some(cores) = args.cores {
        sandbox_config.cores = cores;
    }
    let mut workers_config = WorkersConfig::new(sandbox_config)?;
    if args.require_namespaces {
        workers_config.namespaces = warden::worker::NamespacePolicy::Required;
    }
    let workers = Arc::new(Workers::open(&workers_config)?);
    tracing::info!("walls around guest code: {}", workers.layers().join(", "));
    let packages = args.pip.store(config, &workers)?;
    let app = App::new(
        registry,
        Arc::clone(&workers),
        AppConfig {
            operator_key,
            warm_start: !args.cold,
            private_network: if args.allow_private_network {
                PrivateNetwork::Allowed
            } else {
                PrivateNetwork::Refused
            },
            secret_key: Some(secret_key),
            audit_key: Some(audit_key),
            ..AppConfig::new(config.home.join("tools"), packages)
        },
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        // Leases of this node's runs, and runs of nodes that stopped (this one's former
        // self included) taken over.
        app.keep_runs();
        // A worker that has loaded the runtime, ready for the first tenant's call.
        tokio::spawn(async move {
            if let Err(e) = workers.keep_spare().await {
                tracing::warn!("cannot start a spare worker: {e}");
            }
        });
        let signalled = shutdown_signal()?;
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr()?;
        let hosts = match mcp.allowed_hosts.as_slice() {
            [] => "any Host".to_owned(),
            hosts => format!("Host {} (more with --mcp-allow-host)", hosts.join(", ")),
        };
        // Before the address line, which scripts wait for and may stop reading after.
        say!("warden: MCP at /mcp for {hosts}");
        say!(
            "warden: review console at /review/ (sign in: POST /v1/review/links with a reviewer key)"
        );
        if args.durability == Durability::Relaxed {
            say!(
                "warden: --durability relaxed: commits do not wait for the disk (a power cut may lose the last moments' changes and audit events)"
            );
        }
        say!("warden listening on http://{addr} (registry {db})");
        let metrics_listener = match args.metrics_listen {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr} for metrics"))?;
                say!(
                    "warden serving /metrics without a key on http://{}",
                    listener.local_addr()?
                );
                Some(listener)
            }
            None => None,
        };
        // One signal stops both servers.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let draining = app.clone();
        tokio::spawn(async move {
            signalled.await;
            draining.drain();
            let _ = stop.send(true);
            // Queued runs go to the other nodes now, not after the drain.
            if let Err(e) = draining.release_runs().await {
                tracing::warn!("cannot hand this node's queued runs over: {e}");
            }
        });
        let until_stopped = move || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|s| *s).await.map(|_| ());
            }
        };
        let metrics = async {
            match metrics_listener {
                Some(l) => http::serve_metrics(l, app.clone(), http_config, until_stopped()).await,
                None => Ok(()),
            }
        };
        let (served, metrics) = tokio::join!(
            http::serve_with(listener, app.clone(), http_config, &mcp, until_stopped()),
            metrics
        );
        // Calls still holding cluster slots were cut at the drain timeout: free them now
        // rather than when their leases run out.
        if let Err(e) = app.release_runs().await {
            say!("warden: cannot hand this node's queued runs over (they are taken over once their leases run out): {e}");
        }
        if let Err(e) = app.release_slots().await {
            say!(
                "warden: cannot release this node's run slots (they expire by themselves): {e}"
            );
        }
        served?;
        metrics?;
        say!("warden stopped");
        anyhow::Ok(())
    })?;
    Ok(ExitCode::Ok)
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM. The handlers are in place when this returns,
/// so call it before announcing the address: a signal sent at once (a supervisor
/// stopping what it just started) drains rather than kills.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {},
            _ = terminate.recv() => {},
        }
        say!("warden: shutting down, finishing the requests in flight");
    })
}
