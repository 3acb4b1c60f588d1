//! A headless Chromium driven over the Chrome DevTools Protocol through a pipe
//! (`--remote-debugging-pipe`: JSON messages ending in NUL on the browser's fds 3 and
//! 4), so the tests need no WebSocket client and no driver crate: a few commands
//! (navigate, evaluate, screenshot) and the events that say a page loaded, what status
//! its document had, and every console error, exception and CSP violation.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long a command or a page load may take.
const WAIT: Duration = Duration::from_secs(30);

/// The browser's binary: `$WARDEN_TEST_CHROMIUM`, else Debian's `chromium`. Missing,
/// the test fails saying how to install it (never skipped).
fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("WARDEN_TEST_CHROMIUM") {
        return PathBuf::from(path);
    }
    for candidate in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if std::path::Path::new(candidate).exists() {
            return PathBuf::from(candidate);
        }
    }
    panic!(
        "the console's browser tests need Chromium, which is not installed: run \
         `./tests/ensure-chromium.sh` (as root: it installs Debian's `chromium` package; \
         `make test` runs it), or set WARDEN_TEST_CHROMIUM to a Chromium binary"
    );
}

/// One headless browser with one page.
pub struct Browser {
    child: Child,
    input: ChildStdin,
    messages: Receiver<Value>,
    next_id: u64,
    session: String,
    /// Console errors, exceptions and CSP violations seen so far, as text.
    pub errors: Vec<String>,
    /// The HTTP status of the last main document loaded.
    pub status: Option<u64>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium with a fresh profile and opens a blank page `width` pixels wide.
    pub fn start(width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        // fd 3 is what the browser reads (our stdin pipe), fd 4 what it writes (our
        // stdout pipe).
        let script = r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null"#;
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg(binary())
            .args([
                "--headless",
                "--remote-debugging-pipe",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--no-proxy-server",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--mute-audio",
                &format!("--window-size={width},{height}"),
                &format!("--user-data-dir={}", profile.path().display()),
                "about:blank",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start chromium");
        let input = child.stdin.take().unwrap();
        let output = child.stdout.take().unwrap();
        let (tx, messages) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(output);
            loop {
                let mut message = Vec::new();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                message.pop();
                if let Ok(value) = serde_json::from_slice::<Value>(&message)
                    && tx.send(value).is_err()
                {
                    return;
                }
            }
        });
        let mut browser = Browser {
            child,
            input,
            messages,
            next_id: 0,
            session: String::new(),
            errors: Vec::new(),
            status: None,
            _profile: profile,
        };
        let target = browser.call(None, "Target.createTarget", json!({"url": "about:blank"}));
        let target = target["targetId"].as_str().unwrap().to_owned();
        let attached = browser.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_owned();
        for domain in [
            "Page.enable",
            "Runtime.enable",
            "Log.enable",
            "Network.enable",
        ] {
            browser.page(domain, json!({}));
        }
        browser.page(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        browser
    }

    /// Sends a command (to the page when `session` is given) and waits for its result.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.input.write_all(&bytes).unwrap();
        self.input.flush().unwrap();
        let reply = self.wait_for(|m| m["id"] == id, method);
        if let Some(e) = reply.get("error") {
            panic!("{method} failed: {e}");
        }
        reply["result"].clone()
    }

    /// A command to the page.
    fn page(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.call(Some(&session), method, params)
    }

    /// Reads messages, noting errors and document statuses, until one `matches`.
    fn wait_for(&mut self, matches: impl Fn(&Value) -> bool, what: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = match self.messages.recv_timeout(left) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("chromium did not answer {what} in {WAIT:?}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("chromium exited while waiting for {what}")
                }
            };
            self.observe(&message);
            if matches(&message) {
                return message;
            }
        }
    }

    fn observe(&mut self, m: &Value) {
        let p = &m["params"];
        match m["method"].as_str() {
            Some("Runtime.consoleAPICalled") if p["type"] == "error" || p["type"] == "warning" => {
                self.errors
                    .push(format!("console.{}: {}", p["type"], p["args"]));
            }
            Some("Runtime.exceptionThrown") => {
                self.errors
                    .push(format!("exception: {}", p["exceptionDetails"]));
            }
            Some("Log.entryAdded")
                if p["entry"]["level"] == "error" || p["entry"]["level"] == "warning" =>
            {
                self.errors.push(format!(
                    "{} {}: {} ({})",
                    p["entry"]["source"],
                    p["entry"]["level"],
                    p["entry"]["text"],
                    p["entry"]["url"]
                ));
            }
            Some("Network.responseReceived") if p["type"] == "Document" => {
                self.status = p["response"]["status"].as_u64();
            }
            _ => {}
        }
    }

    /// Loads `url` and waits for the page's load event.
    pub fn open(&mut self, url: &str) {
        self.status = None;
        let navigated = self.page("Page.navigate", json!({"url": url}));
        assert!(navigated.get("errorText").is_none(), "{url}: {navigated}");
        self.wait_loaded();
    }

    fn wait_loaded(&mut self) {
        let session = self.session.clone();
        self.wait_for(
            |m| m["method"] == "Page.loadEventFired" && m["sessionId"] == session.as_str(),
            "a page load",
        );
    }

    /// The value of `expression` evaluated in the page (DevTools' evaluation, which the
    /// page's CSP does not govern; the pages themselves run no script).
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.page(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expression}: {r}");
        r["result"]["value"].clone()
    }

    /// Evaluates `expression`, which navigates (submits a form), and waits for the load.
    pub fn submit(&mut self, expression: &str) {
        self.status = None;
        self.eval(expression);
        self.wait_loaded();
    }

    /// The page's whole HTML.
    pub fn html(&mut self) -> String {
        self.eval("document.documentElement.outerHTML")
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The page's visible text.
    pub fn text(&mut self) -> String {
        self.eval("document.body.innerText")
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// A PNG of the viewport.
    pub fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine;
        let shot = self.page("Page.captureScreenshot", json!({"format": "png"}));
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
