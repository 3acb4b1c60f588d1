//! Server files: the tools an MCP server file declares, registered together (`POST
//! /v1/servers`) and updated as one (`PUT /v1/servers/{id}`), with one version history
//! (`GET /v1/servers/{id}`). Each tool keeps its own name, switch, grants, limits and
//! audit; what they share is the file, its revisions ([`ServerRef`] in each version's
//! manifest) and the server id the registry finds them by.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{App, AppError, ToolView, approval, refuse_warden_folders, spec, tool_folder, view};
use crate::manifest::{Manifest, ServerId, ServerRef, ToolName};
use crate::registry::{Registry, RegistryError, Tool, ToolId, Widens};
use crate::schema::PipRequirement;
use crate::tenant::{TenantId, TenantPolicy};

use super::spec::ToolSpec;

/// What `POST /v1/servers` and `PUT /v1/servers/{id}` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ServerView {
    /// The server, and the revision of its file now current.
    pub server: ServerRef,
    /// Each tool the file declares (registered or updated), in the file's order. A file
    /// of resources and prompts alone has one entry that is no tool (its schema is
    /// `members_only`).
    pub tools: Vec<ToolView>,
    /// The server's tools the new file no longer declares: disabled, history kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<ToolView>,
}

/// A server file's new source (`PUT /v1/servers/{id}`).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerUpdate {
    /// The file's new Python source.
    pub source: String,
    /// Requirements besides the file's PEP 723 block, as for a tool.
    #[serde(default)]
    pub pip_requirements: Vec<PipRequirement>,
}

/// One server: its tools now and the history of its file (`GET /v1/servers/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ServerDetail {
    /// The server, and the newest revision of its file.
    pub server: ServerRef,
    /// Its tools (disabled ones too), oldest first.
    pub tools: Vec<ToolView>,
    /// Each revision of the file, oldest first, with the tool versions that hold it.
    pub history: Vec<Revision>,
}

/// One revision of a server's file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Revision {
    /// 1 for the registration, one more with each update.
    pub revision: u32,
    /// When its first version was stored, in Unix milliseconds.
    pub created_at_ms: i64,
    /// The tool versions that hold this revision of the file.
    pub versions: Vec<RevisionVersion>,
}

/// A tool version of a [`Revision`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RevisionVersion {
    /// The tool.
    pub tool: ToolId,
    /// Its name.
    pub name: ToolName,
    /// The version's number among the tool's.
    pub version: u32,
}

/// What a server file declares, each the choice of one entry: a function the file
/// marks as a tool, or `None` for a file of resources and prompts alone.
fn entries(spec: &ToolSpec) -> Vec<Option<String>> {
    let mut functions: Vec<Option<String>> = crate::schema::tool_functions(&spec.source)
        .into_iter()
        .map(|d| Some(d.function))
        .collect();
    if functions.is_empty() && spec::validate(spec).schema.is_some_and(|s| s.members_only) {
        functions.push(None);
    }
    functions
}

impl App {
    /// Registers every tool an MCP server file declares (each function decorated as a
    /// tool, `@mcp.tool`), each a tool of its own (its name from its decorator, else its
    /// function's; its own versions, enable/disable, grants and limits from then on),
    /// with the spec's grants, limits and the rest for all, as revision 1 of a new
    /// server. The file's resources and prompts come with each (listed once); a file of
    /// them alone is one entry that is no tool. Nothing is stored unless every one can
    /// be: a refused manifest or a name already taken refuses them all.
    pub async fn register_server(
        &self,
        tenant: &TenantId,
        spec: ToolSpec,
    ) -> Result<ServerView, AppError> {
        if spec.function.is_some() || spec.name.is_some() || spec.schema.is_some() {
            return Err(AppError::ServerFile {
                reason: "a server registration takes every tool of the file under its own name: leave out `function`, `name` and `schema` (or register one tool with POST /v1/tools)".into(),
            });
        }
        let functions = entries(&spec);
        if functions.is_empty() {
            return Err(AppError::ServerFile {
                reason: "the file declares no tool, resource or prompt: decorate its tools with @mcp.tool() (or another framework's tool decorator), or register its function with POST /v1/tools".into(),
            });
        }
        let server = ServerRef {
            id: ServerId::generate(),
            revision: 1,
        };
        let t = tenant.clone();
        let tools_dir = self.inner.tools_dir.clone();
        let app = self.clone();
        let own = self.own_folders();
        let at = server.clone();
        let tools = self
            .blocking(move |r| {
                let policy = r.policy(&t)?;
                let (runtime, lock) = app.lock_for(&spec)?;
                // Every manifest first: one that is refused stores nothing.
                let mut manifests = Vec::with_capacity(functions.len());
                for function in &functions {
                    let one = ToolSpec {
                        function: function.clone(),
                        ..spec.clone()
                    };
                    let (mut manifest, diagnostics) = spec::manifest(one, &policy)?;
                    refuse_warden_folders(&policy.resolve_grants(&manifest.grants)?, &own)?;
                    manifest.packages = lock.clone();
                    manifest.runtime = runtime;
                    manifest.server = Some(at.clone());
                    name_is_free(r, &t, &manifest.name)?;
                    manifests.push((manifest, diagnostics));
                }
                let widens =
                    |old: Option<&Manifest>, new: &Manifest| approval::widening(&policy, old, new);
                let gate: Widens<'_> = policy.review_widening.then_some(&widens);
                let mut views = Vec::with_capacity(manifests.len());
                for (manifest, diagnostics) in manifests {
                    tool_folder(&tools_dir, &manifest)?;
                    let tool = r.register_reviewed(&t, &manifest, gate)?;
                    views.push(view(r, &t, &tool.id, diagnostics, None)?);
                }
                Ok(views)
            })
            .await?;
        self.server_changed(tenant, &tools);
        Ok(ServerView {
            server,
            tools,
            disabled: Vec::new(),
        })
    }

    /// Makes `update.source` the server's file, as its next revision: each tool the new
    /// file still declares (by function) gets a version of it, keeping its own name,
    /// grants, limits, tags, title and description; a tool the file adds is registered
    /// with no grants and default limits; a tool it no longer declares is disabled, its
    /// history kept. Every manifest is checked before anything is stored.
    pub async fn update_server(
        &self,
        tenant: &TenantId,
        server: &ServerId,
        update: ServerUpdate,
    ) -> Result<ServerView, AppError> {
        let (t, id) = (tenant.clone(), server.clone());
        let tools_dir = self.inner.tools_dir.clone();
        let app = self.clone();
        let own = self.own_folders();
        let view_of = self
            .blocking(move |r| {
                let policy = r.policy(&t)?;
                let members = members(r, &t, &id)?;
                // After the newest revision any version holds (a restored older version
                // is current with its own, older, revision).
                let newest = history(r, &t, &members)?
                    .last()
                    .map_or(1, |revision| revision.revision);
                let at = ServerRef {
                    id: id.clone(),
                    revision: newest + 1,
                };
                let spec = ToolSpec {
                    source: update.source,
                    pip_requirements: update.pip_requirements,
                    ..ToolSpec::default()
                };
                let functions = entries(&spec);
                if functions.is_empty() {
                    return Err(AppError::ServerFile {
                        reason: "the new file declares no tool, resource or prompt: a server keeps at least one; delete its tools to end it".into(),
                    });
                }
                let (runtime, lock) = app.lock_for(&spec)?;
                let mut planned = Vec::with_capacity(functions.len());
                for function in &functions {
                    let old = members.iter().find(|(_, m)| match function {
                        Some(f) => m.function == *f && !m.schema.members_only,
                        None => m.schema.members_only,
                    });
                    let (mut manifest, diagnostics) =
                        next_manifest(&spec, function, old.map(|(_, m)| m), &policy)?;
                    refuse_warden_folders(&policy.resolve_grants(&manifest.grants)?, &own)?;
                    manifest.packages = lock.clone();
                    manifest.runtime = runtime;
                    manifest.server = Some(at.clone());
                    if old.is_none() {
                        name_is_free(r, &t, &manifest.name)?;
                    }
                    planned.push((old.map(|(tool, _)| tool.id.clone()), manifest, diagnostics));
                }
                let widens =
                    |old: Option<&Manifest>, new: &Manifest| approval::widening(&policy, old, new);
                let gate: Widens<'_> = policy.review_widening.then_some(&widens);
                let mut tools = Vec::with_capacity(planned.len());
                for (existing, manifest, diagnostics) in planned {
                    tool_folder(&tools_dir, &manifest)?;
                    tools.push(match existing {
                        Some(tool) => {
                            let (_, outcome) = r.update_reviewed(&t, &tool, &manifest, gate)?;
                            view(r, &t, &tool, diagnostics, Some(outcome))?
                        }
                        None => {
                            let tool = r.register_reviewed(&t, &manifest, gate)?;
                            view(r, &t, &tool.id, diagnostics, None)?
                        }
                    });
                }
                let mut disabled = Vec::new();
                for (tool, _) in &members {
                    if tools.iter().all(|v| v.tool.id != tool.id) {
                        r.set_enabled(&t, &tool.id, false)?;
                        disabled.push(view(r, &t, &tool.id, Vec::new(), None)?);
                    }
                }
                // The revision the tools now hold: the new one, unless every version was
                // unchanged (the same file again) or restored.
                let revision = tools
                    .iter()
                    .filter_map(|v| v.manifest.server.as_ref().map(|s| s.revision))
                    .max()
                    .unwrap_or(at.revision);
                Ok(ServerView {
                    server: ServerRef { id, revision },
                    tools,
                    disabled,
                })
            })
            .await?;
        self.server_changed(tenant, &view_of.tools);
        Ok(view_of)
    }

    /// The server's tools and the history of its file.
    pub async fn server(
        &self,
        tenant: &TenantId,
        server: &ServerId,
    ) -> Result<ServerDetail, AppError> {
        let (t, id) = (tenant.clone(), server.clone());
        self.blocking(move |r| {
            let members = members(r, &t, &id)?;
            let history = history(r, &t, &members)?;
            let tools = members
                .iter()
                .map(|(tool, _)| view(r, &t, &tool.id, Vec::new(), None))
                .collect::<Result<Vec<_>, _>>()?;
            let newest = history.last().map_or(1, |revision| revision.revision);
            Ok(ServerDetail {
                server: ServerRef {
                    id,
                    revision: newest,
                },
                tools,
                history,
            })
        })
        .await
    }

    /// After a server's tools changed: warm each, and tell who listens.
    fn server_changed(&self, tenant: &TenantId, tools: &[ToolView]) {
        for view in tools {
            self.warm_in_background(tenant, &view.tool.id);
        }
        self.tools_changed(tenant);
    }
}

/// The server's tools with their current manifests, oldest first; an unknown server
/// (or another tenant's) is not found.
fn members(
    r: &Registry,
    tenant: &TenantId,
    server: &ServerId,
) -> Result<Vec<(Tool, Manifest)>, AppError> {
    let tools = r.tools_of_server(tenant, server)?;
    if tools.is_empty() {
        return Err(AppError::UnknownServer(server.to_string()));
    }
    tools
        .into_iter()
        .map(|tool| {
            let (tool, version) = r.current(tenant, &tool.id)?;
            Ok((tool, version.manifest))
        })
        .collect()
}

/// Each revision of the server's file, oldest first, with the versions that hold it.
fn history(
    r: &Registry,
    tenant: &TenantId,
    members: &[(Tool, Manifest)],
) -> Result<Vec<Revision>, AppError> {
    let mut revisions: BTreeMap<u32, Revision> = BTreeMap::new();
    for (tool, _) in members {
        for summary in r.versions(tenant, &tool.id)? {
            let version = r.version(tenant, &tool.id, &summary.id)?;
            let Some(at) = version.manifest.server else {
                continue;
            };
            let revision = revisions.entry(at.revision).or_insert(Revision {
                revision: at.revision,
                created_at_ms: summary.created_at_ms,
                versions: Vec::new(),
            });
            revision.created_at_ms = revision.created_at_ms.min(summary.created_at_ms);
            revision.versions.push(RevisionVersion {
                tool: tool.id.clone(),
                name: tool.name.clone(),
                version: summary.number,
            });
        }
    }
    Ok(revisions.into_values().collect())
}

/// A name already taken refuses the whole server registration or update.
fn name_is_free(r: &Registry, tenant: &TenantId, name: &ToolName) -> Result<(), AppError> {
    match r.tool_by_name(tenant, name) {
        Ok(_) => Err(RegistryError::Conflict { name: name.clone() }.into()),
        Err(RegistryError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The manifest of one entry of the new file: an existing tool's (`old`) keeps its
/// name, grants, limits, tags, title, description and icon; a new one's takes the
/// file's name for it, no grants and default limits.
fn next_manifest(
    spec: &ToolSpec,
    function: &Option<String>,
    old: Option<&Manifest>,
    policy: &TenantPolicy,
) -> Result<(Manifest, Vec<crate::schema::Diagnostic>), AppError> {
    let one = ToolSpec {
        function: function.clone(),
        name: old.map(|m| m.name.clone()),
        grants: old.map(|m| m.grants.clone()).unwrap_or_default(),
        ..spec.clone()
    };
    let (mut manifest, diagnostics) = spec::manifest(one, policy)?;
    if let Some(old) = old {
        policy.admit_limits(&old.limits)?;
        manifest.limits = old.limits;
        manifest.tags = old.tags.clone();
        manifest.description = old.description.clone();
        manifest.title = old.title.clone();
        manifest.icon = old.icon.clone();
    }
    Ok((manifest, diagnostics))
}
