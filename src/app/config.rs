//! An [`App`](super::App)'s settings, given in one step to [`App::new`](super::App::new).

use std::path::PathBuf;

use super::SecretKey;
use crate::outbound::PrivateNetwork;
use crate::packages::Packages;

/// Settings of an [`App`](super::App).
#[derive(Clone)]
pub struct AppConfig {
    /// Where tool sources are written for the sandbox (`$WARDEN_HOME/tools`).
    pub tools_dir: PathBuf,
    /// The operator key for tenant administration; `None` disables it.
    pub operator_key: Option<String>,
    /// The package store tools' requirements are resolved and installed with.
    pub packages: Packages,
    /// Whether tool versions get warm states ([`App::set_warm_start`](super::App::set_warm_start)).
    pub warm_start: bool,
    /// Whether tools may reach private networks ([`App::set_private_network`](super::App::set_private_network)).
    pub private_network: PrivateNetwork,
    /// The key tenants' secrets are sealed with; `None`: secrets cannot be stored or
    /// used until [`App::set_secret_key`](super::App::set_secret_key).
    pub secret_key: Option<SecretKey>,
    /// The key audit exports are signed with; `None`: until [`App::set_audit_key`](super::App::set_audit_key).
    pub audit_key: Option<crate::audit::AuditKey>,
}

impl AppConfig {
    /// Settings writing tool sources to `tools_dir` and installing packages with
    /// `packages`; everything else off or absent: no operator key, cold starts, no
    /// private network, no keys.
    pub fn new(tools_dir: PathBuf, packages: Packages) -> AppConfig {
        AppConfig {
            tools_dir,
            operator_key: None,
            packages,
            warm_start: false,
            private_network: PrivateNetwork::Refused,
            secret_key: None,
            audit_key: None,
        }
    }
}

impl std::fmt::Debug for AppConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppConfig")
            .field("tools_dir", &self.tools_dir)
            .field("operator_key", &self.operator_key.as_ref().map(|_| "…"))
            .field("packages", &self.packages)
            .field("warm_start", &self.warm_start)
            .field("private_network", &self.private_network)
            .field("secret_key", &self.secret_key.as_ref().map(|_| "…"))
            .field("audit_key", &self.audit_key.as_ref().map(|_| "…"))
            .finish()
    }
}
