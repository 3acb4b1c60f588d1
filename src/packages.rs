//! Tool packages: pure-Python requirements per tool, resolved once on the host into a
//! lock, installed into a content-addressed read-only folder the guest imports from.
//!
//! # The flow
//!
//! A tool declares requirements (PEP 508) in its source's PEP 723 block ([`script`]),
//! with `warden run --requirement`, or in the service's `pip_requirements`; all become
//! one sorted [`Requirement`] set. [`Packages::lock`] turns a set into a [`Lock`] once:
//! requirements the runtime's bundled packages satisfy ([`bundled`]) are recorded as
//! such, the rest are resolved by pip for the guest's platform ([`resolve`]), and every
//! wheel is pinned with its SHA-256. pip downloads wheels only (a source distribution
//! would run build code) and runs confined ([`PipSession`]). Locks are cached per
//! requirement set under `$WARDEN_HOME/packages/locks`, so a set is resolved once, never
//! at call time. The
//! wheels are unpacked ([`install`]) into `$WARDEN_HOME/packages/sites/<site id>`, one
//! folder per distinct set of wheels, shared by every tool that resolves to it, read-only
//! on the host and mounted read-only at [`GUEST_SITE`] in the guest, where the harness
//! puts it on `sys.path` after the runtime's own.
//!
//! An installed edge bundle ships the locks and wheels of its tools (`shipped`):
//! [`Packages::with_shipped`] makes the store read locks from there before resolving and
//! install their wheels from there without pip.
//!
//! This module never runs the guest: it sees requirement text, pip and files.

pub mod bundled;
pub mod choice;
mod error;
pub mod install;
pub mod lock;
pub mod requirement;
pub mod resolve;
pub mod script;
pub mod session;
mod shipped;
mod wheelhouse;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

pub use bundled::Bundled;
pub use error::{Fault, PackagesError};
pub use lock::{BundledUse, Lock, LockedWheel};
pub use requirement::Requirement;
pub use resolve::Pip;
pub use session::PipSession;
pub use shipped::{SHIPPED_LOCKS, SHIPPED_WHEELS};

use crate::sandbox::{Flavour, Progress};

/// Where a tool's installed packages appear in the guest.
pub const GUEST_SITE: &str = crate::sandbox::wasi::PACKAGES_GUEST;

/// Most requirements one tool may declare: 100.
pub const MAX_REQUIREMENTS: usize = 100;

/// Compiles the Python files of a site being installed (a writable folder) to
/// bytecode, once, so that calls import `.pyc` files instead of compiling every module
/// on every call. It runs in the guest (the host may have another Python, whose
/// bytecode the guest cannot use); a failure only costs speed.
pub type Compiler = Arc<dyn Fn(&Path) -> Result<(), String> + Send + Sync>;

/// The package store under `$WARDEN_HOME/packages`, with the pip settings and the
/// runtime's bundled packages.
#[derive(Clone)]
pub struct Packages {
    root: PathBuf,
    pip: Pip,
    bundled: Bundled,
    progress: Progress,
    compiler: Option<Compiler>,
    /// An installed bundle's `packages` folder: locks read before the home's cache, and
    /// wheels installed without pip.
    shipped: Option<PathBuf>,
    /// The runtime the packages are for: its Python decides markers and wheels.
    flavour: Flavour,
}

impl std::fmt::Debug for Packages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packages")
            .field("root", &self.root)
            .field("pip", &self.pip)
            .field("compiles_bytecode", &self.compiler.is_some())
            .field("shipped", &self.shipped)
            .finish_non_exhaustive()
    }
}

impl Packages {
    /// The store's folder: resolved sites, locks and pip's cache.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The store of `home`, for the runtime whose standard-library zip is `stdlib_zip`.
    pub fn new(
        home: &Path,
        stdlib_zip: &Path,
        pip: Pip,
        progress: Progress,
    ) -> Result<Self, PackagesError> {
        Ok(Packages {
            root: home.join("packages"),
            pip,
            bundled: Bundled::from_stdlib_zip(stdlib_zip)?,
            progress,
            compiler: None,
            shipped: None,
            flavour: Flavour::Standard,
        })
    }

    /// The same store, for `flavour`'s runtime (whose standard-library zip it was
    /// opened with): markers are evaluated and wheels chosen for its Python.
    pub fn for_flavour(mut self, flavour: Flavour) -> Self {
        self.flavour = flavour;
        self
    }

    /// The store for another runtime (`flavour`, whose standard-library zip is
    /// `stdlib_zip`): the same home and pip settings; no bytecode compiler until one is
    /// given (it runs in that runtime's workers).
    pub fn sibling(&self, stdlib_zip: &Path, flavour: Flavour) -> Result<Self, PackagesError> {
        Ok(Packages {
            root: self.root.clone(),
            pip: self.pip.clone(),
            bundled: Bundled::from_stdlib_zip(stdlib_zip)?,
            progress: self.progress,
            compiler: None,
            shipped: self.shipped.clone(),
            flavour,
        })
    }

    /// The runtime the packages are for.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// The same store, compiling each new site to bytecode with `compiler`.
    pub fn with_compiler(mut self, compiler: Compiler) -> Self {
        self.compiler = Some(compiler);
        self
    }

    /// The runtime's bundled packages.
    pub fn bundled(&self) -> &Bundled {
        &self.bundled
    }

    /// The lock of `requirements`: shipped with the installed bundle, or from the cache
    /// if this set was resolved before, otherwise resolved now (with progress) and
    /// installed. Empty set: empty lock.
    pub fn lock(&self, requirements: Vec<Requirement>) -> Result<Lock, PackagesError> {
        let requirements = lock::canonical(requirements);
        if requirements.is_empty() {
            return Ok(Lock::default());
        }
        if let Some(lock) = self.shipped_lock(&requirements) {
            self.site(&lock)?;
            return Ok(lock);
        }
        let cached = self.lock_path(&requirements);
        if let Some(lock) = fs::read(&cached)
            .ok()
            .and_then(|b| serde_json::from_slice::<Lock>(&b).ok())
            .filter(|l| l.requirements == requirements)
        {
            self.site(&lock)?;
            return Ok(lock);
        }

        let mut to_resolve = Vec::new();
        let mut bundled = Vec::new();
        for r in requirements.iter().filter(|r| r.applies_in(self.flavour)) {
            match self.bundled.version(r.name()) {
                Some(v) if r.allows(v) => bundled.push(BundledUse {
                    name: r.name().to_owned(),
                    version: v.to_string(),
                }),
                Some(v) => {
                    return Err(PackagesError::BundledConflict {
                        requirement: r.to_string(),
                        name: r.name().to_owned(),
                        bundled: v.to_string(),
                    });
                }
                None => to_resolve.push(r.clone()),
            }
        }
        bundled.sort();
        bundled.dedup();
        choice::refuse_other_runtime(self, &to_resolve)?;
        let work = self.work_dir()?;
        let downloaded = if to_resolve.is_empty() {
            Vec::new()
        } else {
            self.pip
                .resolve(
                    &to_resolve,
                    &self.bundled,
                    self.flavour.python(),
                    work.path(),
                    self.progress,
                )
                .map_err(|e| self.not_shipped(e, &requirements))
                .map_err(|e| choice::explain_other_runtime(self, &requirements, e))?
        };
        let lock = Lock {
            requirements,
            packages: downloaded.iter().map(|d| d.locked.clone()).collect(),
            bundled,
        };
        if let Some(id) = lock.site_id() {
            install::install(&self.sites(), &id, &downloaded, self.compiler.as_ref())?;
        }
        self.save_lock(&cached, &lock)?;
        Ok(lock)
    }

    /// The installed folder of `lock`'s wheels (`None` when it installs nothing),
    /// downloading and installing them from the lock if this machine lacks them.
    pub fn site(&self, lock: &Lock) -> Result<Option<PathBuf>, PackagesError> {
        let Some(id) = lock.site_id() else {
            return Ok(None);
        };
        let site = self.sites().join(&id);
        if site.is_dir() {
            return Ok(Some(site));
        }
        let work = self.work_dir()?;
        let downloaded =
            self.pip
                .download(lock, work.path(), self.flavour.python(), self.progress)?;
        install::install(&self.sites(), &id, &downloaded, self.compiler.as_ref()).map(Some)
    }

    /// Downloads `lock`'s wheels into `dest` (created if needed), each checked against
    /// its SHA-256: a wheelhouse to copy to an offline machine and use there with
    /// `--find-links DIR --no-index`. Returns the wheels' paths.
    pub fn fetch(&self, lock: &Lock, dest: &Path) -> Result<Vec<PathBuf>, PackagesError> {
        fs::create_dir_all(dest).map_err(|e| io(dest, e))?;
        if lock.packages.is_empty() {
            return Ok(Vec::new());
        }
        let downloaded = self
            .pip
            .download(lock, dest, self.flavour.python(), self.progress)?;
        Ok(downloaded.into_iter().map(|d| d.path).collect())
    }

    fn sites(&self) -> PathBuf {
        match self.flavour {
            Flavour::Standard => self.root.join("sites"),
            // Compiled to another Python's bytecode, so kept apart.
            other => self.root.join(format!("sites-{other}")),
        }
    }

    /// A private scratch folder, removed when dropped.
    fn work_dir(&self) -> Result<tempfile::TempDir, PackagesError> {
        fs::create_dir_all(&self.root).map_err(|e| io(&self.root, e))?;
        tempfile::Builder::new()
            .prefix(".work-")
            .tempdir_in(&self.root)
            .map_err(|e| io(&self.root, e))
    }

    /// The cache file of a requirement set's lock.
    fn lock_path(&self, requirements: &[Requirement]) -> PathBuf {
        self.root.join("locks").join(self.lock_name(requirements))
    }

    /// The file name of a requirement set's lock, in the home's cache and in a bundle:
    /// keyed by the set, the runtime's bundled packages (another runtime may satisfy
    /// other requirements) and, beyond the standard runtime, its Python (the standard
    /// runtime's keys stay those of the locks made before flavours).
    fn lock_name(&self, requirements: &[Requirement]) -> String {
        let mut hasher = Sha256::new();
        hasher.update(b"warden.lock-request.v1\n");
        if self.flavour != Flavour::Standard {
            hasher.update(format!("python {}\n", self.flavour.python_full()).as_bytes());
        }
        for (name, version) in self.bundled.iter() {
            hasher.update(format!("bundled {name} {version}\n").as_bytes());
        }
        for r in requirements {
            hasher.update(format!("requires {r}\n").as_bytes());
        }
        format!("{}.json", hex::encode(hasher.finalize()))
    }

    fn save_lock(&self, path: &Path, lock: &Lock) -> Result<(), PackagesError> {
        let dir = path.parent().unwrap_or(&self.root);
        fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| io(dir, e))?;
        let bytes =
            serde_json::to_vec_pretty(lock).map_err(|e| io(path, std::io::Error::other(e)))?;
        std::io::Write::write_all(&mut tmp, &bytes).map_err(|e| io(path, e))?;
        tmp.persist(path).map_err(|e| io(path, e.error))?;
        Ok(())
    }
}

fn io(path: &Path, source: std::io::Error) -> PackagesError {
    PackagesError::Io {
        path: path.to_owned(),
        source,
    }
}
