//! PEP 723 inline script metadata: the `# /// script` block a tool's source may carry.
//!
//! ```python
//! # /// script
//! # requires-python = ">=3.12"
//! # dependencies = ["pydantic<2", "httpx"]
//! # ///
//! ```
//!
//! Read statically, like the schema: nothing is run. The rules are the PEP's reference
//! reading: a block opens with a line that is exactly `# /// script`, every following
//! line is `#` or starts with `# `, and the block closes at the last `# ///` line of that
//! run of comment lines. Two `script` blocks are an error, as is a block with no closing
//! line. Blocks of other types are ignored.

use serde::Deserialize;

use super::PackagesError;
use super::requirement::{GUEST_PYTHON, Requirement, guest_python_satisfies};

/// What a source's `script` block declares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptMetadata {
    /// `dependencies`, in order.
    pub dependencies: Vec<Requirement>,
    /// `requires-python`, if given (already checked against the guest's Python).
    pub requires_python: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Raw {
    #[serde(default)]
    dependencies: Vec<String>,
    requires_python: Option<String>,
}

/// Reads the `script` block of `source`, if any. No block: empty metadata.
pub fn read(source: &str) -> Result<ScriptMetadata, PackagesError> {
    let Some((line, toml_text)) = block(source)? else {
        return Ok(ScriptMetadata::default());
    };
    let bad = |reason: String| PackagesError::ScriptMetadata { line, reason };
    let raw: Raw = toml::from_str(&toml_text).map_err(|e| bad(e.message().to_owned()))?;
    if raw.dependencies.len() > super::MAX_REQUIREMENTS {
        return Err(PackagesError::TooMany {
            count: raw.dependencies.len(),
        });
    }
    let mut dependencies = Vec::with_capacity(raw.dependencies.len());
    for d in raw.dependencies {
        dependencies.push(d.parse::<Requirement>()?);
    }
    if let Some(spec) = &raw.requires_python {
        match guest_python_satisfies(spec) {
            Ok(true) => {}
            Ok(false) => {
                return Err(bad(format!(
                    "requires-python = \"{spec}\" excludes the guest's Python {GUEST_PYTHON}"
                )));
            }
            Err(e) => return Err(bad(format!("requires-python = \"{spec}\": {e}"))),
        }
    }
    Ok(ScriptMetadata {
        dependencies,
        requires_python: raw.requires_python,
    })
}

/// The 1-based line of the `script` block's opening and its TOML content.
fn block(source: &str) -> Result<Option<(usize, String)>, PackagesError> {
    let lines: Vec<&str> = source.lines().collect();
    let mut found: Option<(usize, String)> = None;
    let mut i = 0;
    while i < lines.len() {
        let Some(kind) = lines[i].strip_prefix("# /// ") else {
            i += 1;
            continue;
        };
        let opening = i + 1;
        // The run of comment lines after the opening.
        let run: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| **l == "#" || l.starts_with("# "))
            .copied()
            .collect();
        let Some(close) = run.iter().rposition(|l| *l == "# ///") else {
            if kind == "script" {
                return Err(PackagesError::ScriptMetadata {
                    line: opening,
                    reason: "the `# /// script` block has no closing `# ///` line".into(),
                });
            }
            i += 1;
            continue;
        };
        if kind == "script" {
            if let Some((first, _)) = found {
                return Err(PackagesError::ScriptMetadata {
                    line: opening,
                    reason: format!("a second `# /// script` block (the first is on line {first})"),
                });
            }
            let content: Vec<&str> = run[..close]
                .iter()
                .map(|l| l.strip_prefix("# ").unwrap_or(""))
                .collect();
            found = Some((opening, content.join("\n")));
        }
        i += close + 2;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_dependencies() {
        let src = "# /// script\n# requires-python = \">=3.10\"\n# dependencies = [\n#   \"pydantic<2\",\n#   \"httpx\",\n# ]\n# ///\n\ndef f() -> int:\n    return 1\n";
        let m = read(src).unwrap();
        let deps: Vec<String> = m.dependencies.iter().map(ToString::to_string).collect();
        assert_eq!(deps, ["pydantic<2", "httpx"]);
        assert_eq!(m.requires_python.as_deref(), Some(">=3.10"));
    }

    #[test]
    fn no_block_is_empty() {
        assert_eq!(read("def f(): pass\n").unwrap(), ScriptMetadata::default());
        // Other block types are not ours.
        assert_eq!(
            read("# /// pyproject\n# x = 1\n# ///\n").unwrap(),
            ScriptMetadata::default()
        );
    }

    #[test]
    fn errors_name_the_line() {
        let two = "# /// script\n# dependencies = []\n# ///\nimport os\n# /// script\n# dependencies = []\n# ///\n";
        assert!(matches!(
            read(two),
            Err(PackagesError::ScriptMetadata { line: 5, .. })
        ));
        let open = "# /// script\n# dependencies = []\nx = 1\n";
        assert!(matches!(
            read(open),
            Err(PackagesError::ScriptMetadata { line: 1, .. })
        ));
        let bad_toml = "# /// script\n# dependencies = [\n# ///\n";
        assert!(read(bad_toml).is_err());
        let bad_req = "# /// script\n# dependencies = [\"!!\"]\n# ///\n";
        assert!(matches!(
            read(bad_req),
            Err(PackagesError::InvalidRequirement { .. })
        ));
        let old = "# /// script\n# requires-python = \"<3.12\"\n# ///\n";
        assert!(read(old).is_err());
    }

    #[test]
    fn closes_at_the_last_marker_of_the_run() {
        let src = "# /// script\n# dependencies = [\"a\"]\n# ///\n# ///\nx = 1\n";
        // The content then includes the first `# ///` as TOML: invalid, as in the PEP's
        // reference reading.
        assert!(read(src).is_err());
    }
}

#[cfg(test)]
mod hostile {
    use super::*;

    #[test]
    fn deeply_nested_toml_is_an_error_not_a_crash() {
        for depth in [1_000, 100_000] {
            let src = format!(
                "# /// script\n# dependencies = {}{}\n# ///\n",
                "[".repeat(depth),
                "]".repeat(depth)
            );
            assert!(read(&src).is_err(), "depth {depth}");
        }
        let long = format!(
            "# /// script\n# dependencies = [\"{}\"]\n# ///\n",
            "a".repeat(5000)
        );
        assert!(read(&long).is_err());
    }
}
