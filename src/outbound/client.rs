//! The HTTP client the host sends guests' requests with: TLS verified by rustls, no
//! proxy from the environment, no redirects followed, and a resolver that refuses
//! non-public addresses, so the check holds for every connection the client opens.

use std::error::Error as StdError;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::address::{PrivateNetwork, refusal};

/// Longest a connection may take to open (the call's deadline may cut it sooner).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A name resolved to an address requests may not reach.
#[derive(Debug)]
pub struct AddressRefused {
    /// The name.
    pub host: String,
    /// The address it resolved to.
    pub address: std::net::IpAddr,
    /// What kind of address it is.
    pub why: &'static str,
}

impl fmt::Display for AddressRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} resolves to {}, {}: the host refuses to reach it (an operator may allow \
             private networks with --allow-private-network)",
            self.host, self.address, self.why
        )
    }
}

impl StdError for AddressRefused {}

/// Resolves with the system resolver and refuses the whole answer when any address in
/// it is not public: a name that resolves to both a public and a private address is
/// refused rather than raced.
struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some((address, why)) = addrs
                .iter()
                .find_map(|a| refusal(a.ip()).map(|why| (a.ip(), why)))
            {
                let refused: Box<dyn StdError + Send + Sync> =
                    Box::new(AddressRefused { host, address, why });
                return Err(refused);
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The two clients a process may need, built on first use (one that refuses non-public
/// addresses, one that allows them), and the runtime their requests run on.
///
/// Requests run on a runtime of their own rather than the caller's: a client keeps
/// connections alive in tasks of the runtime that opened them, and a call may come from
/// any runtime (`warden run`, a blocking call's own runtime, a test's), which may be
/// gone by the next call.
#[derive(Default)]
pub struct Clients {
    guarded: OnceLock<reqwest::Client>,
    open: OnceLock<reqwest::Client>,
    runtime: OnceLock<tokio::runtime::Runtime>,
}

/// The host's HTTP machinery could not start or its task failed.
#[derive(Debug, thiserror::Error)]
#[error("the host's HTTP client failed: {0}")]
pub struct ClientError(String);

impl Clients {
    /// The client for `private`.
    pub fn get(&self, private: PrivateNetwork) -> Result<reqwest::Client, ClientError> {
        let cell = match private {
            PrivateNetwork::Refused => &self.guarded,
            PrivateNetwork::Allowed => &self.open,
        };
        if let Some(client) = cell.get() {
            return Ok(client.clone());
        }
        // rustls needs a process-wide crypto provider; one already installed is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = build(private).map_err(|e| ClientError(e.to_string()))?;
        Ok(cell.get_or_init(|| client).clone())
    }

    /// Runs `work` on the clients' runtime; dropping the returned future (the call's
    /// deadline) aborts it.
    pub async fn run<F>(&self, work: F) -> Result<F::Output, ClientError>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let runtime = match self.runtime.get() {
            Some(rt) => rt,
            None => {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("warden-http")
                    .enable_all()
                    .build()
                    .map_err(|e| ClientError(format!("cannot start its runtime: {e}")))?;
                self.runtime.get_or_init(|| rt)
            }
        };
        let task = runtime.spawn(work);
        let _abort = AbortOnDrop(task.abort_handle());
        task.await.map_err(|e| ClientError(e.to_string()))
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which is not allowed inside async code.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn build(private: PrivateNetwork) -> Result<reqwest::Client, reqwest::Error> {
    let builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .https_only(false)
        .user_agent(concat!("warden/", env!("CARGO_PKG_VERSION")));
    let builder = match private {
        PrivateNetwork::Refused => builder.dns_resolver(Arc::new(GuardedResolver)),
        PrivateNetwork::Allowed => builder,
    };
    builder.build()
}

/// The refusal somewhere in an error's chain of causes, if any.
pub fn address_refusal<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a AddressRefused> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(refused) = e.downcast_ref::<AddressRefused>() {
            return Some(refused);
        }
        cause = e.source();
    }
    None
}
