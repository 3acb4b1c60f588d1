//! Which runtime a tool's requirements need, when the tool does not say
//! ([`crate::sandbox::Flavour`]).
//!
//! The standard runtime installs pure-Python wheels only, so Pydantic 2 (whose core,
//! pydantic-core, is a Rust extension) is out of its reach, while Pydantic 1.10 is a
//! pure-Python wheel it installs. A tool whose requirements ask for `pydantic-core`, or
//! for a `pydantic` that no 1.x release satisfies, runs on the Pydantic runtime, which
//! has both built in; every other tool runs on the standard one.

use std::str::FromStr;

use pep508_rs::pep440_rs::Version;

use super::requirement::Requirement;
use crate::sandbox::Flavour;
use crate::sandbox::flavour::LAST_PYDANTIC_1;

/// The runtime `requirements` need: [`Flavour::Pydantic`] when one of them (that applies
/// there) asks for Pydantic 2 or its core, else [`Flavour::Standard`].
pub fn flavour_for(requirements: &[Requirement]) -> Flavour {
    let Ok(last_v1) = Version::from_str(LAST_PYDANTIC_1) else {
        return Flavour::Standard;
    };
    let needs_v2 = |r: &Requirement| match r.name() {
        "pydantic-core" => true,
        "pydantic" => !r.allows(&last_v1),
        _ => false,
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
