//! `warden tenant create|list|policy|set-policy|revoke-key|rotate-key|reviewer-key`: tenant
//! administration on the registry database (`$WARDEN_HOME/warden.db`, or `--db`)
//! directly, for the operator.

use std::path::Path;

use anyhow::Result;
use clap::{Args, Subcommand};

use warden::grants::HostPattern;
use warden::limits::{self, ByteSize, Fuel, Limits};
use warden::registry::{Registry, Tenant};
use warden::tenant::{AllowedFolder, TenantId, TenantPolicy};

use super::args::DbArgs;
use super::{ExitCode, deadline, usage};

/// `warden tenant [--db PATH|URL] COMMAND`.
#[derive(Debug, Args)]
pub struct TenantArgs {
    /// Where the registry is.
    #[command(flatten)]
    pub db: DbArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: TenantCommand,
}

/// `warden tenant`.
#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant and print its API key (shown only this once).
    Create(CreateArgs),
    /// List the tenants.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a tenant's policy as JSON (the body `PUT /v1/admin/tenants/{id}/policy`
    /// takes).
    Policy {
        /// The tenant's id (tnt_...).
        id: String,
    },
    /// Replace a tenant's whole policy: flags left out take their defaults, as in
    /// `create`. Audited with the old and the new policy; applies from the next call.
    SetPolicy(SetPolicyArgs),
    /// Revoke a tenant's API key; its tools and audit trail stay.
    RevokeKey {
        /// The tenant's id (tnt_...).
        id: String,
    },
    /// Give a tenant a new API key (printed once); the old one stops working.
    RotateKey {
        /// The tenant's id (tnt_...).
        id: String,
    },
    /// A tenant's reviewer keys: they read its tools and audit trail and approve or
    /// reject held versions, but cannot register, change or run tools.
    #[command(subcommand)]
    ReviewerKey(ReviewerKeyCommand),
}

/// `warden tenant reviewer-key`.
#[derive(Debug, Subcommand)]
pub enum ReviewerKeyCommand {
    /// Mint a reviewer key for a tenant and print it (shown only this once).
    Create {
        /// The tenant's id (tnt_...).
        id: String,
        /// Print the key as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a tenant's reviewer keys (ids and hints, never the keys).
    List {
        /// The tenant's id (tnt_...).
        id: String,
    },
    /// Revoke a reviewer key: it stops working at once.
    Revoke {
        /// The tenant's id (tnt_...).
        id: String,
        /// The key's id (rvk_...), as `create` and `list` print it.
        key: String,
    },
}

/// `warden tenant create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// A name for people.
    pub name: String,
    /// The tenant's policy.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Print the tenant and key as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `warden tenant set-policy`.
#[derive(Debug, Args)]
pub struct SetPolicyArgs {
    /// The tenant's id (tnt_...).
    pub id: String,
    /// The whole new policy.
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// A tenant's policy as flags, each with its default.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Calls the tenant may have running at once.
    #[arg(long, value_name = "N", default_value_t = warden::tenant::DEFAULT_MAX_CONCURRENT_CALLS)]
    pub max_concurrent_calls: u32,
    /// Calls the tenant may start per minute.
    #[arg(long, value_name = "N", default_value_t = warden::tenant::DEFAULT_CALLS_PER_MINUTE)]
    pub calls_per_minute: u32,
    /// A host folder under which the tenant's tools may mount folders: `DIR:ro` for
    /// read-only mounts only, `DIR` or `DIR:rw` for either. Repeatable.
    #[arg(long, value_name = "DIR[:ro|:rw]")]
    pub allow_folder: Vec<AllowedFolder>,
    /// An outbound host pattern the tenant's tools may be granted (they may ask for it
    /// or anything narrower): `api.example.com`, `*.example.com:443`, `*`. Repeatable;
    /// without it no tool of the tenant reaches any host.
    #[arg(long, value_name = "PATTERN")]
    pub allow_host: Vec<HostPattern>,
    /// Ceiling on a call's fuel (e.g. 2G).
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_FUEL)]
    pub max_fuel: Fuel,
    /// Ceiling on a call's memory (e.g. 256MiB).
    #[arg(long, value_name = "SIZE", default_value_t = limits::DEFAULT_MEMORY, value_parser = limits::parse_memory)]
    pub max_memory: ByteSize,
    /// Ceiling on a call's deadline (e.g. 10s).
    #[arg(long, value_name = "DURATION", default_value_t = limits::DEFAULT_DEADLINE.into(), value_parser = deadline)]
    pub max_deadline: humantime::Duration,
    /// Ceiling on the binary parts of a call's rich result (images, audio, files), in
    /// all (e.g. 8MiB).
    #[arg(long, value_name = "SIZE", default_value_t = limits::DEFAULT_RETURN_BYTES, value_parser = limits::parse_size)]
    pub max_return_bytes: ByteSize,
    /// Ceiling on a call's scratch folder (/tmp) (e.g. 64MiB).
    #[arg(long, value_name = "SIZE", default_value_t = limits::DEFAULT_SCRATCH, value_parser = limits::parse_size)]
    pub max_scratch_bytes: ByteSize,
    /// Refuse, for every tool of the tenant, a result that does not fit its return
    /// annotation (tool_error, ResultMismatch) instead of delivering it with a warning.
    #[arg(long)]
    pub strict_results: bool,
    /// Hold every new tool version that widens what the tool can do until a reviewer
    /// key of the tenant approves it (`warden tenant reviewer-key create`); calls run
    /// the last approved version meanwhile.
    #[arg(long)]
    pub review_widening: bool,
    /// Runs (`POST /v1/tools/{id}/runs`) the tenant may have queued at once, across
    /// nodes; one more is refused with 429 `queue_full`.
    #[arg(long, value_name = "N", default_value_t = warden::tenant::DEFAULT_MAX_QUEUED_RUNS)]
    pub max_queued_runs: u32,
    /// How long an ended run's result is kept (e.g. 24h, 7d); its audit events stay.
    #[arg(long, value_name = "DURATION", default_value_t = warden::tenant::DEFAULT_RUN_RETENTION.into())]
    pub run_retention: humantime::Duration,
}

impl PolicyArgs {
    fn policy(&self) -> Result<TenantPolicy> {
        let policy = TenantPolicy {
            max_concurrent_calls: self.max_concurrent_calls,
            calls_per_minute: self.calls_per_minute,
            allowed_folders: self.allow_folder.clone(),
            allowed_hosts: self.allow_host.clone(),
            ceilings: Limits {
                fuel: self.max_fuel,
                memory: self.max_memory,
                deadline: self.max_deadline.into(),
                return_bytes: self.max_return_bytes,
                scratch: self.max_scratch_bytes,
                strict_results: self.strict_results,
                ..Limits::default()
            },
            review_widening: self.review_widening,
            max_queued_runs: self.max_queued_runs,
            run_retention: self.run_retention.into(),
        };
        policy.check().map_err(|e| usage(e.to_string()))?;
        Ok(policy)
    }
}

pub(super) fn tenant(home: &Path, db: &DbArgs, cmd: TenantCommand) -> Result<ExitCode> {
    let (registry, _) = db.open(home)?;
    match cmd {
        TenantCommand::Create(args) => {
            let (tenant, key) = registry.create_tenant(&args.name, &args.policy.policy()?)?;
            if args.json {
                let out = serde_json::json!({ "tenant": tenant, "api_key": key.expose() });
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!("created tenant {} ({})", tenant.id, tenant.name);
                println!("api key (shown once): {}", key.expose());
            }
        }
        TenantCommand::List { json } => {
            let tenants = registry.tenants()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&tenants)?);
            } else {
                for t in &tenants {
                    print_tenant(t);
                }
            }
        }
        TenantCommand::Policy { id } => {
            let tenant = registry.tenant(&tenant_id(&id)?)?;
            println!("{}", serde_json::to_string_pretty(&tenant.policy)?);
        }
        TenantCommand::SetPolicy(args) => {
            let id = tenant_id(&args.id)?;
            let policy = args.policy.policy()?;
            let before = registry.tenant(&id)?.policy;
            registry.set_policy(&id, &policy)?;
            if before == policy {
                println!("the policy of {id} is unchanged");
            } else {
                println!("changed the policy of {id}");
                println!("was: {}", serde_json::to_string(&before)?);
                println!("now: {}", serde_json::to_string(&policy)?);
            }
        }
        TenantCommand::RevokeKey { id } => {
            let id = tenant_id(&id)?;
            registry.revoke_key(&id)?;
            println!("revoked the api key of {id}");
        }
        TenantCommand::RotateKey { id } => {
            let id = tenant_id(&id)?;
            let key = registry.rotate_key(&id)?;
            println!("new api key of {id} (shown once): {}", key.expose());
        }
        TenantCommand::ReviewerKey(cmd) => reviewer_key(&registry, cmd)?,
    }
    Ok(ExitCode::Ok)
}

fn reviewer_key(registry: &Registry, cmd: ReviewerKeyCommand) -> Result<()> {
    match cmd {
        ReviewerKeyCommand::Create { id, json } => {
            let id = tenant_id(&id)?;
            let (info, key) = registry.create_reviewer_key(&id)?;
            if json {
                let out = serde_json::json!({ "reviewer_key": info, "api_key": key.expose() });
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!("created reviewer key {} for {id}", info.id);
                println!("reviewer key (shown once): {}", key.expose());
            }
        }
        ReviewerKeyCommand::List { id } => {
            for k in registry.reviewer_keys(&tenant_id(&id)?)? {
                let state = if k.revoked_at_ms.is_some() {
                    "revoked"
                } else {
                    "active"
                };
                println!("{}  {}  {state}", k.id, k.key_hint);
            }
        }
        ReviewerKeyCommand::Revoke { id, key } => {
            let id = tenant_id(&id)?;
            let key = key
                .parse()
                .map_err(|e: warden::registry::RegistryError| usage(e.to_string()))?;
            registry.revoke_reviewer_key(&id, &key)?;
            println!("revoked reviewer key {key} of {id}");
        }
    }
    Ok(())
}

pub(super) fn tenant_id(s: &str) -> Result<TenantId> {
    s.parse()
        .map_err(|e: warden::tenant::TenantError| usage(e.to_string()))
}

fn print_tenant(t: &Tenant) {
    println!(
        "{}  {}  key {}  {} concurrent, {}/min",
        t.id,
        t.name,
        t.key_hint.as_deref().unwrap_or("revoked"),
        t.policy.max_concurrent_calls,
        t.policy.calls_per_minute
    );
}
