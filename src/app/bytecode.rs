//! Compiling a package site to bytecode in the guest, once per site: CPython 3.15's
//! `.pyc` format is the guest's own, so the host's Python cannot write it.
//!
//! The site being installed (a private staging folder) is mounted read-write at
//! `/site`; `compileall` writes each module's `__pycache__/*.pyc`, recording `/packages`
//! (where calls see the site) as the source folder for tracebacks. Measured on Pydantic
//! 1.10: a call importing it costs ~430 M fuel with bytecode, ~1,600 M without.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::grants::{Access, Grants, Mount};
use crate::limits::{ByteSize, FileCount, Fuel, Limits};
use crate::outcome::Status;
use crate::packages::Compiler;
use crate::sandbox::{Call, ToolFolder};
use crate::worker::Workers;

const TOOL: &str = "def compile_site() -> bool:\n    \
import compileall\n    \
return bool(compileall.compile_dir('/site', ddir='/packages', quiet=1, workers=1))\n";

/// A [`Compiler`] that runs `compileall` in a worker.
pub fn compiler(workers: Arc<Workers>) -> Compiler {
    Arc::new(move |site: &Path| compile(&workers, site))
}

fn compile(workers: &Workers, site: &Path) -> Result<(), String> {
    let tool = ToolFolder::temporary("compile_site.py", TOOL).map_err(|e| e.to_string())?;
    let grants = Grants {
        mounts: vec![Mount {
            host: site.to_owned(),
            guest: "/site"
                .parse()
                .map_err(|e: crate::grants::GrantError| e.to_string())?,
            access: Access::Rw,
        }],
        ..Grants::default()
    };
    // Generous: this runs once per site, at install, on the operator's behalf.
    let limits = Limits {
        fuel: Fuel(200_000_000_000),
        deadline: Duration::from_secs(600),
        memory: ByteSize::gib(1),
        files_created: FileCount(100_000),
        disk_write: ByteSize::gib(1),
        ..Limits::default()
    };
    let call = Call {
        tool: &tool,
        function: "compile_site",
        arguments: &serde_json::Map::new(),
        none_if_omitted: &[],
        grants: &grants,
        limits: &limits,
        packages: None,
    };
    // Called from blocking code that may run inside an async runtime.
    // Warden's own call: the staging folder lies in Warden's home, which no tenant's
    // mount may reach.
    let result = workers.own_call_blocking(call).map_err(|e| e.to_string())?;
    match result.status {
        Status::Ok => Ok(()),
        other => Err(format!(
            "compileall ended {other}: {}",
            result.message.unwrap_or_default()
        )),
    }
}
