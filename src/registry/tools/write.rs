//! Writing tools and versions: registration, updates through the review gate
//! (`registry/reviews.rs`), deletion and the on/off switch. Every write is one
//! transaction under the tenant's lock, audited in it.

use super::{Tool, Update, load_tool, load_version};
use crate::manifest::{Manifest, Tag, VersionId};
use crate::registry::audit::{AuditEvent, ToolLabels, append};
use crate::registry::db::{Tx, vals};
use crate::registry::reviews::{ReviewState, Widens, submit};
use crate::registry::{Registry, RegistryError, ToolId, is_unique_violation, now_ms};
use crate::tenant::TenantId;

fn insert_version(
    tx: &mut Tx<'_>,
    tool: &ToolId,
    version: &VersionId,
    number: i64,
    manifest: &Manifest,
    at_ms: i64,
    review: ReviewState,
) -> Result<(), RegistryError> {
    let json = serde_json::to_string(manifest)
        .map_err(|e| RegistryError::corrupt(format!("manifest of {}", manifest.name), e))?;
    tx.execute(
        "INSERT INTO versions (tool_id, version_id, number, manifest, created_at_ms, review)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        vals![
            tool.as_str(),
            version.as_str(),
            number,
            json,
            at_ms,
            review.as_str()
        ],
    )?;
    Ok(())
}

fn replace_tags(tx: &mut Tx<'_>, tool: &ToolId, tags: &[Tag]) -> Result<(), RegistryError> {
    tx.execute(
        "DELETE FROM tool_tags WHERE tool_id = ?1",
        vals![tool.as_str()],
    )?;
    for tag in tags {
        tx.execute(
            "INSERT INTO tool_tags (tool_id, tag) VALUES (?1, ?2)",
            vals![tool.as_str(), tag.as_str()],
        )?;
    }
    Ok(())
}

impl Registry {
    /// Registers a new tool for `tenant` with `manifest` as its first version, all or
    /// nothing. A name the tenant already uses is [`RegistryError::Conflict`].
    ///
    /// The manifest is checked ([`Manifest::check`]) but not admitted against the
    /// tenant's policy: the caller does that first.
    pub fn register(&self, tenant: &TenantId, manifest: &Manifest) -> Result<Tool, RegistryError> {
        self.register_reviewed(tenant, manifest, None)
    }

    /// [`Registry::register`] under a policy that holds widening versions: `widens`
    /// says whether the first version widens no capabilities at all (then it is held
    /// for review: the tool exists, and refuses calls until a reviewer approves).
    /// `None`: no review.
    pub fn register_reviewed(
        &self,
        tenant: &TenantId,
        manifest: &Manifest,
        widens: Widens<'_>,
    ) -> Result<Tool, RegistryError> {
        manifest.check()?;
        let held = widens.is_some_and(|w| w(None, manifest));
        let id = ToolId::generate();
        let version = manifest.version_id();
        let now = now_ms();
        self.write(|tx| {
            tx.lock_tenant(tenant)?;
            let conflict = || RegistryError::Conflict {
                name: manifest.name.clone(),
            };
            let taken = tx.query_opt(
                "SELECT 1 FROM tools WHERE tenant_id = ?1 AND name = ?2",
                vals![tenant.as_str(), manifest.name.as_str()],
            )?;
            if taken.is_some() {
                return Err(conflict());
            }
            tx.execute(
                "INSERT INTO tools (id, tenant_id, name, description, enabled, current_version,
                                    created_at_ms, updated_at_ms, server_id)
                 VALUES (?1, ?2, ?3, ?4, TRUE, ?5, ?6, ?6, ?7)",
                vals![
                    id.as_str(),
                    tenant.as_str(),
                    manifest.name.as_str(),
                    manifest.description.as_deref(),
                    version.as_str(),
                    now,
                    manifest.server.as_ref().map(|s| s.id.as_str())
                ],
            )
            .map_err(|e| {
                if is_unique_violation(&e) {
                    conflict()
                } else {
                    e
                }
            })?;
            let review = if held {
                ReviewState::Pending
            } else {
                ReviewState::Approved
            };
            insert_version(tx, &id, &version, 1, manifest, now, review)?;
            if held {
                tx.execute(
                    "UPDATE tools SET pending_version = ?2 WHERE id = ?1",
                    vals![id.as_str(), version.as_str()],
                )?;
            }
            replace_tags(tx, &id, &manifest.tags)?;
            let mut tags = manifest.tags.clone();
            tags.sort();
            let labels = (!tags.is_empty() || manifest.description.is_some()).then(|| ToolLabels {
                tags,
                description: manifest.description.clone(),
            });
            append(
                tx,
                tenant,
                &AuditEvent::ToolCreated {
                    tool: id.clone(),
                    name: manifest.name.clone(),
                    version: version.clone(),
                    labels,
                },
            )?;
            if manifest.grants != Default::default() {
                let event =
                    AuditEvent::grants_changed(id.clone(), version.clone(), &manifest.grants);
                append(tx, tenant, &event)?;
            }
            let review = match (held, widens.is_some()) {
                (true, _) => Some(AuditEvent::ReviewPending {
                    tool: id.clone(),
                    version: version.clone(),
                    number: 1,
                    against: None,
                }),
                (false, true) => Some(AuditEvent::ReviewNotNeeded {
                    tool: id.clone(),
                    version: version.clone(),
                    against: None,
                }),
                (false, false) => None,
            };
            if let Some(event) = review {
                append(tx, tenant, &event)?;
            }
            tx.tools_changed(tenant)?;
            load_tool(tx, tenant, &id)
        })
    }

    /// Makes `manifest` the tool's current version; see [`Update`] for the three
    /// outcomes. Tags and description are replaced by the manifest's in every case (a
    /// change of them is audited as [`AuditEvent::ToolLabelsChanged`], whether or not
    /// the version changed). The name must stay the same ([`RegistryError::Rename`]).
    pub fn update(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        manifest: &Manifest,
    ) -> Result<(Tool, Update), RegistryError> {
        self.update_reviewed(tenant, tool, manifest, None)
    }

    /// [`Registry::update`] under a policy that holds widening versions: `widens` says
    /// whether the manifest widens the tool's approved version; if so it is stored and
    /// held ([`Update::Pending`]), and the current version stays. Either way a version
    /// waiting before is superseded by a different one. Content a reviewer rejected is
    /// refused (`ReviewError::Rejected`), policy or not.
    pub fn update_reviewed(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        manifest: &Manifest,
        widens: Widens<'_>,
    ) -> Result<(Tool, Update), RegistryError> {
        manifest.check()?;
        let version = manifest.version_id();
        let now = now_ms();
        self.write(|tx| {
            tx.lock_tenant(tenant)?;
            let current = load_tool(tx, tenant, tool)?;
            if current.name != manifest.name {
                return Err(RegistryError::Rename {
                    tool: tool.clone(),
                    current: current.name,
                    requested: manifest.name.clone(),
                });
            }
            let mut tags = manifest.tags.clone();
            tags.sort();
            let labels_changed =
                tags != current.tags || current.description != manifest.description;
            let (outcome, submitted) = if version == current.current_version && current.approved {
                (Update::Unchanged, false)
            } else if current.pending_version.as_ref() == Some(&version) {
                // Still waiting: nothing about its version changes.
                (Update::Pending, false)
            } else {
                let known = tx.query_opt(
                    "SELECT 1 FROM versions WHERE tool_id = ?1 AND version_id = ?2",
                    vals![tool.as_str(), version.as_str()],
                )?;
                if known.is_none() {
                    let number: i64 = tx
                        .query_one(
                            "SELECT coalesce(max(number), 0) + 1 FROM versions WHERE tool_id = ?1",
                            vals![tool.as_str()],
                        )?
                        .get(0)?;
                    let review = ReviewState::Approved;
                    insert_version(tx, tool, &version, number, manifest, now, review)?;
                }
                let outcome = submit(
                    tx,
                    tenant,
                    &current,
                    &version,
                    manifest,
                    known.is_none(),
                    widens,
                )?;
                (outcome, true)
            };
            if !submitted && !labels_changed {
                return Ok((current, outcome));
            }
            tx.execute(
                "UPDATE tools SET description = ?2, updated_at_ms = ?3 WHERE id = ?1",
                vals![tool.as_str(), manifest.description.as_deref(), now],
            )?;
            replace_tags(tx, tool, &manifest.tags)?;
            if submitted {
                let previous = load_version(tx, tool, &current.current_version)?;
                if outcome != Update::Pending {
                    append(
                        tx,
                        tenant,
                        &AuditEvent::ToolUpdated {
                            tool: tool.clone(),
                            from: current.current_version.clone(),
                            to: version.clone(),
                        },
                    )?;
                }
                if previous.manifest.grants != manifest.grants {
                    let event =
                        AuditEvent::grants_changed(tool.clone(), version.clone(), &manifest.grants);
                    append(tx, tenant, &event)?;
                }
            }
            if labels_changed {
                let event = AuditEvent::ToolLabelsChanged {
                    tool: tool.clone(),
                    from: ToolLabels {
                        tags: current.tags.clone(),
                        description: current.description.clone(),
                    },
                    to: ToolLabels {
                        tags,
                        description: manifest.description.clone(),
                    },
                };
                append(tx, tenant, &event)?;
            }
            tx.tools_changed(tenant)?;
            Ok((load_tool(tx, tenant, tool)?, outcome))
        })
    }

    /// Deletes the tool with all its versions and tags; its name is free again. The
    /// audit trail keeps its events.
    pub fn delete(&self, tenant: &TenantId, tool: &ToolId) -> Result<(), RegistryError> {
        self.write(|tx| {
            tx.lock_tenant(tenant)?;
            let t = load_tool(tx, tenant, tool)?;
            tx.execute(
                "DELETE FROM tools WHERE id = ?1 AND tenant_id = ?2",
                vals![tool.as_str(), tenant.as_str()],
            )?;
            append(
                tx,
                tenant,
                &AuditEvent::ToolDeleted {
                    tool: tool.clone(),
                    name: t.name,
                },
            )?;
            tx.tools_changed(tenant)?;
            Ok(())
        })
    }

    /// Enables or disables the tool; a change is audited, a repeat is not.
    pub fn set_enabled(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        enabled: bool,
    ) -> Result<Tool, RegistryError> {
        let now = now_ms();
        self.write(|tx| {
            tx.lock_tenant(tenant)?;
            let t = load_tool(tx, tenant, tool)?;
            if t.enabled == enabled {
                return Ok(t);
            }
            tx.execute(
                "UPDATE tools SET enabled = ?2, updated_at_ms = ?3 WHERE id = ?1",
                vals![tool.as_str(), enabled, now],
            )?;
            let event = if enabled {
                AuditEvent::ToolEnabled { tool: tool.clone() }
            } else {
                AuditEvent::ToolDisabled { tool: tool.clone() }
            };
            append(tx, tenant, &event)?;
            tx.tools_changed(tenant)?;
            load_tool(tx, tenant, tool)
        })
    }
}
