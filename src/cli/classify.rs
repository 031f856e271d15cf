//! `classify` (a verdict line per call line on stdin) and `policy check`:
//! the classifier from the command line, with no launch and no root.
#![forbid(unsafe_code)]

use std::io::Write;

use super::args::{Command, PolicyAction};
use super::exit::{self, CliError};
use super::load_policy;
use crate::classify::Policy;

/// Runs `classify` or `policy`.
pub(super) fn command(command: Command) -> Result<i32, CliError> {
    match command {
        Command::Classify { policy } => classify_lines(&load_policy(policy.as_deref())?),
        Command::Policy {
            action: PolicyAction::Check { file },
        } => {
            let policy = load_policy(Some(&file))?;
            for (name, kind) in policy.tools() {
                let stays = if policy.may_stay(kind) {
                    "may stay"
                } else {
                    "drops"
                };
                println!("{name:<24} {:<12} {stays}", kind.name());
            }
            println!("stay ports: {:?}", policy.stay_ports());
            Ok(exit::OK)
        }
        _ => Err(CliError::new(
            exit::FAILED,
            "internal error: not a classify or policy command",
        )),
    }
}

/// `classify`: one verdict line per input line, in order; a malformed line
/// is its own refusal and processing goes on.
fn classify_lines(policy: &Policy) -> Result<i32, CliError> {
    use std::io::BufRead;
    let stdin = std::io::stdin().lock();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let io = |e: std::io::Error| CliError::new(exit::FAILED, e.to_string());
    for line in stdin.split(b'\n') {
        let line = line.map_err(io)?;
        let (_, verdict) = crate::classify::classify_raw(&line, policy);
        let answer = serde_json::json!({ "verdict": verdict.kind(), "code": verdict.code(), "reason": verdict.reason() });
        serde_json::to_writer(&mut out, &answer)
            .map_err(|e| CliError::new(exit::FAILED, e.to_string()))?;
        out.write_all(b"\n").map_err(io)?;
    }
    out.flush().map_err(io)?;
    Ok(exit::OK)
}
