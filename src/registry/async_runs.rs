//! Runs: calls accepted now and run in the background, polled and cancelled from any
//! node (`POST /v1/tools/{id}/runs`).
//!
//! A run's row is committed, with its `run_accepted` event, before its `202` goes out. The
//! node that accepted it holds it (`node`) and renews its lease while it is queued or
//! running ([`Registry::renew_runs`]); a run whose lease ran out lost its node (a crash,
//! a kill) and any node takes it over ([`Registry::claim_run`]). What happens then is
//! the app's choice: queued again when it never started or its tool is safe to repeat,
//! else ended `interrupted`. A cancellation asked on any node is a flag on the row that
//! the holder reads when it renews, or at once when it is the holder itself.
//!
//! A run's acceptance commits durably before its `202`. Its start and its end commit
//! without waiting for the disk, as a call's audit event does: the next commit that
//! waits makes them durable too (the keeper flushes within a second of them). After a
//! power cut a run is therefore at worst one step behind, and the step is taken again:
//! a run that reads as queued or running is taken over, never lost.
//!
//! An ended run keeps its result until `delete_after_ms` (its tenant's retention);
//! [`Registry::delete_kept_runs`] then deletes the row. Its audit events stay.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

mod callbacks;
mod keeping;
mod writes;

pub use callbacks::{CallbackOutcome, CallbackState};
pub use writes::{RunWrite, RunWritten};

use super::db::{Row, Tx, vals};
use super::{Kind, Page, Registry, RegistryError, RunId, ToolId};
use crate::manifest::VersionId;
use crate::tenant::TenantId;

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Accepted, waiting for one of its tenant's call slots.
    Queued,
    /// Its guest is running.
    Running,
    /// The call ran to an outcome; `result.status` says which (`ok`, `error`,
    /// `timeout`, ...).
    Completed,
    /// The call was refused or the host could not run it: `result.error` says why.
    Failed,
    /// Cancelled before or while it ran.
    Cancelled,
    /// It waited in the queue past its `queue_timeout_ms` and never started.
    Expired,
    /// Its node stopped while it ran, and its tool is not marked safe to repeat.
    Interrupted,
}

impl RunStatus {
    /// Every status, as stored.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Expired,
        RunStatus::Interrupted,
    ];

    /// The status as stored and served.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Expired => "expired",
            RunStatus::Interrupted => "interrupted",
        }
    }

    /// True once the run can change no more.
    pub fn ended(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }
}

impl std::str::FromStr for RunStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<RunStatus, String> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                let all: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown run status {s:?}: one of {}", all.join(", "))
            })
    }
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct AsyncRun {
    /// Its id.
    pub id: RunId,
    /// Its tenant.
    pub tenant: TenantId,
    /// The tool called.
    pub tool: ToolId,
    /// The version asked for by number (`None`: the tool's current version when it
    /// starts).
    pub version_number: Option<u32>,
    /// The version that ran (once started).
    pub version: Option<VersionId>,
    /// Where it is.
    pub status: RunStatus,
    /// Its arguments (a JSON object).
    pub arguments: Json,
    /// Where its result is posted once it ended, if anywhere.
    pub callback_url: Option<String>,
    /// How long it may wait for a slot before it ends `expired`.
    pub queue_timeout: Duration,
    /// When it was accepted, Unix milliseconds.
    pub created_at_ms: i64,
    /// When its guest started.
    pub started_at_ms: Option<i64>,
    /// When it ended.
    pub ended_at_ms: Option<i64>,
    /// The node that holds it while it is queued or running.
    pub node: Option<String>,
    /// Until when that node's hold lasts unless renewed.
    pub lease_until_ms: Option<i64>,
    /// Whether a cancellation was asked.
    pub cancel_requested: bool,
    /// How many times it was started (more than one after its node was lost).
    pub attempts: u32,
    /// The result once ended: the call's answer, or `{"error": ...}`.
    pub result: Option<Json>,
    /// When the row (and its result) is deleted.
    pub delete_after_ms: Option<i64>,
    /// Where its callback stands, when it has a `callback_url`.
    pub callback: Option<CallbackState>,
    /// Attempts made to post its result.
    pub callback_attempts: u32,
}

/// A run to accept.
#[derive(Debug, Clone)]
pub struct NewRun {
    /// Its id.
    pub id: RunId,
    /// The tool.
    pub tool: ToolId,
    /// The version asked for by number, if any.
    pub version_number: Option<u32>,
    /// The arguments, checked by the caller.
    pub arguments: Json,
    /// Where to post its result.
    pub callback_url: Option<String>,
    /// How long it may wait for a slot.
    pub queue_timeout: Duration,
    /// The accepting node, which holds it.
    pub node: String,
    /// Its first lease.
    pub lease_until_ms: i64,
    /// The tenant's key hint, for the event.
    pub key_hint: Option<String>,
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunQuery {
    /// Only this tool's.
    pub tool: Option<ToolId>,
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs accepted before this one (the previous page's `next`).
    pub after: Option<RunId>,
    /// At most this many (0: 50; at most 500).
    pub limit: u32,
}

/// A run's end, as [`Registry::end_run`] writes it.
#[derive(Debug, Clone)]
pub struct RunEnd {
    /// How it ended.
    pub status: RunStatus,
    /// What it answered.
    pub result: Json,
    /// How long its result is kept.
    pub retention: Duration,
}

/// The columns of a run, as [`read`] takes them.
const COLUMNS: &str = "id, tenant_id, tool_id, version_number, version_id, status, arguments, \
     callback_url, queue_timeout_ms, created_at_ms, started_at_ms, ended_at_ms, node, \
     lease_until_ms, cancel_requested, attempts, result, delete_after_ms, callback_state, \
     callback_attempts";

fn read(row: &Row) -> Result<AsyncRun, RegistryError> {
    let corrupt = |e: String| RegistryError::corrupt("run", e);
    let json =
        |text: String| serde_json::from_str::<Json>(&text).map_err(|e| corrupt(e.to_string()));
    let millis = |ms: i64| Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    Ok(AsyncRun {
        id: row.get::<String>(0)?.parse()?,
        tenant: row.get::<String>(1)?.parse()?,
        tool: row.get::<String>(2)?.parse()?,
        version_number: row
            .get::<Option<i64>>(3)?
            .map(|n| u32::try_from(n).map_err(|e| corrupt(e.to_string())))
            .transpose()?,
        version: row
            .get::<Option<String>>(4)?
            .map(|v| v.parse().map_err(|e| corrupt(format!("{e}"))))
            .transpose()?,
        status: row.get::<String>(5)?.parse().map_err(corrupt)?,
        arguments: json(row.get(6)?)?,
        callback_url: row.get(7)?,
        queue_timeout: millis(row.get(8)?),
        created_at_ms: row.get(9)?,
        started_at_ms: row.get(10)?,
        ended_at_ms: row.get(11)?,
        node: row.get(12)?,
        lease_until_ms: row.get(13)?,
        cancel_requested: row.get(14)?,
        attempts: u32::try_from(row.get::<i64>(15)?).unwrap_or(u32::MAX),
        result: row.get::<Option<String>>(16)?.map(json).transpose()?,
        delete_after_ms: row.get(17)?,
        callback: row
            .get::<Option<String>>(18)?
            .map(|c| CallbackState::parse(&c).map_err(corrupt))
            .transpose()?,
        callback_attempts: u32::try_from(row.get::<i64>(19)?).unwrap_or(u32::MAX),
    })
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn one(tx: &mut Tx<'_>, tenant: &TenantId, id: &RunId) -> Result<AsyncRun, RegistryError> {
    let row = tx.query_opt(
        &format!("SELECT {COLUMNS} FROM async_runs WHERE id = ?1 AND tenant_id = ?2"),
        vals![id.as_str(), tenant.as_str()],
    )?;
    match row {
        Some(row) => read(&row),
        None => Err(RegistryError::NotFound {
            kind: Kind::Run,
            id: id.to_string(),
        }),
    }
}

impl Registry {
    /// The tenant's run `id`.
    pub fn async_run(&self, tenant: &TenantId, id: &RunId) -> Result<AsyncRun, RegistryError> {
        self.read(|tx| one(tx, tenant, id))
    }

    /// The tenant's runs, newest first.
    pub fn async_runs(
        &self,
        tenant: &TenantId,
        query: &RunQuery,
    ) -> Result<Page<AsyncRun, RunId>, RegistryError> {
        let limit = match query.limit {
            0 => 50,
            n => n.min(500),
        };
        self.read(|tx| {
            let mut sql = format!("SELECT {COLUMNS} FROM async_runs WHERE tenant_id = ?1");
            let mut params = vec![super::db::Value::from(tenant.as_str())];
            if let Some(tool) = &query.tool {
                params.push(tool.as_str().into());
                sql.push_str(&format!(" AND tool_id = ?{}", params.len()));
            }
            if let Some(status) = query.status {
                params.push(status.as_str().into());
                sql.push_str(&format!(" AND status = ?{}", params.len()));
            }
            if let Some(after) = &query.after {
                // The cursor names a run of the tenant's; one deleted since (its
                // retention over) or unknown is an error, not a silent restart.
                let cursor = one(tx, tenant, after)?;
                params.push(cursor.created_at_ms.into());
                params.push(after.as_str().into());
                sql.push_str(&format!(
                    " AND (created_at_ms < ?{a} OR (created_at_ms = ?{a} AND id < ?{b}))",
                    a = params.len() - 1,
                    b = params.len()
                ));
            }
            params.push(i64::from(limit + 1).into());
            sql.push_str(&format!(
                " ORDER BY created_at_ms DESC, id DESC LIMIT ?{}",
                params.len()
            ));
            let mut items = tx
                .query(&sql, &params)?
                .iter()
                .map(read)
                .collect::<Result<Vec<_>, _>>()?;
            let next = if items.len() > limit as usize {
                items.truncate(limit as usize);
                items.last().map(|r| r.id.clone())
            } else {
                None
            };
            Ok(Page { items, next })
        })
    }

    /// Asks for the run's cancellation: the flag its holder reads. Returns the run as
    /// it is now (an ended run is returned unchanged).
    pub fn request_run_cancel(
        &self,
        tenant: &TenantId,
        id: &RunId,
    ) -> Result<AsyncRun, RegistryError> {
        self.write(|tx| {
            tx.execute(
                "UPDATE async_runs SET cancel_requested = ?1
                 WHERE id = ?2 AND tenant_id = ?3 AND ended_at_ms IS NULL",
                vals![true, id.as_str(), tenant.as_str()],
            )?;
            one(tx, tenant, id)
        })
    }
}
