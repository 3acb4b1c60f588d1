//! What a failed pip run means: pip's debug log read for the files it skipped and the
//! projects it found nothing loadable for, and its error output turned into a
//! [`PackagesError`] that names the requirement and says what to do.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::super::PackagesError;
use super::WheelName;

/// What pip's debug log says about the files it looked at.
#[derive(Debug, Default)]
pub(super) struct PipLog {
    /// The file names of the links it skipped (source distributions under
    /// `--only-binary`, wheels with other tags, files of other projects).
    skipped: Vec<String>,
    /// The projects (normalized names) it found no file at all for that the guest can
    /// load: a dependency with only native wheels or sources makes pip backtrack and
    /// then report a conflict that does not name it.
    without_files: Vec<String>,
}

impl PipLog {
    pub(super) fn read(log: &Path) -> PipLog {
        let Ok(file) = fs::File::open(log) else {
            return PipLog::default();
        };
        // At most 64 MiB of log: an index page of a large project is long but not that
        // long.
        let lines = BufReader::new(file.take(64 << 20))
            .lines()
            .map_while(Result::ok);
        PipLog::parse(lines)
    }

    fn parse(lines: impl Iterator<Item = String>) -> PipLog {
        const NO_LINKS: &str = "Given no hashes to check 0 links for project '";
        let mut log = PipLog::default();
        for line in lines {
            if line.contains("Skipping link: ") {
                log.skipped.extend(skipped_file(&line));
            } else if let Some((_, rest)) = line.split_once(NO_LINKS)
                && let Some((name, _)) = rest.split_once('\'')
            {
                log.without_files
                    .push(super::super::requirement::normalize_name(name));
            }
        }
        log.without_files.sort();
        log.without_files.dedup();
        log
    }
}

/// The file name of a "Skipping link" line: "...: URL (from INDEX-PAGE)
/// (requires-python:...)", whose URL is the first word after the last ": ".
fn skipped_file(line: &str) -> Option<String> {
    let url = line.rsplit(": ").next()?.split_whitespace().next()?;
    let path = url.split(['#', '?']).next()?;
    Some(percent_decode(path.rsplit('/').next()?))
}

/// `%2B` and the like in a link's file name (a local version's `+`, mostly).
fn percent_decode(name: &str) -> String {
    url::Url::parse(&format!("file:///{name}"))
        .ok()
        .and_then(|u| u.to_file_path().ok())
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_else(|| name.to_owned())
}

/// A source distribution's file name: (normalized project name, version).
fn sdist_name(file: &str) -> Option<(String, String)> {
    let stem = [".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".tgz", ".tar"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))?;
    let (name, version) = stem.rsplit_once('-')?;
    Some((
        super::super::requirement::normalize_name(name),
        version.to_owned(),
    ))
}

/// Whether pip found nothing for `requirement` (as pip printed it) because only source
/// distributions match it: the source distributions of `skipped` that match, if no
/// wheel of any kind does.
fn source_only(requirement: &str, skipped: &[String]) -> Option<Vec<String>> {
    let wanted: super::Requirement = requirement.parse().ok()?;
    let matches = |name: &str, version: &str| {
        name == wanted.name()
            && version
                .parse::<pep508_rs::pep440_rs::Version>()
                .map_or(true, |v| wanted.allows(&v))
    };
    let sdists: Vec<String> = skipped
        .iter()
        .filter(|f| sdist_name(f).is_some_and(|(n, v)| matches(&n, &v)))
        .cloned()
        .collect();
    let wheels = skipped
        .iter()
        .filter_map(|f| WheelName::parse(f))
        .any(|w| matches(&w.name, &w.version));
    let mut sdists = sdists;
    sdists.sort();
    sdists.dedup();
    (!sdists.is_empty() && !wheels).then_some(sdists)
}

/// The most useful error for what pip said, and what its log says of the files.
pub(super) fn diagnose(what: &str, stderr: &str, log: &PipLog) -> PackagesError {
    let skipped = &log.skipped;
    if stderr.contains("No module named pip") {
        return PackagesError::NoPip;
    }
    if stderr.contains("DO NOT MATCH THE HASHES") {
        return PackagesError::HashMismatch {
            detail: tail(stderr, 12),
        };
    }
    if let Some(name) = stderr
        .lines()
        .find_map(|l| l.split("No matching distribution found for ").nth(1))
    {
        let name = name.trim().to_owned();
        let offline = [
            "NewConnectionError",
            "Failed to establish",
            "Name or service not known",
            "Temporary failure in name resolution",
            "Network is unreachable",
        ]
        .iter()
        .any(|m| stderr.contains(m));
        if offline {
            return PackagesError::IndexUnreachable {
                detail: tail(stderr, 6),
            };
        }
        if let Some(files) = source_only(&name, skipped) {
            return PackagesError::SourceOnly {
                requirement: name,
                files,
            };
        }
        return PackagesError::NoPureWheel { requirement: name };
    }
    if stderr.contains("ResolutionImpossible") || stderr.contains("conflicting dependencies") {
        // pip's explanation names the versions it tried, not the dependency none of
        // them could have: say which one had no file the guest can load.
        if !log.without_files.is_empty() {
            return PackagesError::NeedsNative {
                packages: log.without_files.join(", "),
            };
        }
        return PackagesError::Conflict {
            detail: tail(stderr, 20),
        };
    }
    PackagesError::Pip {
        action: what.to_owned(),
        detail: tail(stderr, 12),
    }
}

fn tail(text: &str, lines: usize) -> String {
    let kept: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    kept[kept.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnoses_pip_errors() {
        let no_wheel = "ERROR: Could not find a version that satisfies the requirement numpy>=9 (from versions: none)\nERROR: No matching distribution found for numpy>=9\n";
        assert!(
            matches!(diagnose("x", no_wheel, &PipLog::default()), PackagesError::NoPureWheel { requirement } if requirement == "numpy>=9")
        );
        let hashes = "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.\n";
        assert!(matches!(
            diagnose("x", hashes, &PipLog::default()),
            PackagesError::HashMismatch { .. }
        ));
    }

    #[test]
    fn a_conflict_over_a_dependency_with_no_loadable_file_names_it() {
        // As pip's debug log has it (abridged): the tool's package was found, its
        // native dependency had files, none of which the guest can load.
        let log = PipLog::parse(
            [
                "2026-11-29T10:09:10,647   Skipping link: none of the wheel's tags (py2-none-any) are compatible (run pip debug --verbose to show compatible tags): https://files.example/packages/71/ec/sso_client-0.1.0-py2-none-any.whl (from https://index.example/simple/sso-client/)",
                "2026-11-29T10:09:10,700 Given no hashes to check 12 links for project 'sso-client': discarding no candidates",
                "2026-11-29T10:09:10,950   Skipping link: No sources permitted for Crypto_Lib: https://files.example/packages/9d/af/crypto_lib-50.0.2.tar.gz (from https://index.example/simple/crypto-lib/)",
                "2026-11-29T10:09:10,950 Given no hashes to check 0 links for project 'Crypto_Lib': discarding no candidates",
                "2026-11-29T10:09:10,998 Given no hashes to check 0 links for project 'Crypto_Lib': discarding no candidates",
            ]
            .map(String::from)
            .into_iter(),
        );
        assert_eq!(log.without_files, ["crypto-lib"]);
        assert_eq!(
            log.skipped,
            [
                "sso_client-0.1.0-py2-none-any.whl",
                "crypto_lib-50.0.2.tar.gz"
            ]
        );
        let stderr = "ERROR: Cannot install sso-client because these package versions have conflicting dependencies.\nERROR: ResolutionImpossible: for help visit ...\n";
        let e = diagnose("x", stderr, &log);
        assert!(
            matches!(&e, PackagesError::NeedsNative { packages } if packages == "crypto-lib"),
            "{e}"
        );
        assert!(e.to_string().contains("no pure-Python wheel"), "{e}");
        // A conflict with every dependency loadable stays pip's own words.
        let e = diagnose("x", stderr, &PipLog::default());
        assert!(matches!(e, PackagesError::Conflict { .. }), "{e}");
    }

    #[test]
    fn a_requirement_with_only_source_distributions_is_told_apart() {
        // pip's log lists every file it skipped, other projects' included.
        let skipped = PipLog {
            skipped: [
                "Only_Sdist-1.0.tar.gz",
                "only_sdist-2.0.zip",
                "mixed-1.0.tar.gz",
                "mixed-1.0-cp315-cp315-manylinux_2_17_x86_64.whl",
            ]
            .map(String::from)
            .to_vec(),
            without_files: Vec::new(),
        };
        let no_match = |r: &str| format!("ERROR: No matching distribution found for {r}\n");
        let e = diagnose("x", &no_match("only-sdist"), &skipped);
        assert!(
            matches!(&e, PackagesError::SourceOnly { requirement, files }
                if requirement == "only-sdist" && files.len() == 2),
            "{e}"
        );
        assert!(e.to_string().contains("runs its build code"), "{e}");
        let e = diagnose("x", &no_match("only-sdist>=2"), &skipped);
        assert!(
            matches!(&e, PackagesError::SourceOnly { files, .. } if files == &["only_sdist-2.0.zip"]),
            "{e}"
        );
        // No source distribution matches: a version that does not exist at all.
        let e = diagnose("x", &no_match("only-sdist>=3"), &skipped);
        assert!(matches!(e, PackagesError::NoPureWheel { .. }), "{e}");
        // A native wheel besides the source distribution: no pure wheel.
        let e = diagnose("x", &no_match("mixed"), &skipped);
        assert!(matches!(e, PackagesError::NoPureWheel { .. }), "{e}");
        assert_eq!(
            percent_decode("pkg-1.0%2Blocal.tar.gz"),
            "pkg-1.0+local.tar.gz"
        );
    }
}
