//! Tools and their versions, always scoped by tenant.
//!
//! Every query filters on the tenant in SQL, and every miss, whether the tool never
//! existed or belongs to someone else, is the same [`RegistryError::NotFound`]. A
//! version's manifest is re-hashed when read, so a row edited behind Warden's back is
//! [`RegistryError::Corrupt`], never run.

use rusqlite::{OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};

use super::audit::{AuditEvent, ToolLabels, append};
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

const TOOL_COLUMNS: &str = "t.id, t.tenant_id, t.name, t.description, t.enabled, \
     t.current_version, t.created_at_ms, t.updated_at_ms, \
     (SELECT group_concat(g.tag, ',') FROM tool_tags g WHERE g.tool_id = t.id)";

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

fn read_tool(r: &rusqlite::Row<'_>) -> rusqlite::Result<ToolRow> {
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
fn load_tool(
    tx: &Transaction<'_>,
    tenant: &TenantId,
    tool: &ToolId,
) -> Result<Tool, RegistryError> {
    tx.query_row(
        &format!("SELECT {TOOL_COLUMNS} FROM tools t WHERE t.id = ?1 AND t.tenant_id = ?2"),
        [tool.as_str(), tenant.as_str()],
        read_tool,
    )
    .optional()?
    .ok_or_else(|| not_found(tool))?
    .into_tool()
}

/// A version of a tool already known to belong to the caller's tenant.
fn load_version(
    tx: &Transaction<'_>,
    tool: &ToolId,
    version: &VersionId,
) -> Result<Version, RegistryError> {
    let row: Option<(i64, String, i64)> = tx
        .query_row(
            "SELECT number, manifest, created_at_ms FROM versions
             WHERE tool_id = ?1 AND version_id = ?2",
            [tool.as_str(), version.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((number, manifest, created_at_ms)) = row else {
        return Err(RegistryError::NotFound {
            kind: Kind::Version,
            id: version.to_string(),
        });
    };
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
    tx: &Transaction<'_>,
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
        params![tool.as_str(), version.as_str(), number, json, at_ms],
    )?;
    Ok(())
}

fn replace_tags(tx: &Transaction<'_>, tool: &ToolId, tags: &[Tag]) -> Result<(), RegistryError> {
    tx.execute("DELETE FROM tool_tags WHERE tool_id = ?1", [tool.as_str()])?;
    let mut stmt = tx.prepare("INSERT INTO tool_tags (tool_id, tag) VALUES (?1, ?2)")?;
    for tag in tags {
        stmt.execute([tool.as_str(), tag.as_str()])?;
    }
    Ok(())
}

fn ensure_tenant(tx: &Transaction<'_>, tenant: &TenantId) -> Result<(), RegistryError> {
    let exists = tx
        .query_row(
            "SELECT 1 FROM tenants WHERE id = ?1",
            [tenant.as_str()],
            |_| Ok(()),
        )
        .optional()?;
    exists.ok_or_else(|| RegistryError::NotFound {
        kind: Kind::Tenant,
        id: tenant.to_string(),
    })
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
            ensure_tenant(tx, tenant)?;
            let conflict = || RegistryError::Conflict {
                name: manifest.name.clone(),
            };
            let taken = tx
                .query_row(
                    "SELECT 1 FROM tools WHERE tenant_id = ?1 AND name = ?2",
                    [tenant.as_str(), manifest.name.as_str()],
                    |_| Ok(()),
                )
                .optional()?;
            if taken.is_some() {
                return Err(conflict());
            }
            tx.execute(
                "INSERT INTO tools (id, tenant_id, name, description, enabled, current_version,
                                    created_at_ms, updated_at_ms)
                 VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?6)",
                params![
                    id.as_str(),
                    tenant.as_str(),
                    manifest.name.as_str(),
                    manifest.description,
                    version.as_str(),
                    now
                ],
            )
            .map_err(|e| {
                if is_unique_violation(&e) {
                    conflict()
                } else {
                    e.into()
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
                let known = tx
                    .query_row(
                        "SELECT 1 FROM versions WHERE tool_id = ?1 AND version_id = ?2",
                        [tool.as_str(), version.as_str()],
                        |_| Ok(()),
                    )
                    .optional()?;
                if known.is_some() {
                    Update::Restored
                } else {
                    let number: i64 = tx.query_row(
                        "SELECT coalesce(max(number), 0) + 1 FROM versions WHERE tool_id = ?1",
                        [tool.as_str()],
                        |r| r.get(0),
                    )?;
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
                params![tool.as_str(), version.as_str(), manifest.description, now],
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
            Ok((load_tool(tx, tenant, tool)?, outcome))
        })
    }

    /// One of the tenant's tools.
    pub fn tool(&self, tenant: &TenantId, tool: &ToolId) -> Result<Tool, RegistryError> {
        self.read(|tx| load_tool(tx, tenant, tool))
    }

    /// The tenant's tool called `name`.
    pub fn tool_by_name(&self, tenant: &TenantId, name: &ToolName) -> Result<Tool, RegistryError> {
        self.read(|tx| {
            tx.query_row(
                &format!(
                    "SELECT {TOOL_COLUMNS} FROM tools t WHERE t.tenant_id = ?1 AND t.name = ?2"
                ),
                [tenant.as_str(), name.as_str()],
                read_tool,
            )
            .optional()?
            .ok_or_else(|| RegistryError::NotFound {
                kind: Kind::Tool,
                id: name.to_string(),
            })?
            .into_tool()
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
            let mut stmt = tx.prepare(&format!(
                "SELECT {TOOL_COLUMNS} FROM tools t
                 WHERE t.tenant_id = ?1
                   AND (?2 IS NULL OR EXISTS
                        (SELECT 1 FROM tool_tags g WHERE g.tool_id = t.id AND g.tag = ?2))
                   AND (?3 IS NULL OR t.name > ?3)
                 ORDER BY t.name LIMIT ?4"
            ))?;
            let rows = stmt
                .query_map(
                    params![
                        tenant.as_str(),
                        query.tag.as_ref().map(Tag::as_str),
                        query.after.as_ref().map(ToolName::as_str),
                        limit + 1
                    ],
                    read_tool,
                )?
                .collect::<Result<Vec<_>, _>>()?;
            let mut items = rows
                .into_iter()
                .map(ToolRow::into_tool)
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
            let mut stmt = tx.prepare(
                "SELECT version_id, number, created_at_ms FROM versions
                 WHERE tool_id = ?1 ORDER BY number",
            )?;
            let rows = stmt
                .query_map([tool.as_str()], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get(2)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            rows.into_iter()
                .map(|(id, number, created_at_ms)| {
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
        self.read(|tx| {
            let t = load_tool(tx, tenant, tool)?;
            let v = load_version(tx, tool, &t.current_version)?;
            Ok((t, v))
        })
    }

    /// Deletes the tool with all its versions and tags; its name is free again. The
    /// audit trail keeps its events.
    pub fn delete(&self, tenant: &TenantId, tool: &ToolId) -> Result<(), RegistryError> {
        self.write(|tx| {
            let t = load_tool(tx, tenant, tool)?;
            tx.execute(
                "DELETE FROM tools WHERE id = ?1 AND tenant_id = ?2",
                [tool.as_str(), tenant.as_str()],
            )?;
            append(
                tx,
                tenant,
                &AuditEvent::ToolDeleted {
                    tool: tool.clone(),
                    name: t.name,
                },
            )?;
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
            let t = load_tool(tx, tenant, tool)?;
            if t.enabled == enabled {
                return Ok(t);
            }
            tx.execute(
                "UPDATE tools SET enabled = ?2, updated_at_ms = ?3 WHERE id = ?1",
                params![tool.as_str(), enabled, now],
            )?;
            let event = if enabled {
                AuditEvent::ToolEnabled { tool: tool.clone() }
            } else {
                AuditEvent::ToolDisabled { tool: tool.clone() }
            };
            append(tx, tenant, &event)?;
            load_tool(tx, tenant, tool)
        })
    }
}
