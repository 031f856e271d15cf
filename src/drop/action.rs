//! What a tool call that drops turns into: the launcher [`Action`] and the
//! call's own timeout, from the call's arguments (`shell` → `/bin/sh -c`,
//! `spawn` → argv, file tools → the launcher's own built-ins, HTTP reads →
//! `curl` as the user).
//!
//! Guarantees: arguments are parsed strictly (an unknown field refuses the
//! call); every secret a call names must be granted by the turn, and no
//! secret and no variable is bound twice, so the program never sees one
//! variable twice; the plan names secrets and never holds a value.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::request::{SecretGrant, DEFAULT_READ_MAX};
use crate::classify::{ToolCall, ToolKind, Verdict};
use crate::launch::plan::{Action, ExecPlan, FileOp, SecretBinding};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellArgs {
    command: String,
    cwd: Option<PathBuf>,
    timeout_ms: Option<u64>,
    #[serde(default)]
    secrets: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpawnArgs {
    argv: Vec<String>,
    cwd: Option<PathBuf>,
    timeout_ms: Option<u64>,
    #[serde(default)]
    secrets: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: PathBuf,
    max_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    path: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: PathBuf,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpArgs {
    url: String,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
}

/// What a call turns into.
pub(super) struct Prepared {
    /// What the launcher does.
    pub(super) action: Action,
    /// The call's own timeout, if it asked for one.
    pub(super) timeout: Option<Duration>,
}

fn args<T: serde::de::DeserializeOwned>(call: &ToolCall) -> Result<T, Verdict> {
    serde_json::from_value(Value::Object(call.args.clone()))
        .map_err(|e| Verdict::refuse("args_invalid", format!("arguments of {}: {e}", call.tool)))
}

/// Binds each secret the call names to its grant. A name asked for twice,
/// or two secrets bound to one variable, is refused: the program would see
/// one variable twice, and programs differ on which copy they read.
fn bind_secrets(wanted: &[String], grants: &[SecretGrant]) -> Result<Vec<SecretBinding>, Verdict> {
    let mut bound: Vec<SecretBinding> = Vec::with_capacity(wanted.len());
    let mut variables = BTreeSet::new();
    for name in wanted {
        let grant = grants
            .iter()
            .find(|g| g.name.as_str() == name)
            .ok_or_else(|| {
                Verdict::refuse(
                    "secret_not_granted",
                    format!("the call asks for secret {name:?}, which this turn does not allow"),
                )
            })?;
        if !variables.insert(grant.env.as_str()) {
            return Err(if bound.iter().any(|b| b.name == *name) {
                Verdict::refuse(
                    "secret_repeated",
                    format!("the call asks for secret {name:?} more than once"),
                )
            } else {
                Verdict::refuse(
                    "env_conflict",
                    format!(
                        "secret {name:?} would set {}, which another secret of this call sets",
                        grant.env
                    ),
                )
            });
        }
        bound.push(SecretBinding {
            name: grant.name.to_string(),
            env: grant.env.clone(),
        });
    }
    Ok(bound)
}

pub(super) fn prepare(
    kind: ToolKind,
    call: &ToolCall,
    grants: &[SecretGrant],
    env: Vec<(String, String)>,
) -> Result<Prepared, Verdict> {
    let ms = |t: Option<u64>| t.map(Duration::from_millis);
    let exec = |argv, cwd, secrets| {
        Action::Exec(ExecPlan {
            argv,
            cwd,
            env: env.clone(),
            secrets,
        })
    };
    Ok(match kind {
        ToolKind::Shell => {
            let a: ShellArgs = args(call)?;
            let secrets = bind_secrets(&a.secrets, grants)?;
            Prepared {
                action: exec(
                    vec!["/bin/sh".into(), "-c".into(), a.command],
                    a.cwd,
                    secrets,
                ),
                timeout: ms(a.timeout_ms),
            }
        }
        ToolKind::Spawn => {
            let a: SpawnArgs = args(call)?;
            if a.argv.is_empty() {
                return Err(Verdict::refuse(
                    "args_invalid",
                    "spawn needs a non-empty argv",
                ));
            }
            let secrets = bind_secrets(&a.secrets, grants)?;
            Prepared {
                action: exec(a.argv, a.cwd, secrets),
                timeout: ms(a.timeout_ms),
            }
        }
        ToolKind::ReadFile => {
            let a: ReadArgs = args(call)?;
            let op = FileOp::Read {
                path: a.path,
                max_bytes: a.max_bytes.unwrap_or(DEFAULT_READ_MAX),
            };
            Prepared {
                action: Action::File { op },
                timeout: None,
            }
        }
        ToolKind::WriteFile => {
            let a: WriteArgs = args(call)?;
            Prepared {
                action: Action::File {
                    op: FileOp::Write {
                        path: a.path,
                        content: a.content,
                    },
                },
                timeout: None,
            }
        }
        ToolKind::ListDir => {
            let a: PathArgs = args(call)?;
            Prepared {
                action: Action::File {
                    op: FileOp::ListDir { path: a.path },
                },
                timeout: None,
            }
        }
        ToolKind::DeleteFile => {
            let a: PathArgs = args(call)?;
            Prepared {
                action: Action::File {
                    op: FileOp::Delete { path: a.path },
                },
                timeout: None,
            }
        }
        ToolKind::HttpGet | ToolKind::HttpHead => {
            // Dropped reads run as the user with curl: the worker's network
            // position and credentials are not lent to them.
            let a: HttpArgs = args(call)?;
            let mut argv: Vec<String> = [
                "curl",
                "--silent",
                "--show-error",
                "--proto",
                "=http,https",
                "--max-redirs",
                "5",
            ]
            .map(String::from)
            .into();
            if kind == ToolKind::HttpHead {
                argv.push("--head".into());
            }
            for (k, v) in a.headers {
                argv.push("--header".into());
                argv.push(format!("{k}: {v}"));
            }
            argv.push("--".into());
            argv.push(a.url);
            Prepared {
                action: exec(argv, None, Vec::new()),
                timeout: None,
            }
        }
    })
}
