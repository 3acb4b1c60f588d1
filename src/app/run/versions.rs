//! Tool versions ready to call: each prepared once per tenant on its first call (its
//! folder, its runtime, its packages), and its warm state made in the background in one
//! of the tenant's workers.

use std::sync::Arc;

use super::super::{App, AppError, PreparedTool, tool_folder};
use crate::manifest::{Manifest, VersionId};
use crate::registry::ToolId;
use crate::sandbox::ShareKey;
use crate::tenant::TenantId;

impl App {
    /// A version prepared for calls, on its first call only: writing its file, compiling
    /// its JSON Schema and locating its packages would otherwise sit on the hot path.
    ///
    /// One per tenant and version: two tenants may register the very same version (its
    /// id is its content's digest), and each has a warm state of its own, which only
    /// its own workers may read.
    pub(super) async fn prepared(
        &self,
        tenant: &TenantId,
        version: &VersionId,
        manifest: &Manifest,
    ) -> Result<Arc<PreparedTool>, AppError> {
        let key = (tenant.clone(), version.clone());
        if let Some(p) = self.cached(&key) {
            return Ok(p);
        }
        let tools_dir = self.inner.tools_dir.clone();
        let app = self.clone();
        let manifest = manifest.clone();
        let prepared = self
            .blocking(move |_| {
                let folder = tool_folder(&tools_dir, &manifest)?;
                // Its runtime opened on this node (compiled the first time).
                let runtime = app.inner.runtimes.get(manifest.runtime)?;
                // Installed at registration; installed again from the lock if this
                // machine's package store lost it.
                let site = runtime.packages.site(&manifest.packages)?;
                Ok(PreparedTool::new(folder, manifest.schema, site).on_runtime(manifest.runtime))
            })
            .await?;
        let mut cache = self
            .inner
            .prepared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(Arc::clone(cache.entry(key).or_insert(Arc::new(prepared))))
    }

    /// Prepares the current version of a tool just registered or updated, and its warm
    /// state, in the background: the registration answers at once, and calls run cold
    /// until the warm state is ready (each result says which start it had).
    pub(in crate::app) fn warm_in_background(&self, tenant: &TenantId, tool: &ToolId) {
        if !self.warm_start() {
            return;
        }
        let (app, t, id) = (self.clone(), tenant.clone(), tool.clone());
        tokio::spawn(async move {
            let (t2, id2) = (t.clone(), id.clone());
            let current = app.blocking(move |r| Ok(r.current(&t2, &id2)?)).await;
            let prepared = match current {
                // A version waiting for review is not even prepared.
                Ok((tool, _)) if !tool.approved => return,
                Ok((_, version)) => app.prepared(&t, &version.id, &version.manifest).await,
                Err(e) => Err(e),
            };
            match prepared {
                Ok(prepared) => app.warm_up(&prepared, &t),
                Err(e) => tracing::warn!(tenant = %t, tool = %id, "cannot prepare the tool: {e}"),
            }
        });
    }

    /// Starts preparing the version's warm state in a worker of `tenant`'s (its
    /// module-level code runs there), unless it is known or under way.
    pub(super) fn warm_up(&self, prepared: &Arc<PreparedTool>, tenant: &TenantId) {
        if !self.warm_start() || !prepared.start_warming() {
            return;
        }
        let workers = match self.inner.runtimes.workers(prepared.flavour()) {
            Ok(workers) => workers,
            Err(e) => {
                tracing::warn!(function = prepared.function(), "the tool runs cold: {e}");
                return;
            }
        };
        let prepared = Arc::clone(prepared);
        let share = ShareKey::new(tenant.as_str());
        tokio::spawn(async move {
            let warmth = workers
                .warm_state(prepared.folder(), prepared.packages(), &share)
                .await;
            match warmth {
                Ok(warmth) => {
                    if let crate::sandbox::Warmth::Cold(reason) = &warmth {
                        tracing::info!(
                            function = prepared.function(),
                            "the tool runs cold: {reason}"
                        );
                    }
                    prepared.set_warmth(warmth);
                }
                Err(e) => tracing::warn!(
                    function = prepared.function(),
                    "the tool runs cold: its warm state failed: {e}"
                ),
            }
        });
    }

    pub(super) fn cached(&self, key: &(TenantId, VersionId)) -> Option<Arc<PreparedTool>> {
        self.inner
            .prepared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .cloned()
    }
}
