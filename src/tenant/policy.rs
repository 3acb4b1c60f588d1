//! A tenant's policy ([`TenantPolicy`]): the ceilings on its tools' limits, its call
//! rates, its queue of runs, the host folders and hosts its tools may be granted, and
//! the admission checks a tool passes before it is registered or run.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::de::{MapAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Serialize};

use super::TenantError;
use crate::grants::{Access, Grants, HostPattern, ResolvedMount};
use crate::limits::Limits;

/// Calls one tenant may have running at once. Default: 4; one more waits or is refused
/// by the service.
pub const DEFAULT_MAX_CONCURRENT_CALLS: u32 = 4;
/// Calls one tenant may start per minute. Default: 120; past it the service refuses
/// with a rate-limit error.
pub const DEFAULT_CALLS_PER_MINUTE: u32 = 120;

/// Runs a tenant may have queued (accepted, not started) across nodes: 100.
pub const DEFAULT_MAX_QUEUED_RUNS: u32 = 100;

/// How long an ended run's result is kept: 24 hours.
pub const DEFAULT_RUN_RETENTION: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What a tenant may do: the ceilings on its tools' limits, its call rates and the host
/// folders its tools may mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TenantPolicy {
    /// No limit of a tool may exceed these. Default: [`Limits::default`].
    pub ceilings: Limits,
    /// Calls running at once. Default: [`DEFAULT_MAX_CONCURRENT_CALLS`].
    pub max_concurrent_calls: u32,
    /// Calls started per minute. Default: [`DEFAULT_CALLS_PER_MINUTE`].
    pub calls_per_minute: u32,
    /// Absolute host folders under which mounts may sit, each read-only or read-write.
    /// Default: none, so no tool of the tenant may mount anything.
    pub allowed_folders: Vec<AllowedFolder>,
    /// Outbound host patterns the tenant's tools may be granted: each pattern a tool
    /// asks for must be [covered](HostPattern::covers) by one of these. Default: none,
    /// so no tool of the tenant may reach any host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>, example = json!(["*.example.com:443"]))]
    pub allowed_hosts: Vec<HostPattern>,
    /// Hold every new version whose capabilities widen those of the tool's last
    /// approved version (a new folder or host, a folder made `rw`, a raised limit, new
    /// packages...) until a reviewer key of the tenant approves it; calls run the
    /// approved version meanwhile. Default: false (every version runs once registered).
    #[serde(skip_serializing_if = "is_false")]
    pub review_widening: bool,
    /// Runs (`POST /v1/tools/{id}/runs`) accepted and not yet started, across every
    /// node; one more is refused with `429 queue_full`. Default:
    /// [`DEFAULT_MAX_QUEUED_RUNS`].
    #[serde(skip_serializing_if = "is_default_queued")]
    pub max_queued_runs: u32,
    /// How long an ended run's result is kept before it is deleted (its audit events
    /// stay). Default: [`DEFAULT_RUN_RETENTION`].
    #[serde(
        rename = "run_retention_ms",
        with = "crate::limits::millis",
        skip_serializing_if = "is_default_retention"
    )]
    #[schema(value_type = u64)]
    pub run_retention: std::time::Duration,
}

fn is_default_queued(n: &u32) -> bool {
    *n == DEFAULT_MAX_QUEUED_RUNS
}

fn is_default_retention(d: &std::time::Duration) -> bool {
    *d == DEFAULT_RUN_RETENTION
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A host folder under which a tenant's tools may mount folders, and how.
///
/// Written in a policy as `{"path": "/srv/data", "mode": "ro"}` (or `"rw"`), or as a bare
/// path, `"/srv/data"`, which allows read-write mounts: what every allowed folder meant
/// before folders had a mode, so policies stored then keep their meaning. A read-write
/// folder is written back as a bare path, exactly as before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedFolder {
    /// The absolute host folder.
    pub path: PathBuf,
    /// `ro`: mounts under it must be read-only; `rw`: they may be either.
    pub mode: Access,
}

impl AllowedFolder {
    /// Mounts under `path` may be read-only or read-write.
    pub fn read_write(path: impl Into<PathBuf>) -> AllowedFolder {
        AllowedFolder {
            path: path.into(),
            mode: Access::Rw,
        }
    }

    /// Mounts under `path` must be read-only.
    pub fn read_only(path: impl Into<PathBuf>) -> AllowedFolder {
        AllowedFolder {
            path: path.into(),
            mode: Access::Ro,
        }
    }
}

/// A bare path allows read-write mounts, as in a policy.
impl From<PathBuf> for AllowedFolder {
    fn from(path: PathBuf) -> Self {
        AllowedFolder::read_write(path)
    }
}

/// A bare path allows read-write mounts, as in a policy.
impl From<&str> for AllowedFolder {
    fn from(path: &str) -> Self {
        AllowedFolder::read_write(path)
    }
}

impl fmt::Display for AllowedFolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.path.display(), self.mode)
    }
}

impl FromStr for AllowedFolder {
    type Err = std::convert::Infallible;

    /// Parses `DIR`, `DIR:ro` or `DIR:rw`; a bare `DIR` is read-write.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.rsplit_once(':') {
            Some((path, "ro")) => AllowedFolder::read_only(path),
            Some((path, "rw")) => AllowedFolder::read_write(path),
            _ => AllowedFolder::read_write(s),
        })
    }
}

/// The object form of an [`AllowedFolder`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FolderEntry {
    path: PathBuf,
    mode: Access,
}

impl Serialize for AllowedFolder {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.mode {
            Access::Rw => self.path.serialize(serializer),
            Access::Ro => FolderEntry {
                path: self.path.clone(),
                mode: self.mode,
            }
            .serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for AllowedFolder {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FolderVisitor;

        impl<'de> Visitor<'de> for FolderVisitor {
            type Value = AllowedFolder;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    r#"a folder: "/path" (read-write) or {"path": "/path", "mode": "ro" or "rw"}"#,
                )
            }

            fn visit_str<E: serde::de::Error>(self, path: &str) -> Result<AllowedFolder, E> {
                Ok(AllowedFolder::read_write(path))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<AllowedFolder, A::Error> {
                let entry = FolderEntry::deserialize(MapAccessDeserializer::new(map))?;
                Ok(AllowedFolder {
                    path: entry.path,
                    mode: entry.mode,
                })
            }
        }

        deserializer.deserialize_any(FolderVisitor)
    }
}

impl Default for TenantPolicy {
    fn default() -> Self {
        TenantPolicy {
            ceilings: Limits::default(),
            max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
            calls_per_minute: DEFAULT_CALLS_PER_MINUTE,
            allowed_folders: Vec::new(),
            allowed_hosts: Vec::new(),
            review_widening: false,
            max_queued_runs: DEFAULT_MAX_QUEUED_RUNS,
            run_retention: DEFAULT_RUN_RETENTION,
        }
    }
}

impl TenantPolicy {
    /// Checks the policy itself: allowed folders are absolute UTF-8 paths, rates are
    /// positive, ceilings are at least each limit's minimum ([`Limits::check`]).
    pub fn check(&self) -> Result<(), TenantError> {
        for folder in &self.allowed_folders {
            let p = &folder.path;
            if !p.is_absolute() || p.to_str().is_none() {
                return Err(TenantError::RelativeFolder(p.clone()));
            }
        }
        if self.max_concurrent_calls == 0 || self.calls_per_minute == 0 {
            return Err(TenantError::ZeroRate);
        }
        // A ceiling below a limit's minimum would make every tool fail.
        self.ceilings.check().map_err(TenantError::Ceiling)
    }

    /// Admits `grants` when they are consistent and every mount's host folder, once
    /// resolved (symlinks followed, `..` removed), lies inside an allowed folder, itself
    /// resolved the same way, whose mode allows the mount's access: a read-write mount
    /// needs a read-write folder. A mount host must be an absolute path to an existing
    /// folder.
    pub fn admit_grants(&self, grants: &Grants) -> Result<(), TenantError> {
        self.resolve_grants(grants).map(drop)
    }

    /// [`TenantPolicy::admit_grants`], returning each mount as it was admitted: its
    /// resolved folder, the allowed folder it lies under, and its identity. A call runs
    /// with exactly these ([`ResolvedMount::open`] refuses a folder that has changed
    /// since), never with its mounts' paths resolved again.
    pub fn resolve_grants(&self, grants: &Grants) -> Result<Vec<ResolvedMount>, TenantError> {
        grants.check()?;
        for host in &grants.hosts {
            if !self.allowed_hosts.iter().any(|a| a.covers(host)) {
                return Err(TenantError::HostNotAllowed(host.to_string()));
            }
        }
        if grants.mounts.is_empty() {
            return Ok(Vec::new());
        }
        // An allowed folder that does not exist (yet) cannot contain anything that does.
        let allowed: Vec<(PathBuf, &AllowedFolder)> = self
            .allowed_folders
            .iter()
            .filter(|f| f.path.is_absolute())
            .filter_map(|f| Some((std::fs::canonicalize(&f.path).ok()?, f)))
            .collect();
        let mut resolved = Vec::with_capacity(grants.mounts.len());
        for mount in &grants.mounts {
            if !mount.host.is_absolute() {
                return Err(TenantError::RelativeHost(mount.host.clone()));
            }
            let mut admitted = ResolvedMount::resolve(mount, Path::new("/"))?;
            // Path::starts_with compares whole components: /data2 is not inside /data.
            let containing: Vec<&(PathBuf, &AllowedFolder)> = allowed
                .iter()
                .filter(|(a, _)| admitted.host.starts_with(a))
                .collect();
            let Some(&(first_path, first)) = containing.first() else {
                return Err(TenantError::OutsideAllowedFolders {
                    host: mount.host.clone(),
                    resolved: admitted.host,
                });
            };
            let within = match mount.access {
                Access::Ro => first_path,
                Access::Rw => match containing.iter().find(|(_, f)| f.mode == Access::Rw) {
                    Some((path, _)) => path,
                    None => {
                        return Err(TenantError::ReadOnlyFolder {
                            host: mount.host.clone(),
                            folder: first.path.clone(),
                        });
                    }
                },
            };
            admitted.within.clone_from(within);
            resolved.push(admitted);
        }
        Ok(resolved)
    }

    /// Admits `limits` when none exceeds its ceiling. To lower them instead of refusing,
    /// use [`Limits::bounded_by`] with [`TenantPolicy::ceilings`].
    pub fn admit_limits(&self, limits: &Limits) -> Result<(), TenantError> {
        let c = &self.ceilings;
        within("fuel", limits.fuel, c.fuel)?;
        if limits.deadline > c.deadline {
            return Err(TenantError::AboveCeiling {
                limit: "deadline",
                asked: humantime::format_duration(limits.deadline).to_string(),
                ceiling: humantime::format_duration(c.deadline).to_string(),
            });
        }
        within("memory", limits.memory, c.memory)?;
        within("stdout", limits.stdout, c.stdout)?;
        within("stderr", limits.stderr, c.stderr)?;
        within("disk_write", limits.disk_write, c.disk_write)?;
        within(
            "http_request_bytes",
            limits.http_request_bytes,
            c.http_request_bytes,
        )?;
        within(
            "http_response_bytes",
            limits.http_response_bytes,
            c.http_response_bytes,
        )?;
        within("return_bytes", limits.return_bytes, c.return_bytes)?;
        within("scratch_bytes", limits.scratch, c.scratch)?;
        within("return_char_limit", limits.return_chars, c.return_chars)?;
        within("open_files", limits.open_files, c.open_files)?;
        within("files_created", limits.files_created, c.files_created)?;
        within("http_requests", limits.http_requests, c.http_requests)?;
        Ok(())
    }
}

/// Refuses `asked` when it is above `ceiling`, naming `limit` and both values.
fn within<T: PartialOrd + std::fmt::Display>(
    limit: &'static str,
    asked: T,
    ceiling: T,
) -> Result<(), TenantError> {
    if asked > ceiling {
        return Err(TenantError::AboveCeiling {
            limit,
            asked: asked.to_string(),
            ceiling: ceiling.to_string(),
        });
    }
    Ok(())
}
