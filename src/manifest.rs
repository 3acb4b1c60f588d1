//! One immutable tool version: its name, function, source, schema, grants and limits,
//! identified by a content hash.
//!
//! Plain data plus one hash: nothing here touches files, the clock or the database.
//!
//! # The version id
//! [`VersionId`] is the SHA-256 (lower-case hex) of a canonical serialization of what
//! *defines* the version: `function`, `source`, `schema`, `grants`, `limits` and, when the
//! tool has requirements, `packages` (its [`Lock`]: a changed lock is a new version). Any change
//! to one of them, a single byte of source or a raised limit, makes a new id; the same
//! content always makes the same id, on any machine. `name`, `tags`, `description`,
//! `title` and `icon` are labels and stay out of the hash: relabelling a tool does not make a new version.
//!
//! The canonical form is the compact JSON of those fields, in that order, under a
//! format tag (`warden.manifest.v1`) so the form can change later without ambiguity.
//! Struct fields serialize in declaration order; JSON values inside the schema keep
//! their order (property order is part of what a model is shown), so a schema with its
//! properties reordered is a different version. Nothing hashed is a map with unstable
//! order.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::grants::{GrantError, Grants};
use crate::id::{Id, IdKind};
use crate::limits::Limits;
use crate::packages::Lock;
use crate::sandbox::Flavour;
use crate::schema::ToolSchema;

mod presentation;
pub use presentation::{
    MAX_ICON_BYTES, MAX_TITLE_BYTES, PresentationError, check_icon, check_title,
};

/// Largest tool source accepted: 1 MiB of UTF-8. A larger source is refused at
/// registration with [`ManifestError::SourceTooLarge`].
pub const MAX_SOURCE_BYTES: usize = 1024 * 1024;
/// Most tags one tool may carry: 32.
pub const MAX_TAGS: usize = 32;
/// Longest description kept: 4,096 bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;

/// Everything that makes up one version of a tool, as registered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The tool's name, unique per tenant; what a model calls.
    pub name: ToolName,
    /// The Python function the tool calls.
    pub function: String,
    /// The tool's Python source.
    pub source: String,
    /// The schema derived from `source` for `function`.
    pub schema: ToolSchema,
    /// Folders and environment variables the tool gets. Default: none.
    #[serde(default)]
    pub grants: Grants,
    /// Limits of each call. Default: [`Limits::default`].
    #[serde(default)]
    pub limits: Limits,
    /// The tool's requirements and the wheels they resolved to. Default: none (the
    /// runtime alone).
    #[serde(default, skip_serializing_if = "Lock::is_empty")]
    pub packages: Lock,
    /// Labels to filter tools by. Not part of the version id.
    #[serde(default)]
    pub tags: Vec<Tag>,
    /// A note for people (the model sees the schema's description). Not part of the
    /// version id.
    #[serde(default)]
    pub description: Option<String>,
    /// A name for people that clients show instead of `name` (MCP's `title`). Not part
    /// of the version id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// An icon clients show beside the tool (MCP's `icons`): an `https:` URL or a
    /// `data:image/...;base64,` URI. Not part of the version id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    /// The MCP server file this tool was registered from with its siblings (`POST
    /// /v1/servers`), and the revision of that file this version holds. Not part of the
    /// version id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerRef>,
    /// The runtime its calls run on: chosen at registration from the tool's spec or
    /// its requirements. Default, and left out when it is: the standard runtime.
    #[serde(default, skip_serializing_if = "Flavour::is_standard")]
    pub runtime: Flavour,
}

/// A tool's place in the one version history of its server file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ServerRef {
    /// The server: every tool registered from one file shares it.
    pub id: ServerId,
    /// The file's revision: 1 when registered, one more with each `PUT /v1/servers/{id}`.
    pub revision: u32,
}

/// A server's id: `srv_` and 32 lower-case hex digits (16 random bytes).
pub type ServerId = Id<ServerKind>;

/// The kind of [`ServerId`]s.
#[derive(Debug)]
pub enum ServerKind {}

impl IdKind for ServerKind {
    const PREFIX: &'static str = "srv_";
    const HEX_DIGITS: usize = 32;
    const NAME: &'static str = "ServerId";
    type Error = ManifestError;
    fn malformed(text: &str) -> ManifestError {
        ManifestError::ServerId(text.to_owned())
    }
}

impl Manifest {
    /// The content hash of this version; see the [module docs](self). Meaningful for a
    /// manifest that passes [`Manifest::check`] (a non-UTF-8 mount path cannot be hashed).
    pub fn version_id(&self) -> VersionId {
        #[derive(Serialize)]
        struct Canonical<'a> {
            format: &'static str,
            function: &'a str,
            source: &'a str,
            schema: &'a ToolSchema,
            grants: &'a Grants,
            limits: &'a Limits,
            // Left out when empty, so versions without packages keep their ids.
            #[serde(skip_serializing_if = "Lock::is_empty")]
            packages: &'a Lock,
            // Left out when standard, so versions made before runtimes keep their ids.
            #[serde(skip_serializing_if = "Flavour::is_standard")]
            runtime: Flavour,
        }
        let canonical = Canonical {
            format: "warden.manifest.v1",
            function: &self.function,
            source: &self.source,
            schema: &self.schema,
            grants: &self.grants,
            limits: &self.limits,
            packages: &self.packages,
            runtime: self.runtime,
        };
        let mut hasher = Sha256::new();
        // Serializing these types cannot fail: no maps with non-string keys, no custom
        // serializers that error. Should it ever, the error text is hashed instead, which
        // still yields a stable id rather than a panic.
        match serde_json::to_vec(&canonical) {
            Ok(bytes) => hasher.update(&bytes),
            Err(e) => hasher.update(e.to_string().as_bytes()),
        }
        VersionId::from_digest(&hasher.finalize())
    }

    /// Checks what the types alone cannot: the function is a Python identifier and is
    /// the one the schema describes, the source and description fit, tags are distinct
    /// and few, and the grants are consistent ([`Grants::check`]) with UTF-8 host paths.
    ///
    /// It does not check the grants against a tenant's policy: see
    /// `TenantPolicy::admit_grants`.
    pub fn check(&self) -> Result<(), ManifestError> {
        if !is_python_identifier(&self.function) {
            return Err(ManifestError::Function(self.function.clone()));
        }
        if self.schema.name != self.function {
            return Err(ManifestError::SchemaMismatch {
                function: self.function.clone(),
                schema: self.schema.name.clone(),
            });
        }
        if self.source.len() > MAX_SOURCE_BYTES {
            return Err(ManifestError::SourceTooLarge {
                bytes: self.source.len(),
            });
        }
        if let Some(at) = self.source.find('\0') {
            // CPython refuses to compile such a source: every call would fail.
            let line = self.source[..at].matches('\n').count() + 1;
            return Err(ManifestError::NulInSource { line });
        }
        if self.tags.len() > MAX_TAGS {
            return Err(ManifestError::TooManyTags {
                count: self.tags.len(),
            });
        }
        for (i, tag) in self.tags.iter().enumerate() {
            if self.tags[i + 1..].contains(tag) {
                return Err(ManifestError::DuplicateTag(tag.clone()));
            }
        }
        if self
            .description
            .as_ref()
            .is_some_and(|d| d.len() > MAX_DESCRIPTION_BYTES)
        {
            return Err(ManifestError::DescriptionTooLong);
        }
        if let Some(title) = &self.title {
            check_title(title)?;
        }
        if let Some(icon) = &self.icon {
            check_icon(icon)?;
        }
        self.grants.check()?;
        if let Some(m) = self
            .grants
            .mounts
            .iter()
            .find(|m| m.host.to_str().is_none())
        {
            return Err(ManifestError::HostNotUtf8(m.host.display().to_string()));
        }
        Ok(())
    }
}

fn is_python_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// The content hash of a version: 64 lower-case hex digits.
pub type VersionId = Id<VersionKind>;

/// The kind of [`VersionId`]s.
#[derive(Debug)]
pub enum VersionKind {}

impl IdKind for VersionKind {
    const PREFIX: &'static str = "";
    const HEX_DIGITS: usize = 64;
    const NAME: &'static str = "VersionId";
    type Error = ManifestError;
    fn malformed(text: &str) -> ManifestError {
        ManifestError::VersionId(text.to_owned())
    }
}

/// A tool name: 1 to 64 ASCII letters, digits, `_` or `-` (the rule OpenAI and Anthropic
/// apply to function names).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct ToolName(String);

impl ToolName {
    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ToolName {
    type Err = ManifestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = (1..=64).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok {
            Ok(ToolName(s.to_owned()))
        } else {
            Err(ManifestError::Name(s.to_owned()))
        }
    }
}

impl TryFrom<String> for ToolName {
    type Error = ManifestError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<ToolName> for String {
    fn from(n: ToolName) -> String {
        n.0
    }
}

/// A tag: 1 to 64 characters of lower-case ASCII letters, digits, `-`, `_`, `.` or `:`.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct Tag(String);

impl Tag {
    /// The tag as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Tag {
    type Err = ManifestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = (1..=64).contains(&s.len())
            && s.bytes().all(|b| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || matches!(b, b'-' | b'_' | b'.' | b':')
            });
        if ok {
            Ok(Tag(s.to_owned()))
        } else {
            Err(ManifestError::Tag(s.to_owned()))
        }
    }
}

impl TryFrom<String> for Tag {
    type Error = ManifestError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Tag> for String {
    fn from(t: Tag) -> String {
        t.0
    }
}

/// A manifest, or one of its parts, that cannot be a tool version.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ManifestError {
    /// Not a valid tool name.
    #[error("invalid tool name {0:?}: use 1 to 64 ASCII letters, digits, _ or -, e.g. csv_summary")]
    Name(String),
    /// Not a valid tag.
    #[error(
        "invalid tag {0:?}: use 1 to 64 lower-case letters, digits, -, _, . or :, e.g. finance"
    )]
    Tag(String),
    /// The same tag twice.
    #[error("tag {0} is given twice: give it once")]
    DuplicateTag(Tag),
    /// Too many tags.
    #[error("{count} tags given: give at most {MAX_TAGS}")]
    TooManyTags {
        /// How many were given.
        count: usize,
    },
    /// Not a Python identifier.
    #[error("invalid function name {0:?}: give the name of a top-level Python function")]
    Function(String),
    /// The schema describes another function.
    #[error(
        "the schema describes `{schema}` but the manifest calls `{function}`: derive the schema for `{function}`"
    )]
    SchemaMismatch {
        /// The manifest's function.
        function: String,
        /// The function named in the schema.
        schema: String,
    },
    /// The source is too large.
    #[error("the source is {bytes} bytes: keep it under {MAX_SOURCE_BYTES} bytes")]
    SourceTooLarge {
        /// Its size.
        bytes: usize,
    },
    /// The source holds a NUL byte, which Python refuses to compile.
    #[error("the source has a NUL byte on line {line}: Python cannot compile it; remove the byte")]
    NulInSource {
        /// The 1-based line of the first NUL byte.
        line: usize,
    },
    /// The description is too long.
    #[error("the description is too long: keep it under {MAX_DESCRIPTION_BYTES} bytes")]
    DescriptionTooLong,
    /// Not a version id.
    #[error("invalid version id {0:?}: give the 64 hex digits of a version's content hash")]
    VersionId(String),
    /// Not a server id.
    #[error(
        "invalid server id {0:?}: give the id POST /v1/servers answered (srv_ and 32 hex digits)"
    )]
    ServerId(String),
    /// A mount's host path is not UTF-8, so the manifest cannot be stored or hashed.
    #[error("mount source {0} is not valid UTF-8: rename the folder or mount a parent")]
    HostNotUtf8(String),
    /// The grants contradict each other.
    #[error(transparent)]
    Grants(#[from] GrantError),
    /// The title or icon cannot be shown.
    #[error(transparent)]
    Presentation(#[from] PresentationError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest() -> Manifest {
        Manifest {
            name: "add".parse().unwrap(),
            function: "add".into(),
            source: "def add(a: int, b: int) -> int:\n    return a + b\n".into(),
            schema: ToolSchema {
                name: "add".into(),
                description: "Adds.".into(),
                parameters: json!({"type": "object", "properties": {"b": {"type": "number", "minimum": 0.1}, "a": {}}}),
                returns: None,
                injected: Vec::new(),
                resources: Vec::new(),
                prompts: Vec::new(),
                members_only: false,
                annotations: None,
                task: None,
            },
            grants: Grants::default(),
            limits: Limits::default(),
            packages: Default::default(),
            tags: vec![],
            description: None,
            title: None,
            icon: None,
            server: None,
            runtime: Flavour::Standard,
        }
    }

    #[test]
    fn the_runtime_is_part_of_the_version_id_and_left_out_when_standard() {
        let standard = manifest();
        let json = serde_json::to_value(&standard).unwrap();
        assert!(json.get("runtime").is_none(), "{json}");
        let pydantic = Manifest {
            runtime: Flavour::Pydantic,
            ..manifest()
        };
        assert_ne!(standard.version_id(), pydantic.version_id());
        let json = serde_json::to_value(&pydantic).unwrap();
        assert_eq!(json["runtime"], "pydantic");
        let back: Manifest = serde_json::from_value(json).unwrap();
        assert_eq!(back.runtime, Flavour::Pydantic);
    }

    #[test]
    fn labels_do_not_change_the_version_id() {
        let a = manifest();
        let mut b = a.clone();
        b.tags = vec!["math".parse().unwrap()];
        b.description = Some("a note".into());
        b.name = "plus".parse().unwrap();
        assert_eq!(a.version_id(), b.version_id());
    }

    #[test]
    fn content_changes_the_version_id() {
        let a = manifest();
        let mut b = a.clone();
        b.limits.fuel = crate::limits::Fuel(1);
        assert_ne!(a.version_id(), b.version_id());
        let mut c = a.clone();
        c.grants.env.push("A=1".parse().unwrap());
        assert_ne!(a.version_id(), c.version_id());
    }

    #[test]
    fn the_id_survives_a_json_round_trip() {
        let a = manifest();
        let back: Manifest = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(a.version_id(), back.version_id());
        assert_eq!(a.version_id().as_str().len(), 64);
    }

    #[test]
    fn check_refuses_a_schema_for_another_function() {
        let mut m = manifest();
        m.function = "sub".into();
        assert!(matches!(
            m.check(),
            Err(ManifestError::SchemaMismatch { .. })
        ));
        assert!(manifest().check().is_ok());
        assert!("bad name".parse::<ToolName>().is_err());
        assert!("Upper".parse::<Tag>().is_err());
    }
}
