//! What a worker writes to stderr (its own log lines: a reason it stops, a warning),
//! relayed into the server's log: each line prefixed with the worker's process id and
//! escaped, long lines cut, the whole capped, so that a breached worker can neither
//! forge a line of the server's log nor flood it.

use super::wire::said;

/// Most bytes the server logs of a worker's stderr (its own log lines: a reason it
/// stops, a warning), prefixes included; past them, one line says the rest was dropped.
const STDERR_LOGGED: usize = 64 << 10;
/// Most characters of one line logged.
const STDERR_LINE: u64 = 1_000;

/// Reads what a worker writes to stderr and logs it as the server's own lines, each
/// prefixed with the worker's process id and escaped: a breached worker cannot forge a
/// line of the server's log or flood it.
pub(super) async fn relay_stderr(stderr: tokio::process::ChildStderr, pid: u32) {
    relay(stderr, pid, |line| tracing::warn!(worker = pid, "{line}")).await;
}

/// [`relay_stderr`]'s work, each line given to `log`.
async fn relay(from: impl tokio::io::AsyncRead + Unpin, pid: u32, mut log: impl FnMut(String)) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
    let mut lines = BufReader::new(from);
    let mut logged = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        // At most a line's worth is kept; the rest of a longer line is read and dropped.
        let mut kept = (&mut lines).take(STDERR_LINE);
        match kept.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") && !skip_line(&mut lines).await {
            return;
        }
        if logged >= STDERR_LOGGED {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let shown = format!("worker {pid} says: {}", said(text.trim_end()));
        logged += shown.len();
        log(shown);
        if logged >= STDERR_LOGGED {
            log(format!(
                "worker {pid} wrote more to stderr; the rest is dropped"
            ));
        }
    }
}

/// Reads up to the end of the line, keeping nothing; false at the end of the stream.
async fn skip_line(from: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> bool {
    use tokio::io::AsyncBufReadExt;
    loop {
        let Ok(buffered) = from.fill_buf().await else {
            return false;
        };
        if buffered.is_empty() {
            return false;
        }
        match buffered.iter().position(|b| *b == b'\n') {
            Some(end) => {
                from.consume(end + 1);
                return true;
            }
            None => {
                let all = buffered.len();
                from.consume(all);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_workers_stderr_is_logged_escaped_cut_and_capped() {
        let mut written = b"starting\n2026-01-01T00:00:00Z  INFO warden: forged\x1b[2J\n".to_vec();
        written.extend(std::iter::repeat_n(b'y', 1 << 20));
        written.push(b'\n');
        for n in 0..10_000 {
            written.extend(format!("line {n}\n").bytes());
        }
        let mut logged = Vec::new();
        relay(&written[..], 42, |line| logged.push(line)).await;
        assert_eq!(logged[0], "worker 42 says: starting");
        // The forged line is one of the worker's, prefixed, its escape shown as text.
        assert!(
            logged[1].starts_with("worker 42 says: 2026"),
            "{}",
            logged[1]
        );
        assert!(!logged[1].contains('\x1b'), "{}", logged[1]);
        // A megabyte line is cut to its first thousand bytes.
        assert!(logged[2].len() < 1_100, "{}", logged[2].len());
        // The lines after the cap are dropped, and it says so once.
        let total: usize = logged.iter().map(String::len).sum();
        assert!(total < 2 * STDERR_LOGGED, "{total}");
        assert!(logged.last().unwrap().contains("the rest is dropped"));
        assert!(!logged.iter().any(|l| l.contains("line 9999")));
    }
}
