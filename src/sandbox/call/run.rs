//! Running one call: a fresh instance of the warm state (or of Warden's snapshot) with
//! the call's WASI context, pipes, scratch folder, door and seat, until it returns,
//! traps or passes its deadline; then the verdict and the result.

use std::sync::Arc;
use std::time::Instant;

use crate::events::LogLevel;
use crate::limits::Fuel;
use crate::outcome::{CallResult, Start};
use crate::sandbox::guest::{Failure, new_store, run_call, trap_kind};
use crate::sandbox::pipe::CappedPipe;
use crate::sandbox::protocol::{self, Request};
use crate::sandbox::verdict::{self, Ended, Observed, TrapKind};
use crate::sandbox::{
    CoreSeat, Door, Job, Sandbox, SandboxError, ScratchRoot, Spent, WarmState, check_memory,
    frame_room, lossy, to_usize, wasi,
};

impl Sandbox {
    /// Runs one job in a fresh instance of the warm state when given one, else of
    /// Warden's snapshot. `budget` is the wall time left to the call (default: its
    /// deadline limit), counted from when it has a pool slot: a worker gets what its
    /// server's call has left. `door` makes the call's door once its deadline is known;
    /// `seat` is its place at the cores. The result's `requests` are left empty: the
    /// door's owner knows them.
    /// With the result comes what the call leaves behind ([`Spent`]): dropping it resets
    /// the instance and frees its slot, so a worker answers first and drops it after.
    pub async fn run_job<'j>(
        &self,
        job: &'j Job,
        warm: Option<&WarmState>,
        budget: Option<std::time::Duration>,
        door: impl FnOnce(Instant) -> Option<Arc<dyn Door>> + Send + 'j,
        seat: Option<Arc<dyn CoreSeat>>,
    ) -> Result<(CallResult, Spent<'_>), SandboxError> {
        let limits = &job.limits;
        check_memory(limits, self.max_memory)?;
        let (loaded, start) = match warm {
            Some(state) => {
                self.warm.store().touch(state);
                match self.warm.load(&self.base(), state) {
                    Ok(loaded) => (Some(loaded), Start::Warm),
                    // Nothing of the guest has run: the call starts from the snapshot
                    // instead, and the state is removed (where this process may write)
                    // so that it is prepared again.
                    Err(SandboxError::WarmRefused { key, reason }) => {
                        tracing::warn!(
                            "the warm state {key} is refused, so the call runs cold: {reason}"
                        );
                        let _ = self.warm.store().remove(&key);
                        (None, Start::Cold)
                    }
                    Err(e) => return Err(e),
                }
            }
            None => (None, Start::Cold),
        };
        let env: serde_json::Map<String, serde_json::Value> = job
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        let nonce = format!("{:032x}", rand::random::<u128>());
        let tool = job.tool();
        let module = tool.guest_path();
        let request = Request {
            nonce: &nonce,
            module: &module,
            function: &job.function,
            arguments: &job.arguments,
            none_if_omitted: &job.none_if_omitted,
            env,
            return_char_limit: limits.return_chars.0,
            return_bytes: limits.return_bytes.as_u64(),
            progress: job.wants.progress,
            log_level: job.wants.log_level.map(LogLevel::as_str),
            packages: job.packages.as_ref().map(|_| wasi::PACKAGES_GUEST),
        };
        let stdin = protocol::stdin(&request)
            .map_err(|e| SandboxError::Instantiate(wasmtime::Error::new(e)))?;

        let stdout_cap = limits.stdout.as_u64();
        let stdout = CappedPipe::new("stdout", to_usize(stdout_cap + frame_room(limits)));
        let stderr = CappedPipe::new("stderr", to_usize(limits.stderr.as_u64()));
        let mut scratch = self.scratch.as_ref().map(ScratchRoot::folder).transpose()?;
        let folders = wasi::RuntimeFolders {
            empty_root: &self.files.empty_root,
            stdlib: &self.files.stdlib_dir(),
            matplotlib_data: &self.files.matplotlib_data_dir(),
            tool: Some(&job.tool_dir),
            packages: job.packages.as_deref(),
            scratch: scratch.as_ref().map(|f| f.path()),
        };
        let mounts = self.open_mounts(job)?;
        let (ctx, scratch_fd) = wasi::context(
            &folders,
            &job.grants,
            &mounts,
            stdin,
            stdout.clone(),
            stderr.clone(),
        )
        .map_err(SandboxError::Instantiate)?;
        drop(mounts);

        let slot = self.slots.acquire().await;
        let started = Instant::now();
        let deadline = started + budget.unwrap_or(limits.deadline).min(limits.deadline);
        let door = door(deadline);
        let mut store = new_store(
            &self.engine,
            ctx,
            limits,
            deadline,
            door,
            seat.clone(),
            scratch_fd,
        )?;

        let (pre, exports) = match &loaded {
            Some(state) => (&state.pre, &state.exports),
            None => (&self.pre, &self.exports),
        };
        let run = tokio::time::timeout_at(deadline.into(), run_call(pre, exports, &mut store));
        let ran = run.await;
        // The guest has stopped (returned, trapped, or dropped with its future): its
        // core goes to the next call at once.
        if let Some(seat) = &seat {
            seat.finish();
        }
        let wall_time = started.elapsed();
        let fuel_left = store.get_fuel().unwrap_or(0);
        let memory = &store.data().memory;
        let (memory_hit, peak) = (memory.hit, memory.peak as u64);
        if let Some(folder) = &mut scratch
            && store.data().created_nothing()
        {
            folder.known_empty();
        }
        // The guest can no longer write: its output is read while the store, whose
        // instance takes a while to reset, is left to the caller to drop.
        let spent = Spent {
            _store: store,
            _slot: slot.ok(),
            _scratch: scratch,
        };

        let (out, out_overflow) = stdout.take();
        let (err, err_overflow) = stderr.take();
        let stdout_cap = to_usize(stdout_cap);
        let ended = match ran {
            Err(_elapsed) => Ended::TimedOut,
            Ok(Err(Failure::Instantiate(e))) if !memory_hit => {
                return Err(SandboxError::Instantiate(e));
            }
            // The snapshot's memory alone is above the cap.
            Ok(Err(Failure::Instantiate(_))) => Ended::Trapped(TrapKind::Other(
                "the runtime needs more memory than the cap".into(),
            )),
            Ok(Err(Failure::Trap(e))) => Ended::Trapped(trap_kind(&e)),
            Ok(Ok(code)) => Ended::Returned(code),
        };
        // The answer is read only once the guest has stopped running for good.
        let (tool_out, answer) = match ended {
            Ended::Returned(0) => protocol::split_stdout(&out, &nonce),
            _ => (&out[..], protocol::Answer::Missing),
        };
        let verdict = verdict::decide(
            Observed {
                ended,
                output_over: out_overflow || err_overflow || tool_out.len() > stdout_cap,
                memory_hit,
                answer,
            },
            limits,
        );
        let result = CallResult {
            status: verdict.status,
            value: verdict.value,
            truncated: verdict.truncated,
            content: verdict.content,
            error: verdict.error,
            message: verdict.message,
            stdout: lossy(&tool_out[..tool_out.len().min(stdout_cap)]),
            stderr: lossy(&err),
            fuel_used: Fuel(limits.fuel.0.saturating_sub(fuel_left)),
            wall_time,
            peak_memory_bytes: peak,
            requests: Vec::new(),
            start,
        };
        Ok((result, spent))
    }
}
