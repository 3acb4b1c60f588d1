//! One PostgreSQL transaction's connection, with its statements pipelined.
//!
//! Each statement is a round trip to the server, and on a busy node those round trips
//! are most of what the registry costs. So a transaction sends what needs no answer yet
//! together with the next statement that does: BEGIN goes with the first statement,
//! writes whose results nobody reads ([`PgTx::execute_later`]: the audit events, the
//! chain heads, NOTIFY) go with the next read or with COMMIT. The client writes them
//! back to back and the server answers them in order (tokio-postgres pipelines the
//! requests of one connection that are in flight together). A transaction's connection is
//! taken from the pool with its first statements, in the same trip to the registry's
//! runtime. An audit batch on a head the node does not know is two round trips: BEGIN with
//! the heads' reads, then the inserts, the head updates and COMMIT (on a head it wrote
//! last, one: `registry/audit/known_head.rs`).
//!
//! If a statement of a pipeline fails, the server aborts the transaction, the ones after
//! it fail too (COMMIT then rolls back), and the first error is the one returned.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use deadpool_postgres::{Object, Pool, PoolError};
use tokio_postgres::types::ToSql;

use super::changes::{CHANNEL, encode};
use super::{pg_error, row, wait};
use crate::registry::db::{Dialect, Row, Statements, Value};
use crate::registry::{Change, RegistryError};

/// A statement waiting to be sent.
enum Step {
    /// Plain SQL (BEGIN, COMMIT, ROLLBACK, a migration), no parameters; several
    /// statements allowed.
    Simple(String),
    /// A statement whose changed-row count is wanted.
    Execute(String, Vec<Value>),
    /// A statement whose rows are wanted.
    Query(String, Vec<Value>),
}

/// What a step answered.
enum Answer {
    Done,
    Count(u64),
    Rows(Vec<tokio_postgres::Row>),
}

/// One transaction's connection (or, outside a transaction, one autocommit's).
pub(crate) struct PgTx {
    /// Taken from `pool` with the first statements, in their own trip to the
    /// registry's runtime; `None` before that and while statements hold it.
    client: Option<Object>,
    pool: Pool,
    handle: tokio::runtime::Handle,
    /// Sent with the next statement that needs an answer, or with COMMIT.
    queued: Vec<Step>,
    /// BEGIN is queued or sent, and neither COMMIT nor ROLLBACK has been sent.
    begun: bool,
    /// BEGIN has reached the server: the connection is inside a transaction.
    open: bool,
    pub(super) node: Arc<str>,
}

impl PgTx {
    pub(super) fn new(pool: Pool, handle: tokio::runtime::Handle, node: Arc<str>) -> PgTx {
        PgTx {
            client: None,
            pool,
            handle,
            queued: Vec::new(),
            begun: false,
            open: false,
            node,
        }
    }

    /// Starts a transaction with `begin` (sent with the first statement).
    pub(super) fn begin(&mut self, begin: &str) {
        self.queued.push(Step::Simple(begin.to_owned()));
        self.begun = true;
    }

    /// Sends what is queued and commits.
    pub(super) fn commit(&mut self) -> Result<(), RegistryError> {
        if !self.begun {
            return self.flush();
        }
        self.run(Some(Step::Simple("COMMIT".into())))?;
        self.begun = false;
        self.open = false;
        Ok(())
    }

    /// Drops what is queued and rolls back what was sent. A connection that cannot be
    /// rolled back is dropped instead of going back to the pool.
    pub(super) fn rollback(&mut self) {
        self.queued.clear();
        self.begun = false;
        if self.open && self.run(Some(Step::Simple("ROLLBACK".into()))).is_ok() {
            self.open = false;
        }
    }

    /// Runs `sql` (several statements allowed, no parameters) after what is queued.
    pub(super) fn batch(&mut self, sql: &str) -> Result<(), RegistryError> {
        self.run(Some(Step::Simple(sql.to_owned()))).map(|_| ())
    }

    /// Announces `change` to the other nodes when this transaction commits.
    pub(crate) fn notify(&mut self, change: &Change) -> Result<(), RegistryError> {
        let payload = encode(&self.node, change);
        self.execute_later(
            &format!("SELECT pg_notify('{CHANNEL}', ?1)"),
            &[Value::Text(payload)],
        )
    }

    /// Every row `sql` returns (after what is queued).
    pub(crate) fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, RegistryError> {
        let step = Step::Query(super::placeholders(sql), params.to_vec());
        match self.run(Some(step))? {
            Some(Answer::Rows(rows)) => rows.iter().map(row).collect(),
            _ => Err(RegistryError::corrupt("a query's answer", "not rows")),
        }
    }

    /// Runs `sql` (after what is queued); how many rows it changed.
    pub(crate) fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, RegistryError> {
        let step = Step::Execute(super::placeholders(sql), params.to_vec());
        match self.run(Some(step))? {
            Some(Answer::Count(n)) => Ok(n),
            _ => Err(RegistryError::corrupt(
                "a statement's answer",
                "not a count",
            )),
        }
    }

    /// Queues `sql`, to be sent with the next statement or with COMMIT; its errors
    /// surface there. Outside a transaction it is sent now.
    pub(crate) fn execute_later(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> Result<(), RegistryError> {
        if !self.begun {
            return self.execute(sql, params).map(|_| ());
        }
        self.queued
            .push(Step::Execute(super::placeholders(sql), params.to_vec()));
        Ok(())
    }

    /// Sends what is queued.
    fn flush(&mut self) -> Result<(), RegistryError> {
        self.run(None).map(|_| ())
    }

    /// Sends what is queued, then `last`, in one pipeline; `last`'s answer.
    fn run(&mut self, last: Option<Step>) -> Result<Option<Answer>, RegistryError> {
        let mut steps = std::mem::take(&mut self.queued);
        let wants_answer = last.is_some();
        steps.extend(last);
        if steps.is_empty() {
            return Ok(None);
        }
        let client = match self.client.take() {
            Some(client) => Some(client),
            // A transaction that already sent statements keeps its connection: losing
            // it means an earlier failure.
            None if self.open => {
                return Err(RegistryError::Unavailable {
                    reason: "the connection was lost by an earlier failure".into(),
                });
            }
            None => None,
        };
        if self.begun {
            // From here the server may be inside the transaction, whatever happens.
            self.open = true;
        }
        let pool = self.pool.clone();
        let (client, answers) = wait(&self.handle, async move {
            let client = match client {
                Some(client) => client,
                None => pool.get().await?,
            };
            let answers = pipeline(&client, &steps).await;
            Ok::<_, PoolError>((client, answers))
        })?
        .map_err(|e| {
            // No connection: nothing reached the server.
            self.open = false;
            super::pool_error(e)
        })?;
        self.client = Some(client);
        let mut answers = answers.map_err(pg_error)?;
        Ok(if wants_answer { answers.pop() } else { None })
    }
}

impl Statements for PgTx {
    fn dialect(&self) -> &'static Dialect {
        &super::DIALECT
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, RegistryError> {
        PgTx::query(self, sql, params)
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, RegistryError> {
        PgTx::execute(self, sql, params)
    }

    fn execute_later(&mut self, sql: &str, params: &[Value]) -> Result<(), RegistryError> {
        PgTx::execute_later(self, sql, params)
    }

    fn notify(&mut self, change: &Change) -> Result<(), RegistryError> {
        PgTx::notify(self, change)
    }
}

impl Drop for PgTx {
    fn drop(&mut self) {
        if self.open {
            // Still inside a transaction nobody can end: close the connection instead of
            // handing it to the next caller.
            if let Some(client) = self.client.take() {
                drop(Object::take(client));
            }
        }
    }
}

type Pending<'a> = Pin<Box<dyn Future<Output = Result<Answer, tokio_postgres::Error>> + Send + 'a>>;

/// Sends every step back to back and collects the answers in order; the first error.
async fn pipeline(client: &Object, steps: &[Step]) -> Result<Vec<Answer>, tokio_postgres::Error> {
    // Preparing is a round trip only the first time a connection sees a statement.
    let mut statements = Vec::with_capacity(steps.len());
    for step in steps {
        statements.push(match step {
            Step::Simple(_) => None,
            Step::Execute(sql, _) | Step::Query(sql, _) => Some(client.prepare_cached(sql).await?),
        });
    }
    let pending: Vec<Pending<'_>> = steps
        .iter()
        .zip(&statements)
        .map(|(step, statement)| -> Pending<'_> {
            match (step, statement) {
                (Step::Simple(sql), _) => {
                    Box::pin(async move { client.batch_execute(sql).await.map(|()| Answer::Done) })
                }
                (Step::Execute(_, params), Some(statement)) => Box::pin(async move {
                    let refs: Vec<&(dyn ToSql + Sync)> =
                        params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
                    client.execute(statement, &refs).await.map(Answer::Count)
                }),
                (Step::Query(_, params), Some(statement)) => Box::pin(async move {
                    let refs: Vec<&(dyn ToSql + Sync)> =
                        params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
                    client.query(statement, &refs).await.map(Answer::Rows)
                }),
                (_, None) => Box::pin(async { Ok(Answer::Done) }),
            }
        })
        .collect();
    futures_util::future::join_all(pending)
        .await
        .into_iter()
        .collect()
}
