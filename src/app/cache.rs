//! What every call reads, kept in memory: which tenant a key names, the tenant (its
//! policy and key hint) and a tool with its current version. Without it, the registry
//! reads of authentication and admission cost more than a trivial call itself.
//!
//! An entry is dropped when what it holds changes: at once for changes made through this
//! node (the app invalidates after each write), for changes other nodes announce
//! ([`crate::registry::Change`], PostgreSQL's NOTIFY; everything when that connection was
//! lost), and for writes of other processes to a SQLite file (a key revoked with `warden
//! tenant` beside a running server: SQLite's `data_version`, checked before each use);
//! and in any case after [`TTL`].
//!
//! A read that began before an invalidation never stores its (possibly stale) answer
//! after it: every invalidation moves a generation, and an answer is kept only if the
//! generation it was read under is still current.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Principal;
use crate::registry::{Tenant, Tool, ToolId, Version};
use crate::tenant::{ApiKey, TenantId};

/// Longest an entry is used without being read again: 1 s.
pub const TTL: Duration = Duration::from_secs(1);

/// Most entries of each kind; past it a kind is emptied (refilled by the next reads).
const MAX_ENTRIES: usize = 10_000;

/// A tool with its current version, as a call reads them.
pub(super) type Current = Arc<(Tool, Version)>;

struct Entry<T> {
    value: T,
    at: Instant,
}

#[derive(Default)]
struct State {
    generation: u64,
    /// The registry's count of other processes' writes when the entries were read.
    outside: u64,
    /// SHA-256 of an API key or reviewer key -> whose it is.
    keys: HashMap<[u8; 32], Entry<Principal>>,
    tenants: HashMap<TenantId, Entry<Arc<Tenant>>>,
    tools: HashMap<(TenantId, ToolId), Entry<Current>>,
}

/// The cache; see the module's documentation.
#[derive(Default)]
pub(super) struct Cache {
    state: Mutex<State>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").finish_non_exhaustive()
    }
}

/// Where an answer read from the registry may be stored: under the generation it was
/// read in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ticket(u64);

fn fresh<T: Clone>(entry: Option<&Entry<T>>) -> Option<T> {
    entry
        .filter(|e| e.at.elapsed() < TTL)
        .map(|e| e.value.clone())
}

fn insert<K: std::hash::Hash + Eq, T>(map: &mut HashMap<K, Entry<T>>, key: K, value: T) {
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
    map.insert(
        key,
        Entry {
            value,
            at: Instant::now(),
        },
    );
}

/// The digest a key is cached under (never the key itself).
pub(super) fn key_digest(plain: &str) -> Option<[u8; 32]> {
    plain.parse::<ApiKey>().ok().map(|k| *k.hash().as_bytes())
}

impl Cache {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A ticket for an answer about to be read.
    pub(super) fn ticket(&self) -> Ticket {
        Ticket(self.lock().generation)
    }

    /// Whose key hashes to `digest`, if known.
    pub(super) fn key(&self, digest: &[u8; 32]) -> Option<Principal> {
        fresh(self.lock().keys.get(digest))
    }

    /// Remembers whose key `digest` is.
    pub(super) fn put_key(&self, ticket: Ticket, digest: [u8; 32], principal: Principal) {
        let mut state = self.lock();
        if state.generation == ticket.0 {
            insert(&mut state.keys, digest, principal);
        }
    }

    /// The tenant, if known.
    pub(super) fn tenant(&self, id: &TenantId) -> Option<Arc<Tenant>> {
        fresh(self.lock().tenants.get(id))
    }

    /// Remembers a tenant.
    pub(super) fn put_tenant(&self, ticket: Ticket, tenant: Arc<Tenant>) {
        let mut state = self.lock();
        if state.generation == ticket.0 {
            insert(&mut state.tenants, tenant.id.clone(), tenant);
        }
    }

    /// The tool and its current version, if known.
    pub(super) fn tool(&self, tenant: &TenantId, tool: &ToolId) -> Option<Current> {
        fresh(self.lock().tools.get(&(tenant.clone(), tool.clone())))
    }

    /// Remembers a tool with its current version.
    pub(super) fn put_tool(&self, ticket: Ticket, current: Current) {
        let mut state = self.lock();
        if state.generation == ticket.0 {
            let key = (current.0.tenant.clone(), current.0.id.clone());
            insert(&mut state.tools, key, current);
        }
    }

    /// Forgets the tenant's tools (one was registered, updated, switched or deleted).
    pub(super) fn tools_changed(&self, tenant: &TenantId) {
        let mut state = self.lock();
        state.generation += 1;
        state.tools.retain(|(t, _), _| t != tenant);
    }

    /// Forgets the tenant and its keys, reviewer keys included (its policy or a key
    /// changed).
    pub(super) fn tenant_changed(&self, tenant: &TenantId) {
        let mut state = self.lock();
        state.generation += 1;
        state.tenants.remove(tenant);
        state.keys.retain(|_, e| e.value.tenant() != tenant);
    }

    /// Notes the registry's count of other processes' writes (see
    /// [`crate::registry::Registry::outside_writes`]): a new count drops everything.
    pub(super) fn observe(&self, outside: u64) {
        let mut state = self.lock();
        if state.outside != outside {
            state.outside = outside;
            state.generation += 1;
            state.keys.clear();
            state.tenants.clear();
            state.tools.clear();
        }
    }

    /// Forgets everything.
    pub(super) fn clear(&self) {
        let mut state = self.lock();
        state.generation += 1;
        state.keys.clear();
        state.tenants.clear();
        state.tools.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_read_before_an_invalidation_is_not_kept() {
        let cache = Cache::default();
        let tenant = TenantId::generate();
        let ticket = cache.ticket();
        cache.tenant_changed(&tenant);
        let principal = Principal::Tenant(tenant.clone());
        cache.put_key(ticket, [1; 32], principal.clone());
        assert_eq!(cache.key(&[1; 32]), None);
        let ticket = cache.ticket();
        cache.put_key(ticket, [1; 32], principal.clone());
        assert_eq!(cache.key(&[1; 32]), Some(principal));
        cache.tenant_changed(&tenant);
        assert_eq!(cache.key(&[1; 32]), None);
    }
}
