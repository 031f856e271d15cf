//! `verify`: the probes of [`crate::verify`] on this machine, printed as a
//! table (or JSON); exit 0 if every probe passed, 1 if any failed, 2 if
//! it could not run.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use super::args::Command;
use super::exit::{self, CliError};
use super::print_json;
use crate::drop::Launcher;
use crate::user::TargetUser;
use crate::verify::{verify, VerifyPlan};

/// Runs `verify`.
pub(super) async fn command(command: Command, launcher: &Launcher) -> Result<i32, CliError> {
    match command {
        Command::Verify {
            mut users,
            agent,
            executor,
            gate,
            tenant_secrets,
            protect,
            code,
            json,
            audit,
            env,
            network,
            home,
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
            let audit = audit.open()?;
            let env = env.load()?;
            let network = network.map(Into::into);
            let plan = |users, code| VerifyPlan {
                users,
                tenant_secrets,
                protect,
                code,
                roles,
                audit,
                env,
                network,
                home: home.map(Into::into),
            };
            run(launcher, &users, code, plan, json.json).await
        }
        _ => Err(CliError::new(
            exit::FAILED,
            "internal error: not a verify command",
        )),
    }
}

/// `verify`: exit 0 if every probe passed, 1 if any failed, 2 if it could
/// not run.
async fn run(
    launcher: &Launcher,
    users: &[String],
    mut code: Vec<PathBuf>,
    plan: impl FnOnce(Vec<TargetUser>, Vec<PathBuf>) -> VerifyPlan,
    json: bool,
) -> Result<i32, CliError> {
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
    let plan = plan(users, code);
    let options = crate::drop::RunOptions {
        env: plan.env.clone(),
        network: plan.network,
        home: plan.home,
        ..crate::drop::RunOptions::default()
    };
    let network = options
        .network_mode()
        .map_err(|e| CliError::usage(e.message))?;
    // The mode of a user the config names nowhere.
    let home = options.home.or(plan.env.config.home).unwrap_or_default();
    let probes = verify(launcher, &plan)
        .await
        .map_err(|e| CliError::usage(format!("verify could not run: {e}")))?;
    let failed = probes.iter().filter(|p| !p.pass).count();
    let inconclusive = probes.iter().filter(|p| p.inconclusive).count();
    // What this host grants, read before any probe (crate::host): the
    // cause of every refusal below is named here first.
    let host = crate::host::HostFacts::current().lines();
    if json {
        let host: serde_json::Map<String, serde_json::Value> = host
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(v.as_str())))
            .collect();
        print_json(&serde_json::json!({
            "host": host,
            "network": network,
            "home": home,
            "passed": probes.len() - failed,
            "failed": failed,
            "inconclusive": inconclusive,
            "probes": probes
        }))?;
    } else {
        println!("host");
        for (what, value) in &host {
            println!("  {what:<48} {value}");
        }
        println!();
        println!(
            "{:<12} {:<15} {:>6} {:<8} {:<62} got",
            "result", "as", "uid", "expected", "probe"
        );
        for p in &probes {
            let expected = serde_json::to_value(p.expected)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            println!(
                "{:<12} {:<15} {:>6} {:<8} {:<62} {}",
                match (p.pass, p.inconclusive) {
                    (true, _) => "pass",
                    (false, false) => "FAIL",
                    (false, true) => "INCONCLUSIVE",
                },
                p.user,
                p.uid,
                expected,
                p.tried,
                p.got
            );
        }
        println!(
            "{} passed, {} failed ({inconclusive} of them inconclusive: no errno or state proved either way)",
            probes.len() - failed,
            failed
        );
        println!(
            "calls get network {network}{}",
            if network == crate::env::Network::Host {
                " (the weakest: a call reaches whatever the host reaches; choose none or proxy)"
            } else {
                ""
            }
        );
        println!(
            "calls get home {home}{}",
            if home == crate::env::HomeMode::Persistent {
                " (the weakest: what one call writes to the home, the next call runs; choose ephemeral or read-only)"
            } else {
                ""
            }
        );
    }
    Ok(if failed == 0 { exit::OK } else { exit::FAILED })
}
