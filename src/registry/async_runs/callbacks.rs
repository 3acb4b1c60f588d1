//! A run's callback as the registry keeps it: where it stands, which attempt is due, one
//! node taking each, and its outcome (see `app/callbacks.rs` for the sending).

use serde::{Deserialize, Serialize};

use super::{AsyncRun, COLUMNS, read};
use crate::registry::audit::{AuditEvent, append};
use crate::registry::db::vals;
use crate::registry::{Registry, RegistryError, RunId};

/// Where a run's callback (its result posted to its `callback_url`) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallbackState {
    /// The run has not ended, or an attempt is due.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Every attempt failed.
    Undelivered,
}

impl CallbackState {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            CallbackState::Pending => "pending",
            CallbackState::Delivered => "delivered",
            CallbackState::Undelivered => "undelivered",
        }
    }

    pub(super) fn parse(s: &str) -> Result<CallbackState, String> {
        [
            CallbackState::Pending,
            CallbackState::Delivered,
            CallbackState::Undelivered,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
        .ok_or_else(|| format!("unknown callback state {s:?}"))
    }
}

/// How one attempt to post a run's result went, as [`Registry::callback_attempted`]
/// records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackOutcome {
    /// The receiver answered 2xx with this status.
    Delivered(u16),
    /// It failed; the next attempt is due at this time (Unix ms).
    Retry {
        /// When.
        at_ms: i64,
        /// What failed.
        error: String,
    },
    /// It failed, and it was the last attempt.
    GaveUp(String),
}

impl Registry {
    /// Ended runs whose callback attempt is due by `now_ms`, at most `limit`.
    pub fn due_callbacks(&self, now_ms: i64, limit: u32) -> Result<Vec<RunId>, RegistryError> {
        self.read(|tx| {
            tx.query(
                "SELECT id FROM async_runs WHERE callback_due_ms <= ?1
                 ORDER BY callback_due_ms LIMIT ?2",
                vals![now_ms, i64::from(limit)],
            )?
            .iter()
            .map(|row| row.get::<String>(0)?.parse())
            .collect()
        })
    }

    /// Takes run `id`'s due callback attempt for the caller until `hold_until_ms` (no
    /// other node tries it meanwhile): the run, its attempts counted one more; `None`
    /// when it is not due (another node took it, or it is done).
    pub fn take_callback(
        &self,
        id: &RunId,
        now_ms: i64,
        hold_until_ms: i64,
    ) -> Result<Option<AsyncRun>, RegistryError> {
        self.write(|tx| {
            let taken = tx.execute(
                "UPDATE async_runs SET callback_due_ms = ?1, callback_attempts = callback_attempts + 1
                 WHERE id = ?2 AND callback_due_ms <= ?3 AND callback_state = 'pending'",
                vals![hold_until_ms, id.as_str(), now_ms],
            )?;
            if taken == 0 {
                return Ok(None);
            }
            let row = tx.query_one(
                &format!("SELECT {COLUMNS} FROM async_runs WHERE id = ?1"),
                vals![id.as_str()],
            )?;
            read(&row).map(Some)
        })
    }

    /// Records how the attempt taken with [`Registry::take_callback`] went: delivered
    /// (a `run_delivered` event), due again, or given up (a `run_undelivered` event).
    pub fn callback_attempted(
        &self,
        run: &AsyncRun,
        outcome: &CallbackOutcome,
    ) -> Result<(), RegistryError> {
        self.write(|tx| {
            tx.lock_tenant(&run.tenant)?;
            let (state, due, event) = match outcome {
                CallbackOutcome::Delivered(status) => (
                    CallbackState::Delivered,
                    None,
                    Some(AuditEvent::RunDelivered {
                        run: run.id.clone(),
                        tool: run.tool.clone(),
                        attempts: run.callback_attempts,
                        status: *status,
                    }),
                ),
                CallbackOutcome::Retry { at_ms, .. } => {
                    (CallbackState::Pending, Some(*at_ms), None)
                }
                CallbackOutcome::GaveUp(error) => (
                    CallbackState::Undelivered,
                    None,
                    Some(AuditEvent::RunUndelivered {
                        run: run.id.clone(),
                        tool: run.tool.clone(),
                        attempts: run.callback_attempts,
                        error: error.clone(),
                    }),
                ),
            };
            tx.execute(
                "UPDATE async_runs SET callback_state = ?1, callback_due_ms = ?2 WHERE id = ?3",
                vals![state.as_str(), due, run.id.as_str()],
            )?;
            if let Some(event) = event {
                append(tx, &run.tenant, &event)?;
            }
            Ok(())
        })
    }
}
