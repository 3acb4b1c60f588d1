//! The limits and grants of a call as flags, for `warden run`, `warden validate` and
//! `warden audit capabilities`.

use anyhow::Result;
use clap::Args;

use warden::grants::{EnvVar, Grants, HostPattern, Mount, SecretGrant, SecretValue};
use warden::limits::{self, ByteSize, CharLimit, FileCount, Fuel, Limits, RequestCount};
use warden::outbound::PrivateNetwork;
use warden::sandbox::Outbound;

use crate::cli::{deadline, usage};

/// The limits and grants of a call, as flags: what `warden run` gives a tool, and what
/// `warden validate` and `warden audit capabilities` review.
#[derive(Debug, Args)]
pub struct GrantArgs {
    /// CPU budget in fuel units (e.g. 2000000000, 2_000_000_000 or 2G).
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_FUEL)]
    pub fuel: Fuel,

    /// Memory cap (e.g. 256MiB).
    #[arg(long, value_name = "SIZE", default_value_t = limits::DEFAULT_MEMORY, value_parser = limits::parse_memory)]
    pub memory: ByteSize,

    /// Wall-clock deadline (e.g. 10s, 500ms).
    #[arg(long, value_name = "DURATION", default_value_t = limits::DEFAULT_DEADLINE.into(), value_parser = deadline)]
    pub timeout: humantime::Duration,

    /// Cap on the tool's stdout (e.g. 1MiB); 0: the tool may print nothing.
    #[arg(long, value_name = "SIZE", default_value_t = limits::DEFAULT_STDOUT, value_parser = limits::parse_size)]
    pub stdout_limit: ByteSize,

    /// Cap on the tool's stderr (e.g. 1MiB); 0: the tool may print nothing there.
    #[arg(long, value_name = "SIZE", default_value_t = limits::DEFAULT_STDERR, value_parser = limits::parse_size)]
    pub stderr_limit: ByteSize,

    /// Characters of the serialized result kept; longer results are truncated.
    #[arg(long, value_name = "CHARS", default_value_t = limits::DEFAULT_RETURN_CHARS)]
    pub return_char_limit: CharLimit,

    /// Files the guest may hold open at once.
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_OPEN_FILES, value_parser = limits::parse_open_files)]
    pub open_files: FileCount,

    /// Bytes the guest may write to read-write mounts in one call; 0: none.
    #[arg(long, value_name = "SIZE", default_value_t = limits::DEFAULT_DISK_WRITE, value_parser = limits::parse_size)]
    pub disk_write: ByteSize,

    /// Files and folders the guest may create in one call; 0: none.
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_FILES_CREATED)]
    pub files_created: FileCount,

    /// Mount a host folder: HOST:GUEST (read-only), HOST:GUEST:ro or HOST:GUEST:rw.
    /// Repeatable.
    #[arg(long, short, value_name = "HOST:GUEST[:rw]")]
    pub mount: Vec<Mount>,

    /// Give the guest an environment variable. Repeatable. Nothing else of the host's
    /// environment reaches the guest.
    #[arg(long, short, value_name = "KEY=VALUE")]
    pub env: Vec<EnvVar>,

    /// Let the tool send HTTP requests, through the host, to a host pattern:
    /// `api.example.com`, `*.example.com:443`, `'GET,HEAD https://api.example.com'`.
    /// Repeatable. Without it the tool reaches no host.
    #[arg(long = "allow-host", value_name = "PATTERN")]
    pub allow_host: Vec<HostPattern>,

    /// Let the tool use a secret without seeing it: NAME@HOST[,HOST...]. The value is
    /// taken from Warden's own environment variable NAME; the guest's variable NAME
    /// holds a placeholder that the host replaces with the value only in requests to
    /// those hosts (which must be allowed with --allow-host). Repeatable.
    #[arg(long, value_name = "NAME@HOSTS")]
    pub secret: Vec<SecretGrant>,

    /// Let requests reach loopback, private and link-local addresses (refused by
    /// default, so a granted name that resolves to 127.0.0.1 or a cloud metadata
    /// address is refused).
    #[arg(long)]
    pub allow_private_network: bool,

    /// Outbound HTTP requests the call may make; 0: none.
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_HTTP_REQUESTS)]
    pub http_requests: RequestCount,

    /// Bytes of request bodies the call may send in all (e.g. 8MiB).
    #[arg(long, value_name = "SIZE", default_value_t = limits::DEFAULT_HTTP_REQUEST_BYTES, value_parser = limits::parse_size)]
    pub http_request_bytes: ByteSize,

    /// Bytes of response bodies the call may receive in all (e.g. 16MiB).
    #[arg(long, value_name = "SIZE", default_value_t = limits::DEFAULT_HTTP_RESPONSE_BYTES, value_parser = limits::parse_size)]
    pub http_response_bytes: ByteSize,

    /// Bytes the binary parts of a rich result (images, audio, files) may hold in all,
    /// decoded (e.g. 8MiB); a larger result ends the call tool_error (ResultTooLarge).
    #[arg(long, value_name = "SIZE", default_value_t = limits::DEFAULT_RETURN_BYTES, value_parser = limits::parse_size)]
    pub return_bytes: ByteSize,

    /// Bytes the call's private scratch folder (/tmp, empty at the start, emptied at the
    /// end) may take (e.g. 64MiB); a write past it fails in the tool with ENOSPC.
    #[arg(long, value_name = "SIZE", default_value_t = limits::DEFAULT_SCRATCH, value_parser = limits::parse_size)]
    pub scratch_bytes: ByteSize,

    /// Refuse a result that does not fit the function's return annotation (tool_error,
    /// ResultMismatch) instead of delivering it with a result_mismatch warning.
    #[arg(long)]
    pub strict_results: bool,
}

impl GrantArgs {
    /// The limits the flags give.
    pub fn limits(&self) -> Limits {
        Limits {
            fuel: self.fuel,
            deadline: self.timeout.into(),
            memory: self.memory,
            stdout: self.stdout_limit,
            stderr: self.stderr_limit,
            return_chars: self.return_char_limit,
            open_files: self.open_files,
            disk_write: self.disk_write,
            files_created: self.files_created,
            http_requests: self.http_requests,
            http_request_bytes: self.http_request_bytes,
            http_response_bytes: self.http_response_bytes,
            return_bytes: self.return_bytes,
            scratch: self.scratch_bytes,
            strict_results: self.strict_results,
        }
    }

    /// The grants the flags give, checked together, each mounted folder an existing
    /// folder: a usage error otherwise.
    pub fn grants(&self) -> Result<Grants> {
        let grants = Grants {
            mounts: self.mount.clone(),
            env: self.env.clone(),
            hosts: self.allow_host.clone(),
            secrets: self.secret.clone(),
        };
        grants.check().map_err(|e| usage(e.to_string()))?;
        for m in &grants.mounts {
            warden::grants::canonical_host_folder(&m.host).map_err(|e| usage(e.to_string()))?;
        }
        Ok(grants)
    }

    /// What the host holds for the outbound requests of calls with `grants`: each
    /// granted secret's value, from Warden's own environment, and the private-network
    /// setting.
    pub fn outbound(&self, grants: &Grants) -> Result<Outbound> {
        Ok(Outbound {
            secrets: secret_values(grants)?,
            private_network: self.private_network(),
            ..Outbound::default()
        })
    }

    /// Whether requests may reach private networks.
    pub fn private_network(&self) -> PrivateNetwork {
        if self.allow_private_network {
            PrivateNetwork::Allowed
        } else {
            PrivateNetwork::Refused
        }
    }
}

/// Each granted secret's value, from Warden's own environment.
fn secret_values(grants: &Grants) -> Result<std::collections::BTreeMap<String, SecretValue>> {
    let mut values = std::collections::BTreeMap::new();
    for secret in &grants.secrets {
        let value = std::env::var(&secret.name).map_err(|_| {
            usage(format!(
                "--secret {secret}: Warden's environment has no variable {} (or it is not \
                 UTF-8): export it before running, e.g. {}=... warden run ...",
                secret.name, secret.name
            ))
        })?;
        let value =
            SecretValue::new(value).map_err(|e| usage(format!("--secret {}: {e}", secret.name)))?;
        values.insert(secret.name.clone(), value);
    }
    Ok(values)
}
