//! The review console's state: single-use sign-in links and the browser sessions they
//! open, kept in the database so that every node of a cluster agrees on them (a link
//! made through one node opens on another; signing out anywhere ends the session
//! everywhere).
//!
//! Tokens (a link's, a session cookie's) are 32 random bytes; only their SHA-256 is
//! stored, like API keys. Times come from the database's clock, so nodes with skewed
//! clocks agree on what has expired. A reviewer's session lasts only while its reviewer
//! key does: revoking the key deletes its sessions and links, and every lookup checks
//! the key again. What a session may see and do is the app's business.

use std::time::Duration;

use rand::RngCore;
use sha2::{Digest, Sha256};

use super::db::{Row, Tx, vals};
use super::{Registry, RegistryError, ReviewerKeyId, ToolId, to_i64_ms};
use crate::tenant::TenantId;

/// A secret token of the console (a sign-in link's or a session's): 64 hex digits.
/// Its `Debug` shows none of it.
#[derive(Clone, PartialEq, Eq)]
pub struct ConsoleToken(String);

impl ConsoleToken {
    /// A fresh random token.
    pub fn generate() -> ConsoleToken {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        ConsoleToken(hex::encode(bytes))
    }

    /// The token, to put in a link or a cookie.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn hash(text: &str) -> Vec<u8> {
        Sha256::digest(text.as_bytes()).to_vec()
    }
}

impl std::fmt::Debug for ConsoleToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConsoleToken(…)")
    }
}

/// Who a link or session belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsoleUser {
    /// A reviewer key of a tenant.
    Reviewer {
        /// The tenant it reviews.
        tenant: TenantId,
        /// The key's id.
        key: ReviewerKeyId,
        /// The key's first characters (`wdr_1a2b3c4d`), to show who is signed in.
        key_hint: String,
    },
    /// The operator; `fingerprint` names the operator key it signed in with (the
    /// SHA-256 of the key's SHA-256, in hex), so that changing the key ends it.
    Operator {
        /// The key's fingerprint.
        fingerprint: String,
    },
}

/// A signed-in browser, as a lookup finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    /// Whose it is.
    pub user: ConsoleUser,
    /// The token every form of the session must carry.
    pub csrf_token: String,
    /// When it ends at the latest, in Unix milliseconds.
    pub expires_at_ms: i64,
}

/// How long sessions last: idle, and at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLife {
    /// A session unused this long ends.
    pub idle: Duration,
    /// A session ends this long after sign-in, used or not.
    pub max: Duration,
}

/// Why a sign-in link does not open a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRefusal {
    /// No such link (mistyped, or deleted a day after it expired).
    Unknown,
    /// It was opened already: a link signs in once.
    Used,
    /// It was not opened within its lifetime.
    Expired,
    /// Its reviewer key was revoked, or the operator key changed, since it was made.
    KeyGone,
}

/// What opening a sign-in link did.
#[derive(Debug)]
pub enum Redeemed {
    /// A session: its cookie's token and the session.
    Session(ConsoleToken, ConsoleSession),
    /// Refused, and why.
    Refused(LinkRefusal),
}

/// Runs per day of one tool, from its `run` audit events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayUsage {
    /// The day: days since 1970-01-01 (UTC).
    pub day: i64,
    /// Calls that ended (any status).
    pub calls: u64,
    /// Fuel those calls consumed.
    pub fuel: u64,
}

/// Links unused a day after they expired are deleted (until then a link opened late
/// is refused as expired rather than as unknown).
const LINK_KEPT_MS: i64 = 24 * 60 * 60 * 1000;

/// A session's last use is written at most this often (not on every page).
const TOUCH_EVERY_MS: i64 = 60 * 1000;

fn now(tx: &mut Tx<'_>) -> Result<i64, RegistryError> {
    let sql = format!("SELECT {}", tx.dialect().now_ms());
    tx.query_one(&sql, &[])?.get(0)
}

/// The columns [`read_user`] reads, from `s` (a link or session) and `k` (its key).
const USER_COLUMNS: &str = "s.tenant_id, s.reviewer_key_id, s.operator_fp, k.key_hint";

fn read_user(r: &Row, at: usize) -> Result<Option<ConsoleUser>, RegistryError> {
    let (tenant, key, fingerprint, hint): (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ) = (r.get(at)?, r.get(at + 1)?, r.get(at + 2)?, r.get(at + 3)?);
    let bad = |e: &dyn std::fmt::Display| RegistryError::corrupt("a console session", e);
    Ok(match (tenant, key, fingerprint, hint) {
        (Some(tenant), Some(key), _, Some(key_hint)) => Some(ConsoleUser::Reviewer {
            tenant: tenant.parse().map_err(|e| bad(&e))?,
            key: key.parse().map_err(|e| bad(&e))?,
            key_hint,
        }),
        (None, None, Some(fingerprint), _) => Some(ConsoleUser::Operator { fingerprint }),
        // A reviewer key that is revoked (or gone): no user any more.
        _ => None,
    })
}

fn user_values(user: &ConsoleUser) -> (Option<String>, Option<String>, Option<String>) {
    match user {
        ConsoleUser::Reviewer { tenant, key, .. } => {
            (Some(tenant.to_string()), Some(key.to_string()), None)
        }
        ConsoleUser::Operator { fingerprint } => (None, None, Some(fingerprint.clone())),
    }
}

/// Whether `user` (as stored) is still who may sign in: its reviewer key unrevoked, or
/// the operator key `operator` (the node's current fingerprint) unchanged.
fn still_valid(user: Option<&ConsoleUser>, operator: Option<&str>) -> bool {
    match user {
        Some(ConsoleUser::Reviewer { .. }) => true,
        Some(ConsoleUser::Operator { fingerprint }) => operator == Some(fingerprint.as_str()),
        None => false,
    }
}

impl Registry {
    /// The database's clock now, in Unix milliseconds (every node reads the same one).
    pub fn clock_ms(&self) -> Result<i64, RegistryError> {
        self.autocommit(now)
    }

    /// Makes a sign-in link for `user`, valid for `ttl`; returns its token (shown only
    /// here) and when it expires, in Unix milliseconds. Deletes links a day past their
    /// expiry and ended sessions on the way.
    pub fn create_console_link(
        &self,
        user: &ConsoleUser,
        ttl: Duration,
    ) -> Result<(ConsoleToken, i64), RegistryError> {
        let token = ConsoleToken::generate();
        let (tenant, key, fingerprint) = user_values(user);
        self.write(|tx| {
            let now = now(tx)?;
            let expires = now.saturating_add(to_i64_ms(ttl));
            tx.execute(
                "DELETE FROM console_links WHERE expires_at_ms < ?1",
                vals![now - LINK_KEPT_MS],
            )?;
            tx.execute(
                "DELETE FROM console_sessions WHERE expires_at_ms < ?1",
                vals![now],
            )?;
            tx.execute(
                "INSERT INTO console_links
                 (token_hash, tenant_id, reviewer_key_id, operator_fp, created_at_ms, expires_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                vals![
                    &ConsoleToken::hash(token.expose()),
                    tenant,
                    key,
                    fingerprint,
                    now,
                    expires
                ],
            )?;
            Ok((token, expires))
        })
    }

    /// Why the sign-in link whose token is `token` cannot be opened (unknown, used or
    /// expired), or `None` if it can be now; reads only, so a page may ask before the
    /// reviewer chooses to sign in. (Whether its key still works is checked on opening.)
    pub fn peek_console_link(&self, token: &str) -> Result<Option<LinkRefusal>, RegistryError> {
        self.read(|tx| {
            let now = now(tx)?;
            let Some(row) = tx.query_opt(
                "SELECT expires_at_ms, used_at_ms FROM console_links WHERE token_hash = ?1",
                vals![&ConsoleToken::hash(token)],
            )?
            else {
                return Ok(Some(LinkRefusal::Unknown));
            };
            let (expires, used): (i64, Option<i64>) = (row.get(0)?, row.get(1)?);
            Ok(if used.is_some() {
                Some(LinkRefusal::Used)
            } else if expires <= now {
                Some(LinkRefusal::Expired)
            } else {
                None
            })
        })
    }

    /// Opens the sign-in link whose token is `token`, once: marks it used and starts a
    /// session that lasts `life`. `operator` is the fingerprint of this node's operator
    /// key (`None`: it has none), which an operator's link must still match.
    pub fn redeem_console_link(
        &self,
        token: &str,
        life: SessionLife,
        operator: Option<&str>,
    ) -> Result<Redeemed, RegistryError> {
        self.write(|tx| {
            let now = now(tx)?;
            let sql = format!(
                "SELECT s.expires_at_ms, s.used_at_ms, {USER_COLUMNS} FROM console_links s
                 LEFT JOIN reviewer_keys k ON k.id = s.reviewer_key_id AND k.revoked_at_ms IS NULL
                 WHERE s.token_hash = ?1{}",
                // The link's row only: a reviewer key's row is on the outer join's
                // nullable side, which PostgreSQL does not lock.
                tx.dialect().for_update_of("s")
            );
            let hash = ConsoleToken::hash(token);
            let Some(row) = tx.query_opt(&sql, vals![&hash])? else {
                return Ok(Redeemed::Refused(LinkRefusal::Unknown));
            };
            let (expires, used): (i64, Option<i64>) = (row.get(0)?, row.get(1)?);
            if used.is_some() {
                return Ok(Redeemed::Refused(LinkRefusal::Used));
            }
            if expires <= now {
                return Ok(Redeemed::Refused(LinkRefusal::Expired));
            }
            let user = read_user(&row, 2)?;
            tx.execute(
                "UPDATE console_links SET used_at_ms = ?2 WHERE token_hash = ?1",
                vals![&hash, now],
            )?;
            let user = match user {
                Some(user) if still_valid(Some(&user), operator) => user,
                _ => return Ok(Redeemed::Refused(LinkRefusal::KeyGone)),
            };
            let session = ConsoleToken::generate();
            let csrf = ConsoleToken::generate();
            let expires = now.saturating_add(to_i64_ms(life.max));
            let (tenant, key, fingerprint) = user_values(&user);
            tx.execute(
                "INSERT INTO console_sessions (token_hash, tenant_id, reviewer_key_id,
                 operator_fp, csrf_token, created_at_ms, last_seen_ms, expires_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)",
                vals![
                    &ConsoleToken::hash(session.expose()),
                    tenant,
                    key,
                    fingerprint,
                    csrf.expose(),
                    now,
                    expires
                ],
            )?;
            Ok(Redeemed::Session(
                session,
                ConsoleSession {
                    user,
                    csrf_token: csrf.0,
                    expires_at_ms: expires,
                },
            ))
        })
    }

    /// The session whose cookie is `token`, if it has not ended: not idle longer than
    /// `life.idle`, not past its end, its reviewer key unrevoked or its operator key
    /// (`operator`, this node's fingerprint) unchanged. Records the use.
    pub fn console_session(
        &self,
        token: &str,
        life: SessionLife,
        operator: Option<&str>,
    ) -> Result<Option<ConsoleSession>, RegistryError> {
        let hash = ConsoleToken::hash(token);
        self.autocommit(|tx| {
            let now = now(tx)?;
            let row = tx.query_opt(
                &format!(
                    "SELECT s.csrf_token, s.last_seen_ms, s.expires_at_ms, {USER_COLUMNS}
                     FROM console_sessions s
                     LEFT JOIN reviewer_keys k
                       ON k.id = s.reviewer_key_id AND k.revoked_at_ms IS NULL
                     WHERE s.token_hash = ?1"
                ),
                vals![&hash],
            )?;
            let Some(row) = row else { return Ok(None) };
            let (csrf_token, last_seen, expires): (String, i64, i64) =
                (row.get(0)?, row.get(1)?, row.get(2)?);
            let user = read_user(&row, 3)?;
            let idle_end = last_seen.saturating_add(to_i64_ms(life.idle));
            if expires <= now || idle_end <= now || !still_valid(user.as_ref(), operator) {
                tx.execute(
                    "DELETE FROM console_sessions WHERE token_hash = ?1",
                    vals![&hash],
                )?;
                return Ok(None);
            }
            let Some(user) = user else { return Ok(None) };
            if now - last_seen >= TOUCH_EVERY_MS {
                tx.execute(
                    "UPDATE console_sessions SET last_seen_ms = ?2 WHERE token_hash = ?1",
                    vals![&hash, now],
                )?;
            }
            Ok(Some(ConsoleSession {
                user,
                csrf_token,
                expires_at_ms: expires,
            }))
        })
    }

    /// Ends the session whose cookie is `token` (signing out); ending one that has
    /// ended already changes nothing.
    pub fn end_console_session(&self, token: &str) -> Result<(), RegistryError> {
        let hash = ConsoleToken::hash(token);
        self.autocommit(|tx| {
            tx.execute(
                "DELETE FROM console_sessions WHERE token_hash = ?1",
                vals![&hash],
            )
            .map(|_| ())
        })
    }

    /// The tool's calls and fuel per day (UTC) since `since_ms`, oldest day first; days
    /// without calls are absent.
    pub fn tool_usage(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        since_ms: i64,
    ) -> Result<Vec<DayUsage>, RegistryError> {
        self.read(|tx| {
            let fuel = tx.dialect().json_integer("event", "fuel_used");
            let rows = tx.query(
                &format!(
                    "SELECT at_ms / 86400000, COUNT(*), CAST(SUM({fuel}) AS BIGINT)
                     FROM audit_events
                     WHERE tenant_id = ?1 AND tool_id = ?2 AND kind = 'run' AND at_ms >= ?3
                     GROUP BY at_ms / 86400000 ORDER BY 1"
                ),
                vals![tenant.as_str(), tool.as_str(), since_ms],
            )?;
            rows.iter()
                .map(|r| {
                    let (day, calls, fuel): (i64, i64, Option<i64>) =
                        (r.get(0)?, r.get(1)?, r.get(2)?);
                    Ok(DayUsage {
                        day,
                        calls: u64::try_from(calls).unwrap_or(0),
                        fuel: u64::try_from(fuel.unwrap_or(0)).unwrap_or(0),
                    })
                })
                .collect()
        })
    }
}

/// Deletes the sessions and links of reviewer key `key` (revoked in `tx`).
pub(super) fn end_reviewer_sessions(
    tx: &mut Tx<'_>,
    key: &ReviewerKeyId,
) -> Result<(), RegistryError> {
    tx.execute(
        "DELETE FROM console_sessions WHERE reviewer_key_id = ?1",
        vals![key.as_str()],
    )?;
    tx.execute(
        "DELETE FROM console_links WHERE reviewer_key_id = ?1",
        vals![key.as_str()],
    )?;
    Ok(())
}
