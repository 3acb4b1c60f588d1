//! The manual's walk-throughs run as written: every shell block marked `<!-- runs -->`
//! (the line before its fence; Markdown shows nothing) in the README and `docs/`.
//!
//! A page's marked blocks run in order, as one bash script, in a fresh folder (with the
//! repository's `examples/` and `tests/` in it) and a fresh home (the runtime shared
//! with the other tests), with the `warden` this build made; a line that fails fails the
//! page, naming it. The page's Python blocks whose first line names a file (`# add.py`)
//! are saved under that name first. What a reader fills in by hand is taken from the
//! answers before it:
//!
//! - a line `KEY=wdn_...` takes the last `wdn_` id printed so far (any `NAME=prefix_...`);
//! - `TENANT_ID` is the last tenant id printed;
//! - a JSON field written `"name": "..."` in a single-quoted body takes the last value
//!   printed for `"name"`;
//! - the server's port (8080 in the manual) is a free one, and a server started in the
//!   background is waited for (`/readyz`) before the next line runs;
//! - `curl` fails on an HTTP error (`--fail-with-body`), as a reader would notice one;
//! - a command followed by `; echo "exit $?"` is shown failing on purpose: it must fail,
//!   and the walk goes on.
//!
//! A console transcript's output lines are checked too: each line shown after a `$ `
//! command must be printed by it (stdout and stderr), in the order shown, other lines
//! may come between. A shown line matches a printed one word for word, where a word
//! with `…` or `...` in it stands for any word and a measured number (a fraction or
//! grouped digits) for any such number (`67.6 ms` matches `41.2 ms`, `4 events` only
//! `4 events`); a shown JSON object with `...` in it matches a printed one that
//! has each of its fields whose value is shown in full.
//!
//! Every Python block runs as well: a tool file named on its first line is saved for
//! the walk, which must use it; any other block names, on the line before its fence, the
//! test that runs it (`<!-- runs: tests/all/mcp_python.rs -->`) or why it cannot run.

use std::path::Path;
use std::process::Command;

mod marks;
mod transcript;

use transcript::{Shown, command_of, console_commands, console_output, prints_as_shown};

/// Placeholders the manual writes for ids printed earlier, and the ids' prefixes.
const IDS: &[(&str, &str)] = &[("TENANT_ID", "tnt_")];

/// A page's marked blocks, and its Python blocks that name their file.
#[derive(Default)]
struct Walk {
    script: Vec<String>,
    files: Vec<(String, String)>,
    /// What each console command shows it prints, in the order the commands run.
    shown: Vec<Shown>,
}

fn walk(text: &str) -> Walk {
    let mut walk = Walk::default();
    let mut marked = false;
    let mut open: Option<(String, bool, String)> = None;
    let mut fence_line = 0;
    for (n, line) in text.lines().enumerate() {
        let fence = line.trim().strip_prefix("```");
        match (&mut open, fence) {
            (Some(_), Some("")) => {
                let (language, runs, body) = open.take().unwrap_or_default();
                if language == "python"
                    && let Some(name) = body.lines().next().and_then(|l| l.strip_prefix("# "))
                    && name.ends_with(".py")
                {
                    walk.files.push((name.to_owned(), body.clone()));
                }
                if runs {
                    // A console transcript's commands are its `$ ` lines; the rest is
                    // what they printed.
                    let commands = if language == "console" {
                        let shown = console_output(&body, fence_line + 1);
                        let commands = shown.iter().map(|s| s.command.as_str()).collect();
                        walk.shown.extend(shown);
                        commands
                    } else {
                        body
                    };
                    walk.script.push(commands);
                }
            }
            (Some((_, _, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, Some(language)) => {
                open = Some((language.to_owned(), marked, String::new()));
                fence_line = n + 1;
            }
            (None, None) => {}
        }
        if open.is_none() {
            marked = line.trim() == "<!-- runs -->";
        }
    }
    walk
}

/// One line of a walk as the script runs it (see the module's documentation).
fn scripted(line: &str, port: u16) -> String {
    scripted_into(line, port, None)
}

/// [`scripted`], its output also kept in `out.N` when `capture` is `Some(N)`.
fn scripted_into(line: &str, port: u16, capture: Option<usize>) -> String {
    let line = line
        .replace("localhost:8080", &format!("localhost:{port}"))
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    // A console line's prompt first: `$ # ...` is a comment too.
    let Some(code) = command_of(&line) else {
        return String::new();
    };
    if let Some((name, value)) = code.split_once('=')
        && !name.contains(' ')
        && let Some(prefix) = value.strip_suffix("...")
    {
        return format!("{}\n", latest(name, prefix));
    }
    let mut out = String::new();
    let mut code = code.to_owned();
    for (placeholder, prefix) in IDS {
        if code.split_whitespace().any(|w| w == *placeholder) {
            out.push_str(&latest(placeholder, prefix));
            out.push('\n');
            code = code
                .split(' ')
                .map(|w| {
                    if w == *placeholder {
                        format!("\"${placeholder}\"")
                    } else {
                        w.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ");
        }
    }
    for (field, variable) in json_placeholders(&code) {
        out.push_str(&latest_field(&field, &variable));
        out.push('\n');
        code = code.replace(
            &format!("\"{field}\": \"...\""),
            &format!("\"{field}\": \"'\"${variable}\"'\""),
        );
    }
    if let Some(rest) = code.strip_prefix("curl ") {
        code = format!("curl --fail-with-body {rest}");
    }
    let redirected = shlex::split(&code).is_some_and(|w| w.iter().any(|w| w == ">" || w == ">>"));
    // Where the command's output goes: the transcript, or first its own file (kept for
    // the comparison with what the page shows, then added to the transcript).
    let sink = capture.map_or_else(|| "\"$TRANSCRIPT\"".to_owned(), |n| format!("out.{n}"));
    let (into, keep) = match capture {
        Some(_) if redirected => (
            format!("2> {sink}"),
            format!("cat {sink} >> \"$TRANSCRIPT\"\n"),
        ),
        Some(_) => (
            format!("> {sink} 2>&1"),
            format!("cat {sink} >> \"$TRANSCRIPT\"\n"),
        ),
        None if redirected => (format!("2>> {sink}"), String::new()),
        None => (format!(">> {sink} 2>&1"), String::new()),
    };
    if let Some(failing) = code.strip_suffix(r#"; echo "exit $?""#) {
        // A command shown failing on purpose: it must fail, and the walk goes on.
        out.push_str(&format!(
            "echo \"\\$ {}\" >> \"$TRANSCRIPT\"\nset +e\n{failing} {into}\nstatus=$?\nset -e\n\
             echo \"exit $status\" >> {sink}\n{keep}\
             test \"$status\" -ne 0 || {{ echo 'expected to fail: {}' >&2; exit 1; }}\n",
            failing.replace(['"', '$', '`', '\\'], "_"),
            failing.replace(['\''], "_"),
        ));
    } else if let Some(background) = code.strip_suffix('&') {
        out.push_str(&format!(
            "{background} {into} &\n\
             for _ in $(seq 300); do curl -sf localhost:{port}/readyz > /dev/null && break; sleep 0.1; done\n"
        ));
    } else {
        let on_failure = if keep.is_empty() {
            String::new()
        } else {
            format!(" || {{ {} exit 1; }}", keep.trim_end())
        };
        out.push_str(&format!(
            "echo \"\\$ {}\" >> \"$TRANSCRIPT\"\n{code} {into}{on_failure}\n{keep}echo >> \"$TRANSCRIPT\"\n",
            code.replace(['"', '$', '`', '\\'], "_")
        ));
    }
    out
}

/// The JSON fields a line leaves for the reader to fill in (`"name": "..."`), each with
/// the shell variable that holds its value.
fn json_placeholders(code: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("\": \"...\"") {
        let field = code[..at].rsplit('"').next().unwrap_or_default();
        if !field.is_empty()
            && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !found.iter().any(|(f, _)| f == field)
        {
            found.push((field.to_owned(), format!("FIELD_{field}")));
        }
    }
    found
}

/// Sets `variable` to the last value printed for the JSON field `field`, or stops the
/// walk.
fn latest_field(field: &str, variable: &str) -> String {
    format!(
        "{variable}=$(grep -oE '\"{field}\" ?: ?\"[^\"]+\"' \"$TRANSCRIPT\" | tail -n 1 | sed -E 's/.*: ?\"([^\"]+)\"$/\\1/')\n\
         test -n \"${variable}\" || {{ echo 'no \"{field}\" printed before it is used' >&2; exit 1; }}"
    )
}

/// Sets `name` to the last id with `prefix` printed so far, or stops the walk.
fn latest(name: &str, prefix: &str) -> String {
    format!(
        "{name}=$(grep -oE '{prefix}[0-9a-f]{{16,}}' \"$TRANSCRIPT\" | tail -n 1)\n\
         test -n \"${name}\" || {{ echo 'no {prefix}... printed before {name}' >&2; exit 1; }}"
    )
}

/// Runs `page`'s walk; returns its transcript, or why it failed.
fn run(page: &Path, walk: &Walk) -> Result<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join(".warden");
    std::fs::create_dir(&home).unwrap();
    for part in ["runtime", "compiled"] {
        std::os::unix::fs::symlink(crate::support::home().join(part), home.join(part)).unwrap();
    }
    for part in ["examples", "tests"] {
        std::os::unix::fs::symlink(root.join(part), dir.path().join(part)).unwrap();
    }
    for (name, body) in &walk.files {
        std::fs::write(dir.path().join(name), body).unwrap();
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
    // A console command that runs keeps its output in `out.N`, N counting them.
    let mut captured = 0;
    for block in &walk.script {
        let mut joined = String::new();
        for line in block.lines() {
            match line.trim_end().strip_suffix('\\') {
                Some(part) => joined.push_str(part),
                None => {
                    joined.push_str(line);
                    let capture =
                        (joined.starts_with("$ ") && command_of(&joined).is_some()).then(|| {
                            captured += 1;
                            captured - 1
                        });
                    script.push_str(&scripted_into(&joined, port, capture));
                    joined.clear();
                }
            }
        }
    }
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
    if out.status.success() {
        let mut drifted = Vec::new();
        for (n, shown) in walk.shown.iter().enumerate() {
            let printed =
                std::fs::read_to_string(dir.path().join(format!("out.{n}"))).unwrap_or_default();
            if !prints_as_shown(&printed, &shown.printed) {
                drifted.push(format!(
                    "{}:{}: `{}` printed:\n{printed}but the page shows:\n{}\n",
                    page.strip_prefix(root).unwrap_or(page).display(),
                    shown.line,
                    shown.command.trim_end(),
                    shown.printed.join("\n")
                ));
            }
        }
        if drifted.is_empty() {
            Ok(transcript)
        } else {
            Err(drifted.join("\n"))
        }
    } else {
        Err(format!(
            "{} failed: {}\n--- transcript ---\n{transcript}--- script ---\n{script}",
            page.display(),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[test]
fn every_marked_walk_through_runs_as_written() {
    crate::support::sandbox();
    let mut walked = Vec::new();
    let mut failed = Vec::new();
    // The README and the chapters (the changelog has no walk).
    for page in crate::docs::pages() {
        let walk = walk(&std::fs::read_to_string(&page).unwrap());
        if walk.script.is_empty() {
            continue;
        }
        match run(&page, &walk) {
            Ok(transcript) => walked.push((page, transcript)),
            Err(why) => failed.push(why),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    let readme = walked
        .iter()
        .find(|(page, _)| page.ends_with("README.md"))
        .map(|(_, transcript)| transcript)
        .expect("the README's tour is marked to run");
    // The tour's schema, its CLI call and its HTTP call, each as the tour says.
    assert!(readme.contains(r#""name": "add""#), "{readme}");
    assert!(
        readme.lines().any(|l| l.trim() == "42"),
        "warden run printed no 42:\n{readme}"
    );
    let last: serde_json::Value = readme
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .expect("the HTTP call's answer");
    assert_eq!(
        (&last["status"], &last["value"]),
        (&"ok".into(), &42.into()),
        "{readme}"
    );
    // The review gate's walk: a held version approved on the diff shown, and a
    // console sign-in link for the same reviewer key.
    let review = walked
        .iter()
        .find(|(page, _)| page.ends_with("review-and-audit.md"))
        .map(|(_, transcript)| transcript)
        .expect("the review gate's walk is marked to run");
    assert!(review.contains(r#""decision":"approve""#), "{review}");
    assert!(review.contains("/review/signin/"), "{review}");
    // A server file registered, grown by a tool and updated: its second revision.
    let server = walked
        .iter()
        .find(|(page, _)| page.ends_with("mcp.md"))
        .map(|(_, transcript)| transcript)
        .expect("the server files' walk is marked to run");
    assert!(server.contains(r#""revision": 2"#), "{server}");
    assert!(server.contains(r#""name": "count_notes""#), "{server}");
    assert!(walked.len() >= 3, "only {} pages walked", walked.len());
}

#[test]
fn a_walk_takes_marked_blocks_and_named_files() {
    let page = "```python\n# add.py\ndef add(a: int) -> int:\n    return a\n```\n\
                ```sh\nwarden not-run\n```\n<!-- runs -->\n```sh\nwarden run add.py\n```\n\
                <!-- runs -->\n```console\n$ warden schema add.py\n{\"name\": \"add\"}\n```\n";
    let walk = walk(page);
    assert_eq!(
        walk.script,
        ["warden run add.py\n", "$ warden schema add.py\n"]
    );
    assert_eq!(walk.files.len(), 1);
    assert_eq!(walk.files[0].0, "add.py");
    assert_eq!(
        console_commands("$ curl a \\\n    -d b\n{\"ok\": 1}\n$ ls\nx \\\n"),
        "$ curl a \\\n    -d b\n$ ls\n"
    );
    let line = scripted(
        r#"curl -s -X POST localhost:8080/x -d '{"note": "ok", "diff_hash": "..."}'"#,
        9,
    );
    assert!(
        line.contains(r#"FIELD_diff_hash=$(grep -oE '"diff_hash" ?: ?"[^"]+"'"#),
        "{line}"
    );
    assert!(
        line.contains(r#"-d '{"note": "ok", "diff_hash": "'"$FIELD_diff_hash"'"}'"#),
        "{line}"
    );
    let line = scripted("warden tenant policy TENANT_ID   # the policy", 9);
    assert!(line.contains("TENANT_ID=$(grep -oE 'tnt_"), "{line}");
    assert!(
        line.contains("warden tenant policy \"$TENANT_ID\" >>"),
        "{line}"
    );
    assert_eq!(scripted("$ # a comment, as a console shows one", 9), "");
    let failing = scripted(r#"warden audit verify a.jsonl; echo "exit $?""#, 9);
    assert!(
        failing.contains("set +e\nwarden audit verify a.jsonl >>"),
        "{failing}"
    );
    assert!(failing.contains(r#"test "$status" -ne 0"#), "{failing}");
    let fetched = scripted("curl -s localhost:8080/v1/audit/export > audit.jsonl", 9);
    assert!(
        fetched.contains("curl --fail-with-body -s localhost:9/v1/audit/export > audit.jsonl 2>>"),
        "{fetched}"
    );
}
