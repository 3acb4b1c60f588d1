//! The server's side of the wire against a worker that says anything: random and
//! mutated frames, written on a real socket pair, read by the real conversation of a
//! call (bounds, budget, door, cores). Whatever arrives, the server must not panic,
//! must not wait past the call, must give back every byte it took from the frame
//! budget, and must not grow its memory.
//!
//! `cargo test` runs a few thousand cases; `make fuzz` runs it for `WARDEN_FUZZ_SECS`
//! (with the schema fuzzer), and `WARDEN_FUZZ_SEED` replays a run.

use std::io::Write;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::call::converse;
use super::process::Worker;
use super::wire::{CallId, Expect, FrameBudget, ToServer, ToWorker};
use crate::grants::Grants;
use crate::limits::Limits;
use crate::outbound::{CallSecrets, Clients, Exchange, PrivateNetwork};
use crate::outcome::CallResult;
use crate::sandbox::cores::{Cores, Seat, ShareKey};

/// A frame as the wire has it: header, payload, call.
fn frame(header: &[u8], payload: &[u8], call: CallId) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&call.0.to_le_bytes());
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(payload);
    bytes
}

fn message(m: &ToServer) -> Vec<u8> {
    serde_json::to_vec(m).expect("a message serializes")
}

/// Frames a worker may send during a call, well formed.
fn valid(call: CallId) -> Vec<Vec<u8>> {
    let result: CallResult = serde_json::from_value(serde_json::json!({
        "status": "ok", "value": {"a": [1, 2]}, "truncated": null, "error": null,
        "message": null, "stdout": "out", "stderr": "", "fuel_used": 10,
        "wall_time_us": 0, "peak_memory_bytes": 65536,
    }))
    .expect("a result parses");
    let door = br#"{"method":"GET","url":"https://example.invalid/"}"#;
    vec![
        frame(&message(&ToServer::Tick), &[], call),
        frame(&message(&ToServer::Acquire), &[], call),
        frame(&message(&ToServer::Release), &[], call),
        frame(
            &message(&ToServer::Door {
                len: door.len() as u64,
            }),
            door,
            call,
        ),
        frame(&message(&ToServer::Done { result: Ok(result) }), &[], call),
        frame(
            &message(&ToServer::Done {
                result: Err("cannot".into()),
            }),
            &[],
            call,
        ),
        frame(&message(&ToServer::Loaded), &[], call),
        frame(
            &message(&ToServer::Unusable {
                reason: "\u{1b}[2J\nforged".into(),
            }),
            &[],
            call,
        ),
    ]
}

/// Lengths around the bounds that matter, and the extremes.
fn length(rng: &mut StdRng, expect: &Expect) -> u64 {
    let edges = [
        0,
        1,
        1 << 10,
        (1 << 10) + 1,
        64 << 10,
        expect.door,
        expect.door + 1,
        expect.result,
        expect.result + 1,
        u64::from(u32::MAX),
        1 << 30,
        u64::MAX,
    ];
    if rng.random_bool(0.7) {
        edges[rng.random_range(0..edges.len())]
    } else {
        rng.random()
    }
}

/// One case: a few frames, valid or mutated, and sometimes bytes with no frame at all.
fn case(rng: &mut StdRng, call: CallId, expect: &Expect) -> Vec<u8> {
    let valid = valid(call);
    let mut bytes = Vec::new();
    for _ in 0..rng.random_range(1..6) {
        let mut f = valid[rng.random_range(0..valid.len())].clone();
        match rng.random_range(0..9) {
            0 => {}
            1 => {
                for _ in 0..rng.random_range(1..8) {
                    let at = rng.random_range(0..f.len());
                    f[at] = rng.random();
                }
            }
            2 => {
                let len = length(rng, expect) as u32;
                f[..4].copy_from_slice(&len.to_le_bytes());
            }
            3 => {
                let len = length(rng, expect);
                f[4..12].copy_from_slice(&len.to_le_bytes());
            }
            4 => f[12..20].copy_from_slice(&rng.random::<u64>().to_le_bytes()),
            5 => f.truncate(rng.random_range(0..f.len())),
            6 => {
                let junk: Vec<u8> = (0..rng.random_range(0..64)).map(|_| rng.random()).collect();
                f.extend(junk);
            }
            7 => {
                f = (0..rng.random_range(0..256))
                    .map(|_| rng.random())
                    .collect();
            }
            _ => {
                // A header of a message kind padded or nested as JSON allows.
                let pad = rng.random_range(0..4096);
                let header = format!("{}{}", " ".repeat(pad), "\"tick\"");
                f = frame(header.as_bytes(), &[], call);
            }
        }
        bytes.extend(f);
    }
    bytes
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

#[tokio::test(flavor = "current_thread")]
async fn frames_from_a_lying_worker_never_crash_stall_or_bloat_the_server() {
    let secs = std::env::var("WARDEN_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    let seed: u64 = std::env::var("WARDEN_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("frame fuzz: seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let limits = Limits::default();
    let budget = FrameBudget::new(bytesize::ByteSize::mib(64));
    let total = budget.available();
    let cores = Cores::new(NonZeroUsize::MIN);
    let clients = Arc::new(Clients::default());
    let resident = resident_bytes();
    let started = Instant::now();
    let mut cases = 0u64;
    let mut outcomes = [0u64; 3];
    while match secs {
        Some(secs) => started.elapsed() < Duration::from_secs(secs),
        None => cases < 3_000,
    } {
        cases += 1;
        let call = CallId::draw();
        let expect = Expect::call(call, &limits);
        let bytes = case(&mut rng, call, &expect);
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut worker = Worker::over(ours, budget.clone()).await;
        worker.call = call;
        let writer = std::thread::spawn(move || {
            let _ = theirs.write_all(&bytes);
            let _ = theirs.shutdown(std::net::Shutdown::Write);
            // Kept open until the server is done answering.
            theirs
        });
        let deadline = Instant::now() + Duration::from_millis(200);
        let exchange = Exchange::new(
            &Grants::default(),
            CallSecrets::default(),
            &limits,
            PrivateNetwork::Refused,
            Arc::clone(&clients),
            deadline,
            None,
        );
        let seat = Arc::new(Seat::new(&cores, ShareKey::new("fuzz")));
        let run = ToWorker::Go;
        let ended = tokio::time::timeout(
            Duration::from_secs(5),
            converse(&mut worker, &run, &exchange, &seat, deadline, &expect),
        )
        .await
        .unwrap_or_else(|_| panic!("case {cases} (seed {seed}) stalled the server"));
        seat.release();
        outcomes[match ended {
            Ok(Ok(_)) => 0,
            Ok(Err(_)) => 1,
            Err(_) => 2,
        }] += 1;
        drop(worker);
        drop(writer.join());
        assert_eq!(
            budget.available(),
            total,
            "case {cases} (seed {seed}) kept frame bytes"
        );
    }
    let grown = resident_bytes().saturating_sub(resident);
    eprintln!(
        "frame fuzz: {cases} cases in {:?}: {} results, {} refusals, {} workers ended; \
         resident memory grew by {} KiB",
        started.elapsed(),
        outcomes[0],
        outcomes[1],
        outcomes[2],
        grown / 1024
    );
    assert!(
        outcomes[2] > 0 && outcomes[0] > 0,
        "the cases must reach both ends"
    );
    assert!(
        grown < 256 << 20,
        "the server grew by {grown} bytes reading frames"
    );
}
