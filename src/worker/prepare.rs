//! Preparing a tool's warm state in a fresh worker of its tenant's, and storing it.

use std::path::Path;
use std::sync::Arc;

use super::key::WorkerKey;
use super::pool::{GRACE, Pool};
use super::process::worker_failed;
use super::wire::{CallId, Expect, ToServer, ToWorker, said};
use crate::sandbox::{PREPARE_DEADLINE, SandboxError, ShareKey, ToolFolder, Warmth};

impl Pool {
    pub(super) async fn warm_state(
        self: &Arc<Self>,
        tool: &ToolFolder,
        packages: Option<&Path>,
        share: &ShareKey,
    ) -> Result<Warmth, SandboxError> {
        if let Some(found) = self.warm.cached(tool, packages, share)? {
            return Ok(found);
        }
        let _one_at_a_time = self.preparing.lock().await;
        if let Some(found) = self.warm.cached(tool, packages, share)? {
            return Ok(found);
        }
        let key = self.warm.key(tool, packages, share)?;
        let worker_key = WorkerKey::of(share, tool.host_dir(), packages, None);
        let _slot = self.slots.acquire().await;
        // A worker that has run nothing yet: a breached one, which has served calls of
        // the key before, could otherwise make the state every later call starts from.
        let mut worker = self.fresh(&worker_key).await?;
        let asked = ToWorker::Prepare {
            tool_dir: tool.host_dir().to_owned(),
            file_name: tool.file_name().to_owned(),
            packages: packages.map(ToOwned::to_owned),
        };
        worker.call = CallId::draw();
        let expect = Expect::prepare(worker.call);
        let answered = tokio::time::timeout(PREPARE_DEADLINE + GRACE, async {
            worker.send(&asked, &[]).await?;
            worker.receive(&expect).await
        })
        .await
        .map(|frame| frame.map(|f| (f.message, f.payload)));
        let (prepared, image) = match answered {
            Ok(Ok((ToServer::Prepared { prepared }, image))) => (prepared, image),
            Ok(Ok((other, _))) => {
                let why = worker.end().await;
                return Err(worker_failed(format!(
                    "it answered a preparation with {other:?}; {why}"
                )));
            }
            Ok(Err(e)) => {
                let why = worker.end().await;
                return Err(worker_failed(format!("{e}; {why}")));
            }
            Err(_) => {
                let _ = worker.end().await;
                return Err(worker_failed(format!(
                    "the preparation took longer than {}",
                    humantime::format_duration(PREPARE_DEADLINE + GRACE)
                )));
            }
        };
        self.give_back(worker_key, worker);
        let mut prepared =
            prepared.map_err(|reason| SandboxError::Warm(wasmtime::Error::msg(said(&reason))))?;
        prepared.payload = Some(image);
        // Written and synced to disk off the pool's thread, which serves every worker.
        let warm = self.warm.clone();
        tokio::task::spawn_blocking(move || warm.store(&key, prepared))
            .await
            .map_err(|e| worker_failed(format!("storing a warm state failed: {e}")))?
    }
}
