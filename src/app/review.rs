//! What a reviewer asks of a tool: the capabilities of one of its versions under the
//! tenant's current ceilings, and what changed between two versions.

use crate::capabilities::{Capabilities, Diff, Subject, diff};
use crate::registry::{Kind, Registry, RegistryError, Tool, ToolId, Version};
use crate::tenant::TenantId;

use super::{App, AppError};

/// A version as a reviewer names it: its number (`3`) or its id.
fn find_version(
    r: &Registry,
    tenant: &TenantId,
    tool: &ToolId,
    version: &str,
) -> Result<Version, AppError> {
    let summaries = r.versions(tenant, tool)?;
    let found = match version.parse::<u32>() {
        Ok(number) => summaries.iter().find(|v| v.number == number),
        Err(_) => summaries.iter().find(|v| v.id.as_str() == version),
    };
    let Some(summary) = found else {
        return Err(RegistryError::NotFound {
            kind: Kind::Version,
            id: version.to_owned(),
        }
        .into());
    };
    Ok(r.version(tenant, tool, &summary.id)?)
}

fn subject(tool: &Tool, version: &Version) -> Subject {
    Subject {
        name: tool.name.to_string(),
        function: version.manifest.function.clone(),
        tool: Some(tool.id.to_string()),
        version: Some(version.id.to_string()),
        number: Some(version.number),
        file: None,
    }
}

fn describe(
    r: &Registry,
    tenant: &TenantId,
    tool: &Tool,
    version: &Version,
) -> Result<Capabilities, AppError> {
    let policy = r.policy(tenant)?;
    let m = &version.manifest;
    let mut document = Capabilities::describe(
        subject(tool, version),
        &m.grants,
        &m.limits,
        &m.packages,
        Some(&policy.ceilings),
    );
    if !m.runtime.is_standard() {
        // Its files are named by the App, from the runtime open on the node.
        document.runtime = crate::capabilities::Runtime::of(m.runtime, None);
    }
    Ok(document)
}

/// The capabilities of the tool's `version` (a number or an id; default: the current
/// one), with its limits as the tenant's current ceilings make them.
pub fn version_capabilities(
    r: &Registry,
    tenant: &TenantId,
    tool: &ToolId,
    version: Option<&str>,
) -> Result<Capabilities, AppError> {
    let (tool_row, current) = r.current(tenant, tool)?;
    let version = match version {
        Some(v) => find_version(r, tenant, tool, v)?,
        None => current,
    };
    describe(r, tenant, &tool_row, &version)
}

/// What changed from version `from` to version `to` of the tool (numbers or ids).
pub fn version_diff(
    r: &Registry,
    tenant: &TenantId,
    tool: &ToolId,
    from: &str,
    to: &str,
) -> Result<Diff, AppError> {
    let tool_row = r.tool(tenant, tool)?;
    let old = find_version(r, tenant, tool, from)?;
    let new = find_version(r, tenant, tool, to)?;
    Ok(diff(
        &describe(r, tenant, &tool_row, &old)?,
        &old.manifest.source,
        &describe(r, tenant, &tool_row, &new)?,
        &new.manifest.source,
    ))
}

impl App {
    /// See [`version_capabilities`].
    pub async fn capabilities(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        version: Option<String>,
    ) -> Result<Capabilities, AppError> {
        let (t, id) = (tenant.clone(), tool.clone());
        let mut document = self
            .blocking(move |r| version_capabilities(r, &t, &id, version.as_deref()))
            .await?;
        let flavour = document.runtime.flavour;
        if !flavour.is_standard() {
            let runtimes = self.clone();
            let manifest = self
                .blocking(move |_| runtimes.inner.runtimes.get(flavour))
                .await
                .ok()
                .map(|r| r.workers.runtime().manifest.clone());
            document.runtime = crate::capabilities::Runtime::of(flavour, manifest);
        }
        document.runtime.layers = self.layers().into_iter().map(String::from).collect();
        Ok(document)
    }

    /// See [`version_diff`].
    pub async fn diff(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        from: String,
        to: String,
    ) -> Result<Diff, AppError> {
        let (t, id) = (tenant.clone(), tool.clone());
        self.blocking(move |r| version_diff(r, &t, &id, &from, &to))
            .await
    }
}
