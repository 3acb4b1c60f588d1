//! A resource read against a tool call of the same file, both through `warden mcp`
//! (the real binary over stdio, driven by rmcp's client): what serving a resource adds
//! to running a function (finding it by URI, typing its arguments, making contents).

use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use rmcp::transport::TokioChildProcess;
use serde_json::json;

use super::{Stats, stats};

/// p50/p99 of `resources/read` and of `tools/call`, `calls` each, in turns after a
/// warm-up (the file's warm state is ready by then).
pub fn read_and_call(
    rt: &tokio::runtime::Runtime,
    home: &std::path::Path,
    file: &std::path::Path,
    calls: usize,
) -> anyhow::Result<(Stats, Stats)> {
    rt.block_on(async {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
        command
            .arg("mcp")
            .arg(file)
            .env("WARDEN_HOME", home)
            .env_remove("WARDEN_LOG")
            .stderr(std::process::Stdio::null());
        let client = rmcp::ServiceExt::serve((), TokioChildProcess::new(command)?).await?;
        let read =
            || client.read_resource(ReadResourceRequestParams::new("forecast://Oslo/current"));
        let call = || {
            let arguments = json!({"city": "Oslo"});
            let arguments = arguments.as_object().cloned().unwrap_or_default();
            client.call_tool(CallToolRequestParams::new("forecast").with_arguments(arguments))
        };
        // Until the warm state is ready, calls run cold: wait for it, then warm up.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let r = call().await?;
            let start = r
                .meta
                .as_ref()
                .and_then(|m| m.0.get("warden"))
                .and_then(|w| w.get("start"));
            if start == Some(&json!("warm")) {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the file's warm state was not ready in 2 minutes"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for _ in 0..50 {
            read().await?;
            call().await?;
        }
        let (mut reads, mut calls_taken) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
        for _ in 0..calls {
            let t = Instant::now();
            let r = read().await?;
            reads.push(t.elapsed());
            anyhow::ensure!(!r.contents.is_empty(), "an empty read");
            let t = Instant::now();
            let r = call().await?;
            calls_taken.push(t.elapsed());
            anyhow::ensure!(r.is_error != Some(true), "the call failed: {r:?}");
        }
        client.cancel().await?;
        Ok((stats(reads), stats(calls_taken)))
    })
}
