//! Statements awaited on the caller's own runtime: a call's start and end.
//!
//! Every other statement goes through the registry's runtime, since the registry's API
//! is synchronous: a call's end went from the call's task to the journal's thread, to
//! the registry's runtime, to the server and back the same way; on a virtual machine
//! each of those wake-ups of a sleeping thread costs tens of microseconds, and together
//! they cost more than the statement (a throwaway probe, 2026-11-27: 170-240 us for an
//! end whose statement takes 60-75 us through `pgbench`). This pool's connections are
//! driven by the runtime of the task that opened them (the server's), so a task awaiting
//! a statement here is woken once, by the answer.
//!
//! Measured (a probe alternating both ways in one process, 2026-11-27, strict, four
//! rounds each): a call through the service on PostgreSQL 873-911 us p50 against
//! 974-1,036 us through the journal.
//!
//! As many statements at a time as the pool has connections ([`Direct::try_take`]:
//! [`DIRECT_CONNECTIONS`]); `app/journal.rs` says which calls use it. A call that
//! finds them all taken hands its record to the journal, whose thread commits the
//! records waiting together in one transaction (under load, one commit for many calls).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use deadpool_postgres::Pool;
use tokio_postgres::types::ToSql;

use super::{pg_error, placeholders, pool_error};
use crate::registry::RegistryError;
use crate::registry::db::Value;

/// Connections of each pool of statements awaited on their caller's runtime: one per
/// core, at most 4 (calls use it while the node has cores to spare: `app/journal.rs`).
pub(crate) static DIRECT_CONNECTIONS: LazyLock<usize> =
    LazyLock::new(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)));

/// A pool of statements awaited on their caller's runtime.
pub(crate) struct Direct {
    pool: Pool,
    /// Statements running: at most the pool's size.
    running: AtomicUsize,
}

/// The right to run one statement now; see [`Direct::try_take`].
pub(crate) struct Taken<'a> {
    direct: &'a Direct,
}

impl Direct {
    pub(super) fn new(pool: Pool) -> Direct {
        Direct {
            pool,
            running: AtomicUsize::new(0),
        }
    }

    /// The right to run a statement now; `None` while the pool's every connection runs
    /// one, or outside a multi-thread tokio runtime. (A connection is driven by the
    /// runtime it was opened on, whoever awaits its statements; a multi-thread
    /// runtime's workers keep driving it while one of them blocks, and a runtime that
    /// is gone closes it, so the pool opens another. A current-thread runtime that
    /// blocks would hold every statement.)
    pub(crate) fn try_take(&self) -> Option<Taken<'_>> {
        let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
        if !matches!(flavor, Ok(tokio::runtime::RuntimeFlavor::MultiThread)) {
            return None;
        }
        let most = self.pool.status().max_size;
        self.running
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                (n < most).then_some(n + 1)
            })
            .ok()
            .map(|_| Taken { direct: self })
    }
}

impl Taken<'_> {
    /// Runs `sql` (one statement, committed on its own); how many rows it changed. Must
    /// be awaited inside a tokio runtime, which drives the connection it opens.
    pub(crate) async fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, RegistryError> {
        let client = self.direct.pool.get().await.map_err(pool_error)?;
        let statement = client
            .prepare_cached(&placeholders(sql))
            .await
            .map_err(pg_error)?;
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        client.execute(&statement, &refs).await.map_err(pg_error)
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.direct.running.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct(connections: usize) -> Direct {
        // Never connected: taking the right to a statement needs no server.
        let config: tokio_postgres::Config =
            "postgresql://warden@localhost/warden".parse().unwrap();
        let tls = super::super::tls().unwrap();
        Direct::new(super::super::make_pool(config, &tls, connections, "test").unwrap())
    }

    #[test]
    fn as_many_statements_as_connections_and_only_on_a_multi_thread_runtime() {
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        for connections in [1, 2] {
            let direct = direct(connections);
            multi.block_on(async {
                let taken: Vec<Taken<'_>> = (0..connections)
                    .map(|n| direct.try_take().unwrap_or_else(|| panic!("{n} free")))
                    .collect();
                assert!(direct.try_take().is_none(), "more than {connections}");
                drop(taken);
                assert!(direct.try_take().is_some(), "not given back");
            });
            let single = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            single.block_on(async { assert!(direct.try_take().is_none()) });
            assert!(direct.try_take().is_none(), "outside any runtime");
        }
    }
}
