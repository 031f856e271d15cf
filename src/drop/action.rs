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
use crate::launch::plan::{Action, ExecPlan, FileOp, PlanEnv, SecretBinding};

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
/// two secrets bound to one variable or to one file name, or a variable
/// named `CREDENTIALS_DIRECTORY` beside a file, is refused: the program
/// would see one variable twice (and programs differ on which copy they
/// read), or one file where two were meant.
fn bind_secrets(wanted: &[String], grants: &[SecretGrant]) -> Result<Vec<SecretBinding>, Verdict> {
    let mut bound: Vec<SecretBinding> = Vec::with_capacity(wanted.len());
    let mut variables = BTreeSet::new();
    let mut files = BTreeSet::new();
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
        if bound.iter().any(|b| b.name == *name) {
            return Err(Verdict::refuse(
                "secret_repeated",
                format!("the call asks for secret {name:?} more than once"),
            ));
        }
        if let Some(env) = &grant.env {
            if !variables.insert(env.as_str()) {
                return Err(Verdict::refuse(
                    "env_conflict",
                    format!(
                        "secret {name:?} would set {env}, which another secret of this call sets"
                    ),
                ));
            }
        }
        if let Some(file) = &grant.file {
            if !files.insert(file.as_str()) {
                return Err(Verdict::refuse(
                    "file_conflict",
                    format!(
                        "secret {name:?} would be the file {file}, which another secret of this \
                         call is"
                    ),
                ));
            }
        }
        bound.push(SecretBinding {
            name: grant.name.to_string(),
            env: grant.env.clone(),
            file: grant.file.clone(),
            bound: None,
        });
    }
    let directory = crate::launch::credentials::CREDENTIALS_VARIABLE;
    if !files.is_empty() && variables.contains(directory) {
        return Err(Verdict::refuse(
            "env_conflict",
            format!("{directory} names the call's credentials folder; a secret cannot set it"),
        ));
    }
    Ok(bound)
}

/// The headers as `Name: value` lines, for curl's `--header @-`. A name
/// that is not an HTTP token, or a value with CR, LF or NUL (which would
/// smuggle a second header or line), refuses the call.
fn header_lines(headers: &std::collections::BTreeMap<String, String>) -> Result<String, Verdict> {
    let mut lines = String::new();
    for (name, value) in headers {
        let bad_name = name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if bad_name || value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(Verdict::refuse(
                "args_invalid",
                format!(
                    "header {:?} is not a valid HTTP header",
                    name.escape_debug().to_string()
                ),
            ));
        }
        lines.push_str(&format!("{name}: {value}\n"));
    }
    Ok(lines)
}

pub(super) fn prepare(
    kind: ToolKind,
    call: &ToolCall,
    grants: &[SecretGrant],
    env: PlanEnv,
) -> Result<Prepared, Verdict> {
    let ms = |t: Option<u64>| t.map(Duration::from_millis);
    let exec = |argv, cwd, secrets| {
        Action::Exec(ExecPlan {
            argv,
            cwd,
            env: env.clone(),
            secrets,
            upstream_ca: None,
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
            let headers = header_lines(&a.headers)?;
            // The headers reach curl on a pipe (`--header @-`), never in
            // its argv, which every local user can read in /proc; the
            // variable that carries them to the shell is readable only by
            // the user itself.
            let mut script = String::from(
                "printf '%s' \"$TONO_HTTP_HEADERS\" | exec curl --silent --show-error \
                 --proto =http,https --max-redirs 5",
            );
            if kind == ToolKind::HttpHead {
                script.push_str(" --head");
            }
            if !headers.is_empty() {
                script.push_str(" --header @-");
            }
            script.push_str(" -- \"$1\"");
            let argv = ["/bin/sh", "-c", &script, "curl", &a.url]
                .map(String::from)
                .into();
            let mut env = env.clone();
            env.push("TONO_HTTP_HEADERS".into(), headers);
            Prepared {
                action: Action::Exec(ExecPlan {
                    argv,
                    cwd: None,
                    env,
                    secrets: Vec::new(),
                    upstream_ca: None,
                }),
                timeout: None,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_refuse_what_would_break_a_line_or_a_name() {
        let one = |k: &str, v: &str| {
            header_lines(&[(k.to_owned(), v.to_owned())].into_iter().collect())
                .map_err(|v| v.code().to_owned())
        };
        assert_eq!(one("X-Token", "a b:c").unwrap(), "X-Token: a b:c\n");
        for (k, v) in [
            ("X A", "v"),
            ("X:A", "v"),
            ("", "v"),
            ("X-A", "v\r\nX-B: w"),
            ("X-A", "v\0"),
        ] {
            assert_eq!(one(k, v), Err("args_invalid".into()), "{k:?}: {v:?}");
        }
    }
}
