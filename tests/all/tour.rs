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

/// The output a console transcript shows for one of its commands.
#[derive(Debug, PartialEq)]
struct Shown {
    /// The command's line on its page (from 1).
    line: usize,
    command: String,
    printed: Vec<String>,
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

/// A console transcript's commands: its `$ ` lines but comments alone, each with the
/// lines it continues onto (a line ending in `\`); the rest is what they printed.
fn console_commands(body: &str) -> String {
    console_output(body, 1)
        .into_iter()
        .map(|shown| shown.command)
        .collect()
}

/// What a console transcript shows its commands print: for each command that runs (not
/// a `$ # comment`), the lines after it up to the next command. `first` is the line of
/// the transcript's first line on its page.
fn console_output(body: &str, first: usize) -> Vec<Shown> {
    let mut shown: Vec<Shown> = Vec::new();
    let mut continued = false;
    let mut comment = false;
    for (n, line) in body.lines().enumerate() {
        if continued || line.starts_with("$ ") {
            if !continued {
                comment = command_of(line).is_none();
                if !comment {
                    shown.push(Shown {
                        line: first + n,
                        command: String::new(),
                        printed: Vec::new(),
                    });
                }
            }
            if let Some(last) = shown.last_mut().filter(|_| !comment) {
                last.command.push_str(line);
                last.command.push('\n');
            }
            continued = line.trim_end().ends_with('\\');
        } else if let Some(last) = shown.last_mut().filter(|_| !comment) {
            last.printed.push(line.to_owned());
        }
    }
    shown
}

/// A line's command without its prompt and comment; `None` for a comment alone.
fn command_of(line: &str) -> Option<&str> {
    let line = line.strip_prefix("$ ").unwrap_or(line);
    let code = line.split(" #").next().unwrap_or_default().trim();
    (!code.is_empty() && !code.starts_with('#')).then_some(code)
}

/// Whether `printed` (a command's output) has each of `shown`'s lines, in order.
fn prints_as_shown(printed: &str, shown: &[String]) -> bool {
    let mut lines = printed.lines();
    shown
        .iter()
        .filter(|s| !s.trim().is_empty())
        .all(|s| lines.any(|p| line_matches(p, s)))
}

/// Whether a printed line matches a shown one (see the module's documentation).
fn line_matches(printed: &str, shown: &str) -> bool {
    let elided = |w: &str| w.contains('…') || w.contains("...");
    if shown.trim_start().starts_with('{') && elided(shown) {
        return json_matches(printed, shown);
    }
    let (p, s): (Vec<_>, Vec<_>) = (
        printed.split_whitespace().collect(),
        shown.split_whitespace().collect(),
    );
    p.len() == s.len()
        && p.iter()
            .zip(&s)
            .all(|(p, s)| elided(s) || measured(p) == measured(s))
}

/// `word` with each measured number in it (a fraction or grouped digits: `67.6`,
/// `248_058_880`) written `#`, so that it stands for any such number; a plain integer
/// (a count, a result) stays as it is.
fn measured(word: &str) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        out.push_str(&rest[..start]);
        let number = &rest[start..];
        let len = number
            .find(|c: char| !(c.is_ascii_digit() || c == '_' || c == '.'))
            .unwrap_or(number.len());
        let digits = number[..len].trim_end_matches(['.', '_']);
        if digits.contains(['.', '_']) {
            out.push('#');
        } else {
            out.push_str(digits);
        }
        rest = &number[digits.len()..];
    }
    out.push_str(rest);
    out
}

/// A shown JSON object with elisions against a printed one: every field shown with its
/// whole value (a string without `...`, a number, a boolean) has that value.
fn json_matches(printed: &str, shown: &str) -> bool {
    use serde_json::Value;
    let Ok(Value::Object(printed)) = serde_json::from_str(printed.trim()) else {
        return false;
    };
    // The fields left out (`, ...`) go; what is left is JSON.
    let shown = shown.trim().replace(", ...}", "}").replace("{...}", "{}");
    let Ok(Value::Object(shown)) = serde_json::from_str(&shown) else {
        return false;
    };
    shown.iter().all(|(field, value)| match value {
        Value::String(s) if s.contains("...") || s.contains('…') => printed.contains_key(field),
        value => printed.get(field) == Some(value),
    })
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

/// The languages of shell blocks: what a walk could run.
const SHELL: &[&str] = &["sh", "bash", "shell", "console"];

/// What the line before a block says of it.
#[derive(Debug, PartialEq)]
enum Mark {
    /// `<!-- runs -->`: it runs with the page's walk.
    Runs,
    /// `<!-- runs: tests/all/x.rs -->`: that test runs it (a Python client, a
    /// receiver's check), reading it from its page.
    RunsIn(String),
    /// `<!-- not run: why -->`: what it needs that a CI machine does not have.
    NotRun(String),
    /// Nothing: an example nobody decided about.
    Unmarked,
}

impl Mark {
    /// The mark a line makes for the block after it.
    fn of(line: &str) -> Mark {
        let line = line.trim();
        if line == "<!-- runs -->" {
            return Mark::Runs;
        }
        let Some(inside) = line
            .strip_prefix("<!--")
            .and_then(|l| l.strip_suffix("-->"))
        else {
            return Mark::Unmarked;
        };
        let inside = inside.trim();
        if let Some(test) = inside.strip_prefix("runs:") {
            Mark::RunsIn(test.trim().to_owned())
        } else if let Some(why) = inside.strip_prefix("not run:") {
            Mark::NotRun(why.trim().to_owned())
        } else {
            Mark::Unmarked
        }
    }
}

/// Each block of `text` in one of `languages`: its fence's line (from 1) and its mark.
fn marks(text: &str, languages: &[&str]) -> Vec<(usize, Mark)> {
    let mut marks = Vec::new();
    let mut before = "";
    let mut open = false;
    for (i, line) in text.lines().enumerate() {
        if let Some(language) = line.trim().strip_prefix("```") {
            if !open && languages.contains(&language) {
                marks.push((i + 1, Mark::of(before)));
            }
            open = !open;
        }
        before = line;
    }
    marks
}

/// Why `mark` does not do for the block at `name:line`, if it does not: a reason not to
/// run it given, and its page listed in docs/development.md among those with blocks
/// that do not run; a test named that exists and reads the page.
fn unfit(mark: &Mark, name: &str, line: usize, development: &str) -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    match mark {
        Mark::Runs => None,
        Mark::RunsIn(test) => match std::fs::read_to_string(root.join(test)) {
            Ok(source) if source.contains(name) => None,
            Ok(_) => Some(format!("{name}:{line}: {test} does not read {name}")),
            Err(e) => Some(format!("{name}:{line}: no test {test}: {e}")),
        },
        Mark::NotRun(why) if why.is_empty() => Some(format!(
            "{name}:{line}: `<!-- not run: -->` without a reason"
        )),
        Mark::NotRun(_) if !development.contains(&format!("`{name}`")) => Some(format!(
            "{name}:{line}: a block that does not run, on a page docs/development.md does not \
             list among those"
        )),
        Mark::NotRun(_) => None,
        Mark::Unmarked => Some(format!(
            "{name}:{line}: a block marked neither `<!-- runs -->`, `<!-- runs: TEST -->` nor \
             `<!-- not run: what it needs -->` (the line before its fence)"
        )),
    }
}

/// A page's path from the repository's root, as the manual's marks name it.
fn page_name(page: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    page.strip_prefix(root)
        .unwrap_or(page)
        .display()
        .to_string()
}

/// Every shell block of the README and `docs/` either runs or says why it cannot on a
/// CI machine, and `docs/development.md` names each page with blocks that do not run.
#[test]
fn every_shell_block_runs_or_says_why_not() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let development = std::fs::read_to_string(root.join("docs/development.md")).unwrap();
    let mut problems = Vec::new();
    let mut counted = 0;
    for page in crate::docs::pages() {
        let name = page_name(&page);
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, mark) in marks(&text, SHELL) {
            counted += 1;
            problems.extend(unfit(&mark, &name, line, &development));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(counted >= 20, "only {counted} shell blocks found");
}

/// Every Python block of the README and `docs/` runs or says why not: a tool file (its
/// first line `# name.py`) that a marked block of its page uses, saved by the walk; a
/// block the line before names the test that runs it (`<!-- runs: tests/all/x.rs -->`);
/// or one that says why not (`<!-- not run: ... -->`). `<!-- runs -->` would run it as
/// shell, and is refused.
#[test]
fn every_python_block_runs_or_says_why_not() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let development = std::fs::read_to_string(root.join("docs/development.md")).unwrap();
    let mut problems = Vec::new();
    let mut counted = 0;
    for page in crate::docs::pages() {
        let name = page_name(&page);
        let text = std::fs::read_to_string(&page).unwrap();
        let script = walk(&text).script.concat();
        let bodies = crate::docs::fenced(&text)
            .into_iter()
            .filter(|(_, language, _)| language == "python");
        for ((line, mark), (_, _, body)) in marks(&text, &["python"]).into_iter().zip(bodies) {
            counted += 1;
            let file = body
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# "))
                .filter(|f| f.ends_with(".py") && !f.contains(' '));
            match (mark, file) {
                (Mark::Runs, _) => problems.push(format!(
                    "{name}:{line}: `<!-- runs -->` before a Python block would run it as \
                     shell: name its file on its first line and use it in a walk, or name \
                     the test that runs it (`<!-- runs: tests/all/x.rs -->`)"
                )),
                (Mark::Unmarked, Some(file)) if !script.contains(file) => problems.push(format!(
                    "{name}:{line}: {file} is saved for the page's walk, which never uses it"
                )),
                (Mark::Unmarked, Some(_)) => {}
                (mark, _) => problems.extend(unfit(&mark, &name, line, &development)),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(counted >= 10, "only {counted} Python blocks found");
}

#[test]
fn a_blocks_mark_is_the_line_before_its_fence() {
    let page = "<!-- runs -->\n```sh\nwarden run a.py\n```\n\n```sh\nmake\n```\n\
                <!-- not run: an arm64 board -->\n```console\n$ x\n```\n\
                ```text\nnot a shell block\n```\n<!-- not run: -->\n```bash\ny\n```\n";
    assert_eq!(
        marks(page, SHELL),
        [
            (2, Mark::Runs),
            (6, Mark::Unmarked),
            (10, Mark::NotRun("an arm64 board".into())),
            (17, Mark::NotRun(String::new())),
        ]
    );
}

#[test]
fn a_mark_may_name_the_test_that_runs_the_block() {
    let page = "<!-- runs: tests/all/mcp_python.rs -->\n```python\nimport mcp\n```\n\
                ```python\n# a.py\n```\n<!-- a note -->\n```python\nx\n```\n";
    assert_eq!(
        marks(page, &["python"]),
        [
            (2, Mark::RunsIn("tests/all/mcp_python.rs".into())),
            (5, Mark::Unmarked),
            (9, Mark::Unmarked),
        ]
    );
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

#[test]
fn a_transcripts_shown_output_is_kept_per_command_and_matched_with_placeholders() {
    let page = "text\n<!-- runs -->\n```console\n$ # a comment\n$ warden run a.py \\\n  --args '{}'\n\
                ok  (fuel 1_000 · 2.5 ms)\n42\n$ true\n```\n";
    let walk = walk(page);
    assert_eq!(
        walk.shown,
        [
            Shown {
                line: 5,
                command: "$ warden run a.py \\\n  --args '{}'\n".into(),
                printed: vec!["ok  (fuel 1_000 · 2.5 ms)".into(), "42".into()],
            },
            Shown {
                line: 9,
                command: "$ true\n".into(),
                printed: vec![],
            },
        ]
    );
    let shown = &walk.shown[0].printed;
    assert!(prints_as_shown(
        "warden: compiling\nok  (fuel 289_972_056 · 40.1 ms)\n42\n",
        shown
    ));
    assert!(!prints_as_shown(
        "ok  (fuel 289_972_056 · 40.1 ms)\n43\n",
        shown
    ));
    assert!(
        !prints_as_shown("42\nok  (fuel 1 · 2 ms)\n", shown),
        "order"
    );
    assert!(line_matches(
        "exported 4 events of tnt_0123456789abcdef to audit.jsonl",
        "exported 4 events of tnt_… to audit.jsonl"
    ));
    assert!(!line_matches(
        "exported 5 events of tnt_0123 to x.jsonl",
        "exported 4 events of tnt_… to audit.jsonl"
    ));
    let json = r#"{"tool": "tool_...", "status": "ok", "value": "Ada keeps: milk", ...}"#;
    assert!(line_matches(
        r#"{"tool":"tool_1","status":"ok","value":"Ada keeps: milk","fuel_used":9}"#,
        json
    ));
    assert!(!line_matches(
        r#"{"tool":"tool_1","status":"ok","value":"Bob keeps: milk"}"#,
        json
    ));
    assert!(!line_matches(
        r#"{"status":"ok","value":"Ada keeps: milk"}"#,
        json
    ));
}
