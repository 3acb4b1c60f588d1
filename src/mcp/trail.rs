//! The local audit trail of `warden mcp`: every call through the stdio server is
//! recorded, like a call through `warden serve`, in a registry of its own (by default
//! the SQLite file `$WARDEN_HOME/mcp-audit.db`) under one tenant named
//! [`TRAIL_TENANT`]. Each tool file is registered there as it is first called (its
//! source, schema, grants and limits; a changed file is a new version, its widened
//! grants audited as `grants_changed`), and each call is appended as a `run` event of
//! the version that ran. `warden audit export --db FILE --tenant ID` exports it,
//! signed; `warden audit verify` checks it offline.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::manifest::VersionId;
use crate::manifest::{Manifest, ToolName};
use crate::outcome::{CallResult, Warning};
use crate::registry::{AuditEvent, Location, Registry, RegistryError, ToolId, Update};
use crate::tenant::{TenantId, TenantPolicy};

/// The name of the tenant whose trail holds `warden mcp`'s calls.
pub const TRAIL_TENANT: &str = "warden-mcp";

/// Where `warden mcp` records its calls.
pub struct LocalTrail {
    registry: Registry,
    tenant: TenantId,
    /// The registered tool and version of each name, as last recorded.
    known: Mutex<HashMap<ToolName, (ToolId, VersionId)>>,
}

impl std::fmt::Debug for LocalTrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTrail")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl LocalTrail {
    /// Opens (creating it and its tenant the first time) the trail at `location`.
    /// Blocking.
    pub fn open(location: &Location) -> Result<LocalTrail, RegistryError> {
        let registry = Registry::connect(location)?;
        let oldest = |registry: &Registry| -> Result<Option<TenantId>, RegistryError> {
            Ok(registry
                .tenants()?
                .into_iter()
                .find(|t| t.name == TRAIL_TENANT)
                .map(|t| t.id))
        };
        let tenant = match oldest(&registry)? {
            Some(id) => id,
            None => {
                // Its key is never shown: nothing calls in with it. Two servers starting
                // at once may both make one: both then use the older.
                registry.create_tenant(TRAIL_TENANT, &TenantPolicy::default())?;
                oldest(&registry)?.ok_or_else(|| RegistryError::NotFound {
                    kind: crate::registry::Kind::Tenant,
                    id: TRAIL_TENANT.into(),
                })?
            }
        };
        Ok(LocalTrail {
            registry,
            tenant,
            known: Mutex::default(),
        })
    }

    /// The tenant whose trail this is.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// Records one call of `manifest`'s version (registering the tool or its new
    /// version first when needed). Blocking.
    pub fn record(
        &self,
        manifest: &Manifest,
        result: &CallResult,
        warnings: &[Warning],
    ) -> Result<(), RegistryError> {
        let version = manifest.version_id();
        let known = self
            .known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&manifest.name)
            .cloned();
        let tool = match known {
            Some((tool, at)) if at == version => tool,
            _ => {
                let tool = self.register(manifest)?;
                self.known
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(manifest.name.clone(), (tool.clone(), version.clone()));
                tool
            }
        };
        let event = AuditEvent::run(tool, version, None, result).with_warnings(warnings);
        self.registry.append_audit(&self.tenant, &event)?;
        Ok(())
    }

    /// The tool called like `manifest`, registered or brought to its version.
    fn register(&self, manifest: &Manifest) -> Result<ToolId, RegistryError> {
        match self.registry.tool_by_name(&self.tenant, &manifest.name) {
            Ok(tool) => {
                let (tool, _outcome): (_, Update) =
                    self.registry.update(&self.tenant, &tool.id, manifest)?;
                Ok(tool.id)
            }
            Err(RegistryError::NotFound { .. }) => {
                Ok(self.registry.register(&self.tenant, manifest)?.id)
            }
            Err(e) => Err(e),
        }
    }
}
