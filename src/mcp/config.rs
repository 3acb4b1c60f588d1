//! `warden.toml` in a tools folder: per-tool grants and limits for `warden mcp`.
//!
//! ```toml
//! [tools.summarize]
//! mounts = ["./reports:/data:ro"]       # HOST:GUEST[:ro|rw]; a relative HOST is the folder's
//! env = ["LANG=C"]
//! hosts = ["api.example.com"]
//! secrets = ["API_KEY@api.example.com"]  # the value: Warden's own variable API_KEY
//! limits = { fuel = "5G", timeout = "30s", memory = "512MiB" }
//! idempotent = true
//! title = "Summarize a report"         # shown by MCP clients instead of the name
//! icon = "https://example.com/summarize.png"   # or a data:image/png;base64,... URI
//! ```
//!
//! A `[tools.NAME]` table (NAME is the tool's function) replaces the command line's
//! grants for that tool (a key left out grants nothing) and overrides the limits it
//! names. Every value is parsed here, once, into the types the sandbox takes; an unknown
//! key or a malformed value is an error naming the file and the key.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use crate::grants::{EnvVar, Grants, HostPattern, Mount, SecretGrant};
use crate::limits::{self, ByteSize, CharLimit, FileCount, Fuel, LimitError, Limits, RequestCount};

/// The name of the configuration file in a tools folder.
pub const CONFIG_FILE: &str = "warden.toml";

/// A `warden.toml` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("cannot read {}: {source}; check its permissions", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML, has an unknown key or a malformed value.
    #[error(
        "{} is invalid: {message}\nfix the file (`warden mcp --help` describes its format)",
        path.display()
    )]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The parser's explanation, naming the key and its line.
        message: String,
    },
}

/// A whole `warden.toml`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FolderConfig {
    /// Per-tool settings, by function name.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolConfig>,
}

/// One `[tools.NAME]` table.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// Host folders, `HOST:GUEST[:ro|rw]`; a relative HOST is relative to the folder
    /// holding `warden.toml`.
    #[serde(default, deserialize_with = "spelled_list")]
    pub mounts: Vec<Mount>,
    /// Environment variables, `KEY=VALUE`.
    #[serde(default, deserialize_with = "spelled_list")]
    pub env: Vec<EnvVar>,
    /// Outbound host patterns, as `--allow-host` takes them.
    #[serde(default)]
    pub hosts: Vec<HostPattern>,
    /// Secrets, `NAME@HOST[,HOST...]`, as `--secret` takes them.
    #[serde(default)]
    pub secrets: Vec<SecretGrant>,
    /// Limits that replace the command line's.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Whether calling the tool twice with the same arguments has no further effect
    /// (MCP's `idempotentHint`). Default: false.
    #[serde(default)]
    pub idempotent: bool,
    /// A name for people, shown by MCP clients instead of the tool's name.
    #[serde(default)]
    pub title: Option<String>,
    /// An icon's `https:` URL or `data:image/...;base64,` URI, shown beside the tool.
    #[serde(default)]
    pub icon: Option<String>,
}

impl ToolConfig {
    /// Checks the title and icon as a registration would.
    pub fn check_presentation(&self) -> Result<(), crate::manifest::PresentationError> {
        if let Some(title) = &self.title {
            crate::manifest::check_title(title)?;
        }
        if let Some(icon) = &self.icon {
            crate::manifest::check_icon(icon)?;
        }
        Ok(())
    }

    /// The table's grants, relative mount folders resolved against `dir`.
    pub fn grants(&self, dir: &Path) -> Grants {
        let mounts = self
            .mounts
            .iter()
            .map(|m| Mount {
                host: dir.join(&m.host),
                ..m.clone()
            })
            .collect();
        Grants {
            mounts,
            env: self.env.clone(),
            hosts: self.hosts.clone(),
            secrets: self.secrets.clone(),
        }
    }
}

/// Limits written in `warden.toml`, each named like the `warden mcp` flag that sets it
/// (`stdout_limit` for `--stdout-limit`), as text (`"5G"`, `"30s"`, `"512MiB"`) or a
/// bare number. Each one left out is the command line's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// CPU budget in fuel units.
    #[serde(default, deserialize_with = "fuel")]
    pub fuel: Option<Fuel>,
    /// Wall-clock deadline.
    #[serde(default, deserialize_with = "deadline")]
    pub timeout: Option<Duration>,
    /// Memory cap.
    #[serde(default, deserialize_with = "memory")]
    pub memory: Option<ByteSize>,
    /// Cap on the tool's stdout.
    #[serde(default, deserialize_with = "size")]
    pub stdout_limit: Option<ByteSize>,
    /// Cap on the tool's stderr.
    #[serde(default, deserialize_with = "size")]
    pub stderr_limit: Option<ByteSize>,
    /// Characters of the serialized result kept.
    #[serde(default, deserialize_with = "chars")]
    pub return_char_limit: Option<CharLimit>,
    /// Files open at once.
    #[serde(default, deserialize_with = "open_files")]
    pub open_files: Option<FileCount>,
    /// Bytes written to read-write mounts per call.
    #[serde(default, deserialize_with = "size")]
    pub disk_write: Option<ByteSize>,
    /// Files and folders created per call.
    #[serde(default, deserialize_with = "count")]
    pub files_created: Option<FileCount>,
    /// Outbound HTTP requests per call.
    #[serde(default, deserialize_with = "requests")]
    pub http_requests: Option<RequestCount>,
    /// Bytes of request bodies per call.
    #[serde(default, deserialize_with = "size")]
    pub http_request_bytes: Option<ByteSize>,
    /// Bytes of response bodies per call.
    #[serde(default, deserialize_with = "size")]
    pub http_response_bytes: Option<ByteSize>,
    /// Bytes of a rich result's binary parts per call.
    #[serde(default, deserialize_with = "size")]
    pub return_bytes: Option<ByteSize>,
    /// Bytes the call's scratch folder (`/tmp`) may take.
    #[serde(default, deserialize_with = "size")]
    pub scratch_bytes: Option<ByteSize>,
    /// Whether a result that does not fit the return annotation is refused.
    #[serde(default)]
    pub strict_results: Option<bool>,
}

impl LimitsConfig {
    /// `base` with the limits given here in place of its own, checked against each
    /// limit's minimum.
    pub fn over(&self, base: &Limits) -> Result<Limits, LimitError> {
        let limits = Limits {
            fuel: self.fuel.unwrap_or(base.fuel),
            deadline: self.timeout.unwrap_or(base.deadline),
            memory: self.memory.unwrap_or(base.memory),
            stdout: self.stdout_limit.unwrap_or(base.stdout),
            stderr: self.stderr_limit.unwrap_or(base.stderr),
            return_chars: self.return_char_limit.unwrap_or(base.return_chars),
            open_files: self.open_files.unwrap_or(base.open_files),
            disk_write: self.disk_write.unwrap_or(base.disk_write),
            files_created: self.files_created.unwrap_or(base.files_created),
            http_requests: self.http_requests.unwrap_or(base.http_requests),
            http_request_bytes: self.http_request_bytes.unwrap_or(base.http_request_bytes),
            http_response_bytes: self.http_response_bytes.unwrap_or(base.http_response_bytes),
            return_bytes: self.return_bytes.unwrap_or(base.return_bytes),
            scratch: self.scratch_bytes.unwrap_or(base.scratch),
            strict_results: self.strict_results.unwrap_or(base.strict_results),
        };
        limits.check()?;
        Ok(limits)
    }
}

/// Reads `path`; a missing file is an empty configuration.
pub fn read(path: &Path) -> Result<FolderConfig, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FolderConfig::default()),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    parse(&text).map_err(|e| ConfigError::Invalid {
        path: path.to_owned(),
        message: e.to_string().trim_end().to_owned(),
    })
}

/// Parses the text of a `warden.toml`.
pub fn parse(text: &str) -> Result<FolderConfig, toml::de::Error> {
    toml::from_str(text)
}

/// A list of values written as text, each parsed by its type's `FromStr`.
fn spelled_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| s.parse().map_err(D::Error::custom))
        .collect()
}

/// One limit, written as text or a bare number, parsed by `parse`.
fn setting<'de, D, T, E>(d: D, parse: impl Fn(&str) -> Result<T, E>) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    E: Display,
{
    let text = match toml::Value::deserialize(d)? {
        toml::Value::String(s) => s,
        toml::Value::Integer(n) => n.to_string(),
        other => {
            return Err(D::Error::custom(format!(
                "expected text such as \"30s\" or \"512MiB\", or a whole number, not {}",
                other.type_str()
            )));
        }
    };
    parse(&text).map(Some).map_err(D::Error::custom)
}

fn fuel<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Fuel>, D::Error> {
    setting(d, Fuel::from_str)
}

fn deadline<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    setting(d, limits::parse_deadline)
}

fn memory<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ByteSize>, D::Error> {
    setting(d, limits::parse_memory)
}

fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ByteSize>, D::Error> {
    setting(d, limits::parse_size)
}

fn chars<'de, D: Deserializer<'de>>(d: D) -> Result<Option<CharLimit>, D::Error> {
    setting(d, CharLimit::from_str)
}

fn open_files<'de, D: Deserializer<'de>>(d: D) -> Result<Option<FileCount>, D::Error> {
    setting(d, limits::parse_open_files)
}

fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<FileCount>, D::Error> {
    setting(d, FileCount::from_str)
}

fn requests<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RequestCount>, D::Error> {
    setting(d, RequestCount::from_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::Access;

    #[test]
    fn a_table_gives_typed_grants_and_limits() {
        let config = parse(
            r#"
            [tools.summarize]
            mounts = ["reports:/data", "/tmp/out:/out:rw"]
            env = ["LANG=C"]
            hosts = ["api.example.com"]
            secrets = ["API_KEY@api.example.com"]
            limits = { fuel = "5G", timeout = "30s", memory = "512MiB", http_requests = 3 }
            idempotent = true
            title = "Summarize"
            icon = "https://example.com/s.png"
            "#,
        )
        .unwrap();
        let tool = &config.tools["summarize"];
        assert_eq!(tool.check_presentation(), Ok(()));
        assert_eq!(tool.title.as_deref(), Some("Summarize"));
        let bad = ToolConfig {
            icon: Some("http://example.com/s.png".into()),
            ..tool.clone()
        };
        assert!(bad.check_presentation().is_err());
        let grants = tool.grants(Path::new("/srv/tools"));
        assert_eq!(grants.mounts[0].host, Path::new("/srv/tools/reports"));
        assert_eq!(grants.mounts[0].access, Access::Ro);
        assert_eq!(grants.mounts[1].host, Path::new("/tmp/out"));
        assert_eq!(grants.mounts[1].access, Access::Rw);
        assert_eq!(grants.env[0].key, "LANG");
        assert_eq!(grants.hosts.len(), 1);
        assert_eq!(grants.secrets[0].name, "API_KEY");
        assert!(tool.idempotent);
        let limits = tool.limits.over(&Limits::default()).unwrap();
        assert_eq!(limits.fuel, Fuel(5_000_000_000));
        assert_eq!(limits.deadline, Duration::from_secs(30));
        assert_eq!(limits.memory, ByteSize::mib(512));
        assert_eq!(limits.http_requests, RequestCount(3));
        assert_eq!(limits.stdout, Limits::default().stdout);
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        for (text, key) in [
            ("[tools.a]\nmount = [\"a:/b\"]\n", "mount"),
            ("[tool.a]\n", "tool"),
            ("[tools.a]\nlimits = { deadline = \"3s\" }\n", "deadline"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(&format!("unknown field `{key}`")), "{e}");
        }
    }

    #[test]
    fn malformed_values_say_what_is_expected() {
        let e = parse("[tools.a]\nmounts = [\"nocolon\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("HOST:GUEST"), "{e}");
        let e = parse("[tools.a]\nlimits = { timeout = \"soon\" }\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid duration"), "{e}");
        let e = parse("[tools.a]\nlimits = { memory = \"1MiB\" }\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("below the minimum"), "{e}");
        let e = parse("[tools.a]\nlimits = { fuel = 1.5 }\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not float"), "{e}");
    }

    #[test]
    fn a_missing_file_is_an_empty_configuration() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read(&dir.path().join(CONFIG_FILE)).unwrap(),
            FolderConfig::default()
        );
        std::fs::write(dir.path().join(CONFIG_FILE), "[tools.a]\nbogus = 1\n").unwrap();
        let e = read(&dir.path().join(CONFIG_FILE)).unwrap_err().to_string();
        assert!(e.contains("warden.toml is invalid"), "{e}");
        assert!(e.contains("bogus"), "{e}");
    }
}
