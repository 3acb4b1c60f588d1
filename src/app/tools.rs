//! A tenant's tools: checked, registered, updated, listed, enabled, deleted, their
//! schema exported; and each version's source written where its calls read it.

use std::path::{Path, PathBuf};

use super::{App, AppError, ToolSpec, ToolView, Validation, approval, spec, validate};
use crate::grants::folder::refuse_warden_folders;
use crate::manifest::Manifest;
use crate::packages::Requirement;
use crate::registry::{Page, Registry, Tool, ToolId, ToolQuery, Update, VersionSummary};
use crate::sandbox::ToolFolder;
use crate::schema::{self, Diagnostic, Format, LettaExtras};
use crate::tenant::{TenantId, TenantPolicy};

impl App {
    /// The checks of registration and the inferred schema, nothing stored. Grants and
    /// limits are admitted against the tenant's policy too.
    pub async fn validate(
        &self,
        tenant: &TenantId,
        spec: ToolSpec,
    ) -> Result<Validation, AppError> {
        let t = tenant.clone();
        let own = self.own_folders();
        self.blocking(move |r| {
            let mut report = validate(&spec);
            if report.valid {
                let policy = r.policy(&t)?;
                let (manifest, _) = spec::manifest(spec, &policy)?;
                refuse_warden_folders(&policy.resolve_grants(&manifest.grants)?, &own)?;
                report.risks = crate::capabilities::warnings(
                    &manifest.grants,
                    &manifest.limits,
                    Some(&policy.ceilings),
                );
            }
            Ok(report)
        })
        .await
    }

    /// Registers a new tool: 201-worthy on success.
    pub async fn register(&self, tenant: &TenantId, spec: ToolSpec) -> Result<ToolView, AppError> {
        let t = tenant.clone();
        let tools_dir = self.inner.tools_dir.clone();
        let app = self.clone();
        let own = self.own_folders();
        self.blocking(move |r| {
            let policy = r.policy(&t)?;
            let requirements = spec::requirements(&spec)?;
            let named = spec.runtime.is_some();
            let (mut manifest, diagnostics) = spec::manifest(spec, &policy)?;
            app.settle(
                &policy,
                &mut manifest,
                named,
                requirements,
                &own,
                &tools_dir,
            )?;
            let widens =
                |old: Option<&Manifest>, new: &Manifest| approval::widening(&policy, old, new);
            let gate: crate::registry::Widens<'_> = policy.review_widening.then_some(&widens);
            let tool = r.register_reviewed(&t, &manifest, gate)?;
            view(r, &t, &tool.id, diagnostics, None)
        })
        .await
        .inspect(|view| {
            self.warm_in_background(tenant, &view.tool.id);
            self.tools_changed(tenant);
        })
    }

    /// What registering and updating do to a new version before it is stored: refused if
    /// a mount reaches one of Warden's folders (`own`); its packages resolved (or found
    /// in the lock cache) and installed for the runtime it runs on; its source written.
    /// A failure leaves no version behind. Blocking.
    fn settle(
        &self,
        policy: &TenantPolicy,
        manifest: &mut Manifest,
        named: bool,
        requirements: Vec<Requirement>,
        own: &[PathBuf],
        tools_dir: &Path,
    ) -> Result<(), AppError> {
        refuse_warden_folders(&policy.resolve_grants(&manifest.grants)?, own)?;
        (manifest.runtime, manifest.packages) =
            self.inner
                .runtimes
                .lock(manifest.runtime, named, requirements)?;
        tool_folder(tools_dir, manifest)?;
        Ok(())
    }

    /// Makes `spec` the tool's current version (see [`Update`]).
    pub async fn update(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        spec: ToolSpec,
    ) -> Result<ToolView, AppError> {
        let (t, id) = (tenant.clone(), tool.clone());
        let tools_dir = self.inner.tools_dir.clone();
        let app = self.clone();
        let own = self.own_folders();
        self.blocking(move |r| {
            let policy = r.policy(&t)?;
            let (current, version) = r.current(&t, &id)?;
            let mut spec = spec;
            // The name is fixed for the tool's life: default to it.
            spec.name.get_or_insert(current.name);
            let requirements = spec::requirements(&spec)?;
            let named = spec.runtime.is_some();
            let (mut manifest, diagnostics) = spec::manifest(spec, &policy)?;
            // A server's tool stays in its server's history, at the file's revision.
            manifest.server = version.manifest.server;
            app.settle(
                &policy,
                &mut manifest,
                named,
                requirements,
                &own,
                &tools_dir,
            )?;
            let widens =
                |old: Option<&Manifest>, new: &Manifest| approval::widening(&policy, old, new);
            let gate: crate::registry::Widens<'_> = policy.review_widening.then_some(&widens);
            let (_, outcome) = r.update_reviewed(&t, &id, &manifest, gate)?;
            view(r, &t, &id, diagnostics, Some(outcome))
        })
        .await
        .inspect(|view| {
            self.warm_in_background(tenant, &view.tool.id);
            self.tools_changed(tenant);
        })
    }

    /// One tool with its current version.
    pub async fn tool(&self, tenant: &TenantId, tool: &ToolId) -> Result<ToolView, AppError> {
        let (t, id) = (tenant.clone(), tool.clone());
        self.blocking(move |r| view(r, &t, &id, Vec::new(), None))
            .await
    }

    /// The tenant's tools, by name, one page at a time.
    pub async fn tools(
        &self,
        tenant: &TenantId,
        query: ToolQuery,
    ) -> Result<Page<Tool, crate::manifest::ToolName>, AppError> {
        let t = tenant.clone();
        self.blocking(move |r| Ok(r.tools(&t, &query)?)).await
    }

    /// The tool's versions, oldest first.
    pub async fn versions(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
    ) -> Result<Vec<VersionSummary>, AppError> {
        let (t, id) = (tenant.clone(), tool.clone());
        self.blocking(move |r| Ok(r.versions(&t, &id)?)).await
    }

    /// Deletes the tool and its versions (audited).
    pub async fn delete(&self, tenant: &TenantId, tool: &ToolId) -> Result<(), AppError> {
        let (t, id) = (tenant.clone(), tool.clone());
        self.blocking(move |r| Ok(r.delete(&t, &id)?)).await?;
        self.tools_changed(tenant);
        Ok(())
    }

    /// Enables or disables the tool (audited when it changes).
    pub async fn set_enabled(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        enabled: bool,
    ) -> Result<ToolView, AppError> {
        let (t, id) = (tenant.clone(), tool.clone());
        self.blocking(move |r| {
            r.set_enabled(&t, &id, enabled)?;
            view(r, &t, &id, Vec::new(), None)
        })
        .await
        .inspect(|_| self.tools_changed(tenant))
    }

    /// The tool's current schema exported as `format`, in its strict variant if asked.
    pub async fn schema(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        format: Format,
        strict: bool,
    ) -> Result<serde_json::Value, AppError> {
        let (t, id) = (tenant.clone(), tool.clone());
        let (_, version) = self.blocking(move |r| Ok(r.current(&t, &id)?)).await?;
        let m = &version.manifest;
        // No tool to describe to a model: its resources and prompts are in the schema.
        if m.schema.members_only {
            return Err(AppError::NothingToCall { tool: tool.clone() });
        }
        let letta = LettaExtras {
            source_code: m.source.clone(),
            return_char_limit: m.limits.return_chars.0,
            tags: m.tags.iter().map(|t| t.as_str().to_owned()).collect(),
            pip_requirements: m
                .packages
                .requirements
                .iter()
                .map(|r| {
                    // Letta pins exact versions: the locked one when a wheel was
                    // installed, else the specifiers as declared.
                    let locked = m.packages.packages.iter().find(|w| w.name == r.name());
                    let version = match locked {
                        Some(w) => Some(w.version.clone()),
                        None => Some(r.specifiers()).filter(|s| !s.is_empty()),
                    };
                    schema::PipRequirement {
                        name: r.name().to_owned(),
                        version,
                    }
                })
                .collect(),
        };
        Ok(schema::export(&m.schema, format, strict, &letta)?)
    }
}

pub(super) fn view(
    r: &Registry,
    tenant: &TenantId,
    tool: &ToolId,
    diagnostics: Vec<Diagnostic>,
    update: Option<Update>,
) -> Result<ToolView, AppError> {
    let (tool, version) = r.current(tenant, tool)?;
    Ok(ToolView {
        tool,
        version: version.number,
        health: schema::health(&version.manifest.schema),
        manifest: version.manifest,
        diagnostics,
        update,
    })
}

/// The folder holding `manifest`'s source, written on first use: to a temporary name,
/// then renamed, so a reader never sees half a file.
pub(super) fn tool_folder(tools_dir: &Path, manifest: &Manifest) -> Result<ToolFolder, AppError> {
    let dir = tools_dir.join(manifest.version_id().as_str());
    let file_name = format!("{}.py", manifest.function);
    let path = dir.join(&file_name);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| AppError::ToolFile { path, source }
    };
    let current = std::fs::read(&path).ok();
    if current.as_deref() != Some(manifest.source.as_bytes()) {
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let tmp = dir.join(format!(".{file_name}.{:016x}", rand::random::<u64>()));
        std::fs::write(&tmp, &manifest.source).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
    }
    Ok(ToolFolder::existing(dir, &file_name))
}
