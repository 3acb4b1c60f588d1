//! The harness of the several-node tests: a cluster's database and keys, and its nodes
//! as real `warden serve` processes, each with a home of its own.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::pg;
use crate::support::home;

/// The keys every node of a cluster shares, and the database.
pub struct Cluster {
    pub url: String,
    pub keys: tempfile::TempDir,
}

/// A `warden serve` process of a cluster, killed when dropped.
pub struct Node {
    child: Child,
    pub address: String,
    _home: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `warden ARGS` with `home` as its home.
pub fn warden_in(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_warden"));
    c.env("WARDEN_HOME", home)
        .env_remove("WARDEN_SECRET_KEY")
        .env_remove("WARDEN_DATABASE_URL")
        .args(args);
    c
}

/// `warden ARGS` in `home`, which must succeed; its output.
pub fn warden_ok(home: &Path, args: &[&str]) -> std::process::Output {
    let out = warden_in(home, args).output().unwrap();
    assert!(
        out.status.success(),
        "warden {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A home of its own that shares the run's runtime.
pub fn node_home() -> tempfile::TempDir {
    crate::support::sandbox();
    let dir = tempfile::tempdir().unwrap();
    for part in ["runtime", "compiled"] {
        std::os::unix::fs::symlink(home().join(part), dir.path().join(part)).unwrap();
    }
    dir
}

impl Cluster {
    /// A new database on the run's server, and keys for its nodes.
    pub fn new() -> Cluster {
        Cluster::on(pg::database())
    }

    /// A cluster over the database at `url`.
    pub fn on(url: String) -> Cluster {
        let keys = tempfile::tempdir().unwrap();
        std::fs::write(keys.path().join("secret.key"), hex(&rand_bytes())).unwrap();
        let audit = warden::audit::AuditKey::generate();
        std::fs::write(keys.path().join("audit.key"), audit.to_hex()).unwrap();
        Cluster { url, keys }
    }

    fn key_flags(&self) -> Vec<String> {
        vec![
            "--secret-key-file".into(),
            self.keys.path().join("secret.key").display().to_string(),
            "--audit-key-file".into(),
            self.keys.path().join("audit.key").display().to_string(),
        ]
    }

    /// Creates a tenant with `flags` through `warden tenant create --db`; its API key.
    pub fn tenant(&self, flags: &[&str]) -> (String, String) {
        let home = node_home();
        let out = warden_ok(
            home.path(),
            &[
                &["tenant", "--db", &self.url, "create", "t", "--json"],
                flags,
            ]
            .concat(),
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            v["api_key"].as_str().unwrap().to_owned(),
            v["tenant"]["id"].as_str().unwrap().to_owned(),
        )
    }

    /// Starts a node; returns once it listens.
    pub fn node(&self) -> Node {
        self.try_node(&[])
            .unwrap_or_else(|e| panic!("the node did not start: {e}"))
    }

    /// Starts a node with `extra` flags; `Err` with its output when it exits instead.
    pub fn try_node(&self, extra: &[&str]) -> Result<Node, String> {
        let home = node_home();
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--cold",
            "--db",
            &self.url,
        ];
        let keys = self.key_flags();
        let with_keys = !extra.contains(&"--secret-key-file");
        if with_keys {
            args.extend(keys.iter().map(String::as_str));
        }
        args.extend(extra);
        let mut child = warden_in(home.path(), &args)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let line = line.trim_end().to_owned();
            seen.push_str(&line);
            seen.push('\n');
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let address = rest.split_whitespace().next().unwrap().to_owned();
                // Keep reading: a node whose stderr is closed cannot say it is stopping.
                let mut rest = stderr;
                std::thread::spawn(move || std::io::copy(&mut rest, &mut std::io::sink()));
                return Ok(Node {
                    child,
                    address,
                    _home: home,
                });
            }
        }
        let _ = child.wait();
        Err(seen)
    }
}

pub fn rand_bytes() -> [u8; 32] {
    std::array::from_fn(|_| rand::random())
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

impl Node {
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        key: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = client()
            .request(method, format!("http://{}{path}", self.address))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn register(&self, key: &str, source: &str) -> String {
        let (status, body) = self
            .send(
                reqwest::Method::POST,
                "/v1/tools",
                key,
                Some(json!({ "source": source })),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["tool"]["id"].as_str().unwrap().to_owned()
    }

    pub async fn run(&self, key: &str, tool: &str, arguments: Value) -> (u16, Value) {
        self.send(
            reqwest::Method::POST,
            &format!("/v1/tools/{tool}/run"),
            key,
            Some(json!({ "arguments": arguments })),
        )
        .await
    }

    /// `kill -9`.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        self.child.wait().unwrap()
    }
}

/// Runs `warden audit export` then `warden audit verify` on `tenant`'s trail in the
/// cluster's database; the verifier's output.
pub fn export_and_verify(cluster: &Cluster, tenant: &str) -> String {
    let home = node_home();
    let file = home.path().join("export.jsonl");
    let audit = cluster.keys.path().join("audit.key");
    warden_ok(
        home.path(),
        &[
            "audit",
            "export",
            "--tenant",
            tenant,
            "--db",
            &cluster.url,
            "--audit-key-file",
            audit.to_str().unwrap(),
            "--out",
            file.to_str().unwrap(),
        ],
    );
    let pubkey = warden::audit::AuditKey::from_hex(&std::fs::read_to_string(&audit).unwrap())
        .unwrap()
        .public_key()
        .to_string();
    let out = warden_ok(
        home.path(),
        &[
            "audit",
            "verify",
            file.to_str().unwrap(),
            "--pubkey",
            &pubkey,
        ],
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
