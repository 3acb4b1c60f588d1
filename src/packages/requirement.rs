//! One requirement (PEP 508), as a tool declares it, and the guest's marker environment.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use pep508_rs::pep440_rs::{Version, VersionSpecifiers};
use pep508_rs::{MarkerEnvironment, MarkerEnvironmentBuilder, VersionOrUrl};
use serde::{Deserialize, Serialize};

use super::PackagesError;
use crate::sandbox::Flavour;

/// The Python version of the guest runtime, for markers and `requires-python`.
pub const GUEST_PYTHON: &str = "3.15.0";

/// A PEP 508 requirement on a package from an index, such as `pydantic<2` or
/// `httpx[http2]>=0.27; python_version >= "3.10"`. Direct URL requirements
/// (`name @ https://...`) are refused: Warden resolves from an index or a wheelhouse only.
///
/// Kept in pep508's canonical text (normalized name, specifiers as written), which is
/// also its serialized form.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Requirement {
    text: String,
    name: String,
}

impl Requirement {
    /// The normalized package name (PEP 503: lower case, runs of `-_.` as one `-`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Letta's shape, `{"name": ..., "version": ...}`: `version` is either an exact
    /// version (`1.10.13`, meaning `==1.10.13`) or a specifier set (`<2`, `>=1,<2`).
    pub fn from_name_and_version(name: &str, version: Option<&str>) -> Result<Self, PackagesError> {
        let name = name.trim();
        let text = match version.map(str::trim).filter(|v| !v.is_empty()) {
            None => name.to_owned(),
            Some(v) if v.starts_with(|c: char| c.is_ascii_digit()) => format!("{name}=={v}"),
            Some(v) => format!("{name}{v}"),
        };
        text.parse()
    }

    fn parsed(&self) -> Option<pep508_rs::Requirement> {
        pep508_rs::Requirement::from_str(&self.text).ok()
    }

    /// Whether the requirement applies in the standard runtime's guest (its marker, if
    /// any, holds there).
    pub fn applies_in_guest(&self) -> bool {
        self.applies_in(Flavour::Standard)
    }

    /// Whether the requirement applies in `flavour`'s guest (its marker, if any, holds
    /// there).
    pub fn applies_in(&self, flavour: Flavour) -> bool {
        match (self.parsed(), guest_markers(flavour)) {
            (Some(r), Some(env)) => r.marker.evaluate(env, &[]),
            _ => true,
        }
    }

    /// Whether `version` satisfies the requirement's specifiers (no specifier: any).
    pub fn allows(&self, version: &Version) -> bool {
        match self.parsed().and_then(|r| r.version_or_url) {
            Some(VersionOrUrl::VersionSpecifier(specs)) => specs.contains(version),
            _ => true,
        }
    }

    /// The specifiers as written (`<2`), empty when there are none.
    pub fn specifiers(&self) -> String {
        match self.parsed().and_then(|r| r.version_or_url) {
            Some(VersionOrUrl::VersionSpecifier(specs)) => specs.to_string(),
            _ => String::new(),
        }
    }
}

impl FromStr for Requirement {
    type Err = PackagesError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: String| PackagesError::InvalidRequirement {
            requirement: s.to_owned(),
            reason,
        };
        if s.len() > 1000 {
            return Err(invalid("longer than 1,000 characters".into()));
        }
        // pep508_rs panics on some names its grammar admits (`a_`): check the name (the
        // leading run of name characters) against PEP 508's rule first.
        let name: &str = s
            .trim()
            .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
            .next()
            .unwrap_or("");
        let alnum = |c: char| c.is_ascii_alphanumeric();
        let well_formed = name.starts_with(alnum) && name.ends_with(alnum);
        if !name.is_empty() && !well_formed {
            return Err(invalid(format!(
                "the package name {name:?} must start and end with a letter or digit"
            )));
        }
        let text = s.trim();
        let parsed = std::panic::catch_unwind(|| {
            pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(text)
        })
        .map_err(|_| invalid("not a valid PEP 508 requirement".into()))?
        .map_err(|e| invalid(e.message.to_string()))?;
        if let Some(VersionOrUrl::Url(_)) = parsed.version_or_url {
            return Err(invalid(
                "direct URL requirements are not supported: Warden installs from the package \
                 index or a --find-links wheelhouse; name a version instead"
                    .into(),
            ));
        }
        Ok(Requirement {
            text: parsed.to_string(),
            name: parsed.name.to_string(),
        })
    }
}

impl TryFrom<String> for Requirement {
    type Error = PackagesError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Requirement> for String {
    fn from(r: Requirement) -> String {
        r.text
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// PEP 503's normalized form of a distribution name.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_run {
                out.push('-');
            }
            in_run = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_run = false;
        }
    }
    out
}

/// Whether the guest's Python satisfies a `requires-python` specifier set.
pub fn guest_python_satisfies(specifiers: &str) -> Result<bool, String> {
    let specs = VersionSpecifiers::from_str(specifiers).map_err(|e| e.to_string())?;
    let version = Version::from_str(GUEST_PYTHON).map_err(|e| e.to_string())?;
    Ok(specs.contains(&version))
}

/// The values PEP 508 markers see in `flavour`'s guest: CPython 3.15 or 3.13 on WASI.
fn guest_markers(flavour: Flavour) -> Option<&'static MarkerEnvironment> {
    static ENV: [OnceLock<Option<MarkerEnvironment>>; 2] = [OnceLock::new(), OnceLock::new()];
    let slot = match flavour {
        Flavour::Standard => &ENV[0],
        Flavour::Pydantic => &ENV[1],
    };
    slot.get_or_init(|| {
        MarkerEnvironment::try_from(MarkerEnvironmentBuilder {
            implementation_name: "cpython",
            implementation_version: flavour.python_full(),
            os_name: "posix",
            platform_machine: "wasm32",
            platform_python_implementation: "CPython",
            platform_release: "",
            platform_system: "WASI",
            platform_version: "",
            python_full_version: flavour.python_full(),
            python_version: flavour.python(),
            sys_platform: "wasi",
        })
        .ok()
    })
    .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_normalizes() {
        let r: Requirement = "Typing_Extensions >= 4.0".parse().unwrap();
        assert_eq!(r.name(), "typing-extensions");
        assert_eq!(r.specifiers(), ">=4.0");
        assert!(r.allows(&Version::from_str("4.16.0").unwrap()));
        assert!(!r.allows(&Version::from_str("3.9").unwrap()));
    }

    #[test]
    fn letta_shape() {
        let exact = Requirement::from_name_and_version("pydantic", Some("1.10.13")).unwrap();
        assert_eq!(exact.to_string(), "pydantic==1.10.13");
        let spec = Requirement::from_name_and_version("pydantic", Some("<2")).unwrap();
        assert_eq!(spec.to_string(), "pydantic<2");
        let bare = Requirement::from_name_and_version("httpx", None).unwrap();
        assert_eq!(bare.to_string(), "httpx");
    }

    #[test]
    fn refuses_names_the_parser_would_panic_on() {
        for bad in ["Z_XRbO_", "a_>=1", "-a", "a.", "A_ A"] {
            assert!(bad.parse::<Requirement>().is_err(), "{bad}");
        }
        assert!("a_b.c-d>=1".parse::<Requirement>().is_ok());
    }

    #[test]
    fn refuses_urls_and_garbage() {
        assert!(
            "pkg @ https://example.invalid/pkg.whl"
                .parse::<Requirement>()
                .is_err()
        );
        assert!("not a requirement!!".parse::<Requirement>().is_err());
        assert!("".parse::<Requirement>().is_err());
    }

    #[test]
    fn markers_are_evaluated_for_the_guest() {
        let old: Requirement = "tomli; python_version < '3.11'".parse().unwrap();
        assert!(!old.applies_in_guest());
        let wasi: Requirement = "x; sys_platform == 'wasi'".parse().unwrap();
        assert!(wasi.applies_in_guest());
    }

    #[test]
    fn requires_python() {
        assert_eq!(guest_python_satisfies(">=3.10"), Ok(true));
        assert_eq!(guest_python_satisfies("<3.12"), Ok(false));
        assert!(guest_python_satisfies("garbage").is_err());
    }
}
