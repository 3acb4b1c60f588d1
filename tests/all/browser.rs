//! The review console in a real browser: headless Chromium (Debian's `chromium`
//! package; `tests/ensure-chromium.sh` installs it) against a real server on loopback.
//! A reviewer signs in through a link, sees a pending review with its widening changes,
//! approves it, and the tool's calls move to the new version; no page carries a key or
//! logs a console error (a CSP violation included); a used or expired link is refused.
//!
//! Screenshots of every page it visits are written to `$CARGO_TARGET_TMPDIR/screenshots/`;
//! `make screenshots` copies the queue's and the diff's, which the manual shows, to
//! `docs/`.

mod cdp;

use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;
use warden::app::ConsoleLife;
use warden::http::{HttpConfig, serve};

use crate::http::Service;
use crate::http::console::{gated, tool_with_pending_version};
use cdp::Browser;

/// Where the screenshots go.
fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A sign-in link made with `key`, for the server at `base` (`http://127.0.0.1:PORT`).
async fn link(s: &Service, key: &str, base: &str) -> String {
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/review/links")
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header(header::HOST, base.trim_start_matches("http://"))
        .body(Body::empty())
        .unwrap();
    let r = s.raw(request).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    let url = r.json["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with(base), "{url}");
    url
}

/// Runs `f` with the browser on this worker thread (the server keeps the other).
fn drive<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_signs_in_reads_the_widening_diff_and_approves_it_in_a_browser() {
    let s = Service::start();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        s.app.clone(),
        HttpConfig::default(),
        async {
            let _ = stopped.await;
        },
    ));

    let (key, reviewer, _) = gated(&s).await;
    let id = tool_with_pending_version(&s, &key, "weather_lookup").await;
    let before = s.run(&key, &id, json!({"a": 1, "b": 1})).await;
    assert_eq!(before.json["value"], 2, "version 1 runs while 2 waits");
    let keys = [
        key.clone(),
        reviewer.clone(),
        crate::http::OPERATOR_KEY.to_owned(),
    ];
    let no_key = |page: &str, what: &str| {
        for k in &keys {
            assert!(!page.contains(k.as_str()), "{what} carries a key");
        }
    };

    let url = link(&s, &reviewer, &base).await;
    let mut browser = drive(|| Browser::start(1000, 760));
    let shots = screenshots();

    // Sign in: the link redirects to the queue.
    let queue = drive(|| {
        browser.open(&url);
        let location = browser.eval("location.pathname");
        assert_eq!(location, "/review/", "the link lands on the queue");
        let text = browser.text();
        std::fs::write(shots.join("review-queue.png"), browser.screenshot()).unwrap();
        (text, browser.html())
    });
    no_key(&queue.1, "the queue");
    assert!(queue.0.contains("weather_lookup version 2"), "{}", queue.0);
    assert!(queue.0.contains("1 widening change"), "{}", queue.0);
    assert!(
        queue.0.contains("GET https://api.example.com"),
        "{}",
        queue.0
    );
    let cookie = drive(|| browser.eval("document.cookie"));
    assert_eq!(cookie, "", "the session cookie is HttpOnly");

    // The review: widening changes first, then the source diff, then the forms.
    let review = drive(|| {
        browser.submit("document.querySelector('a[href*=\"/versions/2\"]').click()");
        browser.eval("document.querySelector('pre.diff').scrollIntoView()");
        std::fs::write(shots.join("review-diff.png"), browser.screenshot()).unwrap();
        (browser.text(), browser.html())
    });
    no_key(&review.1, "the review page");
    let widens = review.0.find("widens").expect("a widening change");
    let source = review.0.find("Source diff").unwrap();
    assert!(widens < source, "widening changes come before the source");
    assert!(
        review.1.contains("<ins>+    return a + b + 100</ins>"),
        "{}",
        review.1
    );
    assert!(
        review.1.contains("<del>-    return a + b</del>"),
        "{}",
        review.1
    );

    // Approve with a note.
    let decided = drive(|| {
        browser.eval("document.querySelector('#note').value = 'host checked, source reviewed'");
        browser.submit("document.querySelector('button.approve').click()");
        assert_eq!(browser.status, Some(200));
        (browser.text(), browser.html())
    });
    no_key(&decided.1, "the tool page");
    assert!(decided.0.contains("Version 2 approved"), "{}", decided.0);

    // Calls move to version 2, and the console shows them there.
    let after = s.run(&key, &id, json!({"a": 1, "b": 1})).await;
    assert_eq!(after.json["value"], 102, "{}", after.json);
    let v2 = after.json["version"].as_str().unwrap().to_owned();
    let audit = drive(|| {
        browser.open(&format!("{base}/review/audit?kind=run"));
        (browser.text(), browser.html())
    });
    no_key(&audit.1, "the audit page");
    assert!(audit.0.contains("Verified"), "{}", audit.0);
    let v1 = before.json["version"].as_str().unwrap();
    let (newest, oldest) = (audit.0.find(&v2), audit.0.find(v1));
    assert!(
        newest.is_some() && oldest.is_some() && newest < oldest,
        "the newest run is of version 2: {}",
        audit.0
    );
    let tool = drive(|| {
        browser.open(&format!("{base}/review/tools/{id}"));
        std::fs::write(shots.join("review-tool.png"), browser.screenshot()).unwrap();
        browser.open(&format!("{base}/review/tools"));
        std::fs::write(shots.join("review-tools.png"), browser.screenshot()).unwrap();
        browser.open(&format!("{base}/review/audit"));
        std::fs::write(shots.join("review-audit.png"), browser.screenshot()).unwrap();
        browser.open(&format!("{base}/review/tools/{id}"));
        browser.eval("document.querySelector('svg').scrollIntoView()");
        std::fs::write(shots.join("review-chart.png"), browser.screenshot()).unwrap();
        browser.text()
    });
    assert!(tool.contains("Calls per day: 2 calls"), "{tool}");
    assert!(tool.contains("host checked, source reviewed"), "{tool}");
    assert!(
        tool.contains(", approving"),
        "the update is the reviewer's: {tool}"
    );

    // Every page so far loaded without a console error or a CSP violation.
    assert!(
        browser.errors.is_empty(),
        "console errors: {:#?}",
        browser.errors
    );

    // A used link is refused, and so is an expired one.
    let used = drive(|| {
        browser.open(&url);
        (browser.status, browser.text())
    });
    assert_eq!(used.0, Some(410));
    assert!(used.1.contains("used already"), "{}", used.1);
    let life = ConsoleLife::default();
    s.app.set_console_life(ConsoleLife {
        link_ttl: Duration::from_millis(1),
        ..life
    });
    let expired = link(&s, &reviewer, &base).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let refused = drive(|| {
        browser.open(&expired);
        (browser.status, browser.text())
    });
    assert_eq!(refused.0, Some(410));
    assert!(refused.1.contains("expired"), "{}", refused.1);
    s.app.set_console_life(life);

    // A phone-width window reads the queue without sideways scrolling.
    let phone_url = link(&s, &reviewer, &base).await;
    let fits = drive(|| {
        let mut phone = Browser::start(390, 800);
        phone.open(&phone_url);
        phone.eval("document.documentElement.scrollWidth <= window.innerWidth")
    });
    assert_eq!(fits, true, "the queue overflows a phone's width");

    // The operator's overview: every tenant, read-only, without a console error either.
    let operator = link(&s, crate::http::OPERATOR_KEY, &base).await;
    let overview = drive(|| {
        let mut browser = Browser::start(1000, 760);
        browser.open(&operator);
        std::fs::write(shots.join("review-operator.png"), browser.screenshot()).unwrap();
        let text = browser.text();
        assert!(
            browser.errors.is_empty(),
            "console errors: {:#?}",
            browser.errors
        );
        (text, browser.html())
    });
    no_key(&overview.1, "the operator's overview");
    assert!(overview.0.contains("Every tenant"), "{}", overview.0);
    assert!(
        overview.0.contains("widening versions wait for review"),
        "{}",
        overview.0
    );

    drop(browser);
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
