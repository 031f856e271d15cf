//! `tono-seal serve --stdio`: a long-running worker speaking JSON lines.
//!
//! Each request line is `{"id": …, "user": …, "secrets": [NAME,
//! NAME=ENV, or a file grant NAME=@FILE / NAME=ENV@FILE, …], "call": {…}, "network": "none" | "proxy" | "host"}`
//! (`network` optional: the worker's default otherwise); each answer line is `{"id": …, "outcome":
//! {…}}` or `{"id": … | null, "error": {"code": …, "message": …}}`.
//! Requests run concurrently and are answered in order of completion. A
//! malformed or oversize line gets its own error line and the worker goes
//! on. The user is looked up afresh for every request. The worker never
//! holds a secret value: it passes names to the launcher.
#![forbid(unsafe_code)]

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, value::RawValue, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Semaphore};

use super::exit::{self, CliError};
use crate::classify::{Policy, MAX_CALL_BYTES};
use crate::drop::Launcher;
use crate::drop::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use crate::user::TargetUser;

/// The longest request line read.
pub const MAX_LINE_BYTES: usize = MAX_CALL_BYTES + 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request<'a> {
    id: Value,
    user: String,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(borrow)]
    call: &'a RawValue,
    /// This call's network, instead of the worker's default.
    #[serde(default)]
    network: Option<crate::env::Network>,
}

fn error_line(id: Value, code: &str, message: impl Into<String>) -> Value {
    json!({ "id": id, "error": { "code": code, "message": message.into() } })
}

/// Handles one request line; always yields one answer line.
/// Every call runs with `options` (receipts, allotted range).
pub async fn handle_line(
    launcher: &Launcher,
    policy: &Policy,
    options: &RunOptions,
    line: &[u8],
) -> Value {
    let request: Request<'_> = match serde_json::from_slice(line) {
        Ok(r) => r,
        Err(e) => {
            // Echo the id if the line is JSON with one.
            let id = serde_json::from_slice::<Value>(line)
                .ok()
                .and_then(|v| v.get("id").cloned())
                .unwrap_or(Value::Null);
            return error_line(
                id,
                "request_invalid",
                format!("the request line is not valid: {e}"),
            );
        }
    };
    let user = match TargetUser::resolve(&request.user) {
        Ok(u) => u,
        Err(e) => return error_line(request.id, e.code(), e.to_string()),
    };
    let grants: Result<Vec<SecretGrant>, String> = request
        .secrets
        .iter()
        .map(|s| SecretGrant::parse(s))
        .collect();
    let grants = match grants {
        Ok(g) => g,
        Err(e) => return error_line(request.id, "secret_grant_invalid", e),
    };
    let req = DropRequest {
        launcher,
        policy,
        user: &user,
        grants: &grants,
        call: request.call.get().as_bytes(),
        options: RunOptions {
            network: request.network.or(options.network),
            ..options.clone()
        },
    };
    let outcome = drop_and_run(&req).await;
    json!({ "id": request.id, "outcome": outcome })
}

/// Reads one line of at most `cap` bytes; an oversize line is consumed to its
/// end and reported as `Err(())`.
async fn read_line<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
    cap: usize,
) -> std::io::Result<Option<Result<Vec<u8>, ()>>> {
    let mut line = Vec::new();
    let mut oversize = false;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if line.is_empty() && !oversize {
                None
            } else if oversize {
                Some(Err(()))
            } else {
                Some(Ok(line))
            });
        }
        let (used, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !oversize {
            let take = if done { used - 1 } else { used };
            if line.len() + take > cap {
                oversize = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(&chunk[..take]);
            }
        }
        reader.consume(used);
        if done {
            return Ok(Some(if oversize { Err(()) } else { Ok(line) }));
        }
    }
}

/// Serves until stdin closes and every call in flight has answered.
/// Every call runs with `options` (receipts, allotted range).
pub async fn serve_stdio(
    launcher: &Launcher,
    concurrency: usize,
    options: RunOptions,
) -> Result<i32, CliError> {
    let options = Arc::new(options);
    let launcher = Arc::new(launcher.clone());
    let policy = Arc::new(Policy::default());
    let permits = Arc::new(Semaphore::new(concurrency));
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(answer) = rx.recv().await {
            let mut bytes = serde_json::to_vec(&answer).unwrap_or_default();
            bytes.push(b'\n');
            if out.write_all(&bytes).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    });
    let mut stdin = BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    loop {
        let line = read_line(&mut stdin, MAX_LINE_BYTES)
            .await
            .map_err(|e| CliError::new(exit::FAILED, format!("reading stdin: {e}")))?;
        let line = match line {
            None => break,
            Some(Err(())) => {
                let _ = tx.send(error_line(
                    Value::Null,
                    "request_too_large",
                    format!("the request line is over {MAX_LINE_BYTES} bytes"),
                ));
                continue;
            }
            Some(Ok(line)) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Some(Ok(line)) => line,
        };
        let permit = Arc::clone(&permits)
            .acquire_owned()
            .await
            .map_err(|e| CliError::new(exit::FAILED, e.to_string()))?;
        let (launcher, policy, tx) = (Arc::clone(&launcher), Arc::clone(&policy), tx.clone());
        let options = Arc::clone(&options);
        tokio::spawn(async move {
            let answer = handle_line(&launcher, &policy, &options, &line).await;
            drop(line);
            let _ = tx.send(answer);
            drop(permit);
        });
    }
    drop(tx);
    let _ = writer.await;
    Ok(exit::OK)
}
