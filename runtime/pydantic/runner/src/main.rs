//! A throwaway host for the Pydantic-2 proof: wasmtime 48.0.8, WASI preview 1, configured
//! like Warden's engine where it decides behaviour (wasm exceptions on, fuel on, epoch
//! interruption on, a 4 MiB wasm stack unless PYD_STACK says otherwise, async calls).
//!
//! Usage:
//!   pyd-runner compile <in.wasm> <out.cwasm>
//!   pyd-runner cmd     <module> [guest argv...]          run `_start` (a command module)
//!   pyd-runner turn    <module> <script.py> [more.py..]  reactor: _initialize,
//!                      wizer.initialize (when exported), then one `turn` per script
//!   pyd-runner run     <module> [guest argv...]          `_initialize`, `run`, `shutdown`
//!   pyd-runner wizer   <in.wasm> <out.wasm> [preload.py] pre-initialize with Wizer
//! <module> is a .wasm (compiled here, timed) or a .cwasm made by `compile`.
//! Environment: PYD_DIRS="host::guest[:ro|rw],..." preopens; PYD_ENV="K=V;K=V" guest env;
//! PYD_STACK max wasm stack in bytes (default 4 MiB, Warden's).

use std::time::Instant;

use wasmtime::error::Context;
use wasmtime::{Result, bail};
use wasmtime::{Config, Engine, Instance, Linker, Module, Store};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

fn engine() -> Result<Engine> {
    let stack: usize = std::env::var("PYD_STACK")
        .ok()
        .map(|s| s.parse())
        .transpose()
        .map_err(|e: std::num::ParseIntError| wasmtime::Error::msg(e.to_string()))?
        .unwrap_or(4 << 20);
    let mut c = Config::new();
    c.wasm_exceptions(true)
        .consume_fuel(true)
        .epoch_interruption(true)
        .max_wasm_stack(stack)
        .async_stack_size(stack + (1 << 20))
        .memory_init_cow(true);
    Engine::new(&c)
}

fn load(engine: &Engine, path: &str) -> Result<Module> {
    let t = Instant::now();
    let m = if path.ends_with(".cwasm") {
        unsafe { Module::deserialize_file(engine, path)? }
    } else {
        Module::from_file(engine, path)?
    };
    eprintln!("[pyd] load/compile {path}: {:.3} s", t.elapsed().as_secs_f64());
    Ok(m)
}

fn wasi(argv: &[String]) -> Result<WasiP1Ctx> {
    let mut b = WasiCtxBuilder::new();
    b.allow_blocking_current_thread(true);
    b.args(argv).inherit_stdio();
    if let Ok(env) = std::env::var("PYD_ENV") {
        for kv in env.split(';').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').context("PYD_ENV entry without =")?;
            b.env(k, v);
        }
    }
    if let Ok(dirs) = std::env::var("PYD_DIRS") {
        for d in dirs.split(',').filter(|s| !s.is_empty()) {
            let (host, rest) = d.split_once("::").context("PYD_DIRS entry without ::")?;
            let (guest, perms) = match rest.rsplit_once(':') {
                Some((g, "rw")) => (g, FsPerms::ReadWrite),
                Some((g, "ro")) => (g, FsPerms::ReadOnly),
                _ => (rest, FsPerms::ReadOnly),
            };
            b.preopened_dir(host, guest, perms)?;
        }
    }
    Ok(b.build_p1())
}

fn linker(engine: &Engine) -> Result<Linker<WasiP1Ctx>> {
    let mut l: Linker<WasiP1Ctx> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut l, |c| c)?;
    // Warden's door, stubbed as its snapshot builder stubs it: no host bound.
    l.func_wrap("host", "call", |_: i32, _: i32, _: i32, _: i32| -> i32 { -1 })?;
    Ok(l)
}

fn store(engine: &Engine, argv: &[String]) -> Result<Store<WasiP1Ctx>> {
    let mut s = Store::new(engine, wasi(argv)?);
    s.set_fuel(u64::MAX / 4)?;
    s.set_epoch_deadline(u64::MAX / 4);
    Ok(s)
}

fn fuel_used(s: &Store<WasiP1Ctx>) -> u64 {
    u64::MAX / 4 - s.get_fuel().unwrap_or(0)
}

async fn call0(s: &mut Store<WasiP1Ctx>, i: Instance, name: &str) -> Result<bool> {
    match i.get_typed_func::<(), ()>(&mut *s, name) {
        Ok(f) => {
            let t = Instant::now();
            f.call_async(&mut *s, ()).await.with_context(|| format!("`{name}` trapped"))?;
            eprintln!("[pyd] {name}: {:.3} s", t.elapsed().as_secs_f64());
            Ok(true)
        }
        Err(_) => Ok(false),
    }
}

async fn turn(s: &mut Store<WasiP1Ctx>, i: Instance, src: &str) -> Result<i32> {
    let mem = i.get_memory(&mut *s, "memory").context("no memory export")?;
    let alloc = i.get_typed_func::<i32, i32>(&mut *s, "host_alloc")?;
    let turn = i.get_typed_func::<(i32, i32), i32>(&mut *s, "turn")?;
    let len = i32::try_from(src.len())?;
    let ptr = alloc.call_async(&mut *s, len).await?;
    mem.write(&mut *s, ptr as u32 as usize, src.as_bytes())?;
    Ok(turn.call_async(&mut *s, (ptr, len)).await?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let engine = engine()?;
    let argv0 = "/usr/local/bin/python.wasm".to_string();
    match args.get(1).map(String::as_str) {
        Some("compile") => {
            let t = Instant::now();
            let bytes = engine.precompile_module(&std::fs::read(&args[2])?)?;
            std::fs::write(&args[3], &bytes)?;
            eprintln!(
                "[pyd] precompile: {:.3} s, {} bytes",
                t.elapsed().as_secs_f64(),
                bytes.len()
            );
        }
        Some("cmd") => {
            let module = load(&engine, &args[2])?;
            let mut argv = vec![argv0];
            argv.extend(args[3..].iter().cloned());
            let l = linker(&engine)?;
            let mut s = store(&engine, &argv)?;
            let t = Instant::now();
            let inst = l.instantiate_async(&mut s, &module).await?;
            eprintln!("[pyd] instantiate: {:.6} s", t.elapsed().as_secs_f64());
            let t = Instant::now();
            let start = inst.get_typed_func::<(), ()>(&mut s, "_start")?;
            let r = start.call_async(&mut s, ()).await;
            eprintln!(
                "[pyd] _start: {:.3} s, fuel {}",
                t.elapsed().as_secs_f64(),
                fuel_used(&s)
            );
            if let Err(e) = r {
                if let Some(code) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                    std::process::exit(code.0);
                }
                return Err(e);
            }
        }
        Some("turn") => {
            let total = Instant::now();
            let module = load(&engine, &args[2])?;
            let l = linker(&engine)?;
            let mut s = store(&engine, &[argv0])?;
            let t = Instant::now();
            let inst = l.instantiate_async(&mut s, &module).await?;
            eprintln!("[pyd] instantiate: {:.6} s", t.elapsed().as_secs_f64());
            call0(&mut s, inst, "_initialize").await?;
            call0(&mut s, inst, "wizer.initialize").await?;
            for script in &args[3..] {
                let src = std::fs::read_to_string(script)?;
                let f0 = fuel_used(&s);
                let t = Instant::now();
                let rc = turn(&mut s, inst, &src).await?;
                eprintln!(
                    "[pyd] turn {script}: rc={rc} {:.3} s, fuel {}",
                    t.elapsed().as_secs_f64(),
                    fuel_used(&s) - f0
                );
            }
            eprintln!(
                "[pyd] total (incl. load): {:.3} s",
                total.elapsed().as_secs_f64()
            );
        }
        Some("run") => {
            // The `run` export with a WASI argv, then `shutdown` (a fresh, non-snapshot module).
            let module = load(&engine, &args[2])?;
            let mut argv = vec![argv0];
            argv.extend(args[3..].iter().cloned());
            let l = linker(&engine)?;
            let mut s = store(&engine, &argv)?;
            let inst = l.instantiate_async(&mut s, &module).await?;
            call0(&mut s, inst, "_initialize").await?;
            let run = inst.get_typed_func::<(), i32>(&mut s, "run")?;
            let t = Instant::now();
            let rc = run.call_async(&mut s, ()).await?;
            eprintln!("[pyd] run: rc={rc} {:.3} s", t.elapsed().as_secs_f64());
            let shutdown = inst.get_typed_func::<(), i32>(&mut s, "shutdown")?;
            let rc = shutdown.call_async(&mut s, ()).await?;
            eprintln!("[pyd] shutdown: rc={rc}");
        }
        Some("wizer") => {
            let wasm = std::fs::read(&args[2])?;
            let mut wizer = wasmtime_wizer::Wizer::new();
            wizer.init_func("wizer.initialize");
            let t = Instant::now();
            let (cx, instrumented) = wizer.instrument(&wasm)?;
            let module = Module::new(&engine, &instrumented)?;
            eprintln!("[pyd] wizer instrument+compile: {:.3} s", t.elapsed().as_secs_f64());
            let l = linker(&engine)?;
            let mut s = store(&engine, &[argv0])?;
            let inst = l.instantiate_async(&mut s, &module).await?;
            call0(&mut s, inst, "_initialize").await?;
            if !call0(&mut s, inst, "wizer.initialize").await? {
                bail!("no wizer.initialize export");
            }
            if let Some(pre) = args.get(4) {
                let rc = turn(&mut s, inst, &std::fs::read_to_string(pre)?).await?;
                eprintln!("[pyd] preload turn rc={rc}");
                if rc != 0 {
                    bail!("preload failed");
                }
            }
            call0(&mut s, inst, "warden_reset_preopens").await?;
            let t = Instant::now();
            let out = wizer
                .snapshot(
                    &cx,
                    &mut wasmtime_wizer::WasmtimeWizer { store: &mut s, instance: inst },
                )
                .await?;
            std::fs::write(&args[3], &out)?;
            eprintln!(
                "[pyd] snapshot: {:.3} s, {} bytes",
                t.elapsed().as_secs_f64(),
                out.len()
            );
        }
        _ => bail!("usage: pyd-runner compile|cmd|turn|wizer ..."),
    }
    Ok(())
}
