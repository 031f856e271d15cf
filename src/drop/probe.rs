//! `tono-seal verify`: probes that prove, on this machine, that separation
//! by uid is real and not cosmetic.
//!
//! Every probe that acts as a user runs through the same launcher and
//! `drop_and_run` as the worker, and reports what it tried, as which uid,
//! what was expected, what happened and whether it passed. Facts about the
//! machine (user namespaces, `/proc` mount options, shared groups or uids,
//! writable code) are read by root from root-owned files only; anything in
//! a home is inspected as its owner.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::run::{drop_and_run, DropRequest, RunOptions};
use super::spawn::Launcher;
use crate::classify::Policy;
use crate::user::TargetUser;

/// What a probe expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// The kernel must refuse.
    Denied,
    /// It must work (scratch folders, reading and running the code).
    Allowed,
    /// A fact about the machine that must hold.
    Holds,
}

/// One probe's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// What was tried.
    pub tried: String,
    /// As which user (`root` for machine facts).
    pub user: String,
    /// As which uid.
    pub uid: u32,
    /// What was expected.
    pub expected: Expect,
    /// What happened (an errno text, or the fact found).
    pub got: String,
    /// Whether it passed.
    pub pass: bool,
}

/// What to probe.
#[derive(Debug, Clone)]
pub struct VerifyPlan {
    /// The probed users.
    pub users: Vec<TargetUser>,
    /// Tenant secret folder, probed if present.
    pub tenant_secrets: PathBuf,
    /// Extra paths nobody probed may read or write.
    pub protect: Vec<PathBuf>,
    /// Installed code nobody probed may write (but all may read and run).
    pub code: Vec<PathBuf>,
    /// Three-uid mode (agent, executor, gate), by uid: the `--protect` paths
    /// are the gate's assets; the agent may neither read nor write them,
    /// the executor may not write them, the gate itself is not probed on
    /// them.
    pub roles: Option<Roles>,
}

/// The three uids of the three-uid mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    /// The agent's uid.
    pub agent: u32,
    /// The executor's uid.
    pub executor: u32,
    /// The gate's uid.
    pub gate: u32,
}

fn fact(tried: impl Into<String>, got: impl Into<String>, pass: bool) -> Probe {
    Probe {
        tried: tried.into(),
        user: "root".into(),
        uid: 0,
        expected: Expect::Holds,
        got: got.into(),
        pass,
    }
}

/// Facts read by root from root-owned files.
pub fn machine_facts(plan: &VerifyPlan) -> Vec<Probe> {
    let mut out = Vec::new();
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let identity = map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    out.push(fact(
        "the uid map is the identity (not a user namespace)",
        if identity {
            "0 0 4294967295".to_string()
        } else {
            format!("uid_map is {:?}: uids here are cosmetic", map.trim())
        },
        identity,
    ));
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let hidepid = mountinfo
        .lines()
        .filter(|l| l.split_whitespace().nth(4) == Some("/proc"))
        .any(|l| l.contains("hidepid=") && !l.contains("hidepid=0") && !l.contains("hidepid=off"));
    out.push(fact(
        "/proc is mounted without hidepid (the evidence is visible)",
        if hidepid {
            "hidepid is set"
        } else {
            "no hidepid"
        },
        !hidepid,
    ));
    let uids: Vec<u32> = plan.users.iter().map(|u| u.uid).collect();
    let unique: BTreeSet<u32> = uids.iter().copied().collect();
    out.push(fact(
        "no two probed users share a uid",
        format!("uids {uids:?}"),
        unique.len() == uids.len(),
    ));
    let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
    for a in &plan.users {
        for b in &plan.users {
            if a.uid == b.uid {
                continue;
            }
            let shares = a.gid == b.gid
                || groups.lines().any(|l| {
                    let f: Vec<&str> = l.split(':').collect();
                    f.len() == 4
                        && f[2].parse() == Ok(b.gid)
                        && f[3].split(',').any(|m| m == a.name)
                });
            out.push(fact(
                format!("{} is not in {}'s group", a.name, b.name),
                if shares {
                    format!("{} is a member of gid {}", a.name, b.gid)
                } else {
                    "no shared group".into()
                },
                !shares,
            ));
        }
    }
    let mounts = super::cgroup::mounts();
    out.push(fact(
        "no process outlives its call",
        match &mounts.v2 {
            Some(m) => format!("each call in its own cgroup v2 under {}, killed as a whole when it ends", m.display()),
            None if !super::cgroup::untracked(mounts) => {
                "no cgroup v2: each call in its own v1 cgroups; what is left in them when it ends is killed through pidfds".into()
            }
            None => "weaker, no cgroup at all: a per-user sweep (kill(-1) as the user) after the user's last live call; \
                     a process that left its call lives until then, and the user's other processes die with it"
                .into(),
        },
        true,
    ));
    // Controllers the v2 root passes down can be enabled for our base.
    let delegated = |name: &str| {
        mounts.v2.as_ref().is_some_and(|m| {
            std::fs::read_to_string(m.join("cgroup.subtree_control"))
                .unwrap_or_default()
                .split_whitespace()
                .any(|c| c == name)
        })
    };
    out.push(fact(
        "limits in force for a call",
        format!(
            "pids.max {}; RLIMIT_NPROC {}; RLIMIT_NOFILE {}; memory {} bytes ({})",
            if delegated("pids") {
                super::cgroup::DEFAULT_PIDS_MAX.to_string() + " (cgroup v2 pids)"
            } else if mounts.v1_pids.is_some() {
                super::cgroup::DEFAULT_PIDS_MAX.to_string() + " (cgroup v1 pids)"
            } else {
                "not applied".into()
            },
            crate::launch::plan::DEFAULT_NPROC,
            crate::launch::plan::DEFAULT_NOFILE,
            super::cgroup::DEFAULT_MEMORY_MAX,
            if delegated("memory") {
                "cgroup v2 memory, OOM-killed inside the call"
            } else if mounts.v1_memory.is_some() {
                "cgroup v1 memory, OOM-killed inside the call"
            } else {
                "RLIMIT_AS: allocations past it fail"
            },
        ),
        true,
    ));
    for path in &plan.code {
        match std::fs::metadata(path) {
            Ok(m) => {
                let ok = m.uid() == 0 && m.mode() & 0o022 == 0;
                out.push(fact(
                    format!(
                        "{} is root-owned and not group/other writable",
                        path.display()
                    ),
                    format!("owner {} mode {:04o}", m.uid(), m.mode() & 0o7777),
                    ok,
                ));
            }
            Err(e) => out.push(fact(
                format!("{} exists", path.display()),
                e.to_string(),
                false,
            )),
        }
    }
    out
}

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
        let (launcher, policy) = (launcher.clone(), policy.clone());
        async move {
            let options = RunOptions {
                timeout,
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
        let out = run(me, script(me, plan, &targets), Duration::from_secs(60)).await;
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
