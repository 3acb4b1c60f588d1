//! One call's outbound requests: each frame the guest sends through the door is parsed,
//! checked against the grants, the secrets' bindings, the address policy and the call's
//! limits, sent by the host, and answered; every request, refused or not, is recorded.
//!
//! The frame protocol (JSON both ways, `runtime/outbound.py` is the guest's half):
//!
//! ```text
//! guest: {"op": "http", "method": "GET", "url": "https://h/p?q", "headers": [[k, v]],
//!         "body": BASE64, "timeout": SECONDS | null}
//! host:  {"ok": true, "status": 200, "reason": "OK", "headers": [[k, v]], "body": BASE64}
//!      | {"ok": false, "error": {"kind": "refused" | "limit" | "timeout" | "network"
//!                                       | "invalid", "message": TEXT}}
//! ```
//!
//! The same door carries what a call reports while it runs (`runtime/warden.py`),
//! handed to the call's [`Events`] (which forwards only what the caller asked for) with
//! every secret's value redacted; the host answers `{"ok": true}`:
//!
//! ```text
//! guest: {"op": "progress", "progress": N, "total": N | null, "message": TEXT | null}
//!      | {"op": "log", "level": "info", "logger": NAME | null, "message": TEXT}
//! ```
//!
//! The host never follows a redirect: the guest's library does, and each hop is a new
//! frame, checked again. Bodies pass as they came (no decompression).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytesize::ByteSize;
use serde_json::json;

use super::address::{PrivateNetwork, refusal};
use super::client::{Clients, address_refusal};
use super::frame::{Frame, HttpFrame, Request, header_bytes};
use super::secrets::CallSecrets;
use crate::events::Events;
use crate::grants::hosts::{Target, parse_address};
use crate::grants::{Grants, HostPattern};
use crate::limits::{Limits, RequestCount};
use crate::outcome::RequestRecord;

/// Largest frame the host reads from the guest: the body cap, base64-inflated, plus room
/// for the URL and headers.
pub fn max_frame(limits: &Limits) -> u64 {
    limits.http_request_bytes.as_u64().saturating_mul(4) / 3 + 1024 * 1024
}

/// The answer to a progress report or a log record.
const REPORTED: &[u8] = br#"{"ok":true}"#;

/// Why a frame got no response.
pub(super) enum Failure {
    Refused(String),
    Limit(String),
    Timeout(String),
    Network(String),
    Invalid(String),
}

impl Failure {
    fn answer(&self) -> Vec<u8> {
        let (kind, message) = match self {
            Failure::Refused(m) => ("refused", m),
            Failure::Limit(m) => ("limit", m),
            Failure::Timeout(m) => ("timeout", m),
            Failure::Network(m) => ("network", m),
            Failure::Invalid(m) => ("invalid", m),
        };
        json!({"ok": false, "error": {"kind": kind, "message": message}})
            .to_string()
            .into_bytes()
    }

    fn is_refusal(&self) -> bool {
        matches!(self, Failure::Refused(_) | Failure::Limit(_))
    }

    fn message(&self) -> &str {
        match self {
            Failure::Refused(m)
            | Failure::Limit(m)
            | Failure::Timeout(m)
            | Failure::Network(m)
            | Failure::Invalid(m) => m,
        }
    }
}

/// What one call has used, and its requests so far.
#[derive(Default)]
struct Ledger {
    requests: u32,
    request_bytes: u64,
    response_bytes: u64,
    records: Vec<RequestRecord>,
}

/// One call's outbound state: what it may reach, its secrets, its limits, its ledger.
/// Shared between the door (which answers frames) and the call (which reads the records
/// at the end, even when the deadline cut a request short).
pub struct Exchange {
    hosts: Vec<HostPattern>,
    secrets: CallSecrets,
    requests: RequestCount,
    request_bytes: ByteSize,
    response_bytes: ByteSize,
    max_frame: u64,
    private: PrivateNetwork,
    clients: Arc<Clients>,
    deadline: Instant,
    ledger: Mutex<Ledger>,
    events: Option<Arc<Events>>,
}

impl Exchange {
    /// The exchange of a call with these grants, secrets and limits.
    pub fn new(
        grants: &Grants,
        secrets: CallSecrets,
        limits: &Limits,
        private: PrivateNetwork,
        clients: Arc<Clients>,
        deadline: Instant,
        events: Option<Arc<Events>>,
    ) -> Exchange {
        Exchange {
            hosts: grants.hosts.clone(),
            secrets,
            requests: limits.http_requests,
            request_bytes: limits.http_request_bytes,
            response_bytes: limits.http_response_bytes,
            max_frame: max_frame(limits),
            private,
            clients,
            deadline,
            ledger: Mutex::new(Ledger::default()),
            events,
        }
    }

    /// The largest frame worth reading; a longer one is answered without being read.
    pub fn max_frame(&self) -> u64 {
        self.max_frame
    }

    /// The answer to a frame too long to read.
    pub fn oversized(&self, len: u64) -> Vec<u8> {
        Failure::Limit(format!(
            "the request is {} encoded, more than the {} this call's http_request_bytes \
             allows",
            ByteSize(len),
            self.request_bytes
        ))
        .answer()
    }

    /// The requests made or tried so far.
    pub fn records(&self) -> Vec<RequestRecord> {
        self.ledger().records.clone()
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers one frame.
    pub async fn answer(&self, frame: &[u8]) -> Vec<u8> {
        let frame: HttpFrame = match serde_json::from_slice::<Frame>(frame) {
            Ok(Frame::Http(f)) => f,
            Ok(Frame::Progress {
                progress,
                total,
                message,
            }) => {
                if let Some(events) = &self.events {
                    let message = message.map(|m| self.secrets.redact(&m));
                    events.progress(progress, total, message.as_deref());
                }
                return REPORTED.to_vec();
            }
            Ok(Frame::Log {
                level,
                logger,
                message,
            }) => {
                if let Some(events) = &self.events {
                    let logger = logger.map(|l| self.secrets.redact(&l));
                    events.log(level, logger.as_deref(), &self.secrets.redact(&message));
                }
                return REPORTED.to_vec();
            }
            Err(e) => {
                return Failure::Invalid(format!("Warden's host could not read the frame: {e}"))
                    .answer();
            }
        };
        let request = match Request::parse(frame) {
            Ok(r) => r,
            Err(f) => return f.answer(),
        };
        let mut record = request.record();
        let index = {
            // Past the request limit every frame is refused: one record says so, and a
            // loop of them is not recorded again and again.
            let mut ledger = self.ledger();
            if ledger.records.len() > self.requests.0 as usize {
                None
            } else {
                ledger.records.push(record.clone());
                Some(ledger.records.len() - 1)
            }
        };
        let started = Instant::now();
        let outcome = self.carry(request, &mut record).await;
        record.duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let answer = match outcome {
            Ok(answer) => {
                record.error = None;
                answer
            }
            Err(failure) => {
                if failure.is_refusal() {
                    record.refused = Some(failure.message().to_owned());
                    record.error = None;
                } else {
                    record.error = Some(failure.message().to_owned());
                }
                failure.answer()
            }
        };
        if let Some(i) = index
            && let Some(slot) = self.ledger().records.get_mut(i)
        {
            *slot = record;
        }
        answer
    }

    async fn carry(
        &self,
        mut req: Request,
        record: &mut RequestRecord,
    ) -> Result<Vec<u8>, Failure> {
        {
            // Every frame counts, refused or not: a loop of refused requests ends too.
            let mut ledger = self.ledger();
            if ledger.requests >= self.requests.0 {
                return Err(Failure::Limit(format!(
                    "this call may make {} outbound requests (http_requests) and has made \
                     them all",
                    self.requests
                )));
            }
            ledger.requests += 1;
        }
        self.check_grant(&req.target())?;
        self.secrets.insert(&mut req)?;
        let body_len = req.body.len() as u64;
        {
            let mut ledger = self.ledger();
            if ledger.request_bytes + body_len > self.request_bytes.as_u64() {
                return Err(Failure::Limit(format!(
                    "the request body is {} and this call may send {} in all \
                     (http_request_bytes), {} of it used",
                    ByteSize(body_len),
                    self.request_bytes,
                    ByteSize(ledger.request_bytes)
                )));
            }
            ledger.request_bytes += body_len;
        }
        if let (Some(ip), PrivateNetwork::Refused) = (parse_address(&req.host), self.private)
            && let Some(why) = refusal(ip)
        {
            return Err(Failure::Refused(format!(
                "{ip} is {why}: the host refuses to reach it (an operator may allow private \
                 networks with --allow-private-network)"
            )));
        }
        record.request_bytes = body_len;
        self.send(req, record).await
    }

    fn check_grant(&self, target: &Target<'_>) -> Result<(), Failure> {
        if self.hosts.iter().any(|p| p.allows(target)) {
            return Ok(());
        }
        let granted = if self.hosts.is_empty() {
            "it is granted no hosts".to_owned()
        } else {
            let list: Vec<String> = self.hosts.iter().map(ToString::to_string).collect();
            format!("its grants are {}", list.join(", "))
        };
        let host_port = format!("{}:{}", target.host, target.port);
        let message = if self.hosts.iter().any(|p| p.allows_host(target)) {
            format!(
                "{} {}://{host_port} is not granted to this tool: {granted}; grant the method \
                 with the host (--allow-host '{} {}')",
                target.method,
                target.scheme.as_str(),
                target.method,
                target.host
            )
        } else {
            format!(
                "{}://{host_port} is not granted to this tool: {granted}; grant it with \
                 --allow-host {} (or the tool's `hosts` grant)",
                target.scheme.as_str(),
                target.host
            )
        };
        Err(Failure::Refused(message))
    }

    async fn send(&self, req: Request, record: &mut RequestRecord) -> Result<Vec<u8>, Failure> {
        let client = self
            .clients
            .get(self.private)
            .map_err(|e| Failure::Network(e.to_string()))?;
        let left = self.deadline.saturating_duration_since(Instant::now());
        let timeout = req
            .timeout
            .map_or(left, |t| t.min(left))
            .max(Duration::from_millis(1));
        let method = reqwest::Method::from_bytes(req.method.as_bytes())
            .map_err(|_| Failure::Invalid(format!("{:?} is not an HTTP method", req.method)))?;
        let mut builder = client
            .request(method, req.url.as_str())
            .timeout(timeout)
            .body(req.body);
        for (name, value) in &req.headers {
            let value = reqwest::header::HeaderValue::from_bytes(&header_bytes(value))
                .map_err(|_| Failure::Invalid(format!("the header {name:?} is not valid HTTP")))?;
            builder = builder.header(name.as_str(), value);
        }
        let url = format!("{}://{}:{}", req.scheme.as_str(), req.host, req.port);
        let budget = {
            let ledger = self.ledger();
            self.response_bytes
                .as_u64()
                .saturating_sub(ledger.response_bytes)
        };
        let fetched = self
            .clients
            .run(fetch(builder, url.clone(), timeout, budget))
            .await
            .map_err(|e| Failure::Network(e.to_string()))?;
        record.status = fetched.status.map(|s| s.as_u16());
        record.response_bytes = fetched.body.len() as u64;
        self.ledger().response_bytes += fetched.body.len() as u64;
        if let Some(failure) = fetched.failure {
            return Err(match failure {
                Failure::Limit(_) => Failure::Limit(format!(
                    "the response from {url} is larger than the {} left of this call's {} \
                     of response bodies (http_response_bytes)",
                    ByteSize(budget),
                    self.response_bytes
                )),
                other => other,
            });
        }
        let status = fetched.status.unwrap_or_default();
        let mut headers = Vec::new();
        for (name, value) in &fetched.headers {
            if matches!(
                name.as_str(),
                "transfer-encoding" | "connection" | "keep-alive"
            ) {
                continue;
            }
            let value = self
                .secrets
                .redact(&String::from_utf8_lossy(value.as_bytes()));
            headers.push((name.as_str().to_owned(), value));
        }
        let body = self.secrets.redact_bytes(fetched.body);
        Ok(json!({
            "ok": true,
            "status": status.as_u16(),
            "reason": status.canonical_reason().unwrap_or(""),
            "headers": headers,
            "body": B64.encode(body),
        })
        .to_string()
        .into_bytes())
    }
}

/// What came back for one request: as much as arrived, and why it stopped short.
struct Fetched {
    status: Option<reqwest::StatusCode>,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
    failure: Option<Failure>,
}

/// Sends the request and reads at most `budget` bytes of its body; runs on the clients'
/// runtime ([`Clients::run`]).
async fn fetch(
    builder: reqwest::RequestBuilder,
    url: String,
    timeout: Duration,
    budget: u64,
) -> Fetched {
    let mut fetched = Fetched {
        status: None,
        headers: reqwest::header::HeaderMap::new(),
        body: Vec::new(),
        failure: None,
    };
    let mut response = match builder.send().await {
        Ok(r) => r,
        Err(e) => {
            fetched.failure = Some(failure_of(&e, &url, timeout));
            return fetched;
        }
    };
    fetched.status = Some(response.status());
    fetched.headers = std::mem::take(response.headers_mut());
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if (fetched.body.len() + chunk.len()) as u64 > budget {
                    fetched.failure = Some(Failure::Limit(String::new()));
                    return fetched;
                }
                fetched.body.extend_from_slice(&chunk);
            }
            Ok(None) => return fetched,
            Err(e) => {
                fetched.failure = Some(failure_of(&e, &url, timeout));
                return fetched;
            }
        }
    }
}

fn failure_of(e: &reqwest::Error, url: &str, timeout: Duration) -> Failure {
    if let Some(refused) = address_refusal(e) {
        return Failure::Refused(refused.to_string());
    }
    if e.is_timeout() {
        return Failure::Timeout(format!(
            "{url} did not answer within {}",
            humantime::format_duration(Duration::from_millis(
                u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)
            ))
        ));
    }
    // The whole chain: reqwest's own message is often just "error sending request".
    let mut message = format!("the request to {url} failed");
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        message.push_str(": ");
        message.push_str(&c.to_string());
        cause = c.source();
    }
    Failure::Network(message)
}
