//! The packages the runtime bundles in its standard-library zip (numpy, pandas, ...),
//! read from the zip's `NAME-VERSION.dist-info/` folders.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::str::FromStr;

use pep508_rs::pep440_rs::Version;

use super::PackagesError;
use super::requirement::normalize_name;

/// Name (normalized) to version of every package in the runtime.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bundled {
    packages: BTreeMap<String, Version>,
}

impl Bundled {
    /// Reads the bundled packages from the runtime's standard-library zip.
    pub fn from_stdlib_zip(path: &Path) -> Result<Bundled, PackagesError> {
        let io = |source| PackagesError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let zip = zip::ZipArchive::new(file).map_err(|e| PackagesError::Runtime {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Bundled::from_names(zip.file_names()))
    }

    /// From the entry names of a zip or folder listing.
    pub fn from_names<'a>(names: impl Iterator<Item = &'a str>) -> Bundled {
        let mut packages = BTreeMap::new();
        for name in names {
            let Some(top) = name.split('/').next() else {
                continue;
            };
            let Some(stem) = top.strip_suffix(".dist-info") else {
                continue;
            };
            // NAME-VERSION: the name's own dashes are underscores in dist-info names.
            let Some((name, version)) = stem.rsplit_once('-') else {
                continue;
            };
            if let Ok(version) = Version::from_str(version) {
                packages.insert(normalize_name(name), version);
            }
        }
        Bundled { packages }
    }

    /// The bundled version of `name` (normalized), if bundled.
    pub fn version(&self, name: &str) -> Option<&Version> {
        self.packages.get(name)
    }

    /// Every bundled package, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Version)> {
        self.packages.iter().map(|(n, v)| (n.as_str(), v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_dist_info_names() {
        let names = [
            "numpy-2.5.2.dist-info/METADATA",
            "numpy-2.5.2.dist-info/RECORD",
            "typing_extensions-4.16.0.dist-info/METADATA",
            "numpy/__init__.py",
            "json/__init__.py",
        ];
        let b = Bundled::from_names(names.into_iter());
        assert_eq!(
            b.version("numpy").map(ToString::to_string).as_deref(),
            Some("2.5.2")
        );
        assert_eq!(
            b.version("typing-extensions")
                .map(ToString::to_string)
                .as_deref(),
            Some("4.16.0")
        );
        assert_eq!(b.iter().count(), 2);
    }
}
