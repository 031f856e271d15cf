//! `drop_and_run`: the worker's one call for a tool call.
//!
//! Classify the raw call; refuse what is malformed; build a launch plan for
//! what drops (`shell` → `/bin/sh -c`, `spawn` → argv, file tools → the
//! launcher's own built-ins, HTTP reads → `curl` as the user); run it
//! through `tono-launch`; return a structured [`Outcome`]. The worker never
//! reads a secret and never touches the user's files: it names secrets, the
//! launcher unseals them after the drop.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::outcome::Outcome;
use super::spawn::{launch_tapped, Finished, Input, Output, Setup, Tap};
use super::start::Launcher;
use crate::classify::{classify_raw, Policy, ToolCall, ToolKind, Verdict, VerdictKind};
use crate::contain::{self, AppliedLimits, CallCgroup};
use crate::env::{EnvBuilder, RunEnv};
use crate::keys::SecretName;
use crate::launch::plan::{Action, ExecPlan, FileOp, LaunchPlan, Limits, SecretBinding};
use crate::launch::report::{LaunchError, Stage, StatusReport};
use crate::user::TargetUser;

/// Default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default cap on each of stdout and stderr.
pub const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;
/// Default cap on what `read_file` returns.
pub const DEFAULT_READ_MAX: u64 = 1024 * 1024;

/// A secret the turn allows, and the variable it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretGrant {
    /// The secret's name in the user's store.
    pub name: SecretName,
    /// The environment variable that receives it.
    pub env: String,
}

impl SecretGrant {
    /// Parses `NAME` (bound to the variable `NAME`) or `NAME=ENV`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (name, env) = spec.split_once('=').unwrap_or((spec, spec));
        let name = SecretName::parse(name).map_err(|e| e.to_string())?;
        crate::env::valid_env_name(env)?;
        Ok(Self {
            name,
            env: env.to_owned(),
        })
    }
}

/// Per-call options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The longest a call may run (a call's own `timeout_ms` can only lower it).
    pub timeout: Duration,
    /// The program's stdin.
    pub input: Input,
    /// Capture or pass through the program's output.
    pub output: Output,
    /// Resource limits.
    pub limits: Limits,
    /// Run the call in its own cgroup (killed as a whole when it ends).
    pub cgroup: bool,
    /// `pids.max` of the call's cgroup, where the pids controller exists.
    pub pids_max: u64,
    /// The call's memory limit: its memory cgroup's where that controller
    /// exists, else `RLIMIT_AS`.
    pub memory_max: u64,
    /// What the program's environment is made of, beside its user.
    pub env: RunEnv,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            input: Input::Null,
            output: Output::Capture(DEFAULT_MAX_OUTPUT),
            limits: Limits::default(),
            cgroup: true,
            pids_max: crate::contain::DEFAULT_PIDS_MAX,
            memory_max: crate::contain::DEFAULT_MEMORY_MAX,
            env: RunEnv::default(),
        }
    }
}

/// One tool call to run.
#[derive(Debug, Clone)]
pub struct DropRequest<'a> {
    /// The launcher to start.
    pub launcher: &'a Launcher,
    /// Tool names and kinds.
    pub policy: &'a Policy,
    /// Who it runs as.
    pub user: &'a TargetUser,
    /// The secrets the turn allows; a call may ask for any of these.
    pub grants: &'a [SecretGrant],
    /// The raw tool call, `{"tool": …, "args": {…}}`.
    pub call: &'a [u8],
    /// Options.
    pub options: RunOptions,
}

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
struct Prepared {
    action: Action,
    timeout: Option<Duration>,
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

fn prepare(
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

/// Classifies and runs one tool call as `req.user`; never panics on input.
pub async fn drop_and_run(req: &DropRequest<'_>) -> Outcome {
    let (call, verdict) = classify_raw(req.call, req.policy);
    let tool = call.as_ref().map(|c| c.tool.clone());
    let Some(call) = call else {
        return Outcome::not_run(&verdict, tool, None);
    };
    let verdict = match verdict.kind() {
        VerdictKind::Refuse => return Outcome::not_run(&verdict, tool, None),
        #[cfg(feature = "read-tool")]
        VerdictKind::Stay => return stay_read(&verdict, &call, req).await,
        // Without the in-worker read tool, a read that may stay runs as the
        // user: the safe side, and said so.
        #[cfg(not(feature = "read-tool"))]
        VerdictKind::Stay => Verdict::drop(
            "stay_runs_as_user",
            "the read may stay, but this build has no in-worker read tool; it runs as the user",
        ),
        VerdictKind::Drop => verdict,
    };
    let Some(kind) = req.policy.kind_of(&call.tool) else {
        let error = LaunchError::new(
            Stage::Plan,
            "no_runner",
            format!("no program implements tool {:?}", call.tool),
        );
        return Outcome::not_run(&verdict, tool, Some(error));
    };
    let env = match EnvBuilder::for_run(req.user, &req.options.env) {
        Ok(env) => env.build(),
        Err(e) => {
            let error = LaunchError::new(Stage::Plan, "env_invalid", e.to_string());
            return Outcome::not_run(&verdict, tool, Some(error));
        }
    };
    let prepared = match prepare(kind, &call, req.grants, env) {
        Ok(p) => p,
        Err(refusal) => return Outcome::not_run(&refusal, tool, None),
    };
    let timeout = prepared
        .timeout
        .map_or(req.options.timeout, |t| t.min(req.options.timeout));
    let launched = launch_as(
        req.launcher,
        req.user,
        prepared.action,
        &req.options,
        timeout,
        None,
    )
    .await;
    outcome_of(&verdict, tool, req.user, launched)
}

/// The [`Outcome`] of what [`launch_as`] returned.
pub(crate) fn outcome_of(
    verdict: &Verdict,
    tool: Option<String>,
    user: &TargetUser,
    launched: Result<(Finished, AppliedLimits), LaunchError>,
) -> Outcome {
    match launched {
        Ok((done, applied)) => {
            let mut outcome = Outcome::from_finished(verdict, tool, (&user.name, user.uid), done);
            outcome.limits = Some(applied);
            outcome
        }
        Err(error) => Outcome::not_run(verdict, tool, Some(error)),
    }
}

/// Runs `action` as `user` through the launcher, in a cgroup of its own
/// when the options ask for one: the one path by which the worker starts
/// anything for a user (tool calls and provider programs alike).
pub(crate) async fn launch_as(
    launcher: &Launcher,
    user: &TargetUser,
    action: Action,
    options: &RunOptions,
    timeout: Duration,
    tap: Option<Tap>,
) -> Result<(Finished, AppliedLimits), LaunchError> {
    let uid = user.uid;
    if contain::is_dirty(uid) && !contain::cleanup(uid) {
        return Err(LaunchError::new(
            Stage::Spawn,
            "user_dirty",
            "an earlier call of this user left processes that could not be killed; no new call starts until they are gone",
        ));
    }
    // No cgroup at all: the user's processes are swept after its last call.
    let live = if options.cgroup && contain::untracked(contain::mounts()) {
        Some(contain::sweep::begin(uid).await)
    } else {
        None
    };
    let mut applied = AppliedLimits::default();
    let plan = LaunchPlan {
        limits: options.limits,
        ..LaunchPlan::for_user(user, action)
    };
    let applied_out = &mut applied;
    let prepare = move |plan: &mut LaunchPlan, placed: Option<(CallCgroup, AppliedLimits)>| {
        // A pooled launcher already waits in a cgroup of its own.
        let entered = placed.is_some();
        let (call_cgroup, mut applied) = if let Some((mut cg, applied)) = placed {
            cg.assign(uid);
            (Some(cg), applied)
        } else if options.cgroup {
            let (cg, applied) =
                CallCgroup::create(contain::mounts(), uid, options.pids_max, options.memory_max)
                    .map_err(|e| {
                        LaunchError::new(
                            Stage::Spawn,
                            "cgroup_create_failed",
                            format!("creating the call's cgroup: {e}"),
                        )
                    })?;
            (Some(cg), applied)
        } else {
            (None, AppliedLimits::default())
        };
        applied.rlimit_nproc = options.limits.nproc;
        applied.rlimit_nofile = options.limits.nofile;
        if applied.memory_max.is_none() {
            // No memory cgroup: the address-space limit is what is left.
            plan.limits.address_space = Some(options.memory_max);
            applied.memory_max = Some((options.memory_max, "RLIMIT_AS".into()));
        }
        plan.cgroups = match &call_cgroup {
            Some(cg) if !entered => cg.procs_files(),
            _ => Vec::new(),
        };
        *applied_out = applied;
        Ok(call_cgroup)
    };
    let done = launch_tapped(
        launcher,
        plan,
        options.input,
        options.output,
        timeout,
        Some(Setup {
            cgroup_limits: options
                .cgroup
                .then_some((options.pids_max, options.memory_max)),
            prepare: Box::new(prepare),
        }),
        tap,
    )
    .await;
    if let Some(live) = live {
        let note = match live.end(|| sweep_user(launcher, user)).await {
            Ok(0) => "no cgroup: the user's processes were swept after its last live call".into(),
            Ok(others) => format!(
                "no cgroup: the sweep waits for the user's {others} other live call(s); \
                 a process that left this call's process group lives until then"
            ),
            Err(e) => e,
        };
        applied.note = Some(note);
    }
    let done = done?;
    applied.pids_max_hits = done.counters.pids_max_hits;
    applied.oom_kills = done.counters.oom_kills;
    applied.cleanup_error = done.cgroup_error.clone();
    Ok((done, applied))
}

/// Has the launcher, as `user`, kill every process of the user.
async fn sweep_user(launcher: &Launcher, user: &TargetUser) -> Result<(), String> {
    let plan = LaunchPlan::for_user(user, Action::Sweep);
    let done = launch_tapped(
        launcher,
        plan,
        Input::Null,
        Output::Capture(4096),
        contain::sweep::SWEEP_TIMEOUT,
        None,
        None,
    )
    .await
    .map_err(|e| format!("the sweep did not start: {e}"))?;
    match done.report {
        StatusReport::Done(_) => Ok(()),
        other => Err(format!("the sweep failed: {other:?}")),
    }
}

/// Runs a `Stay` read inside the worker (no launch, no user).
#[cfg(feature = "read-tool")]
async fn stay_read(verdict: &Verdict, call: &ToolCall, req: &DropRequest<'_>) -> Outcome {
    use crate::stay::fetch::{
        fetch, FetchConfig, SystemResolver, DEFAULT_MAX_BODY, DEFAULT_TIMEOUT,
    };
    let tool = Some(call.tool.clone());
    // The classifier has checked these shapes; re-read them, never trust.
    let url = call
        .args
        .get("url")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let headers: Vec<(String, String)> = call
        .args
        .get("headers")
        .and_then(Value::as_object)
        .map(|h| {
            h.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let kind = req.policy.kind_of(&call.tool).unwrap_or(ToolKind::HttpGet);
    let config = FetchConfig {
        max_body: match req.options.output {
            Output::Capture(cap) => cap,
            Output::Inherit => DEFAULT_MAX_BODY,
        },
        timeout: req.options.timeout.min(DEFAULT_TIMEOUT),
        ..FetchConfig::default()
    };
    let started = std::time::Instant::now();
    let result = fetch(kind, url, &headers, req.policy, &config, &SystemResolver).await;
    let mut out = Outcome::not_run(verdict, tool, None);
    out.duration_us = started.elapsed().as_micros() as u64;
    match result {
        Ok(done) => {
            out.exit_code = Some(0);
            out.stdout = String::from_utf8_lossy(&done.body).into_owned();
            out.stdout_truncated = done.truncated;
            out.result = Some(serde_json::json!({
                "status": done.status, "url": done.url, "redirects": done.redirects, "content_type": done.content_type,
            }));
        }
        Err(e) => out.launch_error = Some(LaunchError::new(Stage::Stay, e.code(), e.to_string())),
    }
    out
}
