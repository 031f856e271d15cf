//! The `tono-seal` command line: the binary parses [`Cli`] and calls
//! [`main`]; every command is one function in a file of its own here, so
//! that the binary stays a single call and tests reach the rest.
//!
//! Guarantees: secret values are never taken from argv or the environment
//! ([`keys`]); every error is a [`exit::CliError`] with a stable exit code
//! (`exit`); the process is undumpable and writes no core file; before it
//! exits, waiting launchers are ended and emptied call cgroups removed.
#![forbid(unsafe_code)]

pub mod args;
pub mod audit;
pub mod call;
pub mod classify;
pub mod exit;
pub mod keys;
pub mod manual;
pub mod printable;
pub mod serve;
pub mod verify;

use std::io::Write;

use serde_json::Value;

pub use args::{Cli, Command, EnvArgs, JsonArg, PolicyAction, UserArg};
pub use call::parse_grants;
pub use keys::keys_op;

use crate::classify::Policy;
use crate::drop::{Launcher, RunOptions};
use crate::user::TargetUser;
use exit::CliError;

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
    // Packaging: nothing to launch, no root needed.
    if let Command::GenerateDocs { out } = &cli.command {
        return manual::generate(out).unwrap_or_else(fail);
    }
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
        None => match Launcher::installed() {
            Ok(l) => l,
            Err(e) => {
                return fail(CliError::new(
                    exit::FAILED,
                    format!("cannot find tono-launch: {e}"),
                ))
            }
        },
    };
    // A command that serves many calls at once gets worker threads and
    // launchers started ahead of need; one that makes one call (or a few,
    // in turn) runs them on this thread and starts one launcher a call:
    // a pool would start two more beside the first call, only to end them.
    let (launcher, mut builder) = if serves_many(&cli.command) {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        (launcher, b)
    } else {
        // It waits for every removal before it exits (below) and has no
        // other call to keep it off the path of: no remover thread.
        crate::contain::remove_in_place();
        (
            launcher.without_pool(),
            tokio::runtime::Builder::new_current_thread(),
        )
    };
    let runtime = match builder.enable_all().build() {
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

/// A worker (`serve`, `mcp`) checks once, before it starts anything, that
/// the host grants what its default calls need (the private view's
/// `CAP_SYS_ADMIN`, a network of the call's own's `CAP_NET_ADMIN`), and
/// refuses to start otherwise, naming the capability and the fix: it never
/// starts to warn per launcher, nor falls back to a weaker view.
fn refuse_unless_granted(options: &RunOptions) -> Result<(), CliError> {
    use crate::host::Need;
    let mut needs = vec![Need::Drop];
    if options.view == crate::launch::view::View::Private {
        needs.push(Need::PrivateView);
        let network = options
            .network_mode()
            .map_err(|e| CliError::usage(e.message))?;
        if network != crate::env::Network::Host {
            needs.push(Need::OwnNetwork);
        }
    }
    crate::host::require(&needs).map_err(Into::into)
}

/// Whether `command` serves calls that overlap (a worker, an MCP server,
/// the demo's and verify's concurrent probes).
fn serves_many(command: &Command) -> bool {
    matches!(
        command,
        Command::Serve { .. } | Command::Mcp { .. } | Command::Demo | Command::Verify { .. }
    )
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

async fn dispatch(command: Command, launcher: &Launcher) -> Result<i32, CliError> {
    match command {
        Command::Keygen { .. }
        | Command::Recipient { .. }
        | Command::Seal { .. }
        | Command::Import { .. }
        | Command::List { .. }
        | Command::Remove { .. }
        | Command::Rotate { .. }
        | Command::Reveal { .. } => match command {
            Command::List {
                all: true, json, ..
            } => keys::list_all(launcher, json.json).await,
            command => keys::command(command, launcher).await,
        },
        Command::Run { .. } | Command::Call { .. } => call::command(command, launcher).await,
        Command::Serve {
            stdio: _,
            concurrency,
            env,
            audit,
            scope,
        } => {
            let options = scope.options(env.load()?, audit.open()?);
            refuse_unless_granted(&options)?;
            serve::serve_stdio(launcher, concurrency.max(1), options).await
        }
        Command::Mcp {
            user,
            secrets,
            policy,
            cwd,
            env,
            audit,
            scope,
        } => {
            if let Some(cwd) = &cwd {
                if !cwd.is_absolute() {
                    return Err(CliError::usage("--cwd must be an absolute path"));
                }
            }
            let options = scope.options(env.load()?, audit.open()?);
            refuse_unless_granted(&options)?;
            let server = crate::mcp::McpServer::new(
                launcher.clone(),
                load_policy(policy.as_deref())?,
                TargetUser::resolve(&user.user).map_err(CliError::from)?,
                parse_grants(&secrets)?,
                cwd,
                options,
            );
            crate::mcp::serve_mcp(server)
                .await
                .map(|()| exit::OK)
                .map_err(|e| CliError::new(exit::FAILED, e.to_string()))
        }
        Command::Audit { action } => audit::command(action),
        Command::Demo => match crate::demo::demo(launcher).await {
            Ok(true) => Ok(exit::OK),
            Ok(false) => Ok(exit::FAILED),
            Err(crate::demo::DemoError::NotGranted(lacking)) => Err(lacking.into()),
            Err(e) => Err(CliError::new(exit::FAILED, e.to_string())),
        },
        Command::Verify { .. } => verify::command(command, launcher).await,
        Command::Classify { .. } | Command::Policy { .. } => classify::command(command),
        Command::GenerateDocs { out } => manual::generate(&out),
    }
}
