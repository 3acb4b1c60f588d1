use super::*;

fn frame(header: &[u8], payload: &[u8], call: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&call.to_le_bytes());
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(payload);
    bytes
}

async fn read(bytes: &[u8], expect: &Expect) -> Result<Frame, WireError> {
    let mut from = bytes;
    receive_async(&mut from, expect, &FrameBudget::default()).await
}

#[test]
fn a_frame_round_trips_with_its_call() {
    let mut buf = Vec::new();
    send(&mut buf, &ToServer::Door { len: 3 }, b"abc", CallId(7)).unwrap();
    let (message, payload, call): (ToServer, _, _) = receive(&buf[..]).unwrap();
    assert!(matches!(message, ToServer::Door { len: 3 }));
    assert_eq!((payload.as_slice(), call), (&b"abc"[..], CallId(7)));
}

#[tokio::test]
async fn the_server_holds_each_frame_to_its_call_and_kind() {
    let limits = Limits::default();
    let call = CallId(0x51);
    let expect = Expect::call(call, &limits);
    let tick = serde_json::to_vec(&ToServer::Tick).unwrap();
    let door = serde_json::to_vec(&ToServer::Door { len: 2 }).unwrap();

    let ok = read(&frame(&door, b"hi", call.0), &expect).await.unwrap();
    assert_eq!(ok.payload, b"hi");
    // Another call's frame: refused before its lengths are looked at.
    assert!(matches!(
        read(&frame(&tick, &[], 0x53), &expect).await,
        Err(WireError::Stray { got: 0x53, .. })
    ));
    // A tick with a payload; a tick padded past a few bytes.
    assert!(matches!(
        read(&frame(&tick, b"x", call.0), &expect).await,
        Err(WireError::TooLarge { max: 0, .. })
    ));
    let mut padded = tick.clone();
    padded.extend(std::iter::repeat_n(b' ', 4096));
    assert!(matches!(
        read(&frame(&padded, &[], call.0), &expect).await,
        Err(WireError::TooLarge { .. })
    ));
    // Lengths past what the call can carry are refused from the prefix alone: the
    // bytes announced are never sent, and nothing waits for them.
    let mut huge = frame(&tick, &[], call.0);
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        read(&huge, &expect).await,
        Err(WireError::TooLarge { .. })
    ));
    let mut huge = frame(&door, &[], call.0);
    huge[4..12].copy_from_slice(&(expect.door + 1).to_le_bytes());
    assert!(matches!(
        read(&huge, &expect).await,
        Err(WireError::TooLarge { .. })
    ));
    // A worker starting may say nothing larger than its reason.
    let mut garbage = frame(b"{}", &[], 0);
    assert!(matches!(
        read(&garbage, &Expect::start()).await,
        Err(WireError::Malformed(_))
    ));
    garbage[..4].copy_from_slice(&(8u32 << 20).to_le_bytes());
    assert!(matches!(
        read(&garbage, &Expect::start()).await,
        Err(WireError::TooLarge { .. })
    ));
}

#[tokio::test]
async fn frames_wait_for_the_budget_and_give_it_back_when_dropped() {
    let budget = FrameBudget::new(ByteSize::kib(4));
    let call = CallId(3);
    let expect = Expect::call(call, &Limits::default());
    let door = serde_json::to_vec(&ToServer::Door { len: 3000 }).unwrap();
    let bytes = frame(&door, &[7u8; 3000], call.0);
    let first = receive_async(&mut &bytes[..], &expect, &budget)
        .await
        .unwrap();
    assert_eq!(budget.available(), ByteSize::kib(1));
    let mut from = &bytes[..];
    let second = receive_async(&mut from, &expect, &budget);
    let waited = tokio::time::timeout(std::time::Duration::from_millis(50), second).await;
    assert!(waited.is_err(), "the second frame must wait for the budget");
    drop(first);
    assert_eq!(budget.available(), ByteSize::kib(4));
    // A frame larger than the whole budget takes all of it, and does not wait
    // forever.
    let big = frame(&door, &[7u8; 9000], call.0);
    let taken = receive_async(&mut &big[..], &expect, &budget)
        .await
        .unwrap();
    assert_eq!(budget.available(), ByteSize::kib(0));
    drop(taken);
}

#[test]
fn what_a_worker_says_cannot_forge_a_log_line() {
    let forged = "ok\n2026-01-01T00:00:00Z  INFO warden: all fine\u{1b}[2J";
    let shown = said(forged);
    assert!(
        !shown.contains('\n') && !shown.contains('\u{1b}'),
        "{shown}"
    );
    assert!(said(&"x".repeat(10_000)).len() < 2_100);
}
