//! A console transcript: its commands, what it shows each printing, and how a printed
//! line is matched against a shown one (see the walk's documentation in `tour.rs`).

/// The output a console transcript shows for one of its commands.
#[derive(Debug, PartialEq)]
pub(super) struct Shown {
    /// The command's line on its page (from 1).
    pub(super) line: usize,
    pub(super) command: String,
    pub(super) printed: Vec<String>,
}

/// A console transcript's commands: its `$ ` lines but comments alone, each with the
/// lines it continues onto (a line ending in `\`); the rest is what they printed.
pub(super) fn console_commands(body: &str) -> String {
    console_output(body, 1)
        .into_iter()
        .map(|shown| shown.command)
        .collect()
}

/// What a console transcript shows its commands print: for each command that runs (not
/// a `$ # comment`), the lines after it up to the next command. `first` is the line of
/// the transcript's first line on its page.
pub(super) fn console_output(body: &str, first: usize) -> Vec<Shown> {
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
pub(super) fn command_of(line: &str) -> Option<&str> {
    let line = line.strip_prefix("$ ").unwrap_or(line);
    let code = line.split(" #").next().unwrap_or_default().trim();
    (!code.is_empty() && !code.starts_with('#')).then_some(code)
}

/// Whether `printed` (a command's output) has each of `shown`'s lines, in order.
pub(super) fn prints_as_shown(printed: &str, shown: &[String]) -> bool {
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

#[test]
fn a_transcripts_shown_output_is_kept_per_command_and_matched_with_placeholders() {
    let page = "text\n<!-- runs -->\n```console\n$ # a comment\n$ warden run a.py \\\n  --args '{}'\n\
                ok  (fuel 1_000 · 2.5 ms)\n42\n$ true\n```\n";
    let walk = super::walk(page);
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
