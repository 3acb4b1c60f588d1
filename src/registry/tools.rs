//! Tools and their versions, always scoped by tenant.
//!
//! Every query filters on the tenant in SQL, and every miss, whether the tool never
//! existed or belongs to someone else, is the same [`RegistryError::NotFound`]. A
//! version's manifest is re-hashed when read, so a row edited behind Warden's back is
//! [`RegistryError::Corrupt`], never run.

use serde::{Deserialize, Serialize};

use super::db::{Row, Tx, vals};
use super::reviews::ReviewState;
use super::{Kind, Page, Registry, RegistryError, ToolId, page_size};
use crate::manifest::{Manifest, ServerId, Tag, ToolName, VersionId};

mod write;
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
    /// The version calls run: the newest approved one. A tool whose versions all wait
    /// for review (or were rejected) shows its newest version here, with `approved`
    /// false, and refuses calls.
    pub current_version: VersionId,
    /// Whether `current_version` may run (false only for a tool without an approved
    /// version).
    pub approved: bool,
    /// The version waiting for a reviewer, if any (see the tenant policy's
    /// `review_widening`); it does not run until approved.
    pub pending_version: Option<VersionId>,
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
    /// Where it stands with the review gate.
    pub review: ReviewState,
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
    /// Where it stands with the review gate: only `approved` versions run.
    pub review: ReviewState,
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
    /// The version widens what the tool can do and waits for a reviewer (the tenant's
    /// policy holds such versions): calls still run the current version.
    Pending,
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
         (SELECT {} FROM tool_tags g WHERE g.tool_id = t.id), t.pending_version, \
         (SELECT v.review FROM versions v \
          WHERE v.tool_id = t.id AND v.version_id = t.current_version)",
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
    pending_version: Option<String>,
    current_review: Option<String>,
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
        pending_version: r.get(9)?,
        current_review: r.get(10)?,
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
            approved: match self.current_review.as_deref() {
                Some(state) => ReviewState::parse(state)? == ReviewState::Approved,
                None => return Err(bad(&"its current version is missing")),
            },
            pending_version: self
                .pending_version
                .map(|v| v.parse())
                .transpose()
                .map_err(|e| bad(&e))?,
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
pub(super) fn load_tool(
    tx: &mut Tx<'_>,
    tenant: &TenantId,
    tool: &ToolId,
) -> Result<Tool, RegistryError> {
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
pub(super) fn load_version(
    tx: &mut Tx<'_>,
    tool: &ToolId,
    version: &VersionId,
) -> Result<Version, RegistryError> {
    let row = tx.query_opt(
        "SELECT number, manifest, created_at_ms, review FROM versions
         WHERE tool_id = ?1 AND version_id = ?2",
        vals![tool.as_str(), version.as_str()],
    )?;
    let Some(row) = row else {
        return Err(RegistryError::NotFound {
            kind: Kind::Version,
            id: version.to_string(),
        });
    };
    let (number, manifest, created_at_ms, review): (i64, String, i64, String) =
        (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
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
        review: ReviewState::parse(&review)?,
    })
}

impl Registry {
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

    /// The tenant's tools registered from the server file `server` (`POST
    /// /v1/servers`), oldest first, by name within one millisecond (ids are random: by
    /// id, tools registered together came back in any order); none for a server the
    /// tenant does not have.
    pub fn tools_of_server(
        &self,
        tenant: &TenantId,
        server: &ServerId,
    ) -> Result<Vec<Tool>, RegistryError> {
        self.read(|tx| {
            let sql = format!(
                "SELECT {} FROM tools t WHERE t.tenant_id = ?1 AND t.server_id = ?2
                 ORDER BY t.created_at_ms, t.name",
                tool_columns(tx)
            );
            tx.query(&sql, vals![tenant.as_str(), server.as_str()])?
                .iter()
                .map(|r| read_tool(r)?.into_tool())
                .collect()
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
                "SELECT version_id, number, created_at_ms, review FROM versions
                 WHERE tool_id = ?1 ORDER BY number",
                vals![tool.as_str()],
            )?;
            rows.iter()
                .map(|r| {
                    let (id, number, created_at_ms, review): (String, i64, i64, String) =
                        (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
                    let bad = |e: &dyn std::fmt::Display| {
                        RegistryError::corrupt(format!("version {id} of tool {tool}"), e)
                    };
                    let id: VersionId = id.parse().map_err(|e| bad(&e))?;
                    Ok(VersionSummary {
                        current: id == current,
                        id,
                        number: u32::try_from(number).map_err(|e| bad(&e))?,
                        created_at_ms,
                        review: ReviewState::parse(&review)?,
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
}
