//! The probes that act as a user: each probed user runs one script through
//! the same launcher and `drop_and_run` as the worker, and every line of
//! its output is one probe (what it tried, the exit status, the error the
//! kernel gave).
#![forbid(unsafe_code)]

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use serde_json::json;

use super::containment::containment_probes;
use super::machine::machine_facts;
use super::probe::{Expect, Probe, VerifyPlan};
use crate::classify::Policy;
use crate::drop::Launcher;
use crate::drop::{drop_and_run, DropRequest, RunOptions};
use crate::user::TargetUser;

fn q(path: &std::path::Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}

/// The shell script of one user's probes; each line prints `name|rc|err`.
fn script(me: &TargetUser, plan: &VerifyPlan, pids: &[(String, u32)]) -> String {
    let mut s = String::from("probe() { n=\"$1\"; shift; err=$( (\"$@\") 2>&1 >/dev/null ); rc=$?; printf '%s|%s|%s\\n' \"$n\" \"$rc\" \"$(printf %s \"$err\" | tr '\\n|' '  ' | cut -c1-120)\"; }\n");
    s.push_str("r() { if [ -d \"$1\" ]; then ls \"$1\"; else cat \"$1\"; fi >/dev/null; }\nw() { : >> \"$1\"; }\nmk() { d=\"$1/.tono-verify-$$\"; : > \"$d\" && rm -f \"$d\"; }\n");
    s.push_str(
        "stat -c 'mode|%a|%n' \"$HOME\" \"$HOME/.tono\" \"$HOME/.tono/identity\" 2>/dev/null\n",
    );
    for other in plan.users.iter().filter(|o| o.uid != me.uid) {
        let h = &other.home;
        for (what, path) in [
            ("home", h.clone()),
            ("identity", h.join(".tono/identity")),
            ("secrets folder", h.join(".tono/secrets")),
            ("recipient", h.join(".tono/recipient")),
        ] {
            s.push_str(&format!(
                "probe 'D:read {}'\"'\"'s {what}' r {}\n",
                other.name,
                q(&path)
            ));
        }
        s.push_str(&format!(
            "probe 'D:write {}'\"'\"'s home' mk {}\n",
            other.name,
            q(h)
        ));
        s.push_str(&format!(
            "probe 'D:write {}'\"'\"'s secrets' mk {}\n",
            other.name,
            q(&h.join(".tono/secrets"))
        ));
    }
    for worker in [
        crate::turn::state::DEFAULT_STATE_DIR,
        crate::turn::turn_dir::DEFAULT_TURN_BASE,
    ] {
        if std::path::Path::new(worker).exists() {
            s.push_str(&format!(
                "probe 'D:write worker folder {worker}' mk {worker}\n"
            ));
        }
    }
    if plan.tenant_secrets.exists() {
        s.push_str(&format!(
            "probe 'D:read tenant secrets {0}' r {1}\nprobe 'D:write tenant secrets {0}' mk {1}\n",
            plan.tenant_secrets.display(),
            q(&plan.tenant_secrets)
        ));
    }
    let (may_read, may_write) = match plan.roles {
        Some(r) if r.gate == me.uid => (true, true),
        Some(r) if r.executor == me.uid => (true, false),
        _ => (false, false),
    };
    for p in &plan.protect {
        if !may_read {
            s.push_str(&format!(
                "probe 'D:read protected {0}' r {1}\n",
                p.display(),
                q(p)
            ));
        }
        if !may_write {
            s.push_str(&format!(
                "probe 'D:write protected {0}' w {1}\n",
                p.display(),
                q(p)
            ));
        }
    }
    for c in &plan.code {
        s.push_str(&format!(
            "probe 'D:write code {0}' w {1}\nprobe 'A:read and run code {0}' sh -c 'test -r \"$1\" && test -x \"$1\"' - {1}\n",
            c.display(),
            q(c)
        ));
    }
    for (who, pid) in pids {
        s.push_str(&format!(
            "probe 'D:signal {who} (pid {pid})' kill -0 {pid}\n\
             probe 'D:ptrace {who} (pid {pid})' perl -e 'exit(syscall(101, 16, {pid}, 0, 0) == -1 ? ($!{{EPERM}} ? 1 : 2) : 0)'\n"
        ));
    }
    s.push_str(
        "probe 'D:setuid(0)' perl -e 'exit(syscall(105, 0) == -1 ? ($!{EPERM} ? 1 : 2) : 0)'\n\
         probe 'D:sudo -n true' sudo -n true\n\
         probe 'D:su to root' sh -c 'su -c true root </dev/null'\n",
    );
    for d in ["/tmp", "/var/tmp", "/dev/shm"] {
        s.push_str(&format!("probe 'A:write {d}' mk {d}\n"));
    }
    s
}

/// Runs every probe; the error says why verify could not run at all.
pub async fn verify(launcher: &Launcher, plan: &VerifyPlan) -> Result<Vec<Probe>, String> {
    let mut probes = machine_facts(plan);
    let policy = Policy::default();
    let run = |user: &TargetUser, command: String, timeout: Duration| {
        let call = serde_json::to_vec(&json!({"tool": "shell", "args": {"command": command}}))
            .unwrap_or_default();
        let user = user.clone();
        let (launcher, policy, audit) = (launcher.clone(), policy.clone(), plan.audit.clone());
        async move {
            let options = RunOptions {
                timeout,
                audit,
                ..RunOptions::default()
            };
            drop_and_run(&DropRequest {
                launcher: &launcher,
                policy: &policy,
                user: &user,
                grants: &[],
                call: &call,
                options,
            })
            .await
        }
    };
    // One long-running process per user, as a target for the others.
    let mut sleepers = Vec::new();
    for u in &plan.users {
        sleepers.push(tokio::spawn(run(
            u,
            "exec sleep 30".into(),
            Duration::from_secs(30),
        )));
    }
    let mut pids: Vec<(String, u32)> =
        vec![("the verifying root process".into(), std::process::id())];
    for u in &plan.users {
        for _ in 0..100 {
            if let Some(pid) = find_sleeper(u.uid) {
                pids.push((u.name.clone(), pid));
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for me in &plan.users {
        let targets: Vec<(String, u32)> = pids
            .iter()
            .filter(|(who, _)| who != &me.name)
            .cloned()
            .collect();
        let text = script(me, plan, &targets);
        let expected_lines = text.lines().filter(|l| l.starts_with("probe ")).count();
        let out = run(me, text, Duration::from_secs(60)).await;
        if let Some(e) = &out.launch_error {
            probes.push(Probe {
                tried: "launch a probe as the user".into(),
                user: me.name.clone(),
                uid: me.uid,
                expected: Expect::Allowed,
                got: e.message.clone(),
                pass: false,
            });
            continue;
        }
        // Every probe of the script must have answered: a script that died
        // or was cut short would otherwise pass by saying nothing.
        let answered = out
            .stdout
            .lines()
            .filter(|l| l.splitn(3, '|').count() == 3 && !l.starts_with("mode|"))
            .count();
        if answered != expected_lines {
            probes.push(Probe {
                tried: "every probe of the user's script answered".into(),
                user: me.name.clone(),
                uid: me.uid,
                expected: Expect::Holds,
                got: format!(
                    "{answered} of {expected_lines} answered; exit {:?}, signal {:?}, timed out {}, \
                     most processes at once {:?}: {}",
                    out.exit_code,
                    out.signal,
                    out.timed_out,
                    out.limits.as_ref().and_then(|l| l.pids_peak),
                    out.stderr.chars().take(200).collect::<String>()
                ),
                pass: false,
            });
        }
        for line in out.stdout.lines() {
            let f: Vec<&str> = line.splitn(3, '|').collect();
            if f.len() != 3 {
                continue;
            }
            if f[0] == "mode" {
                let mode = u32::from_str_radix(f[1], 8).unwrap_or(0o777);
                probes.push(Probe {
                    tried: format!("{} has no group/other access", f[2]),
                    user: me.name.clone(),
                    uid: me.uid,
                    expected: Expect::Holds,
                    got: format!("mode {:04o}", mode),
                    pass: mode & 0o077 == 0,
                });
                continue;
            }
            let (expected, tried) = match f[0].split_once(':') {
                Some(("A", t)) => (Expect::Allowed, t),
                Some((_, t)) => (Expect::Denied, t),
                None => (Expect::Denied, f[0]),
            };
            let ok = f[1] == "0";
            let got = if ok {
                "succeeded".to_string()
            } else if f[2].trim().is_empty() {
                format!("failed (exit {})", f[1])
            } else {
                f[2].trim().to_string()
            };
            // A denial counts only when the kernel gave it: a missing probe
            // tool (126/127), a vanished target or an errno other than EPERM
            // from the ptrace/setuid probes (exit 2) is a failed probe.
            let ran = !matches!(f[1], "126" | "127" | "2")
                || tried.starts_with("read")
                || tried.starts_with("write");
            let signal_ok = !tried.starts_with("signal") || f[2].contains("not permitted");
            let pass = match expected {
                Expect::Allowed => ok,
                _ => !ok && ran && signal_ok,
            };
            probes.push(Probe {
                tried: tried.to_string(),
                user: me.name.clone(),
                uid: me.uid,
                expected,
                got,
                pass,
            });
        }
    }
    for u in &plan.users {
        let _ = std::process::Command::new("pkill")
            .args(["-KILL", "-u", &u.name, "-x", "sleep"])
            .status();
    }
    for s in sleepers {
        let _ = s.await;
    }
    if let Some(first) = plan.users.first() {
        let base = RunOptions {
            audit: plan.audit.clone(),
            ..RunOptions::default()
        };
        probes.extend(containment_probes(launcher, first, &base).await);
    }
    Ok(probes)
}

fn find_sleeper(uid: u32) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(meta) = e.metadata() else { continue };
        if meta.uid() == uid
            && std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
        {
            return Some(pid);
        }
    }
    None
}
