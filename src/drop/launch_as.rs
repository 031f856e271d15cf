//! The one path by which the worker starts anything for a user (tool calls
//! and provider programs alike): a launch inside the call's containment.
//!
//! Guarantees: nothing runs as a user a worker must not act as (a system
//! account, `nobody`, one outside the allotted range or with a shared
//! primary group: [`crate::user::allowed`]); no call of a user starts while an earlier call of theirs
//! left processes that could not be killed (the user is dirty); a call runs
//! in a cgroup of its own when the options ask for one (made while a fresh
//! launcher loads, or the one a pooled launcher waits in); where the host
//! has no cgroup at all the user is swept, as the user, after their last
//! live call; and the [`AppliedLimits`] returned say what was really in
//! force; a launch whose view or network needs a capability the host does
//! not grant is refused before it starts ([`crate::host`]).
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use super::direct::DirectRules;
use super::outcome::Outcome;
use super::proxy::CallEnd;
use super::request::RunOptions;
use super::spawn::{launch_tapped, Finished, Go, Input, Output, Setup, Tap};
use super::start::Launcher;
use crate::classify::Verdict;
use crate::contain::{self, AppliedLimits, CallCgroup};
use crate::env::{Network, ProxyUpstream};
use crate::launch::plan::{Action, LaunchPlan};
use crate::launch::report::{LaunchError, Stage, StatusReport};
use crate::user::{check_worker_target, TargetUser};

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
    launch_as_after(launcher, user, action, options, (timeout, tap), None).await
}

/// [`launch_as`], with the call held before its first key and its program
/// until `go` says its begin record is durable ([`Setup::go`]): the
/// launcher prepares the call meanwhile.
pub(crate) async fn launch_as_after(
    launcher: &Launcher,
    user: &TargetUser,
    action: Action,
    options: &RunOptions,
    (timeout, tap): (Duration, Option<Tap>),
    go: Option<Go>,
) -> Result<(Finished, AppliedLimits), LaunchError> {
    check_worker_target(user, &options.allotted)
        .map_err(|e| LaunchError::new(Stage::Plan, e.code(), e.to_string()))?;
    let uid = user.uid;
    if contain::is_dirty(uid) && !contain::cleanup(uid) {
        return Err(LaunchError::new(
            Stage::Spawn,
            "user_dirty",
            "an earlier call of this user left processes that could not be killed; no new call starts until they are gone",
        ));
    }
    let network = options.network_mode()?;
    let home_view = options.home_view(&user.name)?;
    let refuse_syscalls = options.env.config.refuse_syscalls.clone();
    if !refuse_syscalls.is_empty() {
        // An operator's unknown name is refused here, before any launch.
        crate::launch::syscall_filter::SyscallFilter::build(&refuse_syscalls)?;
    }
    let mut plan = LaunchPlan {
        limits: options.limits,
        view: options.view,
        network,
        home_view,
        refuse_syscalls,
        ..LaunchPlan::for_user(user, action)
    };
    bind_secrets(&mut plan, &options.env.config, &options.narrow)?;
    if plan.has_file_secrets() && !plan.in_own_namespaces() {
        return Err(LaunchError::new(
            Stage::Plan,
            "file_needs_private_view",
            "a secret given as a file needs the private view (--view private): the shared \
             view has no mount namespace of its own to hold the call's folder",
        ));
    }
    // What the launch really gets: provisioning and the sweep always run
    // on the host's network (they run no program of the user's choosing).
    let network = if plan.in_own_network() {
        network
    } else {
        Network::Host
    };
    // What the host must grant this launch, checked before anything
    // starts: a host that does not grant it is named with the fix, never
    // run in a weaker mode.
    let mut needs = vec![crate::host::Need::Drop];
    if plan.in_own_namespaces() {
        needs.push(crate::host::Need::PrivateView);
    }
    if plan.in_own_network() {
        needs.push(crate::host::Need::OwnNetwork);
    }
    crate::host::require(&needs)
        .map_err(|l| LaunchError::new(Stage::Spawn, l.code(), l.message()))?;
    let call_end = match (&options.env.config.proxy, network) {
        (Some(url), Network::Proxy) => {
            let mut upstream = ProxyUpstream::parse(url)
                .map_err(|e| LaunchError::new(Stage::Plan, "network_invalid", e))?;
            upstream.allow_hosts = options.env.config.proxy_allow_hosts.clone();
            Some(CallEnd::Proxy(Arc::new(upstream)))
        }
        (_, Network::Host) if plan.in_own_network() => {
            Some(CallEnd::Direct(Arc::new(DirectRules {
                allow_ranges: options.env.config.egress_allow_ranges.clone(),
            })))
        }
        _ => None,
    };
    // What the launch sees is decided by the plan alone (the worker starts
    // its launcher by it, and the launcher checks it).
    let private = plan.in_own_namespaces();
    let home = private.then(|| plan.home_view.mode.to_string());
    // No cgroup at all: the user's processes are swept after its last call,
    // unless the launch runs in a PID namespace of its own, whose end takes
    // everything in it (and a sweep would take the user's others).
    let live = if options.cgroup && !private && contain::untracked(contain::mounts()) {
        Some(contain::sweep::begin(uid).await)
    } else {
        None
    };
    let view = if private {
        crate::launch::view::View::Private
    } else {
        crate::launch::view::View::Shared
    };
    let mut applied = AppliedLimits::default();
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
            call_end,
            go,
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
    if applied.pids_max.is_none() {
        // No pids controller reached the call: say so, never let a limit
        // by rlimit pass for the call's own.
        let rlimit = format!(
            "limits by rlimit only: no cgroup pids controller is delegated here, so \
             RLIMIT_NPROC {} counts every process of the uid across its calls",
            applied.rlimit_nproc
        );
        applied.note = Some(match applied.note.take() {
            Some(note) => format!("{rlimit}; {note}"),
            None => rlimit,
        });
    }
    applied.view = Some(view.to_string());
    applied.network = Some(network.to_string());
    applied.home = home;
    applied.pids_max_hits = done.counters.pids_max_hits;
    applied.oom_kills = done.counters.oom_kills;
    applied.memory_peak = done.counters.memory_peak;
    applied.pids_peak = done.counters.pids_peak;
    applied.killed_at_end = done.counters.killed_at_end;
    applied.cleanup_error = done.cgroup_error.clone();
    Ok((done, applied))
}

/// Marks each secret of a program's plan that root's config binds to
/// hosts for this user; if any is, the call must be of the private view,
/// gets the operator's `upstream_ca`, and its proxy and CA variables name
/// its broker and the call's bundle ([`crate::broker::trust`]).
fn bind_secrets(
    plan: &mut LaunchPlan,
    config: &crate::env::EnvConfig,
    narrow: &[(String, Vec<String>)],
) -> Result<(), LaunchError> {
    let bindings = config.bindings();
    let private = plan.in_own_namespaces();
    let Action::Exec(exec) = &mut plan.action else {
        return Ok(());
    };
    for (name, _) in narrow {
        if bindings.for_user(&plan.user, name).is_none() {
            return Err(LaunchError::new(
                Stage::Plan,
                "binding_unknown",
                format!(
                    "--bind {name}=…: root's env config binds no secret {name} for {}; a call \
                     may narrow a binding, not make one (add it to the config's bind)",
                    plan.user
                ),
            ));
        }
    }
    for secret in &mut exec.secrets {
        let Some(binding) = bindings.for_user(&plan.user, &secret.name) else {
            continue;
        };
        let mut binding = binding.clone();
        for (_, hosts) in narrow.iter().filter(|(n, _)| *n == secret.name) {
            let body = binding.body;
            binding = binding
                .narrowed(&secret.name, hosts, body)
                .map_err(|e| LaunchError::new(Stage::Plan, "binding_wider", e.to_string()))?;
        }
        secret.bound = Some(binding);
    }
    let bound: Vec<&str> = exec
        .secrets
        .iter()
        .filter(|s| s.bound.is_some())
        .map(|s| s.name.as_str())
        .collect();
    if bound.is_empty() {
        return Ok(());
    }
    if !private {
        return Err(LaunchError::new(
            Stage::Plan,
            "binding_needs_private_view",
            format!(
                "{} bound to hosts by the operator's config: such a secret reaches a call \
                 only through its broker, which needs the private view (--view private); \
                 the shared view would hand the tool the value",
                bound.join(", ")
            ),
        ));
    }
    if let Some(path) = &config.upstream_ca {
        let pem = std::fs::read_to_string(path).map_err(|e| {
            LaunchError::new(
                Stage::Plan,
                "upstream_ca_unreadable",
                format!("upstream_ca {}: {e}", path.display()),
            )
        })?;
        exec.upstream_ca = Some(pem);
    }
    for (name, value) in crate::broker::trust::variables(crate::env::BROKER_ADDR) {
        exec.env.set(name, value);
    }
    Ok(())
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
