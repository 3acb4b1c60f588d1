//! What the review console (`/review/`, `http/console/`) asks of the app: sign-in links
//! and sessions, and the read models its pages show (tools with their capabilities
//! and risky grants, a tool's history and usage, the audit trail with its chain
//! checked). Decisions made in the console go through [`App::decide`], exactly as the
//! API's do.
//!
//! # Sign-in
//! A reviewer key (or the operator key) asks for a link ([`App::console_link`]): a
//! random token valid for [`LINK_TTL`], stored as its SHA-256 in the registry (so any
//! node opens it). Opening it once ([`App::open_console_link`]) starts a session of
//! [`SESSION_IDLE`] idle and [`SESSION_MAX`] at most; the session ends sooner when its
//! reviewer key is revoked or the operator key changes.

use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{App, AppError, Principal};
use crate::capabilities::{Capabilities, Risk, Subject, warnings};
use crate::registry::{
    AuditFilter, AuditRecord, ChainCheck, ConsoleSession, ConsoleToken, ConsoleUser, DayUsage,
    LinkRefusal, Page, Redeemed, Registry, SessionLife, Tool, ToolId, ToolQuery, Version,
    VersionSummary,
};
use crate::tenant::TenantId;

/// How long a sign-in link may wait to be opened: 5 minutes.
pub const LINK_TTL: Duration = Duration::from_secs(5 * 60);
/// A console session unused this long ends: 1 hour.
pub const SESSION_IDLE: Duration = Duration::from_secs(60 * 60);
/// A console session ends this long after sign-in, however used: 8 hours.
pub const SESSION_MAX: Duration = Duration::from_secs(8 * 60 * 60);

/// How long console links and sessions last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsoleLife {
    /// A sign-in link's lifetime. Default: [`LINK_TTL`].
    pub link_ttl: Duration,
    /// A session's. Default: [`SESSION_IDLE`] idle, [`SESSION_MAX`] at most.
    pub session: SessionLife,
}

impl Default for ConsoleLife {
    fn default() -> Self {
        ConsoleLife {
            link_ttl: LINK_TTL,
            session: SessionLife {
                idle: SESSION_IDLE,
                max: SESSION_MAX,
            },
        }
    }
}

/// Where [`App`] keeps its [`ConsoleLife`].
#[derive(Debug, Default)]
pub(super) struct ConsoleSettings(Mutex<ConsoleLife>);

/// A tool as the console lists it: its current version's capabilities under the
/// tenant's ceilings and its risky grants.
#[derive(Debug, Clone)]
pub struct ToolCard {
    /// The tool.
    pub tool: Tool,
    /// Its current version's number.
    pub version: u32,
    /// What that version's guest can exercise.
    pub capabilities: Capabilities,
    /// The grants a reviewer should look at twice.
    pub risks: Vec<Risk>,
}

/// One tool in detail: its card, its versions, its changes and its usage.
#[derive(Debug, Clone)]
pub struct ToolHistory {
    /// The tool now.
    pub card: ToolCard,
    /// Its versions, oldest first.
    pub versions: Vec<VersionSummary>,
    /// Its audit events other than calls (created, updated, grants, reviews), newest
    /// first, up to [`HISTORY_EVENTS`].
    pub events: Vec<AuditRecord>,
    /// Calls and fuel per day over the last [`USAGE_DAYS`] days, oldest first.
    pub usage: Vec<DayUsage>,
    /// The first day the usage covers (days since 1970-01-01, UTC).
    pub usage_from_day: i64,
}

/// Days the usage chart covers: 14.
pub const USAGE_DAYS: i64 = 14;
/// Events of a tool's history shown: 200.
pub const HISTORY_EVENTS: u32 = 200;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

fn card(
    r: &Registry,
    tenant: &TenantId,
    tool: Tool,
    current: &Version,
) -> Result<ToolCard, AppError> {
    let ceilings = r.policy(tenant)?.ceilings;
    let m = &current.manifest;
    let subject = Subject {
        name: tool.name.to_string(),
        function: m.function.clone(),
        tool: Some(tool.id.to_string()),
        version: Some(current.id.to_string()),
        number: Some(current.number),
        file: None,
    };
    Ok(ToolCard {
        capabilities: Capabilities::describe(
            subject,
            &m.grants,
            &m.limits,
            &m.packages,
            Some(&ceilings),
        ),
        risks: warnings(&m.grants, &m.limits, Some(&ceilings)),
        version: current.number,
        tool,
    })
}

fn tool_cards(r: &Registry, tenant: &TenantId) -> Result<Vec<ToolCard>, AppError> {
    let mut cards = Vec::new();
    let mut query = ToolQuery {
        limit: crate::registry::MAX_PAGE_SIZE,
        ..ToolQuery::default()
    };
    loop {
        let page = r.tools(tenant, &query)?;
        for tool in page.items {
            let (tool, current) = r.current(tenant, &tool.id)?;
            cards.push(card(r, tenant, tool, &current)?);
        }
        match page.next {
            Some(next) => query.after = Some(next),
            None => return Ok(cards),
        }
    }
}

fn history(r: &Registry, tenant: &TenantId, tool: &ToolId) -> Result<ToolHistory, AppError> {
    let (tool_row, current) = r.current(tenant, tool)?;
    let card = card(r, tenant, tool_row, &current)?;
    let filter = AuditFilter {
        tool: Some(tool.clone()),
        no_runs: true,
        ..AuditFilter::default()
    };
    let events = r.audit_where(tenant, &filter, None, HISTORY_EVENTS)?.items;
    let today = r.clock_ms()? / DAY_MS;
    let from = today - (USAGE_DAYS - 1);
    Ok(ToolHistory {
        versions: r.versions(tenant, tool)?,
        usage: r.tool_usage(tenant, tool, from * DAY_MS)?,
        usage_from_day: from,
        events,
        card,
    })
}

impl App {
    /// Sets how long console links and sessions last (tests shorten them).
    pub fn set_console_life(&self, life: ConsoleLife) {
        *self
            .inner
            .console
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = life;
    }

    /// How long console links and sessions last.
    pub fn console_life(&self) -> ConsoleLife {
        *self
            .inner
            .console
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The fingerprint of the operator key (SHA-256 of its SHA-256, hex), if any.
    fn operator_fingerprint(&self) -> Option<String> {
        self.inner
            .operator_key
            .map(|k| hex::encode(Sha256::digest(k)))
    }

    /// A single-use sign-in link's token for the holder of `bearer`: a reviewer key (the
    /// console of its tenant) or the operator key (every tenant, read-only). A tenant's
    /// own API key is refused ([`AppError::ConsoleKey`]). Returns the token and when it
    /// expires, in Unix milliseconds.
    pub async fn console_link(
        &self,
        bearer: Option<&str>,
    ) -> Result<(ConsoleToken, i64), AppError> {
        let user = match (self.authorize_operator(bearer), self.operator_fingerprint()) {
            (Ok(()), Some(fingerprint)) => ConsoleUser::Operator { fingerprint },
            _ => match self.identify(bearer).await? {
                Principal::Reviewer(r) => ConsoleUser::Reviewer {
                    tenant: r.tenant,
                    key: r.key,
                    key_hint: r.key_hint,
                },
                Principal::Tenant(_) => return Err(AppError::ConsoleKey),
            },
        };
        let ttl = self.console_life().link_ttl;
        self.blocking(move |r| Ok(r.create_console_link(&user, ttl)?))
            .await
    }

    /// Why the sign-in link `token` cannot be opened, or `None` if it can: reads only.
    pub async fn peek_console_link(&self, token: String) -> Result<Option<LinkRefusal>, AppError> {
        if !link_token_shaped(&token) {
            return Ok(Some(LinkRefusal::Unknown));
        }
        self.blocking(move |r| Ok(r.peek_console_link(&token)?))
            .await
    }

    /// Opens the sign-in link whose token is `token`, once, starting a session.
    pub async fn open_console_link(&self, token: String) -> Result<Redeemed, AppError> {
        if !link_token_shaped(&token) {
            return Ok(Redeemed::Refused(LinkRefusal::Unknown));
        }
        let life = self.console_life().session;
        let operator = self.operator_fingerprint();
        self.blocking(move |r| Ok(r.redeem_console_link(&token, life, operator.as_deref())?))
            .await
    }

    /// The live session whose cookie is `token`, if any.
    pub async fn console_session(&self, token: String) -> Result<Option<ConsoleSession>, AppError> {
        let life = self.console_life().session;
        let operator = self.operator_fingerprint();
        self.blocking(move |r| Ok(r.console_session(&token, life, operator.as_deref())?))
            .await
    }

    /// Ends the session whose cookie is `token`.
    pub async fn end_console_session(&self, token: String) -> Result<(), AppError> {
        self.blocking(move |r| Ok(r.end_console_session(&token)?))
            .await
    }

    /// The tenant's tools by name, each with its current capabilities and risks.
    pub async fn tool_cards(&self, tenant: &TenantId) -> Result<Vec<ToolCard>, AppError> {
        let t = tenant.clone();
        self.blocking(move |r| tool_cards(r, &t)).await
    }

    /// One tool: its card, versions, changes and usage.
    pub async fn tool_history(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
    ) -> Result<ToolHistory, AppError> {
        let (t, id) = (tenant.clone(), tool.clone());
        self.blocking(move |r| history(r, &t, &id)).await
    }

    /// The tenant's audit events that `filter` keeps, newest first, a page at a time.
    pub async fn audit_where(
        &self,
        tenant: &TenantId,
        filter: AuditFilter,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Page<AuditRecord, u64>, AppError> {
        let t = tenant.clone();
        self.blocking(move |r| Ok(r.audit_where(&t, &filter, before, limit)?))
            .await
    }

    /// The tenant's audit chain, recomputed from its first event.
    pub async fn verify_chain(&self, tenant: &TenantId) -> Result<ChainCheck, AppError> {
        let t = tenant.clone();
        self.blocking(move |r| Ok(r.verify_chain(&t)?)).await
    }
}

/// Whether `token` looks like a sign-in link's token (64 hex digits): only such reach
/// the database.
fn link_token_shaped(token: &str) -> bool {
    token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit())
}
