//! The provisioning commands (`keygen`, `recipient`, `seal`, `import`,
//! `list`, `remove`, `rotate`, `reveal`): each a key store operation run
//! as the user through the launcher.
//!
//! Guarantees: secret values are never taken from argv or the environment:
//! `seal` and `import` hand this process's stdin to the launcher, and
//! `reveal` hands it this process's stdout, so the provisioning process
//! never holds a value.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use serde_json::Value;

use super::args::{AuditArg, Command, JsonArg, UserArg};
use super::exit::{self, CliError};
use super::print_json;
use crate::audit::{AuditRecord, RecordKind};
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

/// What one key store command asks of the launcher, and how its result
/// is printed when `--json` is not given.
struct KeysRequest {
    user: UserArg,
    audit: AuditArg,
    /// A secret name to check once the user is resolved, before the launch.
    name: Option<String>,
    op: KeysOp,
    input: Input,
    output: Output,
    json: bool,
    text: fn(&Value, &TargetUser),
}

fn recipient_line(v: &Value) {
    println!("{}", v["recipient"].as_str().unwrap_or_default());
}

fn keygen_text(v: &Value, _: &TargetUser) {
    if let Some(kept) = v["replaced_identity_kept_at"].as_str() {
        eprintln!(
            "tono-seal: the old identity was kept at {kept}; {} secret(s) are still sealed to it",
            v["secrets_sealed_to_replaced_key"]
        );
    }
    recipient_line(v);
}

fn seal_text(v: &Value, user: &TargetUser) {
    println!(
        "sealed {} for {} ({} bytes)",
        v["sealed"].as_str().unwrap_or_default(),
        user.name,
        v["value_bytes"]
    );
}

fn import_text(v: &Value, user: &TargetUser) {
    println!(
        "imported {} for {}",
        v["imported"].as_str().unwrap_or_default(),
        user.name
    );
}

fn list_text(v: &Value, _: &TargetUser) {
    health_lines(v);
}

/// The health table: one line for the identity, one per secret.
fn health_lines(v: &Value) {
    let line = |e: &Value| {
        let reasons: Vec<&str> = e["reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        println!(
            "{:<32} {:<10} {:>8}  {}",
            e["name"].as_str().unwrap_or_default(),
            e["state"].as_str().unwrap_or_default(),
            e["bytes"],
            reasons.join("; ")
        );
    };
    println!("{:<32} {:<10} {:>8}  why", "entry", "state", "bytes");
    line(&v["identity"]);
    for secret in v["secrets"].as_array().into_iter().flatten() {
        line(secret);
    }
}

/// `list --all`: the health of every store of a user a worker may run as,
/// each read as its user; users without a store (or a home) are left out.
/// Exit 0; the states are in what is printed.
pub(super) async fn list_all(launcher: &Launcher, json: bool) -> Result<i32, CliError> {
    let users = TargetUser::all().map_err(CliError::from)?;
    let range = crate::user::AllottedRange::default();
    let mut stores = Vec::new();
    for user in users {
        if crate::user::check_worker_target(&user, &range).is_err() {
            continue;
        }
        let done = keys_op(
            launcher,
            &user,
            KeysOp::List,
            Input::Null,
            Output::Capture(64 * 1024),
        )
        .await;
        let entry = match done {
            Ok(health) => {
                serde_json::json!({ "user": user.name, "uid": user.uid, "store": health })
            }
            Err(e)
                if matches!(
                    e.launch_code.as_deref(),
                    Some("identity_missing" | "home_missing")
                ) =>
            {
                continue
            }
            Err(e) => serde_json::json!({ "user": user.name, "uid": user.uid, "error": e.message }),
        };
        stores.push(entry);
    }
    if json {
        print_json(&Value::Array(stores))?;
        return Ok(exit::OK);
    }
    for entry in &stores {
        println!(
            "{} (uid {})",
            entry["user"].as_str().unwrap_or_default(),
            entry["uid"]
        );
        match entry.get("store") {
            Some(health) => health_lines(health),
            None => println!(
                "  could not be read: {}",
                entry["error"].as_str().unwrap_or_default()
            ),
        }
    }
    Ok(exit::OK)
}

fn remove_text(v: &Value, _: &TargetUser) {
    println!("removed {}", v["removed"].as_str().unwrap_or_default());
}

fn rotate_text(v: &Value, _: &TargetUser) {
    recipient_line(v);
    eprintln!(
        "tono-seal: rotated; {} secret(s) re-sealed to the new key",
        v["resealed"]
    );
}

/// A secret name from the command line, checked before any launch.
fn checked_name(name: &str) -> Result<(), CliError> {
    crate::keys::SecretName::parse(name)
        .map(drop)
        .map_err(|e| CliError::usage(e.to_string()))
}

fn keys_request(command: Command) -> Result<KeysRequest, CliError> {
    let capture = Output::Capture(64 * 1024);
    let request = |user, audit, op, input, json: JsonArg, text| KeysRequest {
        user,
        audit,
        name: None,
        op,
        input,
        output: capture,
        json: json.json,
        text,
    };
    Ok(match command {
        Command::Keygen {
            user,
            force,
            json,
            audit,
        } => request(
            user,
            audit,
            KeysOp::Keygen { force },
            Input::Null,
            json,
            keygen_text,
        ),
        Command::Recipient { user, json, audit } => {
            request(user, audit, KeysOp::Recipient, Input::Null, json, |v, _| {
                recipient_line(v)
            })
        }
        Command::Seal {
            user,
            name,
            allow_empty,
            json,
            audit,
        } => {
            let checked = Some(name.clone());
            let op = KeysOp::Seal { name, allow_empty };
            KeysRequest {
                name: checked,
                ..request(user, audit, op, Input::Inherit, json, seal_text)
            }
        }
        Command::Import {
            user,
            name,
            json,
            audit,
        } => {
            let checked = Some(name.clone());
            let op = KeysOp::Import { name };
            KeysRequest {
                name: checked,
                ..request(user, audit, op, Input::Inherit, json, import_text)
            }
        }
        Command::List {
            user,
            all: _,
            json,
            audit,
        } => {
            let user = UserArg {
                user: user.unwrap_or_default(),
            };
            request(user, audit, KeysOp::List, Input::Null, json, list_text)
        }
        Command::Remove {
            user,
            name,
            json,
            audit,
        } => request(
            user,
            audit,
            KeysOp::Remove { name },
            Input::Null,
            json,
            remove_text,
        ),
        Command::Rotate { user, json, audit } => {
            request(user, audit, KeysOp::Rotate, Input::Null, json, rotate_text)
        }
        // The value goes straight to this process's stdout, from the launcher.
        Command::Reveal { user, name, audit } => KeysRequest {
            user,
            audit,
            name: None,
            op: KeysOp::Reveal { name },
            input: Input::Null,
            output: Output::Inherit,
            json: false,
            text: |_, _| {},
        },
        _ => {
            return Err(CliError::new(
                exit::FAILED,
                "internal error: not a key store command",
            ))
        }
    })
}

/// The receipt of a key store operation, before it runs.
fn receipt(user: &TargetUser, op: &KeysOp) -> AuditRecord {
    let (tool, secret) = match op {
        KeysOp::Keygen { .. } => ("keygen", None),
        KeysOp::Recipient => ("recipient", None),
        KeysOp::Seal { name, .. } => ("seal", Some(name)),
        KeysOp::SealRandom { name, .. } => ("seal_random", Some(name)),
        KeysOp::Import { name } => ("import", Some(name)),
        KeysOp::List => ("list", None),
        KeysOp::Remove { name } => ("remove", Some(name)),
        KeysOp::Rotate => ("rotate", None),
        KeysOp::Reveal { name } => ("reveal", Some(name)),
    };
    let secrets: Vec<String> = secret.into_iter().cloned().collect();
    AuditRecord {
        user: Some(user.name.clone()),
        uid: Some(user.uid),
        tool: Some(tool.into()),
        verdict: "drop".into(),
        reason_code: "keys_op".into(),
        secrets_requested: secrets.clone(),
        secrets_granted: secrets,
        ..AuditRecord::new(RecordKind::Keys)
    }
}

/// Runs one of the key store commands.
pub(super) async fn command(command: Command, launcher: &Launcher) -> Result<i32, CliError> {
    let request = keys_request(command)?;
    let user = TargetUser::resolve(&request.user.user).map_err(CliError::from)?;
    if let Some(name) = &request.name {
        checked_name(name)?;
    }
    let audit = request.audit.open()?;
    let receipt = audit
        .as_ref()
        .map(|_| (receipt(&user, &request.op), Instant::now()));
    let done = keys_op(launcher, &user, request.op, request.input, request.output).await;
    if let (Some(log), Some((mut record, started))) = (audit, receipt) {
        record.duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        match &done {
            Ok(_) => record.exit_code = Some(0),
            Err(e) => {
                record.launch_error = Some(e.launch_code.clone().unwrap_or_else(|| "failed".into()))
            }
        }
        log.append(record).map_err(|e| {
            CliError::new(exit::FAILED, format!("the receipt was not written: {e}"))
        })?;
    }
    let v = done?;
    if request.json {
        print_json(&v)?;
    } else {
        (request.text)(&v, &user);
    }
    Ok(exit::OK)
}
