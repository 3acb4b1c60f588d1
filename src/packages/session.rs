//! pip, confined: every pip run starts from a [`PipSession`], which gives it a fresh
//! temporary home and a cleared environment and starts it through Warden's own binary
//! (`warden __confined-exec`, [`crate::confine`]) so that the kernel holds it to what it
//! needs.
//!
//! # What pip can reach
//!
//! - **Read**: the system's programs and libraries (`/usr`, `/lib`, `/lib64`, `/bin`),
//!   the files under `/etc` that pip, TLS and name resolution read ([`ETC`]), the Python
//!   installation it runs from (`sys.prefix` and `sys.base_prefix` of the `python3` on
//!   `PATH`, and pip's own folder), the `--find-links` folders (from the command line
//!   and pip's configuration), the certificate files the environment names, and what the
//!   caller adds (its request files).
//! - **Write**: its temporary home (`HOME`, `TMPDIR`, `XDG_*`, `PIP_CACHE_DIR`, removed
//!   when the session ends) and the folder the caller names (where wheels go).
//! - **Network**: TCP connections to the ports of the configured index, extra-index,
//!   find-links and proxy URLs only (443 for the default index; 80 only if one is
//!   `http://`), no listening socket, no Unix socket. UDP stays open (DNS needs it).
//! - **Not**: Warden's home (the database, keys, other tools' sites and locks), the
//!   user's home, any other file; exec of anything written; ptrace or signals to other
//!   processes.
//!
//! pip's configuration keeps working: the environment's `PIP_*` variables pass through,
//! `/etc/pip.conf` and `/etc/xdg/pip/pip.conf` are readable, and a user configuration
//! file (`~/.config/pip/pip.conf`, `~/.pip/pip.conf`), which the temporary home would
//! hide, is passed as `PIP_CONFIG_FILE`.
//!
//! The one unconfined step is a probe of the host's `python3` (`python3 -c` printing
//! `sys.prefix` and where pip is), which runs no pip code.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{PackagesError, Pip};
use crate::confine::{self, Confinement, Profile};

/// What pip, OpenSSL and glibc read under `/etc`: pip's configuration, the trust store,
/// name resolution, the dynamic linker's cache, the time zone, MIME types (Python's
/// `mimetypes` reads every one that exists) and the release files pip's user agent
/// quotes. Missing ones are skipped; nothing else under `/etc` is readable.
pub const ETC: &[&str] = &[
    "/etc/pip.conf",
    "/etc/xdg/pip",
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/httpd/mime.types",
    "/etc/httpd/conf/mime.types",
    "/etc/apache/mime.types",
    "/etc/apache2/mime.types",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/debian_version",
    "/etc/alpine-release",
    "/etc/redhat-release",
    "/etc/system-release",
];

/// The system's programs and libraries.
const SYSTEM: &[&str] = &["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"];

/// Environment variables passed to pip besides `PIP_*`: the search path, the locale,
/// trust stores and proxies (which decide how pip reaches the index).
const PASSED: &[&str] = &[
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
];

/// The proxy variables of [`PASSED`]: their ports are reachable.
const PROXIES: &[&str] = &["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"];

/// `PIP_*` variables not passed: they would point pip outside its session.
const PIP_OVERRIDDEN: &[&str] = &["PIP_CACHE_DIR", "PIP_LOG", "PIP_LOG_FILE", "PIP_TARGET"];

/// Printed by the host's `python3`: what the confined process must be able to read.
const PROBE: &str = "\
import importlib.util, json, os, sys
spec = importlib.util.find_spec('pip')
pip = os.path.dirname(os.path.dirname(spec.origin)) if spec and spec.origin else None
print(json.dumps({'executable': sys.executable, 'prefixes': [sys.prefix, sys.base_prefix, \
sys.exec_prefix, sys.base_exec_prefix], 'pip': pip}))
";

#[derive(serde::Deserialize)]
struct Probed {
    executable: PathBuf,
    prefixes: Vec<PathBuf>,
    pip: Option<PathBuf>,
}

/// One confined pip session: a temporary home (removed when dropped), the host's Python,
/// and the confinement every command of the session runs under.
#[derive(Debug)]
pub struct PipSession {
    home: tempfile::TempDir,
    warden: PathBuf,
    python: PathBuf,
    env: Vec<(String, String)>,
    confinement: Confinement,
}

impl PipSession {
    /// Prepares a session for `pip`'s settings: checks that this kernel can confine
    /// (Landlock), probes the host's `python3`, reads pip's configuration (confined) for
    /// the index and find-links it will use.
    pub fn new(pip: &Pip) -> Result<PipSession, PackagesError> {
        confine::check_support().map_err(|e| PackagesError::Unconfined {
            reason: e.to_string(),
        })?;
        let warden = match &pip.warden {
            Some(w) => w.clone(),
            None => std::env::current_exe().map_err(|e| io(Path::new("current_exe"), e))?,
        };
        let home = tempfile::Builder::new()
            .prefix("warden-pip-")
            .tempdir()
            .map_err(|e| io(&std::env::temp_dir(), e))?;
        let home_path = home.path().to_owned();
        for sub in ["tmp", "cache", "config", "data", "state"] {
            let dir = home_path.join(sub);
            std::fs::create_dir(&dir).map_err(|e| io(&dir, e))?;
        }
        let env = environment(&home_path);

        let probed = probe(&env, &home_path)?;
        let mut read_only: BTreeSet<PathBuf> =
            SYSTEM.iter().chain(ETC).map(PathBuf::from).collect();
        read_only.extend(probed.prefixes.iter().cloned());
        read_only.extend(probed.executable.parent().map(Path::to_owned));
        if let Ok(real) = std::fs::canonicalize(&probed.executable) {
            read_only.extend(real.parent().map(Path::to_owned));
        }
        let pip_dir = probed.pip.ok_or(PackagesError::NoPip)?;
        read_only.insert(pip_dir);
        for (key, value) in &env {
            let is_file_setting = matches!(
                key.as_str(),
                "SSL_CERT_FILE"
                    | "SSL_CERT_DIR"
                    | "REQUESTS_CA_BUNDLE"
                    | "PIP_CERT"
                    | "PIP_CONFIG_FILE"
            );
            if is_file_setting {
                read_only.insert(PathBuf::from(value));
            }
        }
        for dir in &pip.find_links {
            read_only.insert(find_links_dir(dir)?);
        }

        let mut session = PipSession {
            home,
            warden,
            python: probed.executable,
            env,
            confinement: Confinement {
                read_only: read_only.into_iter().collect(),
                read_write: vec![home_path],
                tcp_connect: Vec::new(),
                profile: Profile::Exec,
                narrow_view: false,
            },
        };
        let config = session.config()?;
        let no_index = pip.no_index || config.no_index;
        let proxies = PROXIES
            .iter()
            .filter_map(|p| session.env.iter().find(|(k, _)| k == p))
            .map(|(_, v)| v.clone());
        let (ports, folders) = reach(no_index, &config, proxies);
        session.confinement.read_only.extend(folders);
        session.confinement.tcp_connect = ports;
        Ok(session)
    }

    /// The session's temporary home.
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// What a runtime build takes from this session: Warden's binary, the host's Python
    /// with pip, pip's environment (less the session's own folders, which the build
    /// replaces by its own) and what they may read and reach.
    pub fn build_host(&self) -> crate::sandbox::build::HostTools {
        crate::sandbox::build::HostTools {
            warden: self.warden.clone(),
            python: self.python.clone(),
            env: self.env.clone(),
            read_only: self.confinement.read_only.clone(),
            tcp_connect: self.confinement.tcp_connect.clone(),
        }
    }

    /// What every command of this session may reach, before the caller's additions.
    pub fn confinement(&self) -> &Confinement {
        &self.confinement
    }

    /// A command that runs the host's Python with the session's environment, in its
    /// home, confined: the session's grants plus `read_only` and `read_write` (which must
    /// exist). Add the arguments (`-m pip ...`).
    pub fn python(
        &self,
        read_only: &[&Path],
        read_write: &[&Path],
    ) -> Result<Command, PackagesError> {
        let mut confinement = self.confinement.clone();
        confinement
            .read_only
            .extend(read_only.iter().map(|p| p.to_path_buf()));
        confinement
            .read_write
            .extend(read_write.iter().map(|p| p.to_path_buf()));
        let mut cmd =
            confine::exec_command(&self.warden, &confinement, &self.python).map_err(|e| {
                PackagesError::Unconfined {
                    reason: e.to_string(),
                }
            })?;
        cmd.env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.home.path())
            .stdin(Stdio::null());
        Ok(cmd)
    }

    /// pip's configuration as `pip config list` (confined, no network) reports it.
    fn config(&self) -> Result<PipConfig, PackagesError> {
        let out = self
            .python(&[], &[])?
            .args(["-m", "pip", "config", "list"])
            .output()
            .map_err(|e| io(&self.warden, e))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(session_failure(
                out.status.code(),
                &stderr,
                "reading pip's configuration",
            ));
        }
        Ok(PipConfig::parse(&String::from_utf8_lossy(&out.stdout)))
    }
}

/// The error for a session command that failed to start or was refused confinement.
pub(super) fn session_failure(code: Option<i32>, stderr: &str, action: &str) -> PackagesError {
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .to_owned();
    match code {
        Some(c) if c == i32::from(confine::EXIT_NOT_CONFINED) => {
            PackagesError::Unconfined { reason: last }
        }
        _ if stderr.contains("No module named pip") => PackagesError::NoPip,
        _ => PackagesError::Pip {
            action: action.to_owned(),
            detail: last,
        },
    }
}

/// The environment of a session rooted at `home`.
fn environment(home: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            PASSED.contains(&k.as_str())
                || (k.starts_with("PIP_") && !PIP_OVERRIDDEN.contains(&k.as_str()))
        })
        .collect();
    if !env.iter().any(|(k, _)| k == "PIP_CONFIG_FILE")
        && let Some(user) = user_config()
    {
        env.push(("PIP_CONFIG_FILE".into(), user.display().to_string()));
    }
    let at = |sub: &str| home.join(sub).display().to_string();
    env.extend([
        ("HOME".into(), home.display().to_string()),
        ("TMPDIR".into(), at("tmp")),
        ("XDG_CACHE_HOME".into(), at("cache")),
        ("XDG_CONFIG_HOME".into(), at("config")),
        ("XDG_DATA_HOME".into(), at("data")),
        ("XDG_STATE_HOME".into(), at("state")),
        ("PIP_CACHE_DIR".into(), at("cache")),
        ("PYTHONNOUSERSITE".into(), "1".into()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
    ]);
    env
}

/// The user's pip configuration file, which the session's home would hide.
fn user_config() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| dirs::home_dir().map(|h| h.join(".config")))?;
    [
        config.join("pip/pip.conf"),
        dirs::home_dir()?.join(".pip/pip.conf"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Runs [`PROBE`] with the host's `python3` (found on the session's `PATH`).
fn probe(env: &[(String, String)], home: &Path) -> Result<Probed, PackagesError> {
    let out = Command::new("python3")
        .args(["-I", "-c", PROBE])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(home)
        .stdin(Stdio::null())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(PackagesError::NoPip),
        Err(e) => return Err(io(Path::new("python3"), e)),
    };
    if !out.status.success() {
        return Err(PackagesError::Pip {
            action: "asking python3 where it is installed".into(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    serde_json::from_slice(&out.stdout).map_err(|e| PackagesError::Pip {
        action: "asking python3 where it is installed".into(),
        detail: e.to_string(),
    })
}

/// A `--find-links` folder of the command line, canonical.
pub(super) fn find_links_dir(dir: &Path) -> Result<PathBuf, PackagesError> {
    let canonical = std::fs::canonicalize(dir).map_err(|e| PackagesError::FindLinks {
        path: dir.to_owned(),
        reason: e.to_string(),
    })?;
    if !canonical.is_dir() {
        return Err(PackagesError::FindLinks {
            path: canonical,
            reason: "not a folder".into(),
        });
    }
    Ok(canonical)
}

/// The TCP ports pip may connect to, and the local find-links folders it may read: the
/// ports of the index URLs (443 for pip's default index) unless there is no index, of
/// the find-links URLs and of the proxies.
fn reach(
    no_index: bool,
    config: &PipConfig,
    proxies: impl Iterator<Item = String>,
) -> (Vec<u16>, Vec<PathBuf>) {
    let mut ports = BTreeSet::new();
    let mut folders = Vec::new();
    let mut urls: Vec<String> = config
        .find_links
        .iter()
        .chain(&config.proxies)
        .cloned()
        .collect();
    urls.extend(proxies);
    if !no_index {
        if config.indexes.is_empty() {
            // pip's default index, over HTTPS.
            ports.insert(443);
        }
        urls.extend(config.indexes.iter().cloned());
    }
    for url in &urls {
        match url::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {
                ports.extend(u.port_or_known_default());
            }
            Ok(u) if u.scheme() == "file" => folders.extend(u.to_file_path().ok()),
            // A find-links entry that is a path (an unparsable URL gets nothing).
            _ if url.starts_with('/') => folders.push(PathBuf::from(url)),
            _ => {}
        }
    }
    (ports.into_iter().collect(), folders)
}

/// What `pip config list` says about where packages come from.
#[derive(Debug, Default, PartialEq, Eq)]
struct PipConfig {
    /// `index-url` and `extra-index-url` (none: pip's default index).
    indexes: Vec<String>,
    /// `find-links`: URLs or paths.
    find_links: Vec<String>,
    /// `proxy`.
    proxies: Vec<String>,
    /// `no-index` is set.
    no_index: bool,
}

impl PipConfig {
    /// Parses lines like `global.index-url='https://...'` and `:env:.find-links='/opt'`.
    fn parse(listing: &str) -> PipConfig {
        let mut config = PipConfig::default();
        for line in listing.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let option = key.rsplit('.').next().unwrap_or_default();
            let value = value.trim().trim_matches(|c| c == '\'' || c == '"');
            let values = value
                .split("\\n")
                .flat_map(str::split_whitespace)
                .map(str::to_owned);
            match option {
                "index-url" | "extra-index-url" => config.indexes.extend(values),
                "find-links" => config.find_links.extend(values),
                "proxy" => config.proxies.extend(values),
                "no-index" => {
                    config.no_index = matches!(
                        value.to_ascii_lowercase().as_str(),
                        "1" | "true" | "yes" | "on"
                    );
                }
                _ => {}
            }
        }
        config
    }
}

fn io(path: &Path, source: std::io::Error) -> PackagesError {
    PackagesError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_confinement_is_reported_as_such() {
        let stderr = "warden __confined-exec: the kernel cannot confine processes with \
                      Landlock (...)\n";
        let e = session_failure(Some(125), stderr, "resolving x");
        assert!(
            matches!(&e, PackagesError::Unconfined { reason } if reason.contains("Landlock")),
            "{e}"
        );
        assert!(e.to_string().contains("does not run pip unconfined"), "{e}");
        let e = session_failure(Some(1), "ModuleNotFoundError: No module named pip\n", "x");
        assert!(matches!(e, PackagesError::NoPip), "{e}");
    }

    #[test]
    fn reads_pip_config_list_and_reaches_only_its_ports() {
        let listing = "\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='/opt/wheels /srv/more'
global.index-url='http://mirror.internal:8080/simple'
global.extra-index-url='https://a.example/simple\\nhttps://b.example:8443/simple'
:env:.no-index='false'
";
        let c = PipConfig::parse(listing);
        assert_eq!(
            c.indexes,
            [
                "http://mirror.internal:8080/simple",
                "https://a.example/simple",
                "https://b.example:8443/simple"
            ]
        );
        assert_eq!(c.find_links, ["/opt/wheels", "/srv/more"]);
        assert!(!c.no_index);
        let (ports, folders) = reach(false, &c, std::iter::empty());
        assert_eq!(ports, [443, 8080, 8443]);
        assert_eq!(folders, [Path::new("/opt/wheels"), Path::new("/srv/more")]);
        // No index: only the find-links and the proxy.
        let proxy = std::iter::once("http://proxy:3128".to_owned());
        assert_eq!(reach(true, &c, proxy).0, [3128]);
        // pip's default index.
        assert_eq!(
            reach(false, &PipConfig::default(), std::iter::empty()).0,
            [443]
        );
        assert!(PipConfig::parse("global.no-index='true'\n").no_index);
    }
}
