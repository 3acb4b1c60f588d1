//! The guest's frames as the host reads them: a request frame parsed into a
//! [`Request`] checked for form (method, URL, host, headers, body), before
//! [`super::exchange`] checks it against the grants and carries it.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;

use super::exchange::Failure;
use crate::events::LogLevel;
use crate::grants::hosts::{Scheme, Target, normalize_name};
use crate::outcome::RequestRecord;

/// Request headers the host sets itself (or that only make sense on one connection).
const HOP_BY_HOP: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

/// One request frame.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(super) enum Frame {
    Http(HttpFrame),
    Progress {
        progress: f64,
        #[serde(default)]
        total: Option<f64>,
        #[serde(default)]
        message: Option<String>,
    },
    Log {
        level: LogLevel,
        #[serde(default)]
        logger: Option<String>,
        message: String,
    },
}

#[derive(Deserialize)]
pub(super) struct HttpFrame {
    method: String,
    url: String,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    body: String,
    #[serde(default)]
    timeout: Option<f64>,
}

/// A header value's bytes: the guest's libraries hand over each byte as one character
/// (Latin-1, as `http.client` does); text with wider characters goes as UTF-8.
pub(super) fn header_bytes(value: &str) -> Vec<u8> {
    if value.chars().all(|c| u32::from(c) <= 0xff) {
        value.chars().map(|c| c as u8).collect()
    } else {
        value.as_bytes().to_vec()
    }
}

/// A request as the guest framed it, checked for form.
pub(super) struct Request {
    pub(super) method: String,
    pub(super) scheme: Scheme,
    /// Lowercase name or address literal (IPv6 bracketed).
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) url: url::Url,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
    pub(super) timeout: Option<Duration>,
}

impl Request {
    pub(super) fn parse(frame: HttpFrame) -> Result<Request, Failure> {
        let invalid = |m: String| Failure::Invalid(m);
        let method = frame.method.to_ascii_uppercase();
        if method.is_empty()
            || method.len() > 20
            || !method.bytes().all(|b| b.is_ascii_alphabetic())
        {
            return Err(invalid(format!("{:?} is not an HTTP method", frame.method)));
        }
        let url = url::Url::parse(&frame.url)
            .map_err(|e| invalid(format!("{:?} is not a URL: {e}", frame.url)))?;
        let scheme: Scheme = url.scheme().parse().map_err(|()| {
            Failure::Refused(format!(
                "{} is not http or https: the host carries HTTP requests only",
                url.scheme()
            ))
        })?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                "a URL with a user or password is not supported: send an Authorization header"
                    .into(),
            ));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => normalize_name(d).map_err(invalid)?,
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => format!("[{ip}]"),
            None => return Err(invalid(format!("{:?} has no host", frame.url))),
        };
        let port = url.port().unwrap_or(scheme.default_port());
        let body = B64
            .decode(frame.body.as_bytes())
            .map_err(|e| invalid(format!("the frame's body is not base64: {e}")))?;
        let mut headers = Vec::with_capacity(frame.headers.len());
        for (name, value) in frame.headers {
            let lower = name.to_ascii_lowercase();
            if HOP_BY_HOP.contains(&lower.as_str()) {
                continue;
            }
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err()
                || reqwest::header::HeaderValue::from_bytes(&header_bytes(&value)).is_err()
            {
                return Err(invalid(format!("the header {name:?} is not valid HTTP")));
            }
            headers.push((name, value));
        }
        let timeout = frame
            .timeout
            .filter(|t| t.is_finite() && *t > 0.0)
            .map(|t| Duration::from_secs_f64(t.min(86_400.0)));
        Ok(Request {
            method,
            scheme,
            host,
            port,
            url,
            headers,
            body,
            timeout,
        })
    }

    pub(super) fn target(&self) -> Target<'_> {
        Target {
            method: &self.method,
            scheme: self.scheme,
            host: &self.host,
            port: self.port,
        }
    }

    /// The record of this request before it is carried: as the guest wrote it (so with
    /// placeholders, never secrets), without the query.
    pub(super) fn record(&self) -> RequestRecord {
        RequestRecord {
            method: self.method.clone(),
            scheme: self.scheme.as_str().to_owned(),
            host: self.host.clone(),
            port: self.port,
            path: self.url.path().to_owned(),
            status: None,
            request_bytes: 0,
            response_bytes: 0,
            duration_us: 0,
            refused: None,
            error: Some("the call ended (deadline or cancellation) before the response".into()),
        }
    }
}
