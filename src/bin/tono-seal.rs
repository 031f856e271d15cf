//! `tono-seal`: provision per-user keys and secrets, run tools as their
//! user, serve a worker. Thin: parses arguments and calls the library.
#![forbid(unsafe_code)]

use clap::Parser;

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TONO_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = tono_seal::cli::Cli::parse();
    std::process::exit(tono_seal::cli::main(cli));
}
