//! The `warden` binary: parse the command line, set up logging, run, and map the
//! outcome to an exit code.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    // `warden __confined-exec`: confines itself, then executes a program (pip). First,
    // while the process has one thread.
    if let Some(code) = warden::confine::exec_main() {
        return code;
    }
    // A worker's stderr is a pipe its server reads and logs as its own lines: plain
    // text, no colours.
    let worker = std::env::args_os().nth(1).is_some_and(|a| a == "__worker");
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(!worker && std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // A worker process started by Warden itself: it must confine itself before any
    // thread starts, so it is dispatched before anything else runs.
    if worker {
        return std::process::ExitCode::from(warden::worker::main());
    }
    let cli = cli::Cli::parse();
    if !matches!(cli.command, cli::Command::Serve(_)) {
        die_quietly_on_broken_pipe();
    }
    let code = match cli.run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<cli::UsageError>().is_some() {
                cli::ExitCode::Usage
            } else if e.downcast_ref::<cli::InvalidArguments>().is_some() {
                cli::ExitCode::InvalidRequest
            } else {
                cli::ExitCode::Failure
            }
        }
    };
    std::process::ExitCode::from(code as u8)
}

/// Lets `warden schema ... | head` end quietly, as Unix tools do, instead of panicking in
/// `println!` when the reader goes away. Not for `serve`: there a client that hangs up
/// must not kill the server.
#[expect(
    unsafe_code,
    reason = "restoring the default SIGPIPE action needs libc"
)]
fn die_quietly_on_broken_pipe() {
    // SAFETY: called once at start-up, before any thread is spawned; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
