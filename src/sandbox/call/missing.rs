//! What to do about a module the tool imports and the guest does not have.
//!
//! `import requests` in a tool that declares no requirement ends in CPython's
//! `ModuleNotFoundError: No module named 'requests'`, which says what went wrong but not
//! what to do in Warden. The host words the second half from the error alone: the
//! module's name is checked to be a dotted Python name, so nothing else the guest wrote
//! reaches the host's sentence.

use crate::outcome::ToolError;

/// The longest module name the host repeats.
const MAX_NAME: usize = 200;

/// The host's sentence for a tool that failed importing a module the guest lacks, or
/// `None` when `error` is anything else.
pub(in crate::sandbox) fn advice(error: &ToolError) -> Option<String> {
    if error.kind != "ModuleNotFoundError" {
        return None;
    }
    let name = error
        .message
        .strip_prefix("No module named '")?
        .strip_suffix('\'')?;
    let dotted = name.len() <= MAX_NAME
        && name.split('.').all(|part| {
            part.chars().next().is_some_and(|c| !c.is_ascii_digit())
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    if !dotted {
        return None;
    }
    let top = name.split('.').next().unwrap_or(name);
    Some(if top.starts_with('_') {
        format!(
            "the module `{name}` is a native part of Python or of a package, which this \
             WebAssembly runtime does not have: the tool needs something WASI cannot \
             provide (processes, sockets, threads) or a package built for another platform"
        )
    } else if name.contains('.') {
        format!(
            "`{top}` was found but not `{name}`: the installed release of the package may \
             lack it, or it is a native extension this runtime cannot load (a tool's \
             packages are installed from pure-Python wheels only)"
        )
    } else {
        format!(
            "the tool imports `{name}`, which neither Python's standard library nor this \
             runtime's bundled packages provide: declare the package that provides it as a \
             requirement (a `# /// script` block in the tool's file, `--requirement` on \
             `warden run`, `pip_requirements` when registering) and Warden installs it for \
             the tool"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(kind: &str, message: &str) -> ToolError {
        ToolError {
            kind: kind.into(),
            message: message.into(),
            traceback: String::new(),
            deliberate: false,
        }
    }

    #[test]
    fn a_package_not_declared_is_named_with_the_ways_to_declare_it() {
        let advice = advice(&error("ModuleNotFoundError", "No module named 'requests'"));
        let advice = advice.expect("advice for a missing package");
        assert!(advice.contains("imports `requests`"), "{advice}");
        assert!(advice.contains("# /// script"), "{advice}");
        assert!(advice.contains("--requirement"), "{advice}");
        assert!(advice.contains("pip_requirements"), "{advice}");
    }

    #[test]
    fn a_missing_submodule_and_a_native_module_get_their_own_advice() {
        let sub = advice(&error(
            "ModuleNotFoundError",
            "No module named 'pydantic_core._pydantic_core'",
        ))
        .expect("advice for a submodule");
        assert!(
            sub.starts_with("`pydantic_core` was found but not `pydantic_core._pydantic_core`"),
            "{sub}"
        );
        assert!(sub.contains("native extension"), "{sub}");
        let native = advice(&error("ModuleNotFoundError", "No module named '_ctypes'"))
            .expect("advice for a native module");
        assert!(native.contains("`_ctypes` is a native part"), "{native}");
    }

    #[test]
    fn anything_but_a_plain_missing_module_gets_none() {
        for (kind, message) in [
            ("ImportError", "No module named 'requests'"),
            ("ValueError", "No module named 'requests'"),
            ("ModuleNotFoundError", "No module named 'a b'"),
            ("ModuleNotFoundError", "No module named 'x'; and more"),
            ("ModuleNotFoundError", "No module named '9lives'"),
            ("ModuleNotFoundError", "No module named 'a..b'"),
            ("ModuleNotFoundError", "No module named ''"),
            (
                "ModuleNotFoundError",
                "import of x halted; None in sys.modules",
            ),
        ] {
            assert_eq!(advice(&error(kind, message)), None, "{kind}: {message}");
        }
        let long = format!("No module named '{}'", "a".repeat(MAX_NAME + 1));
        assert_eq!(advice(&error("ModuleNotFoundError", &long)), None);
    }
}
