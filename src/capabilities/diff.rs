//! What changed between two versions' capabilities, widening changes flagged, then the
//! source as a unified diff.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Capabilities, Subject};
use crate::grants::HostPattern;

/// The `format` of a [`Diff`].
pub const DIFF_FORMAT: &str = "warden.capabilities.diff.v1";

/// What changed from one version to another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Diff {
    /// Always `DIFF_FORMAT`.
    pub format: String,
    /// The older version.
    pub from: Subject,
    /// The newer version.
    pub to: Subject,
    /// True when any change gives the guest more than it had.
    pub widening: bool,
    /// Capability changes, widening ones first, then by area and item.
    pub changes: Vec<CapabilityChange>,
    /// The source as a unified diff; empty when it did not change.
    pub source: String,
}

/// One changed capability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CapabilityChange {
    /// `folder`, `env`, `host`, `secret`, `package`, `limit` or `runtime`.
    pub area: String,
    /// Added, removed or changed.
    pub kind: ChangeKind,
    /// Which one: a guest path, a variable or secret name, a host pattern, a package
    /// name, a limit key.
    pub item: String,
    /// Before (absent when added).
    pub before: Option<String>,
    /// After (absent when removed).
    pub after: Option<String>,
    /// True when the guest can do more than before.
    pub widening: bool,
}

/// How a capability changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// New in the newer version.
    Added,
    /// Gone from the newer version.
    Removed,
    /// In both, different.
    Changed,
}

/// What changed from `old` (with `old_source`) to `new` (with `new_source`).
pub fn diff(old: &Capabilities, old_source: &str, new: &Capabilities, new_source: &str) -> Diff {
    let mut changes = Vec::new();
    let mut push = |area: &str, kind, item: &str, before, after, widening| {
        changes.push(CapabilityChange {
            area: area.to_owned(),
            kind,
            item: item.to_owned(),
            before,
            after,
            widening,
        });
    };

    // Folders, by guest path: a new folder, a different host folder or rw widen.
    let folders = |c: &Capabilities| -> BTreeMap<String, (String, String)> {
        c.folders
            .iter()
            .map(|f| (f.guest.clone(), (f.host.clone(), f.mode.clone())))
            .collect()
    };
    let show = |(host, mode): &(String, String)| format!("{host} ({mode})");
    for (guest, before, after) in pairs(&folders(old), &folders(new)) {
        let widening = match (before, after) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some((old_host, _)), Some((new_host, new_mode))) => {
                old_host != new_host || (new_mode == "rw" && before.is_some_and(|b| b.1 == "ro"))
            }
        };
        push(
            "folder",
            kind(before.is_some(), after.is_some()),
            &guest,
            before.map(show),
            after.map(show),
            widening,
        );
    }

    // Variables, by name.
    let names = |list: &[String]| -> BTreeMap<String, ()> {
        list.iter().map(|n| (n.clone(), ())).collect()
    };
    for (name, before, after) in pairs(&names(&old.env), &names(&new.env)) {
        let added = before.is_none();
        push(
            "env",
            kind(before.is_some(), after.is_some()),
            &name,
            before.map(|()| name.clone()),
            after.map(|()| name.clone()),
            added,
        );
    }

    // Hosts, by pattern: a pattern no old one covers widens.
    let old_hosts = patterns(old.hosts.iter().map(|h| h.pattern.as_str()));
    let hosts = |c: &Capabilities| -> BTreeMap<String, ()> {
        c.hosts.iter().map(|h| (h.pattern.clone(), ())).collect()
    };
    for (pattern, before, after) in pairs(&hosts(old), &hosts(new)) {
        let widening = before.is_none() && !covered(&old_hosts, &pattern);
        push(
            "host",
            kind(before.is_some(), after.is_some()),
            &pattern,
            before.map(|()| pattern.clone()),
            after.map(|()| pattern.clone()),
            widening,
        );
    }

    // Secrets, by name: a new secret, or a host its value may now reach, widens.
    let secrets = |c: &Capabilities| -> BTreeMap<String, Vec<String>> {
        c.secrets
            .iter()
            .map(|s| (s.name.clone(), s.hosts.clone()))
            .collect()
    };
    for (name, before, after) in pairs(&secrets(old), &secrets(new)) {
        let widening = match (before, after) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(old_hosts), Some(new_hosts)) => {
                let old_hosts = patterns(old_hosts.iter().map(String::as_str));
                new_hosts.iter().any(|h| !covered(&old_hosts, h))
            }
        };
        let show = |hosts: &Vec<String>| format!("{name}@{}", hosts.join(","));
        push(
            "secret",
            kind(before.is_some(), after.is_some()),
            &name,
            before.map(show),
            after.map(show),
            widening,
        );
    }

    // Wheels, by name: new or different third-party code widens.
    let wheels = |c: &Capabilities| -> BTreeMap<String, String> {
        c.packages
            .wheels
            .iter()
            .map(|w| {
                (
                    w.name.clone(),
                    format!("{} (sha256 {})", w.version, w.sha256),
                )
            })
            .collect()
    };
    for (name, before, after) in pairs(&wheels(old), &wheels(new)) {
        push(
            "package",
            kind(before.is_some(), after.is_some()),
            &name,
            before.cloned(),
            after.cloned(),
            after.is_some(),
        );
    }

    // Limits as requested: a raised limit widens.
    for (o, n) in old.limits.iter().zip(&new.limits) {
        if o.name == n.name && o.requested != n.requested {
            push(
                "limit",
                ChangeKind::Changed,
                &o.name,
                Some(format!("{} {}", o.requested, o.unit)),
                Some(format!("{} {}", n.requested, n.unit)),
                n.requested > o.requested,
            );
        }
    }

    if old.runtime != new.runtime {
        let show = |c: &Capabilities| {
            format!(
                "{} (snapshot {}), warden {}",
                c.runtime.package, c.runtime.snapshot_sha256, c.runtime.warden
            )
        };
        push(
            "runtime",
            ChangeKind::Changed,
            "runtime",
            Some(show(old)),
            Some(show(new)),
            false,
        );
    }

    changes.sort_by(|a, b| (!a.widening, &a.area, &a.item).cmp(&(!b.widening, &b.area, &b.item)));
    Diff {
        format: DIFF_FORMAT.to_owned(),
        from: old.subject.clone(),
        to: new.subject.clone(),
        widening: changes.iter().any(|c| c.widening),
        changes,
        source: source_diff(&old.subject, old_source, &new.subject, new_source),
    }
}

fn kind(before: bool, after: bool) -> ChangeKind {
    match (before, after) {
        (false, _) => ChangeKind::Added,
        (_, false) => ChangeKind::Removed,
        _ => ChangeKind::Changed,
    }
}

/// The keys of both maps whose values differ (or that only one has), with both sides.
fn pairs<'a, V: PartialEq>(
    old: &'a BTreeMap<String, V>,
    new: &'a BTreeMap<String, V>,
) -> Vec<(String, Option<&'a V>, Option<&'a V>)> {
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|k| (k.clone(), old.get(k), new.get(k)))
        .filter(|(_, before, after)| before != after)
        .collect()
}

fn patterns<'a>(texts: impl Iterator<Item = &'a str>) -> Vec<HostPattern> {
    texts.filter_map(|t| t.parse().ok()).collect()
}

/// Whether one of `old` allows everything `pattern` does.
fn covered(old: &[HostPattern], pattern: &str) -> bool {
    match pattern.parse::<HostPattern>() {
        Ok(p) => old.iter().any(|o| o.covers(&p)),
        Err(_) => false,
    }
}

fn source_diff(from: &Subject, old: &str, to: &Subject, new: &str) -> String {
    if old == new {
        return String::new();
    }
    let label = |s: &Subject| match (&s.number, &s.file) {
        (Some(n), _) => format!("{}.py (version {n})", s.function),
        (None, Some(file)) => file.clone(),
        (None, None) => format!("{}.py", s.function),
    };
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&label(from), &label(to))
        .to_string()
}
