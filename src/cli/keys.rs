//! The provisioning commands (`keygen`, `recipient`, `seal`, `import`,
//! `list`, `remove`, `rotate`, `reveal`): each a key store operation run
//! as the user through the launcher.
//!
//! Guarantees: secret values are never taken from argv or the environment:
//! `seal` and `import` hand this process's stdin to the launcher, and
//! `reveal` hands it this process's stdout, so the provisioning process
//! never holds a value.
#![forbid(unsafe_code)]

use std::time::Duration;

use serde_json::Value;

use super::args::{Command, UserArg};
use super::exit::{self, CliError};
use super::print_json;
use crate::drop::spawn::{launch, Input, Output};
use crate::drop::Launcher;
use crate::launch::plan::{Action, KeysOp, LaunchPlan};
use crate::launch::report::StatusReport;
use crate::user::TargetUser;

/// Runs a key store operation as `user` through the launcher.
pub async fn keys_op(
    launcher: &Launcher,
    user: &TargetUser,
    op: KeysOp,
    input: Input,
    output: Output,
) -> Result<Value, CliError> {
    let plan = LaunchPlan::for_user(user, Action::Keys { op });
    let done = launch(launcher, plan, input, output, Duration::from_secs(600)).await?;
    match done.report {
        StatusReport::Done(v) => Ok(v),
        StatusReport::Failed(e) => Err(e.into()),
        other => Err(CliError::new(
            exit::FAILED,
            format!(
                "the launcher ended without a result ({other:?}, status {:?}): {}",
                done.status,
                String::from_utf8_lossy(&done.stderr.bytes).trim()
            ),
        )),
    }
}

/// Runs one of the key store commands.
pub(super) async fn command(command: Command, launcher: &Launcher) -> Result<i32, CliError> {
    let capture = Output::Capture(64 * 1024);
    let simple = |user: &UserArg| TargetUser::resolve(&user.user).map_err(CliError::from);
    match command {
        Command::Keygen { user, force, json } => {
            let user = simple(&user)?;
            let v = keys_op(
                launcher,
                &user,
                KeysOp::Keygen { force },
                Input::Null,
                capture,
            )
            .await?;
            if json.json {
                print_json(&v)?;
            } else {
                if let Some(kept) = v["replaced_identity_kept_at"].as_str() {
                    eprintln!(
                        "tono-seal: the old identity was kept at {kept}; {} secret(s) are still sealed to it",
                        v["secrets_sealed_to_replaced_key"]
                    );
                }
                println!("{}", v["recipient"].as_str().unwrap_or_default());
            }
            Ok(exit::OK)
        }
        Command::Recipient { user, json } => {
            let user = simple(&user)?;
            let v = keys_op(launcher, &user, KeysOp::Recipient, Input::Null, capture).await?;
            if json.json {
                print_json(&v)?;
            } else {
                println!("{}", v["recipient"].as_str().unwrap_or_default());
            }
            Ok(exit::OK)
        }
        Command::Seal {
            user,
            name,
            allow_empty,
            json,
        } => {
            let user = simple(&user)?;
            crate::keys::SecretName::parse(&name).map_err(|e| CliError::usage(e.to_string()))?;
            let v = keys_op(
                launcher,
                &user,
                KeysOp::Seal { name, allow_empty },
                Input::Inherit,
                capture,
            )
            .await?;
            if json.json {
                print_json(&v)?;
            } else {
                println!(
                    "sealed {} for {} ({} bytes)",
                    v["sealed"].as_str().unwrap_or_default(),
                    user.name,
                    v["value_bytes"]
                );
            }
            Ok(exit::OK)
        }
        Command::Import { user, name, json } => {
            let user = simple(&user)?;
            crate::keys::SecretName::parse(&name).map_err(|e| CliError::usage(e.to_string()))?;
            let v = keys_op(
                launcher,
                &user,
                KeysOp::Import { name },
                Input::Inherit,
                capture,
            )
            .await?;
            if json.json {
                print_json(&v)?;
            } else {
                println!(
                    "imported {} for {}",
                    v["imported"].as_str().unwrap_or_default(),
                    user.name
                );
            }
            Ok(exit::OK)
        }
        Command::List { user, json } => {
            let user = simple(&user)?;
            let v = keys_op(launcher, &user, KeysOp::List, Input::Null, capture).await?;
            if json.json {
                print_json(&v)?;
            } else {
                for item in v.as_array().into_iter().flatten() {
                    println!("{}", item["name"].as_str().unwrap_or_default());
                }
            }
            Ok(exit::OK)
        }
        Command::Remove { user, name, json } => {
            let user = simple(&user)?;
            let v = keys_op(
                launcher,
                &user,
                KeysOp::Remove { name },
                Input::Null,
                capture,
            )
            .await?;
            if json.json {
                print_json(&v)?;
            } else {
                println!("removed {}", v["removed"].as_str().unwrap_or_default());
            }
            Ok(exit::OK)
        }
        Command::Rotate { user, json } => {
            let user = simple(&user)?;
            let v = keys_op(launcher, &user, KeysOp::Rotate, Input::Null, capture).await?;
            if json.json {
                print_json(&v)?;
            } else {
                println!("{}", v["recipient"].as_str().unwrap_or_default());
                eprintln!(
                    "tono-seal: rotated; {} secret(s) re-sealed to the new key",
                    v["resealed"]
                );
            }
            Ok(exit::OK)
        }
        Command::Reveal { user, name } => {
            let user = simple(&user)?;
            keys_op(
                launcher,
                &user,
                KeysOp::Reveal { name },
                Input::Null,
                Output::Inherit,
            )
            .await?;
            Ok(exit::OK)
        }
        _ => Err(CliError::new(
            exit::FAILED,
            "internal error: not a key store command",
        )),
    }
}
