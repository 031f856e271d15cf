//! The `tono-seal` command line: argument types and one function per
//! command, so that the binary stays a single call and tests reach the rest.
//!
//! Secret values are never taken from argv or the environment: `seal` and
//! `import` hand this process's stdin to the launcher, and `reveal` hands it
//! this process's stdout, so the provisioning process never holds a value.
#![forbid(unsafe_code)]

pub mod demo;
pub mod exit;
pub mod mcp;
pub mod memscan;
pub mod serve;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use crate::classify::Policy;
use crate::drop::outcome::Outcome;
use crate::drop::spawn::{launch, Input, Output};
use crate::drop::Launcher;
use crate::drop::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use crate::env::{EnvConfig, Provider, RunEnv};
use crate::launch::plan::{Action, KeysOp, LaunchPlan};
use crate::launch::report::{LaunchError, Stage, StatusReport};
use crate::user::TargetUser;
use exit::CliError;

/// Per-user age-sealed secrets, and tools run as their user.
#[derive(Debug, Parser)]
#[command(name = "tono-seal", version, about, long_about = None)]
pub struct Cli {
    /// Path of the `tono-launch` binary (default: beside this program).
    #[arg(long, global = true, hide = true)]
    pub launcher: Option<PathBuf>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// A user named by login name or `#UID`.
#[derive(Debug, Args)]
pub struct UserArg {
    /// The user: a login name or #UID (never root).
    #[arg(long, short = 'u')]
    pub user: String,
}

/// Output as JSON.
#[derive(Debug, Args)]
pub struct JsonArg {
    /// Print machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

/// What a launched program's environment is made of, beside its user.
#[derive(Debug, Args)]
pub struct EnvArgs {
    /// The agent's provider (openai, anthropic, bedrock): sets its login
    /// location in the home, and for bedrock only the AWS settings.
    #[arg(long)]
    pub provider: Option<String>,
    /// The operator's environment settings (JSON: proxy, no_proxy, bedrock,
    /// providers).
    #[arg(long)]
    pub env_config: Option<PathBuf>,
}

impl EnvArgs {
    /// Loads the settings into a [`RunEnv`].
    pub fn load(&self) -> Result<RunEnv, CliError> {
        let provider = match &self.provider {
            Some(name) => Some(Provider::parse(name).ok_or_else(|| {
                CliError::usage(format!(
                    "unknown provider {name:?}: use openai, anthropic or bedrock"
                ))
            })?),
            None => None,
        };
        let config = match &self.env_config {
            Some(path) => {
                let bytes = std::fs::read(path)
                    .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
                EnvConfig::from_json(&bytes)
                    .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?
            }
            None => EnvConfig::default(),
        };
        Ok(RunEnv {
            config: std::sync::Arc::new(config),
            provider,
            credential: None,
        })
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a user's key store and print its recipient.
    Keygen {
        #[command(flatten)]
        user: UserArg,
        /// Replace an existing identity (it is kept beside the new one).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Print a user's age recipient (age1…).
    Recipient {
        #[command(flatten)]
        user: UserArg,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Seal the value on stdin as NAME (never from argv or env).
    Seal {
        #[command(flatten)]
        user: UserArg,
        /// The secret's name.
        name: String,
        /// Accept an empty value.
        #[arg(long)]
        allow_empty: bool,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Install an age file from stdin (made with `age -r RECIPIENT`) as NAME.
    Import {
        #[command(flatten)]
        user: UserArg,
        /// The secret's name.
        name: String,
        #[command(flatten)]
        json: JsonArg,
    },
    /// List a user's secret names (never values).
    List {
        #[command(flatten)]
        user: UserArg,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Remove a secret.
    Remove {
        #[command(flatten)]
        user: UserArg,
        /// The secret's name.
        name: String,
        #[command(flatten)]
        json: JsonArg,
    },
    /// New identity; every secret re-sealed to it; safe to kill and re-run.
    Rotate {
        #[command(flatten)]
        user: UserArg,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Print one secret's value, read as the user (for operators only).
    Reveal {
        #[command(flatten)]
        user: UserArg,
        /// The secret's name.
        name: String,
    },
    /// Run a program as the user with the named secrets in its environment.
    Run {
        #[command(flatten)]
        user: UserArg,
        /// A secret to unseal into the variable of the same name, or NAME=ENV.
        #[arg(long = "secret", short = 's')]
        secrets: Vec<String>,
        /// Working folder (absolute; default the user's home).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Timeout in seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
        #[command(flatten)]
        env: EnvArgs,
        /// The program and its arguments.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Run one tool call (JSON on stdin) as the user; print its Outcome JSON.
    Call {
        #[command(flatten)]
        user: UserArg,
        /// A secret the call may ask for: NAME or NAME=ENV.
        #[arg(long = "secret", short = 's')]
        secrets: Vec<String>,
        /// Timeout in seconds.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
        #[command(flatten)]
        env: EnvArgs,
    },
    /// A long-running worker: JSON-lines requests on stdin, outcomes on stdout.
    Serve {
        /// Serve on stdin/stdout (the only transport).
        #[arg(long, required = true)]
        stdio: bool,
        /// Most calls running at once.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
    },
    /// An MCP server on stdio whose every tools/call runs as the user.
    Mcp {
        #[command(flatten)]
        user: UserArg,
        /// A secret calls may ask for: NAME or NAME=ENV.
        #[arg(long = "secret", short = 's')]
        secrets: Vec<String>,
        /// A policy file (JSON); the built-in default otherwise.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Working folder of shell and spawn calls that name none.
        #[arg(long)]
        cwd: Option<PathBuf>,
        #[command(flatten)]
        env: EnvArgs,
    },
    /// Show the guarantees on this machine with two throwaway users.
    Demo,
    /// Prove on this machine that the isolation between users is real.
    Verify {
        /// A user to probe (repeat for several).
        #[arg(long = "user", short = 'u', required_unless_present = "agent")]
        users: Vec<String>,
        /// Three-uid mode: the agent user.
        #[arg(long, requires_all = ["executor", "gate"])]
        agent: Option<String>,
        /// Three-uid mode: the executor user.
        #[arg(long, requires_all = ["agent", "gate"])]
        executor: Option<String>,
        /// Three-uid mode: the gate user (its assets are the --protect paths).
        #[arg(long, requires_all = ["agent", "executor"])]
        gate: Option<String>,
        /// Tenant secret folder, probed if present.
        #[arg(long, default_value = "/etc/tonoman/secrets")]
        tenant_secrets: PathBuf,
        /// A path no probed user may read or write (repeatable).
        #[arg(long)]
        protect: Vec<PathBuf>,
        /// Installed code no probed user may write (besides tono-seal and tono-launch).
        #[arg(long)]
        code: Vec<PathBuf>,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Classify raw tool calls, one JSON line each on stdin.
    Classify {
        /// A policy file (JSON); the built-in default otherwise.
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Policy files.
    Policy {
        /// What to do.
        #[command(subcommand)]
        action: PolicyAction,
    },
}

/// `policy` subcommands.
#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Load a policy file and say whether it is valid.
    Check {
        /// The policy file (JSON).
        file: PathBuf,
    },
}

/// Loads a policy file, or the default.
pub fn load_policy(path: Option<&std::path::Path>) -> Result<Policy, CliError> {
    let Some(path) = path else {
        return Ok(Policy::default());
    };
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::usage(format!("cannot read policy {}: {e}", path.display())))?;
    Policy::from_json(&bytes).map_err(|e| CliError::usage(format!("{}: {e}", path.display())))
}

/// Makes this root process undumpable with no core file, so that a user
/// can neither ptrace it nor read a core of it (euid changes reset the
/// dumpable flag; this process never changes its own ids).
fn harden_worker() {
    let _ = nix::sys::prctl::set_dumpable(false);
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
}

/// Runs the parsed command line; returns the process exit code.
pub fn main(cli: Cli) -> i32 {
    harden_worker();
    if nix::unistd::geteuid().is_root() {
        // Calls of workers that were SIGKILLed: their cgroups still hold
        // whatever escaped; nothing else can end them.
        let swept = crate::contain::sweep_dead_workers(crate::contain::mounts());
        if swept > 0 {
            tracing::warn!(
                swept,
                "killed and removed the call cgroups of workers that no longer run"
            );
        }
    }
    let launcher = match &cli.launcher {
        Some(p) => Launcher::at(p),
        None => match Launcher::beside_current_exe() {
            Ok(l) => l,
            Err(e) => {
                return fail(CliError::new(
                    exit::FAILED,
                    format!("cannot find tono-launch: {e}"),
                ))
            }
        },
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(CliError::new(
                exit::FAILED,
                format!("cannot start the runtime: {e}"),
            ))
        }
    };
    let code = match runtime.block_on(dispatch(cli.command, &launcher)) {
        Ok(code) => code,
        Err(e) => fail(e),
    };
    // Waiting launchers end, and emptied call cgroups are removed in the
    // background; let that finish before the process goes (a leftover
    // would wait for the next start's sweep).
    crate::drop::pool::drain();
    crate::contain::settle(crate::contain::EMPTY_TIMEOUT);
    code
}

fn fail(e: CliError) -> i32 {
    eprintln!("tono-seal: {}", e.message);
    e.code
}

fn print_json(value: &Value) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)
        .map_err(|e| CliError::new(exit::FAILED, e.to_string()))?;
    writeln!(out).map_err(|e| CliError::new(exit::FAILED, e.to_string()))
}

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

async fn dispatch(command: Command, launcher: &Launcher) -> Result<i32, CliError> {
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
        Command::Run {
            user,
            secrets,
            cwd,
            timeout,
            env,
            argv,
        } => {
            let user = simple(&user)?;
            let grants = parse_grants(&secrets)?;
            let names: Vec<&str> = grants.iter().map(|g| g.name.as_str()).collect();
            let mut args = serde_json::json!({ "argv": argv, "secrets": names });
            if let Some(cwd) = cwd {
                args["cwd"] = Value::String(cwd.display().to_string());
            }
            let call = serde_json::to_vec(&serde_json::json!({ "tool": "spawn", "args": args }))
                .map_err(|e| CliError::new(exit::FAILED, e.to_string()))?;
            let options = RunOptions {
                timeout: Duration::from_secs(timeout),
                input: Input::Inherit,
                output: Output::Inherit,
                env: env.load()?,
                ..RunOptions::default()
            };
            let outcome = run_call(launcher, &user, &grants, &call, options).await;
            run_exit_code(&outcome)
        }
        Command::Call {
            user,
            secrets,
            timeout,
            env,
        } => {
            let user = simple(&user)?;
            let grants = parse_grants(&secrets)?;
            let mut call = Vec::new();
            std::io::Read::read_to_end(
                &mut std::io::Read::take(
                    std::io::stdin().lock(),
                    crate::classify::MAX_CALL_BYTES as u64 + 1,
                ),
                &mut call,
            )
            .map_err(|e| {
                CliError::new(exit::FAILED, format!("reading the call from stdin: {e}"))
            })?;
            let options = RunOptions {
                timeout: Duration::from_secs(timeout),
                env: env.load()?,
                ..RunOptions::default()
            };
            let outcome = run_call(launcher, &user, &grants, &call, options).await;
            print_json(&serde_json::to_value(&outcome).unwrap_or(Value::Null))?;
            Ok(if outcome.succeeded() {
                exit::OK
            } else {
                exit::FAILED
            })
        }
        Command::Serve {
            stdio: _,
            concurrency,
        } => serve::serve_stdio(launcher, concurrency.max(1)).await,
        Command::Mcp {
            user,
            secrets,
            policy,
            cwd,
            env,
        } => {
            if let Some(cwd) = &cwd {
                if !cwd.is_absolute() {
                    return Err(CliError::usage("--cwd must be an absolute path"));
                }
            }
            let server = mcp::McpServer::new(
                launcher.clone(),
                load_policy(policy.as_deref())?,
                simple(&user)?,
                parse_grants(&secrets)?,
                cwd,
                env.load()?,
            );
            mcp::serve_mcp(server).await
        }
        Command::Demo => demo::demo(launcher).await,
        Command::Verify {
            mut users,
            agent,
            executor,
            gate,
            tenant_secrets,
            protect,
            code,
            json,
        } => {
            let roles = match (agent, executor, gate) {
                (Some(a), Some(e), Some(g)) => {
                    let [a_id, e_id, g_id] =
                        [&a, &e, &g].map(|u| TargetUser::resolve(u).map(|t| t.uid));
                    users.extend([a, e, g]);
                    Some(crate::verify::Roles {
                        agent: a_id?,
                        executor: e_id?,
                        gate: g_id?,
                    })
                }
                _ => None,
            };
            verify_command(
                launcher,
                &users,
                tenant_secrets,
                protect,
                code,
                roles,
                json.json,
            )
            .await
        }
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

/// `verify`: exit 0 if every probe passed, 1 if any failed, 2 if it could
/// not run.
async fn verify_command(
    launcher: &Launcher,
    users: &[String],
    tenant_secrets: PathBuf,
    protect: Vec<PathBuf>,
    mut code: Vec<PathBuf>,
    roles: Option<crate::verify::Roles>,
    json: bool,
) -> Result<i32, CliError> {
    use crate::verify::{verify, VerifyPlan};
    if !nix::unistd::geteuid().is_root() {
        return Err(CliError::usage(
            "verify runs probes as other users and must run as root",
        ));
    }
    let users = users
        .iter()
        .map(|u| TargetUser::resolve(u))
        .collect::<Result<Vec<_>, _>>()?;
    if let Ok(me) = std::env::current_exe() {
        code.insert(0, me);
    }
    code.insert(1.min(code.len()), launcher.path().to_path_buf());
    let plan = VerifyPlan {
        users,
        tenant_secrets,
        protect,
        code,
        roles,
    };
    let probes = verify(launcher, &plan)
        .await
        .map_err(|e| CliError::usage(format!("verify could not run: {e}")))?;
    let failed = probes.iter().filter(|p| !p.pass).count();
    if json {
        print_json(
            &serde_json::json!({ "passed": probes.len() - failed, "failed": failed, "probes": probes }),
        )?;
    } else {
        println!(
            "{:<6} {:<15} {:>6} {:<8} {:<62} got",
            "result", "as", "uid", "expected", "probe"
        );
        for p in &probes {
            let expected = serde_json::to_value(p.expected)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            println!(
                "{:<6} {:<15} {:>6} {:<8} {:<62} {}",
                if p.pass { "pass" } else { "FAIL" },
                p.user,
                p.uid,
                expected,
                p.tried,
                p.got
            );
        }
        println!("{} passed, {} failed", probes.len() - failed, failed);
    }
    Ok(if failed == 0 { exit::OK } else { exit::FAILED })
}

/// One tool call through `drop_and_run` with the default policy.
async fn run_call(
    launcher: &Launcher,
    user: &TargetUser,
    grants: &[SecretGrant],
    call: &[u8],
    options: RunOptions,
) -> Outcome {
    let policy = Policy::default();
    drop_and_run(&DropRequest {
        launcher,
        policy: &policy,
        user,
        grants,
        call,
        options,
    })
    .await
}

/// Parses `--secret` grants.
pub fn parse_grants(specs: &[String]) -> Result<Vec<SecretGrant>, CliError> {
    specs
        .iter()
        .map(|s| SecretGrant::parse(s).map_err(CliError::usage))
        .collect()
}

/// `run`'s exit code: the program's own, 128+signal, or the launch error's.
fn run_exit_code(outcome: &Outcome) -> Result<i32, CliError> {
    if let Some(error) = &outcome.launch_error {
        return Err(error.clone().into());
    }
    if outcome.verdict == crate::classify::VerdictKind::Refuse {
        return Err(CliError::usage(format!("refused: {}", outcome.reason)));
    }
    if outcome.timed_out {
        return Err(CliError::new(
            exit::FAILED,
            "the program timed out and was killed",
        ));
    }
    match (outcome.exit_code, outcome.signal) {
        (Some(code), _) => Ok(code),
        (None, Some(sig)) => Ok(128 + sig),
        _ => Err(LaunchError::new(Stage::Launcher, "no_status", "no exit status").into()),
    }
}
