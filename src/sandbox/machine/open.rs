//! Opening the sandbox: the runtime fetched and compiled (or only loaded, in a worker or
//! from a bundle), its module linked, its warm states swept.

use std::path::PathBuf;
use std::sync::Arc;

use wasmtime::{Engine, InstancePre, Linker, Module};

use crate::outbound::Clients;
use crate::sandbox::cores::Cores;
use crate::sandbox::engine::engine;
use crate::sandbox::guest::{Exports, Guest};
use crate::sandbox::tool::sweep_orphaned_tool_folders;
use crate::sandbox::warm::WarmStates;
use crate::sandbox::{
    RuntimeFiles, SHIPPED_WARM, Sandbox, SandboxConfig, SandboxError, ScratchRoot, WarmStore,
    compiled, host_calls, own_folders, syscalls,
};

impl Sandbox {
    /// Fetches and compiles the runtime if needed (slow the first time, with progress),
    /// then loads it. A bundle's runtime, or any runtime in a binary built without the
    /// compiler, is only loaded: never fetched or compiled. Blocking: call it outside
    /// async code or with `spawn_blocking`.
    pub fn open(config: &SandboxConfig) -> Result<Sandbox, SandboxError> {
        let files = config.runtime_files()?;
        sweep_orphaned_tool_folders(&std::env::temp_dir());
        let engine = engine(config, &files.platform)?;
        let compiles = cfg!(feature = "compiler") && !files.bundled;
        // A runtime compiled already needs only what a call reads: a home without the
        // snapshot the compiler reads (~104 MB) is complete.
        let compiled = compiled::path(&files)?.is_file() && files.runnable();
        if files.bundled || (compiles && !compiled) {
            files.ensure(config.progress)?;
        } else if !files.runnable() {
            // Without the compiler nothing is fetched either: say what to install.
            return Err(compiled::missing(&files, &compiled::path(&files)?));
        }
        #[cfg(feature = "compiler")]
        {
            if compiles {
                let (module, pending) = compiled::load_or_build(&engine, &files, config.progress)?;
                let mut sandbox = Sandbox::assemble(config, files, engine, module)?;
                if let Some(pending) = pending {
                    sandbox.check_new_snapshot()?;
                    match pending.keep()? {
                        compiled::Kept::Ours => sandbox.forget_other_images()?,
                        // Another process named its file first without the compile lock
                        // (an older Warden sharing the home): every process of this home
                        // runs that one, or each would refuse the warm states the others
                        // prepare.
                        compiled::Kept::Theirs => {
                            tracing::info!(
                                "another process compiled the runtime at the same time; \
                                 using its file"
                            );
                            let Sandbox { files, engine, .. } = sandbox;
                            let module = compiled::load_existing(&engine, &files)?;
                            sandbox = Sandbox::assemble(config, files, engine, module)?;
                        }
                    }
                }
                sandbox.sweep_warm_states(config)?;
                sandbox.scratch = Some(ScratchRoot::create(&config.home)?);
                return Ok(sandbox);
            }
        }
        let module = compiled::load_existing(&engine, &files)?;
        let mut sandbox = Sandbox::assemble(config, files, engine, module)?;
        sandbox.sweep_warm_states(config)?;
        sandbox.scratch = Some(ScratchRoot::create(&config.home)?);
        Ok(sandbox)
    }

    /// After this process compiled the snapshot and named its file: removes the warm
    /// states recorded against an earlier build of the same name (its compiled file
    /// removed and built again), which every process would otherwise load and refuse.
    #[cfg(feature = "compiler")]
    fn forget_other_images(&self) -> Result<(), SandboxError> {
        let forgotten = self.warm.forget_other_images(&self.module)?;
        if forgotten > 0 {
            tracing::info!(
                "removed {forgotten} warm state(s) of an earlier build of this runtime; \
                 they are prepared again on first use"
            );
        }
        Ok(())
    }

    /// At start: removes what interrupted preparations of warm states left, and the
    /// states beyond a lowered budget.
    fn sweep_warm_states(&self, config: &SandboxConfig) -> Result<(), SandboxError> {
        let swept = self.warm_store().sweep()?;
        if swept.leftovers + swept.evicted > 0 {
            tracing::info!(
                "warm states: removed {} leftover file(s) of interrupted preparations or older \
                 formats, evicted {} state(s) over the budget of {}; {} kept ({})",
                swept.leftovers,
                swept.evicted,
                config.warm_budget,
                swept.kept,
                swept.bytes
            );
        }
        Ok(())
    }

    /// Loads the runtime a server has fetched and compiled already, starting no thread
    /// and writing nothing: what a worker process does before it confines itself.
    pub fn load(config: &SandboxConfig) -> Result<Sandbox, SandboxError> {
        let files = config.runtime_files()?;
        if !files.runnable() {
            return Err(SandboxError::Harness(
                "the runtime is not fetched yet; run `warden runtime fetch`".into(),
            ));
        }
        let engine = engine(config, &files.platform)?;
        let module = compiled::load_existing(&engine, &files)?;
        Sandbox::assemble(config, files, engine, module)
    }

    /// A sandbox over a loaded module, linked.
    fn assemble(
        config: &SandboxConfig,
        files: RuntimeFiles,
        engine: Engine,
        module: Module,
    ) -> Result<Sandbox, SandboxError> {
        let compiled_name = compiled::name(&files)?;
        let (linker, pre, exports) = link(&engine, &module)?;
        Ok(Sandbox {
            engine,
            module,
            linker,
            pre,
            exports,
            files,
            warm: WarmStates::new(warm_store(config, compiled_name)),
            clients: Arc::new(Clients::default()),
            max_memory: config.max_memory,
            slots: tokio::sync::Semaphore::new(config.max_instances as usize),
            cores: Cores::new(config.cores),
            own_folders: own_folders(config),
            held: None,
            scratch: None,
        })
    }

    /// Runs one real call on a freshly built snapshot before it is cached: a tool reads
    /// a folder and a variable granted to this call only. A snapshot that remembered
    /// the folders or environment of the instance that built it would fail here.
    #[cfg(feature = "compiler")]
    fn check_new_snapshot(&self) -> Result<(), SandboxError> {
        use crate::grants::Grants;
        use crate::limits::Limits;
        use crate::sandbox::{Call, ToolFolder, io_error};
        const TOOL: &str = "import os\n\
def check() -> list:\n    \
with open('/warden-check/probe.txt') as f:\n        \
return [f.read(), os.environ.get('WARDEN_CHECK')]\n";
        let dir = tempfile::tempdir().map_err(|e| io_error(&std::env::temp_dir(), e))?;
        let probe = dir.path().join("probe.txt");
        std::fs::write(&probe, "mounted").map_err(|e| io_error(&probe, e))?;
        let tool = ToolFolder::temporary("check.py", TOOL)?;
        let grants = Grants {
            mounts: vec![crate::grants::Mount {
                host: dir.path().to_owned(),
                guest: "/warden-check".parse()?,
                access: crate::grants::Access::Ro,
            }],
            env: vec!["WARDEN_CHECK=granted".parse()?],
            ..Grants::default()
        };
        let call = Call {
            tool: &tool,
            function: "check",
            arguments: &serde_json::Map::new(),
            none_if_omitted: &[],
            grants: &grants,
            limits: &Limits::default(),
            packages: None,
        };
        let result = self.call_blocking(call)?;
        if result.status == crate::outcome::Status::Ok
            && result.value == Some(serde_json::json!(["mounted", "granted"]))
        {
            return Ok(());
        }
        Err(SandboxError::Harness(format!(
            "the snapshot built just now failed its check (a call reading a granted folder \
             and variable): {} {} {} {}",
            result.status,
            result.message.unwrap_or_default(),
            result.value.map(|v| v.to_string()).unwrap_or_default(),
            result.stderr
        )))
    }

    /// Where the compiled runtime for `config` is cached (it may not exist yet).
    pub fn compiled_path(config: &SandboxConfig) -> Result<PathBuf, SandboxError> {
        compiled::path(&config.runtime_files()?)
    }
}

/// The warm states of `config`'s home for the compiled snapshot `compiled_name`, and
/// those shipped beside an installed bundle's runtime.
fn warm_store(config: &SandboxConfig, compiled_name: String) -> WarmStore {
    let store = WarmStore::new(&config.home, compiled_name, config.warm_budget);
    match &config.runtime {
        Some(runtime) => store.with_shipped(runtime.join(SHIPPED_WARM)),
        None => store,
    }
}

/// The linker of every instance (WASI preview 1, Warden's checked calls, the door) and
/// the module's instance-pre and exports.
fn link(
    engine: &Engine,
    module: &Module,
) -> Result<(Linker<Guest>, InstancePre<Guest>, Exports), SandboxError> {
    let exports = Exports::of(module)?;
    let mut linker: Linker<Guest> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |g: &mut Guest| &mut g.wasi)
        .map_err(SandboxError::Engine)?;
    syscalls::add_to_linker(&mut linker).map_err(SandboxError::Engine)?;
    host_calls::add_to_linker(&mut linker).map_err(SandboxError::Engine)?;
    let pre = linker
        .instantiate_pre(module)
        .map_err(SandboxError::Engine)?;
    Ok((linker, pre, exports))
}
