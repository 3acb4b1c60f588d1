//! The HTTP service: most tests through `router(app).oneshot(...)`, one against a real
//! server on loopback. Every service here has its own registry file and tool folder
//! and shares the run's sandbox.

mod audit;
pub mod console;
mod content;
mod fairness;
mod gate;
mod letta;
mod lifecycle;
mod load;
mod mcp;
mod policy;
mod properties;
mod registration;
mod rejections;
mod review;
mod runs;
mod runtimes;
mod server;
mod tenancy;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt;
use warden::app::{App, AppConfig};
use warden::http::router;
use warden::registry::Registry;
use warden::tenant::TenantId;
use warden::worker::Workers;

use crate::support::shared_workers;

pub const OPERATOR_KEY: &str = "test-operator-key";

pub const ADD: &str =
    "def add(a: int, b: int) -> int:\n    \"\"\"Add two integers.\"\"\"\n    return a + b\n";
pub const SPIN: &str =
    "def spin() -> None:\n    \"\"\"Loop forever.\"\"\"\n    while True:\n        pass\n";

/// A service over a registry file in its own folder.
pub struct Service {
    pub dir: tempfile::TempDir,
    pub registry: Arc<Registry>,
    pub app: App,
    pub router: Router,
}

impl Service {
    pub fn start() -> Service {
        let dir = tempfile::tempdir().unwrap();
        Service::open(dir)
    }

    /// A service that prepares each version's warm state at registration, as `warden
    /// serve` does (the other tests run cold, so that they do not spend the CI's cores
    /// preparing states they do not look at).
    pub fn start_warm() -> Service {
        Service::with(tempfile::tempdir().unwrap(), true)
    }

    /// A service over the registry file in `dir`, as after a restart.
    pub fn open(dir: tempfile::TempDir) -> Service {
        Service::with(dir, false)
    }

    /// A service running its calls in `workers` instead of the shared pool.
    pub fn on(workers: Arc<Workers>) -> Service {
        Service::in_pool(tempfile::tempdir().unwrap(), false, workers)
    }

    fn with(dir: tempfile::TempDir, warm_start: bool) -> Service {
        Service::in_pool(dir, warm_start, Arc::clone(shared_workers()))
    }

    /// A service whose pip may reach the package index (the others install from local
    /// wheelhouses only).
    pub fn with_index() -> Service {
        let dir = tempfile::tempdir().unwrap();
        let packages = crate::support::package_store_with_pip(dir.path(), crate::support::pip());
        Service::assemble(dir, false, Arc::clone(shared_workers()), packages)
    }

    fn in_pool(dir: tempfile::TempDir, warm_start: bool, workers: Arc<Workers>) -> Service {
        let packages = crate::support::package_store(dir.path());
        Service::assemble(dir, warm_start, workers, packages)
    }

    fn assemble(
        dir: tempfile::TempDir,
        warm_start: bool,
        workers: Arc<Workers>,
        packages: warden::packages::Packages,
    ) -> Service {
        let registry = Arc::new(Registry::open(dir.path().join("warden.db")).unwrap());
        let app = App::new(
            Arc::clone(&registry),
            workers,
            AppConfig {
                operator_key: Some(OPERATOR_KEY.into()),
                warm_start,
                audit_key: Some(warden::audit::AuditKey::generate()),
                ..AppConfig::new(dir.path().join("tools"), packages)
            },
        );
        let router = router(app.clone());
        Service {
            dir,
            registry,
            app,
            router,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Creates a tenant through the admin endpoint; returns its API key.
    pub async fn tenant(&self, policy: Value) -> String {
        self.tenant_with_id(policy).await.0
    }

    /// Creates a tenant through the admin endpoint; returns its API key and its id.
    pub async fn tenant_with_id(&self, policy: Value) -> (String, TenantId) {
        let r = self
            .send(
                Method::POST,
                "/v1/admin/tenants",
                Some(OPERATOR_KEY),
                Some(json!({"name": "t", "policy": policy})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
        (
            r.json["api_key"].as_str().unwrap().to_owned(),
            r.json["tenant"]["id"].as_str().unwrap().parse().unwrap(),
        )
    }

    /// Registers `source` for the tenant with `key`; returns the tool's id.
    pub async fn register(&self, key: &str, spec: Value) -> String {
        let r = self
            .send(Method::POST, "/v1/tools", Some(key), Some(spec))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
        r.json["tool"]["id"].as_str().unwrap().to_owned()
    }

    pub async fn run(&self, key: &str, tool: &str, arguments: Value) -> Reply {
        self.send(
            Method::POST,
            &format!("/v1/tools/{tool}/run"),
            Some(key),
            Some(json!({ "arguments": arguments })),
        )
        .await
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        send_to(&self.router, method, path, key, body).await
    }

    pub async fn raw(&self, request: Request<Body>) -> Reply {
        raw_to(&self.router, request).await
    }
}

/// A JSON request to `router`.
pub async fn send_to(
    router: &Router,
    method: Method,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(key) = key {
        request = request.header(header::AUTHORIZATION, format!("Bearer {key}"));
    }
    let request = match body {
        Some(body) => request
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string())),
        None => request.body(Body::empty()),
    }
    .unwrap();
    raw_to(router, request).await
}

/// Any request to `router`.
pub async fn raw_to(router: &Router, request: Request<Body>) -> Reply {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Reply {
        status,
        headers,
        json,
    }
}

/// A response: status, headers and the body as JSON (or a JSON string of the text).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub json: Value,
}

impl Reply {
    /// The machine code of an error body.
    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }
}

/// A folder under `root`, created.
pub fn folder(root: &Path, name: &str) -> PathBuf {
    let p = root.join(name);
    std::fs::create_dir_all(&p).unwrap();
    p
}
