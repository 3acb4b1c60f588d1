//! Tools and their versions, always scoped by tenant.
//!
//! Every query filters on the tenant in SQL, and every miss, whether the tool never
//! existed or belongs to someone else, is the same [`RegistryError::NotFound`]. A
//! version's manifest is re-hashed when read, so a row edited behind Warden's back is
//! [`RegistryError::Corrupt`], never run.

use serde::{Deserialize, Serialize};

use super::audit::{AuditEvent, ToolLabels, append};
use super::db::{Row, Tx, vals};
use super::{Kind, Page, Registry, RegistryError, ToolId, is_unique_violation, now_ms, page_size};
use crate::manifest::{Manifest, Tag, ToolName, VersionId};
use crate::tenant::TenantId;

/// A tool: a name with a current version, labels and an on/off switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Tool {
    /// Its id.
    pub id: ToolId,
    /// Its owner.
    pub tenant: TenantId,
    /// Its name, unique for the tenant and fixed for the tool's life.
    pub name: ToolName,
    /// The description of the newest manifest registered for it.
    pub description: Option<String>,
    /// The tags of the newest manifest registered for it, sorted.
    pub tags: Vec<Tag>,
    /// False when disabled: the app refuses to call it.
    pub enabled: bool,
    /// The version that runs.
    pub current_version: VersionId,
    /// When it was registered, in Unix milliseconds.
    pub created_at_ms: i64,
    /// When its version, labels or switch last changed, in Unix milliseconds.
    pub updated_at_ms: i64,
}

/// One immutable version of a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Version {
    /// The tool.
    pub tool: ToolId,
    /// Its content hash.
    pub id: VersionId,
    /// 1 for the tool's first version, then one more for each new content.
    pub number: u32,
    /// The manifest as registered.
    pub manifest: Manifest,
    /// When this content was first registered, in Unix milliseconds.
    pub created_at_ms: i64,
}

/// A version in a listing, without its manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VersionSummary {
    /// Its content hash.
    pub id: VersionId,
    /// Its number.
    pub number: u32,
    /// When it was first registered, in Unix milliseconds.
    pub created_at_ms: i64,
    /// Whether it is the tool's current version.
    pub current: bool,
}

/// What [`Registry::update`] did to the tool's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Update {
    /// The content equals the current version's: no version changed (labels may have).
    Unchanged,
    /// A new version was stored and made current.
    Created,
    /// The content equals an older version's, which is current again.
    Restored,
}

/// Which tools [`Registry::tools`] lists: sorted by name, one page at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields, default)]
#[into_params(parameter_in = Query)]
pub struct ToolQuery {
    /// Only tools with this tag.
    pub tag: Option<Tag>,
    /// Only tools named after this (the previous page's `next`).
    pub after: Option<ToolName>,
    /// Tools per page; 0 means [`DEFAULT_PAGE_SIZE`](super::DEFAULT_PAGE_SIZE), and at
    /// most [`MAX_PAGE_SIZE`](super::MAX_PAGE_SIZE) are returned.
    pub limit: u32,
}

/// The columns [`read_tool`] reads, from `tools t`, in `tx`'s dialect.
fn tool_columns(tx: &Tx<'_>) -> String {
    format!(
        "t.id, t.tenant_id, t.name, t.description, t.enabled, \
         t.current_version, t.created_at_ms, t.updated_at_ms, \
         (SELECT {} FROM tool_tags g WHERE g.tool_id = t.id)",
        tx.dialect().join_commas("g.tag")
    )
}

struct ToolRow {
    id: String,
    tenant: String,
    name: String,
    description: Option<String>,
    enabled: bool,
    current_version: String,
    created_at_ms: i64,
    updated_at_ms: i64,
    tags: Option<String>,
}

fn read_tool(r: &Row) -> Result<ToolRow, RegistryError> {
    Ok(ToolRow {
        id: r.get(0)?,
        tenant: r.get(1)?,
        name: r.get(2)?,
        description: r.get(3)?,
        enabled: r.get(4)?,
        current_version: r.get(5)?,
        created_at_ms: r.get(6)?,
        updated_at_ms: r.get(7)?,
        tags: r.get(8)?,
    })
}

impl ToolRow {
    fn into_tool(self) -> Result<Tool, RegistryError> {
        let what = format!("tool {}", self.id);
        let bad = |e: &dyn std::fmt::Display| RegistryError::corrupt(&what, e);
        // Tags never contain ',', so the concatenation splits back exactly.
        let mut tags = self
            .tags
            .as_deref()
            .unwrap_or("")
            .split(',')
            .filter(|t| !t.is_empty())
            .map(|t| t.parse::<Tag>().map_err(|e| bad(&e)))
            .collect::<Result<Vec<_>, _>>()?;
        tags.sort();
        Ok(Tool {
            id: self.id.parse().map_err(|e| bad(&e))?,
            tenant: self.tenant.parse().map_err(|e| bad(&e))?,
            name: self.name.parse().map_err(|e| bad(&e))?,
            description: self.description,
            tags,
            enabled: self.enabled,
            current_version: self.current_version.parse().map_err(|e| bad(&e))?,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
        })
    }
}

fn not_found(tool: &ToolId) -> RegistryError {
    RegistryError::NotFound {
        kind: Kind::Tool,
        id: tool.to_string(),
    }
}

/// The tool, if it exists and belongs to `tenant`.
fn load_tool(tx: &mut Tx<'_>, tenant: &TenantId, tool: &ToolId) -> Result<Tool, RegistryError> {
    let sql = format!(
        "SELECT {} FROM tools t WHERE t.id = ?1 AND t.tenant_id = ?2",
        tool_columns(tx)
    );
    let row = tx
        .query_opt(&sql, vals![tool.as_str(), tenant.as_str()])?
        .ok_or_else(|| not_found(tool))?;
    read_tool(&row)?.into_tool()
}

/// A version of a tool already known to belong to the caller's tenant.
fn load_version(
    tx: &mut Tx<'_>,
    tool: &ToolId,
    version: &VersionId,
) -> Result<Version, RegistryError> {
    let row = tx.query_opt(
        "SELECT number, manifest, created_at_ms FROM versions
         WHERE tool_id = ?1 AND version_id = ?2",
        vals![tool.as_str(), version.as_str()],
    )?;
    let Some(row) = row else {
        return Err(RegistryError::NotFound {
            kind: Kind::Version,
            id: version.to_string(),
        });
    };
    let (number, manifest, created_at_ms): (i64, String, i64) =
        (row.get(0)?, row.get(1)?, row.get(2)?);
    let what = format!("version {version} of tool {tool}");
    let manifest: Manifest =
        serde_json::from_str(&manifest).map_err(|e| RegistryError::corrupt(&what, e))?;
    if manifest.version_id() != *version {
        return Err(RegistryError::corrupt(
            &what,
            "its manifest no longer hashes to its id",
        ));
    }
    Ok(Version {
        tool: tool.clone(),
        id: version.clone(),
        number: u32::try_from(number).map_err(|e| RegistryError::corrupt(&what, e))?,
        manifest,
        created_at_ms,
    })
}

fn insert_version(
    tx: &mut Tx<'_>,
    tool: &ToolId,
    version: &VersionId,
    number: i64,
    manifest: &Manifest,
    at_ms: i64,
) -> Result<(), RegistryError> {
    let json = serde_json::to_string(manifest)
        .map_err(|e| RegistryError::corrupt(format!("manifest of {}", manifest.name), e))?;
    tx.execute(
        "INSERT INTO versions (tool_id, version_id, number, manifest, created_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        vals![tool.as_str(), version.as_str(), number, json, at_ms],
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
        manifest.check()?;
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
                                    created_at_ms, updated_at_ms)
                 VALUES (?1, ?2, ?3, ?4, TRUE, ?5, ?6, ?6)",
                vals![
                    id.as_str(),
                    tenant.as_str(),
                    manifest.name.as_str(),
                    manifest.description.as_deref(),
                    version.as_str(),
                    now
                ],
            )
            .map_err(|e| {
                if is_unique_violation(&e) {
                    conflict()
                } else {
                    e
                }
            })?;
            insert_version(tx, &id, &version, 1, manifest, now)?;
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
            let outcome = if version == current.current_version {
                Update::Unchanged
            } else {
                let known = tx.query_opt(
                    "SELECT 1 FROM versions WHERE tool_id = ?1 AND version_id = ?2",
                    vals![tool.as_str(), version.as_str()],
                )?;
                if known.is_some() {
                    Update::Restored
                } else {
                    let number: i64 = tx
                        .query_one(
                            "SELECT coalesce(max(number), 0) + 1 FROM versions WHERE tool_id = ?1",
                            vals![tool.as_str()],
                        )?
                        .get(0)?;
                    insert_version(tx, tool, &version, number, manifest, now)?;
                    Update::Created
                }
            };
            if outcome == Update::Unchanged && !labels_changed {
                return Ok((current, outcome));
            }
            tx.execute(
                "UPDATE tools SET current_version = ?2, description = ?3, updated_at_ms = ?4
                 WHERE id = ?1",
                vals![
                    tool.as_str(),
                    version.as_str(),
                    manifest.description.as_deref(),
                    now
                ],
            )?;
            replace_tags(tx, tool, &manifest.tags)?;
            if outcome != Update::Unchanged {
                let previous = load_version(tx, tool, &current.current_version)?;
                append(
                    tx,
                    tenant,
                    &AuditEvent::ToolUpdated {
                        tool: tool.clone(),
                        from: current.current_version.clone(),
                        to: version.clone(),
                    },
                )?;
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

    /// One of the tenant's tools.
    pub fn tool(&self, tenant: &TenantId, tool: &ToolId) -> Result<Tool, RegistryError> {
        self.autocommit(|tx| load_tool(tx, tenant, tool))
    }

    /// The tenant's tool called `name`.
    pub fn tool_by_name(&self, tenant: &TenantId, name: &ToolName) -> Result<Tool, RegistryError> {
        self.read(|tx| {
            let sql = format!(
                "SELECT {} FROM tools t WHERE t.tenant_id = ?1 AND t.name = ?2",
                tool_columns(tx)
            );
            let row = tx
                .query_opt(&sql, vals![tenant.as_str(), name.as_str()])?
                .ok_or_else(|| RegistryError::NotFound {
                    kind: Kind::Tool,
                    id: name.to_string(),
                })?;
            read_tool(&row)?.into_tool()
        })
    }

    /// The tenant's tools, by name, one page at a time; see [`ToolQuery`].
    pub fn tools(
        &self,
        tenant: &TenantId,
        query: &ToolQuery,
    ) -> Result<Page<Tool, ToolName>, RegistryError> {
        let limit = page_size(query.limit);
        self.read(|tx| {
            let sql = format!(
                "SELECT {} FROM tools t
                 WHERE t.tenant_id = ?1
                   AND (CAST(?2 AS TEXT) IS NULL OR EXISTS
                        (SELECT 1 FROM tool_tags g WHERE g.tool_id = t.id AND g.tag = ?2))
                   AND (CAST(?3 AS TEXT) IS NULL OR t.name > ?3)
                 ORDER BY t.name LIMIT ?4",
                tool_columns(tx)
            );
            let rows = tx.query(
                &sql,
                vals![
                    tenant.as_str(),
                    query.tag.as_ref().map(Tag::as_str),
                    query.after.as_ref().map(ToolName::as_str),
                    limit + 1
                ],
            )?;
            let mut items = rows
                .iter()
                .map(|r| read_tool(r)?.into_tool())
                .collect::<Result<Vec<_>, _>>()?;
            let next = if items.len() > limit as usize {
                items.truncate(limit as usize);
                items.last().map(|t| t.name.clone())
            } else {
                None
            };
            Ok(Page { items, next })
        })
    }

    /// The tool's versions, oldest first.
    pub fn versions(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
    ) -> Result<Vec<VersionSummary>, RegistryError> {
        self.read(|tx| {
            let current = load_tool(tx, tenant, tool)?.current_version;
            let rows = tx.query(
                "SELECT version_id, number, created_at_ms FROM versions
                 WHERE tool_id = ?1 ORDER BY number",
                vals![tool.as_str()],
            )?;
            rows.iter()
                .map(|r| {
                    let (id, number, created_at_ms): (String, i64, i64) =
                        (r.get(0)?, r.get(1)?, r.get(2)?);
                    let bad = |e: &dyn std::fmt::Display| {
                        RegistryError::corrupt(format!("version {id} of tool {tool}"), e)
                    };
                    let id: VersionId = id.parse().map_err(|e| bad(&e))?;
                    Ok(VersionSummary {
                        current: id == current,
                        id,
                        number: u32::try_from(number).map_err(|e| bad(&e))?,
                        created_at_ms,
                    })
                })
                .collect()
        })
    }

    /// One version of the tool, current or not.
    pub fn version(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        version: &VersionId,
    ) -> Result<Version, RegistryError> {
        self.read(|tx| {
            load_tool(tx, tenant, tool)?;
            load_version(tx, tool, version)
        })
    }

    /// The tool with its current version: what a call runs.
    pub fn current(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
    ) -> Result<(Tool, Version), RegistryError> {
        // Versions never change: the tool's row names one, which is read next.
        self.autocommit(|tx| {
            let t = load_tool(tx, tenant, tool)?;
            let v = load_version(tx, tool, &t.current_version)?;
            Ok((t, v))
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
