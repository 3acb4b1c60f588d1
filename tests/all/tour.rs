//! The README's one-minute tour runs as written. Its tool is saved under the name its
//! first line gives (`# add.py`), and its shell blocks are run by bash, one after the
//! other, in a fresh folder and home (the runtime shared with the other tests), with
//! the `warden` this build made. What a reader fills in by hand is taken from the
//! answers before it: a line `KEY=wdn_...` takes the last `wdn_` id printed so far.
//! The server's port is a free one, and a server started in the background is waited
//! for (`/readyz`) before the next line runs.

use std::path::Path;
use std::process::Command;

/// The README's section `heading`, up to the next heading of its level or above.
fn section<'a>(readme: &'a str, heading: &str) -> &'a str {
    let start = readme.find(heading).expect("the tour's heading");
    let rest = &readme[start + heading.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    &rest[..end]
}

/// The fenced blocks of `text`: (language, body), in order.
fn blocks(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        match (&mut open, line.trim().strip_prefix("```")) {
            (Some(_), Some("")) => found.extend(open.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, Some(language)) => open = Some((language.to_owned(), String::new())),
            (None, None) => {}
        }
    }
    found
}

/// One line of the tour as the script runs it: its output added to the transcript,
/// a placeholder assignment filled in from it, a background server waited for.
fn scripted(line: &str, port: u16) -> String {
    let line = line
        .replace("localhost:8080", &format!("localhost:{port}"))
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    let code = line
        .split(" #")
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    if code.is_empty() {
        return String::new();
    }
    if let Some((name, value)) = code.split_once('=')
        && !name.contains(' ')
        && let Some(prefix) = value.strip_suffix("...")
    {
        return format!(
            "{name}=$(grep -oE '{prefix}[0-9a-f]{{16,}}' \"$TRANSCRIPT\" | tail -n 1)\n\
             test -n \"${name}\" || {{ echo 'no {prefix}... printed before' >&2; exit 1; }}\n"
        );
    }
    if let Some(background) = code.strip_suffix('&') {
        return format!(
            "{background} >> \"$TRANSCRIPT\" 2>&1 &\n\
             for _ in $(seq 300); do curl -sf localhost:{port}/readyz > /dev/null && break; sleep 0.1; done\n"
        );
    }
    format!("{code} >> \"$TRANSCRIPT\" 2>&1\necho >> \"$TRANSCRIPT\"\n")
}

#[test]
fn the_readmes_tour_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let tour = section(&readme, "## A one-minute tour");
    crate::support::sandbox();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    for part in ["runtime", "compiled"] {
        std::os::unix::fs::symlink(crate::support::home().join(part), home.join(part)).unwrap();
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut script = String::from(
        "set -euo pipefail\nTRANSCRIPT=transcript.txt\n: > \"$TRANSCRIPT\"\n\
         trap 'kill $(jobs -p) 2> /dev/null || true' EXIT\n",
    );
    let mut files = 0;
    for (language, body) in blocks(tour) {
        match language.as_str() {
            "python" => {
                let name = body
                    .lines()
                    .next()
                    .and_then(|l| l.strip_prefix("# "))
                    .expect("the tool's first line names its file");
                std::fs::write(dir.path().join(name), &body).unwrap();
                files += 1;
            }
            "sh" => {
                let mut joined = String::new();
                for line in body.lines() {
                    match line.trim_end().strip_suffix('\\') {
                        Some(part) => joined.push_str(part),
                        None => {
                            joined.push_str(line);
                            script.push_str(&scripted(&joined, port));
                            joined.clear();
                        }
                    }
                }
            }
            _ => {}
        }
    }
    assert_eq!(files, 1, "the tour's tool file");
    let bin = Path::new(env!("CARGO_BIN_EXE_warden")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .env("WARDEN_HOME", &home)
        .env_remove("WARDEN_LOG")
        .output()
        .unwrap();
    let transcript = std::fs::read_to_string(dir.path().join("transcript.txt")).unwrap_or_default();
    assert!(
        out.status.success(),
        "the tour failed: {}\n{script}\n{transcript}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The schema, the CLI's call and the HTTP call, each as the tour says.
    assert!(
        transcript.contains(r#""name": "add""#) || transcript.contains(r#""name":"add""#),
        "{transcript}"
    );
    let answers: Vec<serde_json::Value> = transcript
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let last = answers.last().expect("the HTTP call's answer");
    assert_eq!(last["status"], "ok", "{transcript}");
    assert_eq!(last["value"], 42, "{transcript}");
    assert!(
        transcript.lines().any(|l| l.trim() == "42"),
        "warden run printed no 42:\n{transcript}"
    );
}
