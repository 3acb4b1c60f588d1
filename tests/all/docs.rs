//! The README, the changelog and the manual (`docs/`, an mdBook) hold together: every
//! relative link names a file that exists, every `#anchor` a heading of its target (as
//! GitHub and mdBook make anchors), and every chapter is listed in `docs/SUMMARY.md`.
//! Its examples of data are well formed (JSON, `warden.toml`, Python, whose tools derive
//! a schema); `src/cli/examples.rs` parses its `warden` commands. `make docs` builds
//! the book and runs these.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files checked: the README, the changelog and every chapter.
pub(crate) fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md"), root().join("CHANGELOG.md")];
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    pages.extend(chapters);
    pages
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// A heading's anchor: lower case, letters, digits, `-` and `_` kept, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (a repeated one also as `name-1`, `name-2`, ...).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let Some(rest) = line.strip_prefix('#') else {
            continue;
        };
        let heading = rest.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let n = seen.entry(base.clone()).or_default();
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of a page's inline links `[text](target)`, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut in_code = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if line.trim().is_empty() {
            in_code = false; // a code span ends with its paragraph
        }
        let line = without_code_spans(line, &mut in_code);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            out.push((n + 1, after[..end].to_owned()));
            rest = &after[end..];
        }
    }
    out
}

/// `line` with its inline code spans (`` `...` ``) blanked: they hold no links. A span
/// may go on from the line before (`inside`).
fn without_code_spans(line: &str, inside: &mut bool) -> String {
    line.chars()
        .map(|c| {
            if c == '`' {
                *inside = !*inside;
                ' '
            } else if *inside {
                ' '
            } else {
                c
            }
        })
        .collect()
}

#[test]
fn every_link_names_a_file_and_heading_that_exist() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", page.display()));
        let dir = page.parent().unwrap();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            let shown = format!("{}:{line}: {target}", shown(&page));
            if !path.exists() {
                broken.push(format!("{shown}: no file {}", path.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let target_text = std::fs::read_to_string(&path).unwrap_or_default();
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{shown}: no heading #{anchor} there"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_chapter_is_in_the_summary_and_the_readme_stays_a_front_door() {
    let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    for page in pages()
        .iter()
        .filter(|p| p.starts_with(root().join("docs")))
    {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        if name != "SUMMARY.md" {
            assert!(
                listed.contains(&name),
                "docs/{name} is not in docs/SUMMARY.md"
            );
        }
    }
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 400,
        "the README has {lines} lines: move detail to docs/"
    );
}

fn shown(page: &Path) -> String {
    page.strip_prefix(root())
        .unwrap_or(page)
        .display()
        .to_string()
}

#[test]
fn anchors_are_made_as_github_and_mdbook_make_them() {
    assert_eq!(slug(" MCP over HTTP: `/mcp`"), "mcp-over-http-mcp");
    assert_eq!(
        slug("Server files: one source, one history"),
        "server-files-one-source-one-history"
    );
    let page = "# A\n## A\n```\n# not a heading\n```\n### `warden run`\n";
    let found: Vec<String> = anchors(page).into_iter().collect();
    assert_eq!(found, ["a", "a-1", "warden-run"]);
}

/// Each fenced block of `text` whose language is `language`: the number of its first
/// line, and its text.
fn blocks(text: &str, language: &str) -> Vec<(usize, String)> {
    fenced(text)
        .into_iter()
        .filter(|(_, lang, _)| lang == language)
        .map(|(line, _, body)| (line, body))
        .collect()
}

/// Every fenced block of `text`, in order: the number of its first line, its language
/// (empty when none) and its text.
pub(crate) fn fenced(text: &str) -> Vec<(usize, String, String)> {
    let mut found = Vec::new();
    let mut open: Option<(usize, String, String)> = None;
    for (at, line) in text.lines().enumerate() {
        match (&mut open, line.trim().strip_prefix("```")) {
            (Some(_), Some("")) => found.extend(open.take()),
            (Some((_, _, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, Some(lang)) => open = Some((at + 2, lang.to_owned(), String::new())),
            (None, None) => {}
        }
    }
    found
}

/// The manual's examples of data are well formed: every JSON block parses (a fragment
/// such as `"requests": [...]` as an object's members), the `warden.toml` examples are
/// read by Warden's own parser, every Python block is valid Python, and every function a
/// Python example defines at the top level has a schema Warden derives. A drifted
/// example fails here, naming its page and line.
#[test]
fn every_json_toml_and_python_example_is_well_formed() {
    let mut failed = Vec::new();
    let mut python = Vec::new();
    let mut counted = [0usize; 3];
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let at = |line: usize| format!("{}:{line}", shown(&page));
        for (line, body) in blocks(&text, "json") {
            counted[0] += 1;
            let whole = if body.trim_start().starts_with('"') {
                format!("{{{body}}}")
            } else {
                body
            };
            if let Err(e) = serde_json::from_str::<serde_json::Value>(&whole) {
                failed.push(format!("{}: not JSON: {e}", at(line)));
            }
        }
        for (line, body) in blocks(&text, "toml") {
            counted[1] += 1;
            if let Err(e) = warden::mcp::config::parse(&body) {
                failed.push(format!("{}: not a warden.toml: {e}", at(line)));
            }
        }
        for (line, body) in blocks(&text, "python") {
            counted[2] += 1;
            for name in top_level_functions(&body) {
                let opts = warden::schema::DeriveOptions {
                    file_stem: name.clone(),
                    function: Some(name.clone()),
                };
                if let Err(e) = warden::schema::derive(&body, &opts) {
                    failed.push(format!("{}: no schema for {name}: {e}", at(line)));
                }
            }
            python.push((at(line), body));
        }
    }
    // One Python process checks every block's syntax.
    let script = "import ast, json, sys\nfor where, body in json.load(sys.stdin):\n    \
                  try:\n        ast.parse(body)\n    except SyntaxError as e:\n        \
                  print(f'{where}: not Python: {e}')\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    serde_json::to_writer(child.stdin.take().unwrap(), &python).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python3 failed");
    failed.extend(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned),
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(
        counted.iter().all(|n| *n > 0),
        "no JSON, TOML or Python example found: {counted:?}"
    );
}

/// The functions `source` defines at the top level (`def` or `async def` at column 0).
fn top_level_functions(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("async ").unwrap_or(line);
            let name = rest.strip_prefix("def ")?.split('(').next()?.trim();
            Some(name.to_owned())
        })
        .collect()
}
