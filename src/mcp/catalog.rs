//! The tools of a folder (or a list of files), each ready to list and call (a server file
//! with several functions decorated as tools gives one tool each): its schema
//! derived, its grants and limits settled (command line, then `warden.toml`), its
//! packages installed, its source copied to a private folder for the sandbox.
//!
//! A file that cannot be a tool (no schema, a name already taken, a grant that cannot be
//! honoured, packages that cannot be installed) is left out and reported as a
//! [`Problem`]; only an unreadable folder or `warden.toml` stops the whole catalog.
//! Blocking (reads files, may run pip): call it on a blocking thread.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::config::{self, CONFIG_FILE, ConfigError, FolderConfig};
use super::{Hints, ListedTool};
use crate::app::PreparedTool;
use crate::app::runtimes::Runtimes;
use crate::grants::{self, Grants, SecretValue};
use crate::limits::Limits;
use crate::manifest::Manifest;
use crate::packages::{choice, script};
use crate::sandbox::{Flavour, Outbound, ToolFolder};
use crate::schema::{self, DeriveOptions, Severity};

/// Where a server's tools are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sources {
    /// Every `.py` file directly in the folder (not in sub-folders; hidden files
    /// skipped), in name order, with the folder's `warden.toml` if it has one.
    Folder(PathBuf),
    /// These files, in this order; no `warden.toml`.
    Files(Vec<PathBuf>),
}

impl Sources {
    /// The tool files, in order.
    pub fn tool_files(&self) -> Result<Vec<PathBuf>, CatalogError> {
        let dir = match self {
            Sources::Files(files) => return Ok(files.clone()),
            Sources::Folder(dir) => dir,
        };
        let unreadable = |source| CatalogError::Folder {
            path: dir.clone(),
            source,
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(unreadable)? {
            let path = entry.map_err(unreadable)?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(".");
            if name.ends_with(".py") && !name.starts_with('.') && path.is_file() {
                files.push(path);
            }
        }
        files.sort();
        Ok(files)
    }

    /// The folder's `warden.toml` (which may not exist), for a folder.
    pub fn config_file(&self) -> Option<PathBuf> {
        match self {
            Sources::Folder(dir) => Some(dir.join(CONFIG_FILE)),
            Sources::Files(_) => None,
        }
    }
}

/// What every tool gets unless its `warden.toml` table says otherwise.
#[derive(Debug, Clone, Default)]
pub struct Defaults {
    /// The grants (already checked).
    pub grants: Grants,
    /// The limits.
    pub limits: Limits,
    /// The values of the secrets `grants` names, and the private-network setting (which
    /// applies to every tool).
    pub outbound: Outbound,
}

/// Why there is no catalog at all.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The tools folder cannot be listed.
    #[error("cannot list the tools folder {}: {source}; check the path", path.display())]
    Folder {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `warden.toml` cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// A file left out of the catalog (or a `warden.toml` table that matches no tool), and
/// why, in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub path: PathBuf,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

/// One tool, ready to list and call.
#[derive(Debug)]
pub struct CatalogTool {
    /// Its file.
    pub path: PathBuf,
    /// The source its schema was derived from (and the guest runs).
    source: String,
    /// How `tools/list` shows it.
    pub listed: ListedTool,
    /// Its checked arguments' validator, private folder, packages and warm state.
    pub prepared: Arc<PreparedTool>,
    /// What each call is granted.
    pub grants: Grants,
    /// Each call's limits.
    pub limits: Limits,
    /// The host's side of its outbound requests.
    pub outbound: Outbound,
}

impl CatalogTool {
    /// The tool as a registry version: what the local trail records a call of. `None`
    /// for a function name that is no tool name (more than 64 characters).
    pub fn manifest(&self) -> Option<Manifest> {
        Some(Manifest {
            name: self.listed.name.parse().ok()?,
            function: self.prepared.function().to_owned(),
            source: self.source.clone(),
            schema: self.prepared.schema().clone(),
            grants: self.grants.clone(),
            limits: self.limits,
            packages: Default::default(),
            tags: Vec::new(),
            description: None,
            title: self.listed.title.clone(),
            icon: self.listed.icon.clone(),
            server: None,
            runtime: self.prepared.flavour(),
        })
    }
}

/// Every tool of the sources, by name.
#[derive(Debug, Default)]
pub struct Catalog {
    tools: BTreeMap<String, Arc<CatalogTool>>,
}

impl Catalog {
    /// Loads every tool of `sources`. Tools whose file and source are unchanged since
    /// `previous` keep their prepared state (and with it their warm state).
    pub fn load(
        sources: &Sources,
        defaults: &Defaults,
        runtimes: &Runtimes,
        previous: &Catalog,
    ) -> Result<(Catalog, Vec<Problem>), CatalogError> {
        let files = sources.tool_files()?;
        let config_file = sources.config_file();
        let config = match &config_file {
            Some(path) => config::read(path)?,
            None => FolderConfig::default(),
        };
        let config_dir = match sources {
            Sources::Folder(dir) => dir.clone(),
            Sources::Files(_) => PathBuf::new(),
        };
        let mut catalog = Catalog::default();
        let mut problems = Vec::new();
        for path in files {
            let loader = Loader {
                path: &path,
                config: &config,
                config_dir: &config_dir,
                defaults,
                runtimes,
                previous,
            };
            for loaded in loader.load(&catalog) {
                match loaded {
                    Ok(tool) => {
                        catalog
                            .tools
                            .insert(tool.listed.name.clone(), Arc::new(tool));
                    }
                    Err(why) => problems.push(Problem {
                        path: path.clone(),
                        message: format!("left out: {why}"),
                    }),
                }
            }
        }
        if let Some(path) = config_file {
            for name in config.tools.keys() {
                if !catalog.tools.contains_key(name) {
                    problems.push(Problem {
                        path: path.clone(),
                        message: format!(
                            "[tools.{name}] matches no tool here; name a tool's function"
                        ),
                    });
                }
            }
        }
        Ok((catalog, problems))
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<CatalogTool>> {
        self.tools.get(name)
    }

    /// Every tool, sorted by name.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<CatalogTool>> {
        self.tools.values()
    }

    /// Every tool as `tools/list` shows it, sorted by name.
    pub fn listed(&self) -> Vec<ListedTool> {
        self.tools.values().map(|t| t.listed.clone()).collect()
    }

    /// Whether `other` lists the same tools from the same sources (a source edited
    /// without changing any listing still changes what its tool and its resources do).
    pub fn same_as(&self, other: &Catalog) -> bool {
        self.listed() == other.listed()
            && self
                .tools
                .values()
                .zip(other.tools.values())
                .all(|(a, b)| a.source == b.source)
    }

    /// The tools' names, sorted (a file of resources and prompts alone is no tool).
    pub fn names(&self) -> BTreeSet<&str> {
        self.tools
            .iter()
            .filter(|(_, t)| !t.listed.members_only)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// How many resources and prompts the files declare.
    pub fn members(&self) -> usize {
        self.tools
            .values()
            .map(|t| t.listed.resources.len() + t.listed.prompts.len())
            .sum()
    }
}

/// Which tool of a file to load.
struct Choice<'a> {
    /// The function (the file's own choice when `None`).
    function: Option<&'a str>,
    /// What the file's tool decorators say, for the function they decorate.
    decorated: Option<&'a schema::DecoratedTool>,
    /// Whether it lists the file's resources and prompts (one tool of a file does).
    members: bool,
}

/// Loads one file.
struct Loader<'a> {
    path: &'a Path,
    config: &'a FolderConfig,
    config_dir: &'a Path,
    defaults: &'a Defaults,
    runtimes: &'a Runtimes,
    previous: &'a Catalog,
}

impl Loader<'_> {
    /// The file's tools, each ready or why it is left out: its one tool, or every tool
    /// of a server file (several functions decorated as tools, `@mcp.tool()`), the
    /// file's resources and prompts served with the first of them.
    fn load(&self, so_far: &Catalog) -> Vec<Result<CatalogTool, String>> {
        let source = match read_source(self.path) {
            Ok(source) => source,
            Err(why) => return vec![Err(why)],
        };
        let decorated = schema::tool_functions(&source);
        if decorated.len() < 2 {
            let one = Choice {
                function: None,
                decorated: decorated.first(),
                members: true,
            };
            return vec![self.load_function(&source, &one, so_far)];
        }
        decorated
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let choice = Choice {
                    function: Some(&d.function),
                    decorated: Some(d),
                    members: i == 0,
                };
                self.load_function(&source, &choice, so_far)
                    .map_err(|why| format!("tool `{}`: {why}", d.function))
            })
            .collect()
    }

    /// One tool of the file, as `choice` says.
    fn load_function(
        &self,
        source: &str,
        choice: &Choice<'_>,
        so_far: &Catalog,
    ) -> Result<CatalogTool, String> {
        let function = choice.function;
        let source = source.to_owned();
        let file_name = self
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("tool.py");
        let options = DeriveOptions {
            file_stem: file_name.trim_end_matches(".py").to_owned(),
            function: function.map(str::to_owned),
        };
        let derived = schema::derive(&source, &options).map_err(|e| first_error(&e))?;
        let schema = derived.schema;
        // What the tool's decorator says (`@mcp.tool(name=..., title=...)`), when it
        // decorates the function chosen.
        let decorated = choice.decorated.filter(|d| d.function == schema.name);
        // A decorator's name that is no tool name (CrewAI's `@tool("Search the web")`)
        // leaves the function's.
        let name = decorated
            .and_then(|d| d.name.clone())
            .filter(|n| n.parse::<crate::manifest::ToolName>().is_ok())
            .unwrap_or_else(|| schema.name.clone());
        if let Some(first) = so_far.get(&name) {
            return Err(format!(
                "a tool named `{name}` comes from {} already; rename one of the functions",
                first.path.display()
            ));
        }
        let Value::Object(parameters) = schema.parameters.clone() else {
            return Err("the derived parameters schema is not an object; please report it".into());
        };
        let table = self.config.tools.get(&name);
        if let Some(table) = table {
            table
                .check_presentation()
                .map_err(|e| format!("{e}; fix [tools.{name}] in {CONFIG_FILE}"))?;
        }
        let (grants, outbound) = match table {
            Some(table) => {
                let grants = table.grants(self.config_dir);
                let outbound = Outbound {
                    secrets: secret_values(&grants)?,
                    private_network: self.defaults.outbound.private_network,
                    ..Outbound::default()
                };
                (grants, outbound)
            }
            None => (self.defaults.grants.clone(), self.defaults.outbound.clone()),
        };
        grants
            .check()
            .map_err(|e| format!("{e}; fix [tools.{name}] in {CONFIG_FILE}"))?;
        for m in &grants.mounts {
            grants::canonical_host_folder(&m.host).map_err(|e| e.to_string())?;
        }
        let limits = match table {
            Some(table) => table
                .limits
                .over(&self.defaults.limits)
                .map_err(|e| format!("{e} (in [tools.{name}] of {CONFIG_FILE})"))?,
            None => self.defaults.limits,
        };
        let listed = ListedTool {
            name: name.clone(),
            description: decorated
                .and_then(|d| d.description.clone())
                .unwrap_or_else(|| schema.description.clone()),
            parameters,
            returns: schema.returns.clone(),
            hints: Hints::of(
                &grants,
                table.is_some_and(|t| t.idempotent),
                schema.annotations.as_ref(),
            ),
            title: table
                .and_then(|t| t.title.clone())
                .or_else(|| decorated.and_then(|d| d.title.clone())),
            icon: table.and_then(|t| t.icon.clone()),
            resources: if choice.members {
                schema.resources.clone()
            } else {
                Vec::new()
            },
            prompts: if choice.members {
                schema.prompts.clone()
            } else {
                Vec::new()
            },
            members_only: schema.members_only,
            task: super::task_mode(schema.task, limits.deadline),
            deadline: limits.deadline,
        };
        let prepared = match self.previous.get(&name) {
            // Same file, same source: same schema, packages and warm state.
            Some(old) if old.path == self.path && old.source == source => Arc::clone(&old.prepared),
            _ => {
                let (flavour, site) = self.packages_site(&source)?;
                let folder =
                    ToolFolder::temporary(file_name, &source).map_err(|e| e.to_string())?;
                Arc::new(PreparedTool::new(folder, schema, site).on_runtime(flavour))
            }
        };
        Ok(CatalogTool {
            path: self.path.to_owned(),
            source,
            listed,
            prepared,
            grants,
            limits,
            outbound,
        })
    }

    /// The runtime the source's PEP 723 block needs ([`choice`]: the Pydantic one for
    /// Pydantic 2 and its extensions, opened now if it is not) and its installed
    /// packages, if it names any.
    fn packages_site(&self, source: &str) -> Result<(Flavour, Option<PathBuf>), String> {
        let requirements = script::read(source)
            .map_err(|e| e.to_string())?
            .dependencies;
        if requirements.is_empty() {
            return Ok((Flavour::Standard, None));
        }
        let chosen = choice::flavour_for(&requirements);
        let (flavour, lock) = self
            .runtimes
            .lock(chosen, false, requirements)
            .map_err(|e| e.to_string())?;
        let runtime = self.runtimes.get(flavour).map_err(|e| e.to_string())?;
        let site = runtime.packages.site(&lock).map_err(|e| e.to_string())?;
        Ok((flavour, site))
    }
}

fn read_source(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text: save the tool as UTF-8".into())
}

/// A schema failure in one line: its first error.
fn first_error(e: &schema::SchemaError) -> String {
    match e
        .diagnostics()
        .iter()
        .find(|d| d.severity == Severity::Error)
    {
        Some(d) => format!(
            "line {}:{}: {} (`warden validate` shows every problem)",
            d.line, d.column, d.message
        ),
        None => e.to_string(),
    }
}

/// Each granted secret's value, from Warden's own environment.
fn secret_values(grants: &Grants) -> Result<BTreeMap<String, SecretValue>, String> {
    let mut values = BTreeMap::new();
    for secret in &grants.secrets {
        let value = std::env::var(&secret.name).map_err(|_| {
            format!(
                "secret {}: Warden's environment has no variable {} (or it is not UTF-8); \
                 export it before starting warden mcp",
                secret.name, secret.name
            )
        })?;
        let value = SecretValue::new(value).map_err(|e| format!("secret {}: {e}", secret.name))?;
        values.insert(secret.name.clone(), value);
    }
    Ok(values)
}
