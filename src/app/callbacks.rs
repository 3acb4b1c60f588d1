//! Callbacks: a run's result posted to its `callback_url` once it ended, signed with
//! its tenant's webhook secret, retried with backoff, from whichever node is free.
//!
//! The URL must be one the tenant's policy allows its tools to reach (`allowed_hosts`,
//! for `POST`), checked when the run is accepted and again at each attempt; the tenant
//! must have set its webhook secret, a tenant secret named [`WEBHOOK_SECRET`] (`PUT
//! /v1/secrets/WARDEN_WEBHOOK_SECRET`: sealed like every secret, never read back). The
//! request is sent by the host, as a tool's outbound request is: TLS verified, no
//! redirect followed, private addresses refused unless the service allows them.
//!
//! What is posted: the run as `GET /v1/runs/{id}` answers it, with these headers:
//!
//! - `Warden-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`, the MAC of
//!   `"<t>.<body>"` under the secret. A receiver recomputes it over the raw body,
//!   compares in constant time, and refuses a `t` older than a few minutes (a replay);
//! - `Warden-Run: run_...` and `Warden-Attempt: <n>`.
//!
//! A 2xx answer is delivered (`run_delivered`); anything else is tried again after 1, 2,
//! 4, ... seconds, [`CALLBACK_ATTEMPTS`] times in all, then given up (`run_undelivered`):
//! the result stays readable for the tenant's retention. Each due attempt is taken by
//! one node at a time ([`crate::registry::Registry::take_callback`]), so a lost node's
//! deliveries go on elsewhere.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{App, AppError, RunView};
use crate::grants::hosts::{Scheme, Target};
use crate::registry::{AsyncRun, CallbackOutcome, RunId, now_ms};
use crate::tenant::{TenantId, TenantPolicy};

/// The tenant secret a run's callback is signed with.
pub const WEBHOOK_SECRET: &str = "WARDEN_WEBHOOK_SECRET";

/// Attempts to post a result, at most: 8 (over about two minutes).
pub const CALLBACK_ATTEMPTS: u32 = 8;

/// The wait before the second attempt: 1 s, doubled for each one after.
pub const CALLBACK_FIRST_RETRY: Duration = Duration::from_secs(1);

/// How long one attempt may take: 10 s.
pub const CALLBACK_TIMEOUT: Duration = Duration::from_secs(10);

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "Warden-Signature";

/// Callbacks taken per keeper tick, at most.
const DUE_BATCH: u32 = 50;

/// `Warden-Signature`'s value for `body` sent at `timestamp` (Unix seconds).
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "t={timestamp},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

/// Where a callback URL may go under `policy`: an `http(s)` URL with a host, no user
/// or password, whose host the tenant's tools may reach with `POST`.
fn check_url(url: &str, policy: &TenantPolicy) -> Result<reqwest::Url, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    let scheme = match parsed.scheme() {
        "https" => Scheme::Https,
        "http" => Scheme::Http,
        other => {
            return Err(format!(
                "{url}: the scheme must be http or https, not {other}"
            ));
        }
    };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "{url}: a user or password in the URL is refused (the request is signed)"
        ));
    }
    let host = match parsed.host() {
        Some(url::Host::Domain(d)) => d.trim_end_matches('.').to_ascii_lowercase(),
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => format!("[{a}]"),
        None => return Err(format!("{url}: no host")),
    };
    let port = parsed.port_or_known_default().unwrap_or(443);
    let target = Target {
        method: "POST",
        scheme,
        host: &host,
        port,
    };
    if !policy.allowed_hosts.iter().any(|p| p.allows(&target)) {
        return Err(format!(
            "{url}: {host}:{port} is not among the hosts the tenant's policy allows \
             (allowed_hosts); ask the operator to allow it, or use another receiver"
        ));
    }
    Ok(parsed)
}

impl App {
    /// Checks a run's `callback_url` at its acceptance: an allowed host, and the
    /// tenant's webhook secret set.
    pub(super) async fn check_callback(
        &self,
        tenant: &TenantId,
        policy: &TenantPolicy,
        url: &str,
    ) -> Result<(), AppError> {
        check_url(url, policy).map_err(AppError::InvalidCallback)?;
        self.webhook_secret(tenant).await.map(drop)
    }

    /// The tenant's webhook secret, unsealed.
    async fn webhook_secret(&self, tenant: &TenantId) -> Result<Vec<u8>, AppError> {
        let key = self.secret_key()?.clone();
        let t = tenant.clone();
        let sealed = self
            .blocking(move |r| Ok(r.sealed_secrets(&t, &[WEBHOOK_SECRET])?))
            .await?;
        let Some((name, sealed)) = sealed.into_iter().next() else {
            return Err(AppError::InvalidCallback(format!(
                "a callback is signed with the tenant's webhook secret, which is not set: \
                 PUT /v1/secrets/{WEBHOOK_SECRET} first"
            )));
        };
        Ok(key
            .open(tenant, &name, &sealed)?
            .expose()
            .as_bytes()
            .to_vec())
    }

    /// Tries the callbacks that are due (any node's runs).
    pub(super) async fn deliver_due_callbacks(&self) -> Result<(), AppError> {
        let now = now_ms();
        let due = self
            .blocking(move |r| Ok(r.due_callbacks(now, DUE_BATCH)?))
            .await?;
        for id in due {
            let app = self.clone();
            tokio::spawn(async move { app.deliver(&id).await });
        }
        Ok(())
    }

    /// One attempt at run `id`'s callback, if it is due and no other node has it.
    pub(super) async fn deliver(&self, id: &RunId) {
        let now = now_ms();
        let hold = now.saturating_add(millis(CALLBACK_TIMEOUT + Duration::from_secs(5)));
        let i = id.clone();
        let taken = self
            .blocking(move |r| Ok(r.take_callback(&i, now, hold)?))
            .await;
        let run = match taken {
            Ok(Some(run)) => run,
            Ok(None) => return,
            Err(e) => return tracing::warn!(run = %id, "cannot take the run's callback: {e}"),
        };
        let outcome = match self.post(&run).await {
            Ok(status) => CallbackOutcome::Delivered(status),
            Err(error) if run.callback_attempts >= CALLBACK_ATTEMPTS => {
                CallbackOutcome::GaveUp(error)
            }
            Err(error) => {
                let wait = CALLBACK_FIRST_RETRY
                    .saturating_mul(1 << run.callback_attempts.saturating_sub(1).min(16));
                CallbackOutcome::Retry {
                    at_ms: now_ms().saturating_add(millis(wait)),
                    error,
                }
            }
        };
        if let CallbackOutcome::Retry { error, .. } = &outcome {
            tracing::info!(run = %run.id, attempt = run.callback_attempts, "callback failed, tried again later: {error}");
        }
        let recorded = self
            .blocking(move |r| Ok(r.callback_attempted(&run, &outcome)?))
            .await;
        if let Err(e) = recorded {
            tracing::warn!(run = %id, "cannot record the callback's attempt: {e}");
        }
    }

    /// Posts the run to its callback URL; the receiver's 2xx status, or what failed.
    async fn post(&self, run: &AsyncRun) -> Result<u16, String> {
        let url = run
            .callback_url
            .as_deref()
            .ok_or("the run has no callback")?;
        let (_, policy) = self
            .tenant_policy(&run.tenant)
            .await
            .map_err(|e| e.to_string())?;
        // Again: the policy may have changed since the run was accepted.
        let url = check_url(url, &policy)?;
        let secret = self
            .webhook_secret(&run.tenant)
            .await
            .map_err(|e| e.to_string())?;
        let body = serde_json::to_vec(&RunView::from(run.clone())).map_err(|e| e.to_string())?;
        let timestamp = u64::try_from(now_ms() / 1000).unwrap_or(0);
        let clients = &self.inner.callback_clients;
        let client = clients
            .get(self.private_network())
            .map_err(|e| e.to_string())?;
        let request = client
            .post(url)
            .timeout(CALLBACK_TIMEOUT)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, signature(&secret, timestamp, &body))
            .header("Warden-Run", run.id.as_str())
            .header("Warden-Attempt", run.callback_attempts.to_string())
            .body(body);
        let sent = clients
            .run(async move { request.send().await.map(|r| r.status().as_u16()) })
            .await
            .map_err(|e| e.to_string())?;
        match sent {
            Ok(status) if (200..300).contains(&status) => Ok(status),
            Ok(status) => Err(format!("the receiver answered {status}")),
            Err(e) => Err(format!("cannot reach the receiver: {}", error_chain(&e))),
        }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// An error with its causes, one after another.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_timestamp_a_dot_and_the_body() {
        // RFC 4231 test case 2's key and data, the data split as `t.body`.
        let sig = signature(b"Jefe", 0, b"what do ya want for nothing?");
        assert!(sig.starts_with("t=0,v1="), "{sig}");
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"0.what do ya want for nothing?");
        assert_eq!(
            sig,
            format!("t=0,v1={}", hex::encode(mac.finalize().into_bytes()))
        );
    }

    #[test]
    fn a_callback_url_must_be_an_allowed_http_host() {
        let policy = TenantPolicy {
            allowed_hosts: vec!["hooks.example.com:443".parse().unwrap()],
            ..TenantPolicy::default()
        };
        assert!(check_url("https://hooks.example.com/warden", &policy).is_ok());
        for refused in [
            "https://evil.example.com/",
            "http://hooks.example.com/",
            "ftp://hooks.example.com/",
            "https://user:pw@hooks.example.com/",
            "not a url",
        ] {
            assert!(check_url(refused, &policy).is_err(), "{refused}");
        }
    }
}
