//! Changes between nodes: a node announces what it changed (PostgreSQL's NOTIFY, sent
//! with the change's transaction) and hears what the others announce on a connection of
//! its own (LISTEN), so that each drops what it cached; see
//! [`crate::registry::Registry::follow`].

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::AsyncMessage;

use super::Postgres;
use crate::registry::Change;
use crate::tenant::TenantId;

/// The channel nodes tell each other of changes on (NOTIFY / LISTEN).
pub(super) const CHANNEL: &str = "warden_changes";
/// How long a node waits before listening again after losing the connection: 1 s.
const RELISTEN: Duration = Duration::from_secs(1);

impl Postgres {
    /// Hears the changes other nodes announce, on a connection of its own, for as long
    /// as this database is open; see [`crate::registry::Registry::follow`].
    pub(crate) fn follow(&self, on_change: Arc<dyn Fn(Change) + Send + Sync>) {
        let (config, tls, node) = (
            self.config.clone(),
            self.tls.clone(),
            Arc::clone(&self.node),
        );
        self.handle.spawn(async move {
            let mut first = true;
            loop {
                if let Err(e) = listen(&config, tls.clone(), &node, &*on_change, first).await {
                    tracing::warn!(
                        "not hearing other nodes' changes ({e}): listening again in {RELISTEN:?}"
                    );
                }
                first = false;
                tokio::time::sleep(RELISTEN).await;
            }
        });
    }
}

/// Listens on [`CHANNEL`] until the connection ends; `Ok` when the server closed it.
async fn listen(
    config: &tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    node: &str,
    on_change: &(dyn Fn(Change) + Send + Sync),
    first: bool,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(tls).await?;
    let (heard, mut payloads) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notification(n) = message?
                && heard.send(n.payload().to_owned()).is_err()
            {
                break;
            }
        }
        Ok::<(), tokio_postgres::Error>(())
    });
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    if !first {
        // Changes made while this node was not listening were not heard.
        on_change(Change::Resync);
    }
    while let Some(payload) = payloads.recv().await {
        if let Some(change) = decode(node, &payload) {
            on_change(change);
        }
    }
    drop(client);
    driver.await.unwrap_or(Ok(()))
}

/// A change as announced: `node|tools|tenant`.
pub(super) fn encode(node: &str, change: &Change) -> String {
    match change {
        Change::Tools(tenant) => format!("{node}|tools|{tenant}"),
        Change::Tenant(tenant) => format!("{node}|tenant|{tenant}"),
        Change::Resync => format!("{node}|resync|"),
    }
}

/// A change another node announced; `None` for this node's own and for what this
/// version does not know.
fn decode(node: &str, payload: &str) -> Option<Change> {
    let mut parts = payload.splitn(3, '|');
    let (from, kind, rest) = (parts.next()?, parts.next()?, parts.next()?);
    if from == node {
        return None;
    }
    match kind {
        "tools" => rest.parse::<TenantId>().ok().map(Change::Tools),
        "tenant" => rest.parse::<TenantId>().ok().map(Change::Tenant),
        "resync" => Some(Change::Resync),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_cross_between_nodes_but_not_back() {
        let tenant = TenantId::generate();
        let payload = encode("a", &Change::Tools(tenant.clone()));
        assert_eq!(decode("b", &payload), Some(Change::Tools(tenant)));
        assert_eq!(decode("a", &payload), None);
        assert_eq!(decode("b", "a|unknown|x"), None);
    }
}
