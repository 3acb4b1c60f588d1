//! The `warden` binary: parse the command line, set up logging, run, and map the
//! outcome to an exit code.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let code = match cli::Cli::parse().run() {
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
