//! Every shell and Python block of the manual runs or says why not: the mark on the line
//! before its fence, and the tests that hold every block to one.

use std::path::Path;

use super::walk;

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

/// A block of the manual, as the checks below see it.
struct Block<'a> {
    /// Its page, from the repository's root.
    page: &'a str,
    /// Its page's text.
    text: &'a str,
    /// Its fence's line (from 1).
    line: usize,
    mark: Mark,
    body: &'a str,
}

/// Runs `check` on every block in `languages` of the README and `docs/`; fails naming
/// every problem it found, or when there are fewer than `at_least` such blocks.
fn every_block(
    languages: &[&str],
    at_least: usize,
    mut check: impl FnMut(&Block<'_>) -> Option<String>,
) {
    let mut problems = Vec::new();
    let mut counted = 0;
    for page in crate::docs::pages() {
        let name = page_name(&page);
        let text = std::fs::read_to_string(&page).unwrap();
        let bodies = crate::docs::fenced(&text)
            .into_iter()
            .filter(|(_, language, _)| languages.contains(&language.as_str()));
        for ((line, mark), (_, _, body)) in marks(&text, languages).into_iter().zip(bodies) {
            counted += 1;
            let block = Block {
                page: &name,
                text: &text,
                line,
                mark,
                body: &body,
            };
            problems.extend(check(&block));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        counted >= at_least,
        "only {counted} {languages:?} blocks found"
    );
}

fn development() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join("docs/development.md")).unwrap()
}

/// Every shell block of the README and `docs/` either runs or says why it cannot on a
/// CI machine, and `docs/development.md` names each page with blocks that do not run.
#[test]
fn every_shell_block_runs_or_says_why_not() {
    let development = development();
    every_block(SHELL, 20, |b| unfit(&b.mark, b.page, b.line, &development));
}

/// Every Python block of the README and `docs/` runs or says why not: a tool file (its
/// first line `# name.py`) that a marked block of its page uses, saved by the walk; a
/// block the line before names the test that runs it (`<!-- runs: tests/all/x.rs -->`);
/// or one that says why not (`<!-- not run: ... -->`). `<!-- runs -->` would run it as
/// shell, and is refused.
#[test]
fn every_python_block_runs_or_says_why_not() {
    let development = development();
    every_block(&["python"], 10, |b| {
        let (name, line) = (b.page, b.line);
        let file = b
            .body
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# "))
            .filter(|f| f.ends_with(".py") && !f.contains(' '));
        match (&b.mark, file) {
            (Mark::Runs, _) => Some(format!(
                "{name}:{line}: `<!-- runs -->` before a Python block would run it as \
                 shell: name its file on its first line and use it in a walk, or name \
                 the test that runs it (`<!-- runs: tests/all/x.rs -->`)"
            )),
            (Mark::Unmarked, Some(file)) if !walk(b.text).script.concat().contains(file) => Some(
                format!("{name}:{line}: {file} is saved for the page's walk, which never uses it"),
            ),
            (Mark::Unmarked, Some(_)) => None,
            (mark, _) => unfit(mark, name, line, &development),
        }
    });
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
