//! A tenant's callable tools by name, as a client that knows tools by name (an MCP
//! client over `/mcp`) sees them: the enabled ones with an approved version (each with
//! that version, never one waiting for review), optionally those with one tag.

use crate::manifest::{Manifest, Tag, ToolName};
use crate::registry::{MAX_PAGE_SIZE, RegistryError, Tool, ToolQuery};
use crate::tenant::TenantId;

use super::{App, AppError};

/// An enabled tool with its current version's manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct CallableTool {
    /// The tool.
    pub tool: Tool,
    /// Its current version's manifest: schema, grants, limits.
    pub manifest: Manifest,
}

impl App {
    /// The tenant's enabled tools (with `tag`, if given), by name, each with its current
    /// version.
    pub async fn callable_tools(
        &self,
        tenant: &TenantId,
        tag: Option<Tag>,
    ) -> Result<Vec<CallableTool>, AppError> {
        let t = tenant.clone();
        self.blocking(move |r| {
            let mut callable = Vec::new();
            let mut after = None;
            loop {
                let query = ToolQuery {
                    tag: tag.clone(),
                    after,
                    limit: MAX_PAGE_SIZE,
                };
                let page = r.tools(&t, &query)?;
                for tool in page
                    .items
                    .into_iter()
                    .filter(|tool| tool.enabled && tool.approved)
                {
                    match r.current(&t, &tool.id) {
                        Ok((tool, version)) => callable.push(CallableTool {
                            tool,
                            manifest: version.manifest,
                        }),
                        // Deleted since the page was read.
                        Err(RegistryError::NotFound { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                match page.next {
                    Some(next) => after = Some(next),
                    None => return Ok(callable),
                }
            }
        })
        .await
    }

    /// The tenant's enabled tool called `name` (with `tag`, if given), with its current
    /// version; `None` when there is none.
    pub async fn callable_tool(
        &self,
        tenant: &TenantId,
        name: &str,
        tag: Option<Tag>,
    ) -> Result<Option<CallableTool>, AppError> {
        let Ok(name) = name.parse::<ToolName>() else {
            return Ok(None);
        };
        let t = tenant.clone();
        self.blocking(move |r| {
            let found = r
                .tool_by_name(&t, &name)
                .and_then(|tool| r.current(&t, &tool.id));
            match found {
                Ok((tool, version)) => {
                    let in_scope = tag.as_ref().is_none_or(|tag| tool.tags.contains(tag));
                    Ok(Some(CallableTool {
                        tool,
                        manifest: version.manifest,
                    })
                    .filter(|c| c.tool.enabled && c.tool.approved && in_scope))
                }
                Err(RegistryError::NotFound { .. }) => Ok(None),
                Err(e) => Err(e.into()),
            }
        })
        .await
    }
}
