//! Which runtime a tool's requirements need, when the tool does not say
//! ([`crate::sandbox::Flavour`]).
//!
//! The standard runtime installs pure-Python wheels only, so Pydantic 2 (whose core,
//! pydantic-core, is a Rust extension) is out of its reach, while Pydantic 1.10 is a
//! pure-Python wheel it installs. A tool whose requirements ask for a `pydantic` that no
//! 1.x release satisfies, or name one of the native extensions built into the Pydantic
//! runtime ([`PYDANTIC_EXTENSIONS`]: pydantic-core, jiter, rpds-py, orjson), runs on the
//! Pydantic runtime; every other tool runs on the standard one.

use std::str::FromStr;

use pep508_rs::pep440_rs::Version;

use super::bundled::Bundled;
use super::requirement::Requirement;
use super::{Packages, PackagesError};
use crate::sandbox::Flavour;
use crate::sandbox::artifacts::Role;
use crate::sandbox::flavour::{LAST_PYDANTIC_1, PYDANTIC_EXTENSIONS};

/// The runtime `requirements` need: [`Flavour::Pydantic`] when one of them (that applies
/// there) asks for Pydantic 2 or names an extension only that runtime has, else
/// [`Flavour::Standard`].
pub fn flavour_for(requirements: &[Requirement]) -> Flavour {
    let Ok(last_v1) = Version::from_str(LAST_PYDANTIC_1) else {
        return Flavour::Standard;
    };
    let needs_v2 = |r: &Requirement| match r.name() {
        "pydantic" => !r.allows(&last_v1),
        name => PYDANTIC_EXTENSIONS.contains(&name),
    };
    if requirements
        .iter()
        .any(|r| r.applies_in(Flavour::Pydantic) && needs_v2(r))
    {
        Flavour::Pydantic
    } else {
        Flavour::Standard
    }
}

/// The runtime to try `requirements` on after `chosen`'s store refused them with
/// `error`: the Pydantic one, when the tool named no runtime (`named`), the standard
/// one refused, and the refusal is of the kind a package needing Pydantic 2 without
/// naming it gives there (a conflict, no pure-Python wheel, a source distribution only:
/// pydantic-core has no pure wheel). `None`: the refusal stands.
pub fn retry_on(chosen: Flavour, named: bool, error: &PackagesError) -> Option<Flavour> {
    let fits = matches!(
        error,
        PackagesError::Conflict { .. }
            | PackagesError::NoPureWheel { .. }
            | PackagesError::NeedsNative { .. }
            // On an edge device: the bundle shipped the lock for the Pydantic runtime.
            | PackagesError::NotShipped { .. }
            | PackagesError::SourceOnly { .. }
    );
    (!named && chosen == Flavour::Standard && fits).then_some(Flavour::Pydantic)
}

/// Refuses, before pip runs, what the standard runtime cannot hold among `to_resolve`
/// (the requirements its bundled packages do not meet): a requirement that needs
/// Pydantic 2 or an extension only the Pydantic runtime has (pip would look through
/// every Pydantic 2 release before giving up).
pub(super) fn refuse_other_runtime(
    store: &Packages,
    to_resolve: &[Requirement],
) -> Result<(), PackagesError> {
    if store.flavour != Flavour::Standard {
        return Ok(());
    }
    match to_resolve
        .iter()
        .map(|r| (r, flavour_for(std::slice::from_ref(r))))
        .find(|(_, needs)| *needs != Flavour::Standard)
    {
        Some((r, needs)) => Err(PackagesError::NeedsRuntime {
            requirement: r.to_string(),
            needs,
            runs_on: store.flavour,
        }),
        None => Ok(()),
    }
}

/// `error` as pip gave it on `store`'s runtime (not the standard one), or, when the
/// package it found no loadable file for is one the standard runtime bundles (numpy,
/// pandas, ...: native there, with no pure wheel anywhere), why: no runtime has both.
/// A package the standard runtime bundles that has a pure wheel (Jinja, ...) installs
/// on either, so only pip can tell.
pub(super) fn explain_other_runtime(
    store: &Packages,
    requirements: &[Requirement],
    error: PackagesError,
) -> PackagesError {
    if store.flavour == Flavour::Standard {
        return error;
    }
    let missing: Vec<String> = match &error {
        PackagesError::NoPureWheel { requirement }
        | PackagesError::SourceOnly { requirement, .. } => requirement
            .parse::<Requirement>()
            .map(|r| vec![r.name().to_owned()])
            .unwrap_or_default(),
        PackagesError::NeedsNative { packages } => {
            packages.split(", ").map(str::to_owned).collect()
        }
        _ => Vec::new(),
    };
    // The standard runtime's bundled packages, when it is on this machine.
    let standard = store
        .root
        .parent()
        .and_then(|home| crate::sandbox::RuntimeFiles::at(home).ok())
        .and_then(|files| Bundled::from_stdlib_zip(&files.path(Role::Stdlib)).ok());
    let Some(standard) = standard else {
        return error;
    };
    let Some(name) = missing.iter().find(|n| standard.version(n).is_some()) else {
        return error;
    };
    let requirement = requirements
        .iter()
        .find(|r| r.name() == name)
        .map_or_else(|| name.clone(), ToString::to_string);
    let why = requirements
        .iter()
        .filter(|q| store.bundled.version(q.name()).is_some())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    PackagesError::OtherRuntime {
        requirement,
        name: name.clone(),
        flavour: store.flavour,
        other: Flavour::Standard,
        why: if why.is_empty() {
            "its requirements".to_owned()
        } else {
            why
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flavour(requirements: &[&str]) -> Flavour {
        let parsed: Vec<Requirement> = requirements.iter().map(|r| r.parse().unwrap()).collect();
        flavour_for(&parsed)
    }

    #[test]
    fn pydantic_2_or_its_core_needs_the_pydantic_runtime() {
        assert_eq!(flavour(&["pydantic>=2"]), Flavour::Pydantic);
        assert_eq!(flavour(&["requests", "pydantic~=2.5"]), Flavour::Pydantic);
        assert_eq!(flavour(&["pydantic==2.*"]), Flavour::Pydantic);
        assert_eq!(flavour(&["pydantic-core"]), Flavour::Pydantic);
        assert_eq!(flavour(&["Pydantic >= 2.0, < 3"]), Flavour::Pydantic);
    }

    #[test]
    fn an_extension_only_the_pydantic_runtime_has_needs_it() {
        assert_eq!(flavour(&["orjson>=3"]), Flavour::Pydantic);
        assert_eq!(flavour(&["rpds_py"]), Flavour::Pydantic);
        assert_eq!(flavour(&["requests", "jiter"]), Flavour::Pydantic);
        assert_eq!(flavour(&["msgpack>=1"]), Flavour::Pydantic);
        // Both runtimes bundle these: no reason to leave the standard one.
        assert_eq!(flavour(&["pyyaml", "markupsafe"]), Flavour::Standard);
        // A package that needs one without naming it is found by resolving (retry_on).
        assert_eq!(flavour(&["jsonschema", "requests"]), Flavour::Standard);
        assert_eq!(flavour(&["pydantic"]), Flavour::Standard);
    }

    #[test]
    fn only_an_unnamed_standard_runtime_refusing_for_want_of_a_wheel_is_retried() {
        let conflict = PackagesError::Conflict {
            detail: "ResolutionImpossible".into(),
        };
        let no_wheel = PackagesError::NoPureWheel {
            requirement: "pydantic-core".into(),
        };
        assert_eq!(
            retry_on(Flavour::Standard, false, &conflict),
            Some(Flavour::Pydantic)
        );
        assert_eq!(
            retry_on(Flavour::Standard, false, &no_wheel),
            Some(Flavour::Pydantic)
        );
        assert_eq!(retry_on(Flavour::Standard, true, &conflict), None);
        assert_eq!(retry_on(Flavour::Pydantic, false, &conflict), None);
        let other = PackagesError::TooMany { count: 999 };
        assert_eq!(retry_on(Flavour::Standard, false, &other), None);
    }

    #[test]
    fn pydantic_1_unpinned_pydantic_or_none_stays_standard() {
        assert_eq!(flavour(&[]), Flavour::Standard);
        assert_eq!(flavour(&["numpy"]), Flavour::Standard);
        assert_eq!(flavour(&["pydantic<2"]), Flavour::Standard);
        // Any version: the standard runtime installs 1.10, as it always has.
        assert_eq!(flavour(&["pydantic"]), Flavour::Standard);
        // A marker that excludes the guest.
        assert_eq!(
            flavour(&["pydantic>=2; sys_platform == 'win32'"]),
            Flavour::Standard
        );
    }
}
