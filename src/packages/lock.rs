//! A lock: the exact wheels a requirement set resolved to, each with its SHA-256.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::requirement::Requirement;

/// What a tool version's requirements resolved to. Part of the version: its id covers
/// the lock, so a changed lock makes a new version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// The requirements as declared (PEP 723 block, flags, `pip_requirements`), sorted
    /// and without duplicates.
    #[schema(value_type = Vec<String>)]
    pub requirements: Vec<Requirement>,
    /// The wheels installed for the tool, sorted by name.
    #[serde(default)]
    pub packages: Vec<LockedWheel>,
    /// Requirements the runtime's bundled packages satisfy: nothing is installed for
    /// them.
    #[serde(default)]
    pub bundled: Vec<BundledUse>,
}

/// One pinned wheel.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(deny_unknown_fields)]
pub struct LockedWheel {
    /// Normalized distribution name.
    pub name: String,
    /// Exact version.
    pub version: String,
    /// The wheel's file name (its tags say it is pure Python).
    pub wheel: String,
    /// SHA-256 of the wheel file, lower-case hex.
    pub sha256: String,
}

/// A package the runtime bundles, used to satisfy a requirement.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(deny_unknown_fields)]
pub struct BundledUse {
    /// Normalized distribution name.
    pub name: String,
    /// The bundled version.
    pub version: String,
}

impl Lock {
    /// No requirements at all: the tool uses the runtime alone.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty() && self.packages.is_empty()
    }

    /// The id of the installed folder: SHA-256 over the pinned wheels only, so every
    /// tool whose requirements resolve to the same wheels shares one folder. `None`
    /// when nothing is installed.
    pub fn site_id(&self) -> Option<String> {
        if self.packages.is_empty() {
            return None;
        }
        let mut hasher = Sha256::new();
        hasher.update(b"warden.site.v1\n");
        for w in &self.packages {
            hasher.update(format!("{} {} {}\n", w.name, w.version, w.sha256).as_bytes());
        }
        Some(hex::encode(hasher.finalize()))
    }

    /// One line per requirement and wheel, for people.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for w in &self.packages {
            lines.push(format!(
                "{} {} (sha256 {})",
                w.name,
                w.version,
                &w.sha256[..w.sha256.len().min(12)]
            ));
        }
        for b in &self.bundled {
            lines.push(format!(
                "{} {} (bundled with the runtime)",
                b.name, b.version
            ));
        }
        lines
    }
}

/// A requirement set in canonical order: sorted, without duplicates.
pub fn canonical(mut requirements: Vec<Requirement>) -> Vec<Requirement> {
    requirements.sort();
    requirements.dedup();
    requirements
}
