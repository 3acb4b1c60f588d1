//! A call as the guest side runs it: plain data that crosses to a worker process.
//!
//! A [`Job`] is everything of a [`Call`] but the host's side of its outbound requests
//! and of its reports: the secrets' values, the network and the reports' watcher stay
//! with whoever made the job (the server);
//! the guest's environment holds each secret's placeholder only.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::events::Wants;
use crate::grants::folder::resolve_all;
use crate::grants::{GrantError, Grants, ResolvedMount};
use crate::limits::Limits;
use crate::outbound::CallSecrets;
use crate::sandbox::{Call, Outbound, SandboxError, ToolFolder, wasi};

/// One call, ready to run in a fresh instance.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// The folder holding the tool's source, mounted read-only at `/tool`.
    pub tool_dir: PathBuf,
    /// The tool's file name in that folder.
    pub file_name: String,
    /// The function to call.
    pub function: String,
    /// Keyword arguments.
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// Parameters that get `None` when omitted.
    pub none_if_omitted: Vec<String>,
    /// The call's grants, checked: environment, hosts and secrets. Its mounts are as
    /// the tool version names them; the folders the call gets are [`Job::mounts`].
    pub grants: Grants,
    /// The mounts as they were admitted: each folder's resolved path and identity,
    /// opened only if it is still that folder ([`ResolvedMount::open`]).
    pub mounts: Vec<ResolvedMount>,
    /// Limits.
    pub limits: Limits,
    /// The tool's installed packages, if any.
    pub packages: Option<PathBuf>,
    /// The guest's whole environment: the base variables, the granted ones and each
    /// granted secret's placeholder.
    pub env: Vec<(String, String)>,
    /// What the caller wants to hear while the call runs (progress, log records).
    pub wants: Wants,
}

impl Job {
    /// The job of `call`, its mounts resolved now, with no policy; and the secrets its
    /// outbound requests may use (bound to their placeholders), which stay with the
    /// caller.
    pub fn of(call: Call<'_>, outbound: &Outbound) -> Result<(Job, CallSecrets), SandboxError> {
        call.grants.check()?;
        let mounts = resolve_all(&call.grants.mounts)?;
        Job::admitted(call, mounts, outbound)
    }

    /// The job of `call` with its mounts as they were admitted (resolved once, by
    /// [`crate::tenant::TenantPolicy::resolve_grants`]): they must be its grants' mounts,
    /// in order.
    pub fn admitted(
        call: Call<'_>,
        mounts: Vec<ResolvedMount>,
        outbound: &Outbound,
    ) -> Result<(Job, CallSecrets), SandboxError> {
        let grants = call.grants;
        grants.check()?;
        let matches = mounts.len() == grants.mounts.len()
            && mounts
                .iter()
                .zip(&grants.mounts)
                .all(|(r, m)| r.guest == m.guest && r.access == m.access);
        if !matches {
            return Err(GrantError::AdmittedMismatch.into());
        }
        let bound = CallSecrets::bind(grants, &outbound.secrets)?;
        let mut env = wasi::environment(grants);
        // The guest sees each secret's placeholder, never its value.
        for (name, placeholder) in bound.environment() {
            env.retain(|(key, _)| key != name);
            env.push((name.to_owned(), placeholder.to_owned()));
        }
        let job = Job {
            tool_dir: call.tool.host_dir().to_owned(),
            file_name: call.tool.file_name().to_owned(),
            function: call.function.to_owned(),
            arguments: call.arguments.clone(),
            none_if_omitted: call.none_if_omitted.to_vec(),
            grants: grants.clone(),
            mounts,
            limits: *call.limits,
            packages: call.packages.map(ToOwned::to_owned),
            env,
            wants: outbound
                .events
                .as_ref()
                .map(|e| e.wants())
                .unwrap_or_default(),
        };
        Ok((job, bound))
    }

    /// The tool's folder, borrowed.
    pub fn tool(&self) -> ToolFolder {
        ToolFolder::existing(self.tool_dir.clone(), &self.file_name)
    }
}
