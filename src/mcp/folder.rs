//! [`FolderSource`]: the tools of a folder (or of some files), watched for changes,
//! run in the sandbox with the grants and limits the catalog settled for each.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rmcp::model::Extensions;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use super::catalog::{Catalog, CatalogError, CatalogTool, Defaults, Problem, Sources};
use super::trail::LocalTrail;
use super::watch::Fingerprint;
use super::{ListedTool, Ran, SourceError, ToolSource};
use crate::app::Refusal;
use crate::app::runtimes::Runtimes;
use crate::events::Events;
use crate::outcome::{CallResult, Warning};
use crate::sandbox::{Outbound, ShareKey, Warmth};

/// How often the files are compared with what the catalog was built from.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Reports a problem with one tool file (`warden mcp` prints it on stderr).
pub type Reporter = Arc<dyn Fn(&Problem) + Send + Sync>;

/// The tools of a folder or of some files, for [`McpServer`](super::McpServer).
pub struct FolderSource {
    sources: Sources,
    defaults: Defaults,
    /// The runtimes the tools run on, each with its workers and package store.
    runtimes: Arc<Runtimes>,
    warm_start: bool,
    report: Reporter,
    catalog: RwLock<Arc<Catalog>>,
    /// The files as they were just before the catalog was first loaded.
    loaded_from: Option<Fingerprint>,
    changes: broadcast::Sender<()>,
    /// Where each call is recorded, if anywhere.
    trail: Option<Arc<LocalTrail>>,
}

impl std::fmt::Debug for FolderSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FolderSource")
            .field("sources", &self.sources)
            .field("warm_start", &self.warm_start)
            .finish_non_exhaustive()
    }
}

impl FolderSource {
    /// Loads the catalog of `sources` (blocking: reads files, may install packages and
    /// open the Pydantic runtime), reporting each file left out. Each tool runs on the
    /// runtime of `runtimes` its requirements need, with its packages installed; with
    /// `warm_start`, each tool's warm state is prepared once [`FolderSource::warm_up`]
    /// is called.
    pub fn load(
        runtimes: Arc<Runtimes>,
        sources: Sources,
        defaults: Defaults,
        warm_start: bool,
        report: Reporter,
    ) -> Result<FolderSource, CatalogError> {
        let loaded_from = Fingerprint::of(&sources).ok();
        let (catalog, problems) =
            Catalog::load(&sources, &defaults, &runtimes, &Catalog::default())?;
        problems.iter().for_each(|p| report(p));
        Ok(FolderSource {
            sources,
            defaults,
            runtimes,
            warm_start,
            report,
            catalog: RwLock::new(Arc::new(catalog)),
            loaded_from,
            changes: broadcast::channel(16).0,
            trail: None,
        })
    }

    /// Records every call in `trail`.
    pub fn with_trail(mut self, trail: Arc<LocalTrail>) -> Self {
        self.trail = Some(trail);
        self
    }

    /// The current catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.catalog.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Starts preparing, in workers, the warm state of every tool that has
    /// none yet (unless warm starts are off); calls run cold until theirs is ready.
    /// Call it inside the tokio runtime.
    pub fn warm_up(&self) {
        if !self.warm_start {
            return;
        }
        for tool in self.catalog().tools() {
            if !tool.prepared.start_warming() {
                continue;
            }
            // Loading the catalog opened every tool's runtime.
            let workers = match self.runtimes.workers(tool.prepared.flavour()) {
                Ok(workers) => workers,
                Err(e) => {
                    tracing::warn!(tool = tool.prepared.function(), "the tool runs cold: {e}");
                    continue;
                }
            };
            let tool = Arc::clone(tool);
            tokio::spawn(async move {
                let prepared = &tool.prepared;
                let warmth = workers
                    .warm_state(prepared.folder(), prepared.packages(), &ShareKey::default())
                    .await;
                match warmth {
                    Ok(warmth) => {
                        if let Warmth::Cold(reason) = &warmth {
                            tracing::warn!(
                                tool = prepared.function(),
                                "the tool runs cold (its imports are paid on every call): {reason}"
                            );
                        }
                        prepared.set_warmth(warmth);
                    }
                    Err(e) => tracing::warn!(
                        tool = prepared.function(),
                        "the tool runs cold: its warm state failed: {e}"
                    ),
                }
            });
        }
    }

    /// Compares the files with the catalog's every `POLL_INTERVAL`, forever; on a
    /// change, loads the catalog again (keeping unchanged tools as they were), reports
    /// each file left out, and fires [`ToolSource::changes`] if the list changed. A
    /// `warden.toml` or folder that cannot be read keeps the catalog as it was.
    pub async fn watch(self: Arc<Self>) {
        let mut seen = self.loaded_from.clone();
        let mut ticks = tokio::time::interval(POLL_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let now = self.fingerprint().await;
            if now == seen {
                continue;
            }
            seen = now;
            let this = Arc::clone(&self);
            let reloaded = tokio::task::spawn_blocking(move || this.reload()).await;
            match reloaded {
                Ok(Ok(true)) => {
                    // No receiver (no client listening) is not an error.
                    let _ = self.changes.send(());
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::warn!("the tools were not reloaded: {e}"),
                Err(e) => tracing::warn!("the tools were not reloaded: {e}"),
            }
            self.warm_up();
        }
    }

    async fn fingerprint(&self) -> Option<Fingerprint> {
        let sources = self.sources.clone();
        tokio::task::spawn_blocking(move || Fingerprint::of(&sources).ok())
            .await
            .ok()
            .flatten()
    }

    /// Loads the catalog again; true when the tool list or a tool's source changed.
    fn reload(&self) -> Result<bool, CatalogError> {
        let previous = self.catalog();
        let (catalog, problems) =
            Catalog::load(&self.sources, &self.defaults, &self.runtimes, &previous)?;
        problems.iter().for_each(|p| (self.report)(p));
        let changed = !catalog.same_as(&previous);
        if changed {
            tracing::info!(tools = ?catalog.names(), "the tool list changed");
        }
        *self.catalog.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(catalog);
        Ok(changed)
    }

    /// Runs the tool `name`, or `member` (one of its file's resource or prompt
    /// functions), with `arguments`.
    async fn run(
        &self,
        name: &str,
        member: Option<&str>,
        arguments: Map<String, Value>,
        events: Arc<Events>,
    ) -> Result<Ran, SourceError> {
        let tool = self.tool(name)?;
        let prepared = &tool.prepared;
        let checked = match member {
            // A file of resources and prompts alone is no tool (and not in tools/list).
            None if tool.listed.members_only => {
                return Err(SourceError::UnknownTool(name.to_owned()));
            }
            None => prepared.check(Value::Object(arguments)),
            Some(function) => prepared
                .check_member(function, Value::Object(arguments))
                .ok_or_else(|| SourceError::UnknownTool(format!("{name}.{function}")))?,
        };
        let arguments = checked.map_err(|refusal| match refusal {
            Refusal::Invalid(violations) => SourceError::InvalidArguments {
                tool: member.unwrap_or(name).to_owned(),
                violations,
            },
            Refusal::BrokenSchema(reason) => SourceError::Failed(format!(
                "the derived schema of {name}() does not compile ({reason}): please report it"
            )),
        })?;
        let warm = prepared.warm_state();
        let outbound = Outbound {
            events: Some(events),
            ..tool.outbound.clone()
        };
        let workers = self
            .runtimes
            .workers(prepared.flavour())
            .map_err(|e| SourceError::Failed(format!("Warden could not run the call: {e}")))?;
        let mut result = workers
            .call_with(
                match member {
                    None => prepared.call(&arguments, &tool.grants, &tool.limits),
                    Some(function) => prepared
                        .call_member(function, &arguments, &tool.grants, &tool.limits)
                        .ok_or_else(|| SourceError::UnknownTool(format!("{name}.{function}")))?,
                },
                warm.as_deref(),
                &outbound,
            )
            .await
            .map_err(|e| {
                tracing::error!(tool = name, "the call could not run: {e}");
                SourceError::Failed(format!("Warden could not run the call: {e}"))
            })?;
        // A member's result is checked where it becomes contents or messages.
        let warnings: Vec<Warning> = match member {
            None => prepared
                .check_result(&mut result, tool.limits.strict_results)
                .into_iter()
                .collect(),
            Some(_) => Vec::new(),
        };
        if let Some(state) = &warm
            && result.start == crate::outcome::Start::Cold
        {
            prepared.forget_warm_state(state);
        }
        if let Some(trail) = &self.trail {
            record(trail, &tool, &result, &warnings).await;
        }
        Ok(Ran {
            start: result.start,
            result,
            output: tool.listed.output(),
            warnings,
        })
    }

    fn tool(&self, name: &str) -> Result<Arc<CatalogTool>, SourceError> {
        self.catalog()
            .get(name)
            .cloned()
            .ok_or_else(|| SourceError::UnknownTool(name.to_owned()))
    }
}

impl ToolSource for FolderSource {
    async fn tools(&self, _request: &Extensions) -> Result<Vec<ListedTool>, SourceError> {
        Ok(self.catalog().listed())
    }

    async fn listed(
        &self,
        _request: &Extensions,
        name: &str,
    ) -> Result<Option<ListedTool>, SourceError> {
        Ok(self.catalog().get(name).map(|t| t.listed.clone()))
    }

    async fn call(
        &self,
        _request: &Extensions,
        name: &str,
        arguments: Map<String, Value>,
        events: Arc<Events>,
    ) -> Result<Ran, SourceError> {
        self.run(name, None, arguments, events).await
    }

    async fn call_member(
        &self,
        _request: &Extensions,
        tool: &str,
        function: &str,
        arguments: Map<String, Value>,
        events: Arc<Events>,
    ) -> Result<Ran, SourceError> {
        self.run(tool, Some(function), arguments, events).await
    }

    fn changes(&self, _request: &Extensions) -> broadcast::Receiver<()> {
        self.changes.subscribe()
    }

    fn list_ttl(&self) -> Duration {
        // The server's own view of the files is up to one poll old.
        POLL_INTERVAL
    }

    fn how_to_raise(&self, limits: &[&str]) -> String {
        let flags: Vec<String> = limits
            .iter()
            .map(|l| format!("--{}", l.replace('_', "-")))
            .collect();
        let flags = flags.join(" / ");
        match self.sources {
            Sources::Folder(_) => {
                let keys: Vec<String> = limits.iter().map(|l| format!("limits.{l}")).collect();
                format!(
                    "raise it with {flags} (every tool) or {} in this tool's table of \
                     warden.toml",
                    keys.join(" / ")
                )
            }
            Sources::Files(_) => format!("raise it with {flags}"),
        }
    }
}

/// Appends the call to the local trail before its result is answered; a failure is
/// logged (the call has run: its result still goes to the client).
async fn record(
    trail: &Arc<LocalTrail>,
    tool: &CatalogTool,
    result: &CallResult,
    warnings: &[Warning],
) {
    let Some(manifest) = tool.manifest() else {
        tracing::warn!(tool = %tool.listed.name, "the call is not recorded: its name is no tool name");
        return;
    };
    let (trail, recorded, warned) = (Arc::clone(trail), result.clone(), warnings.to_vec());
    match tokio::task::spawn_blocking(move || trail.record(&manifest, &recorded, &warned)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::error!(tool = %tool.listed.name, "the call could not be recorded in the local audit trail: {e}")
        }
        Err(e) => tracing::error!(tool = %tool.listed.name, "recording the call failed: {e}"),
    }
}
