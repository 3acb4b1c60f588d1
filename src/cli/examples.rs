//! The manual's `warden` commands parse (a test): every `warden` command line of a
//! shell block in the README and `docs/` is parsed by this CLI, so a renamed or removed
//! command or flag fails here, naming the page and line. (Placeholders such as
//! `TENANT_ID` or `$RUN` stand for values, `[--flag]` marks an optional flag, and the
//! variables a block exports or a line assigns reach the flags that read them.) The
//! MCP client configurations' `warden` commands are parsed too.

use std::path::{Path, PathBuf};

use clap::Parser;

use super::Cli;

/// The README and every chapter of the manual.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("the manual's folder")
        .map(|entry| entry.expect("a chapter").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    pages.extend(chapters);
    pages
}

/// Shell variables, in the order they were set: (name, value).
type Variables = Vec<(String, String)>;

/// A command line of a shell block: where it starts, its text (continuations joined),
/// and the variables its block exported before it.
struct ShellLine {
    line: usize,
    text: String,
    exported: Variables,
}

/// The command lines of `text`'s shell blocks.
fn shell_lines(text: &str) -> Vec<ShellLine> {
    let mut lines = Vec::new();
    let mut in_shell = false;
    let mut console = false;
    let mut exported = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (at, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(language) = trimmed.strip_prefix("```") {
            in_shell = matches!(language, "sh" | "bash" | "console" | "shell");
            console = language == "console";
            exported.clear();
            pending = None;
            continue;
        }
        if !in_shell {
            continue;
        }
        // In a console transcript, what follows a command is its output.
        if console && pending.is_none() && !trimmed.starts_with("$ ") {
            continue;
        }
        let trimmed = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
        let (start, mut joined) = match pending.take() {
            Some((start, before)) => (start, format!("{before} {trimmed}")),
            None => (at + 1, trimmed.to_owned()),
        };
        if joined.ends_with('\\') {
            joined.pop();
            pending = Some((start, joined));
        } else if let Some(assignments) = joined.strip_prefix("export ") {
            let words = shlex::split(assignments).unwrap_or_default();
            exported.extend(words.iter().filter_map(|w| assignment(w)));
        } else {
            lines.push(ShellLine {
                line: start,
                text: joined,
                exported: exported.clone(),
            });
        }
    }
    lines
}

/// The words of a `warden` command on `line`, from the program on, with the variables
/// assigned before it: none if the line runs another program (`curl`, `npx`, ...). The
/// words end where the shell's command does (`&`, `|`, `;`, `>`).
fn warden_words(line: &str) -> Option<(Variables, Vec<String>)> {
    let words = shlex::split(line)?;
    let assigned: Variables = words.iter().map_while(|w| assignment(w)).collect();
    let mut command: Vec<String> = words.into_iter().skip(assigned.len()).collect();
    let program = command.first()?;
    if program != "warden" && !program.ends_with("/bin/warden") {
        return None;
    }
    if let Some(end) = command
        .iter()
        .position(|w| matches!(w.as_str(), "&" | "&&" | "|" | "||" | ";" | ">" | ">>"))
    {
        command.truncate(end);
    }
    if let Some(end) = command.iter().position(|w| w.ends_with(';')) {
        command[end].pop();
        command.truncate(end + 1);
    }
    // `[--json]`: an optional flag, shown as such.
    command.retain(|w| !(w.starts_with('[') && w.ends_with(']')));
    for word in &mut command {
        if let Some(value) = PLACEHOLDERS.iter().find(|(p, _)| p == word).map(|(_, v)| v) {
            *word = (*value).to_owned();
        }
    }
    Some((assigned, command))
}

/// Placeholders the manual writes for values a parser checks, and a value of that kind.
const PLACEHOLDERS: &[(&str, &str)] = &[
    (
        "$(warden audit pubkey)",
        "0000000000000000000000000000000000000000000000000000000000000000",
    ),
    (
        "PUBLIC_KEY",
        "0000000000000000000000000000000000000000000000000000000000000000",
    ),
];

/// `NAME=value`, as a shell assigns a variable.
fn assignment(word: &str) -> Option<(String, String)> {
    let (name, value) = word.split_once('=')?;
    let is_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    is_name.then(|| (name.to_owned(), value.to_owned()))
}

/// `words` with the variables in `environment` that its command reads (an argument's
/// `env`) given as their flags, as the command would read them from its environment.
fn with_environment(words: Vec<String>, environment: &[(String, String)]) -> Vec<String> {
    use clap::CommandFactory;
    let root = Cli::command();
    let mut commands = vec![root.clone()];
    for word in words.iter().skip(1).filter(|w| !w.starts_with('-')) {
        let Some(sub) = commands
            .last()
            .and_then(|c| c.find_subcommand(word))
            .cloned()
        else {
            break;
        };
        commands.push(sub);
    }
    let mut words = words;
    for command in &commands {
        for arg in command.get_arguments() {
            let (Some(variable), Some(long)) = (arg.get_env(), arg.get_long()) else {
                continue;
            };
            let flag = format!("--{long}");
            let given = environment
                .iter()
                .find(|(name, _)| variable == name.as_str());
            if let Some((_, value)) = given
                && !words.contains(&flag)
            {
                words.extend([flag, value.clone()]);
            }
        }
    }
    words
}

/// The `warden` commands of the MCP client configurations in `text`'s JSON blocks
/// (`"mcpServers": {"warden": {"command": ".../warden", "args": [...]}}`), each with the
/// number of its block's first line.
fn client_commands(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut commands = Vec::new();
    let mut block: Option<(usize, String)> = None;
    for (at, line) in text.lines().enumerate() {
        match (&mut block, line.trim().strip_prefix("```")) {
            (Some(_), Some("")) => {
                let (start, body) = block.take().unwrap_or_default();
                let Ok(config) = serde_json::from_str::<serde_json::Value>(&body) else {
                    continue;
                };
                let servers = config["mcpServers"].as_object().into_iter().flatten();
                for server in servers.map(|(_, server)| server) {
                    let Some(program) = server["command"].as_str() else {
                        continue;
                    };
                    if !program.ends_with("warden") {
                        continue;
                    }
                    let args = server["args"].as_array().into_iter().flatten();
                    let words = std::iter::once(program.to_owned())
                        .chain(args.filter_map(|a| a.as_str().map(str::to_owned)))
                        .collect();
                    commands.push((start, words));
                }
            }
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, Some("json")) => block = Some((at + 2, String::new())),
            (None, _) => {}
        }
    }
    commands
}

#[test]
fn every_warden_command_in_the_manual_parses() {
    let mut checked = 0;
    let mut failed = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        let name = page
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let shell = shell_lines(&text).into_iter().filter_map(|l| {
            let (assigned, words) = warden_words(&l.text)?;
            let environment = [l.exported, assigned].concat();
            Some((l.line, with_environment(words, &environment)))
        });
        for (line, words) in shell.chain(client_commands(&text)) {
            checked += 1;
            if let Err(e) = Cli::try_parse_from(&words) {
                failed.push(format!(
                    "{name}:{line}: {}\n{}",
                    words.join(" "),
                    e.render()
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(
        checked >= 60,
        "only {checked} warden commands found in the manual"
    );
}

#[test]
fn command_lines_are_taken_as_a_shell_would() {
    let page = "```sh\nexport WARDEN_SERVER=http://h:1 WARDEN_API_KEY=$KEY\n\
                WARDEN_HOME=/x warden run a.py --args '{\"a\": 1}' &   # note\n\
                $ warden runs wait $RUN \\\n  --timeout 10m; echo \"exit $?\"\n\
                curl -s http://h/v1 | jq .\n```\nwarden run not.py\n";
    let lines = shell_lines(page);
    let words: Vec<_> = lines.iter().map(|l| warden_words(&l.text)).collect();
    let strings = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        words,
        [
            Some((
                vec![("WARDEN_HOME".to_owned(), "/x".to_owned())],
                strings(&["warden", "run", "a.py", "--args", "{\"a\": 1}"])
            )),
            Some((
                vec![],
                strings(&["warden", "runs", "wait", "$RUN", "--timeout", "10m"])
            )),
            None,
        ]
    );
    assert_eq!(lines[1].line, 4);
    // The block's exports reach the command as the flags that read them.
    let (_, wait) = words[1].clone().unwrap();
    let wait = with_environment(wait, &lines[1].exported);
    assert_eq!(
        wait[6..],
        strings(&["--server", "http://h:1", "--key", "$KEY"])
    );
    assert!(Cli::try_parse_from(&wait).is_ok());
}
