//! `warden runs`: runs on a Warden server (`warden serve`), from the command line:
//! start one and leave (`start`, or `warden run --detach`), read it, wait for it,
//! cancel it, list them. A client of the REST API (`/v1/tools/{id}/runs`,
//! `/v1/runs/{id}`), nothing more.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use warden::outcome::Status;

use super::{ExitCode, usage};

/// Where the server is, and the tenant's key.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// The server's address, e.g. http://127.0.0.1:8080.
    #[arg(long, env = "WARDEN_SERVER", value_name = "URL")]
    pub server: String,
    /// The tenant's API key (`warden tenant create` printed it).
    #[arg(
        long,
        env = "WARDEN_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub key: String,
}

/// `warden runs`.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Start a run of a registered tool and print its id at once (the call runs on the
    /// server; `--wait` waits for its end instead).
    Start(StartArgs),
    /// Print a run: its status, and its result once it ended.
    Get {
        /// The run's id (`run_...`).
        run: String,
        /// Where and as whom.
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Wait for a run's end and print its result; the exit code is its call's, as
    /// `warden run`'s.
    Wait {
        /// The run's id.
        run: String,
        /// Give up after this long (e.g. 10m).
        #[arg(long, value_name = "DURATION", default_value = "1h")]
        timeout: humantime::Duration,
        /// Where and as whom.
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Cancel a run: a queued one never starts, a running one is stopped.
    Cancel {
        /// The run's id.
        run: String,
        /// Where and as whom.
        #[command(flatten)]
        server: ServerArgs,
    },
    /// List the tenant's runs, newest first.
    List {
        /// Only this tool's.
        #[arg(long, value_name = "TOOL_ID")]
        tool: Option<String>,
        /// Only runs in this status (queued, running, completed, failed, cancelled,
        /// expired, interrupted).
        #[arg(long)]
        status: Option<String>,
        /// At most this many (at most 500).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Where and as whom.
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// `warden runs start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// The registered tool's id (`tool_...`).
    pub tool: String,
    /// The arguments, as a JSON object.
    #[arg(long, short, value_name = "JSON", default_value = "{}")]
    pub args: String,
    /// Run this version of the tool (by number) instead of its current one.
    #[arg(long, value_name = "N")]
    pub version: Option<u32>,
    /// How long the run may wait for one of the tenant's call slots (e.g. 10m).
    #[arg(long, value_name = "DURATION")]
    pub queue_timeout: Option<humantime::Duration>,
    /// Wait for the run's end and print its result, as `warden runs wait`.
    #[arg(long)]
    pub wait: bool,
    /// Where and as whom.
    #[command(flatten)]
    pub server: ServerArgs,
}

pub(super) fn runs(cmd: RunsCommand) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        match cmd {
            RunsCommand::Start(args) => start(args).await,
            RunsCommand::Get { run, server } => {
                let view = Client::new(&server)?.get(&run, None).await?;
                print_json(&view)?;
                Ok(ExitCode::Ok)
            }
            RunsCommand::Wait {
                run,
                timeout,
                server,
            } => wait(&Client::new(&server)?, &run, timeout.into()).await,
            RunsCommand::Cancel { run, server } => {
                let client = Client::new(&server)?;
                let view = client
                    .send(
                        reqwest::Method::POST,
                        &format!("/v1/runs/{run}/cancel"),
                        None,
                    )
                    .await?;
                print_json(&view)?;
                Ok(ExitCode::Ok)
            }
            RunsCommand::List {
                tool,
                status,
                limit,
                server,
            } => {
                let mut query = vec![format!("limit={limit}")];
                query.extend(tool.map(|t| format!("tool={t}")));
                query.extend(status.map(|s| format!("status={s}")));
                let page = Client::new(&server)?
                    .send(
                        reqwest::Method::GET,
                        &format!("/v1/runs?{}", query.join("&")),
                        None,
                    )
                    .await?;
                for run in page["items"].as_array().into_iter().flatten() {
                    println!(
                        "{}  {:<11}  {}",
                        run["id"].as_str().unwrap_or("?"),
                        run["status"].as_str().unwrap_or("?"),
                        run["tool"].as_str().unwrap_or("?")
                    );
                }
                Ok(ExitCode::Ok)
            }
        }
    })
}

/// `warden runs start` (and `warden run --detach`).
pub(super) async fn start(args: StartArgs) -> Result<ExitCode> {
    let arguments: Value =
        serde_json::from_str(&args.args).map_err(|e| usage(format!("--args is not JSON: {e}")))?;
    if !arguments.is_object() {
        return Err(usage("--args must be a JSON object, e.g. '{\"x\": 1}'"));
    }
    let mut body = json!({ "arguments": arguments });
    if let Some(timeout) = args.queue_timeout {
        let ms = u64::try_from(Duration::from(timeout).as_millis()).unwrap_or(u64::MAX);
        body["queue_timeout_ms"] = json!(ms);
    }
    let path = match args.version {
        Some(n) => format!("/v1/tools/{}/versions/{n}/runs", args.tool),
        None => format!("/v1/tools/{}/runs", args.tool),
    };
    let client = Client::new(&args.server)?;
    let view = client
        .send(reqwest::Method::POST, &path, Some(body))
        .await?;
    let id = view["id"]
        .as_str()
        .context("the server answered no run id")?;
    if args.wait {
        return wait(&client, id, Duration::from_secs(24 * 3600)).await;
    }
    println!("{id}");
    Ok(ExitCode::Ok)
}

/// Waits for `run`'s end (polling with the server's long wait), prints it, and
/// answers its call's exit code.
async fn wait(client: &Client, run: &str, timeout: Duration) -> Result<ExitCode> {
    let until = Instant::now() + timeout;
    loop {
        let view = client.get(run, Some("30s")).await?;
        let status = view["status"].as_str().unwrap_or("");
        if !matches!(status, "queued" | "running") {
            print_json(&view)?;
            return Ok(match status {
                "completed" => serde_json::from_value::<Status>(view["result"]["status"].clone())
                    .map(ExitCode::from)
                    .unwrap_or(ExitCode::Failure),
                _ => ExitCode::Failure,
            });
        }
        if Instant::now() >= until {
            bail!(
                "run {run} is still {status} after {}: wait again with `warden runs wait {run}`, or cancel it",
                humantime::format_duration(timeout)
            );
        }
    }
}

fn print_json(value: &Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// The server's REST API, as the tenant.
struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Client {
    fn new(server: &ServerArgs) -> Result<Client> {
        let base = server.server.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(usage(format!(
                "--server {base}: give the server's URL, e.g. http://127.0.0.1:8080"
            )));
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(90))
            .build()
            .context("cannot make an HTTP client")?;
        Ok(Client {
            http,
            base,
            key: server.key.clone(),
        })
    }

    async fn get(&self, run: &str, wait: Option<&str>) -> Result<Value> {
        let path = match wait {
            Some(w) => format!("/v1/runs/{run}?wait={w}"),
            None => format!("/v1/runs/{run}"),
        };
        self.send(reqwest::Method::GET, &path, None).await
    }

    /// One request; an error answer becomes this command's error, with the server's
    /// message.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url).bearer_auth(&self.key);
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.with_context(|| {
            format!(
                "cannot reach {}: is `warden serve` running there?",
                self.base
            )
        })?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            return Ok(value);
        }
        let message = value["error"]["message"].as_str().unwrap_or("no message");
        let code = value["error"]["code"].as_str().unwrap_or("?");
        if status.is_client_error() {
            return Err(usage(format!(
                "the server refused ({status} {code}): {message}"
            )));
        }
        bail!("the server failed ({status} {code}): {message}")
    }
}
