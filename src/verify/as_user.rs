//! The probes that act as a user: each probed user has the launcher, after
//! the same drop as every call, make each attempt itself and report the
//! kernel's answer ([`crate::launch::access`]); a denial counts only when
//! the kernel said `EACCES` or `EPERM`, and any other answer is an
//! inconclusive probe with its errno shown.
#![forbid(unsafe_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::containment::containment_probes;
use super::machine::machine_facts;
use super::network::network_probes;
use super::probe::{fact, Expect, Probe, Verdict, VerifyPlan};
use super::side_doors::side_door_probes;
use super::tree_walk::{walk, MAX_ENTRIES};
use crate::classify::Policy;
use crate::drop::launch_as::launch_as;
use crate::drop::Launcher;
use crate::drop::{drop_and_run, DropRequest, RunOptions};
use crate::launch::access::{AccessAnswer, AccessProbe};
use crate::launch::plan::Action;
use crate::launch::report::StatusReport;
use crate::user::TargetUser;

/// How many attempts one launch carries (the answers stay well under the
/// status pipe's cap).
const PROBES_PER_LAUNCH: usize = 2_000;
/// How many times root looks for each user's target process (20 ms apart)
/// before the probes aimed at it are reported as not run.
const SLEEPER_LOOKS: usize = 100;
/// How many entries of a tree a failing probe names.
const SHOWN: usize = 3;

/// How an answer is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judge {
    /// Only `EACCES`/`EPERM` passes.
    Denied,
    /// Only success passes.
    Allowed,
    /// The path's mode has no group/other bits (an absent path has none).
    Private,
    /// A program that grants root must refuse: a non-zero exit that is not
    /// "not found" (127) or "cannot run" (126).
    ProgramRefuses,
    /// `sudo` in a call must refuse *because of* `no_new_privs`: that is all
    /// it can show (under the flag it refuses every user, a `NOPASSWD: ALL`
    /// sudoer too); another refusal proves nothing about the flag.
    NoNewPrivs,
}

/// One line of the report: one or more attempts judged together (a
/// `--protect` tree is one line per user and kind, over all its entries).
struct Ask {
    tried: String,
    judge: Judge,
    probes: Vec<AccessProbe>,
}

impl Ask {
    fn one(tried: impl Into<String>, judge: Judge, probe: AccessProbe) -> Self {
        Self {
            tried: tried.into(),
            judge,
            probes: vec![probe],
        }
    }
}

fn target_of(probe: &AccessProbe) -> String {
    match probe {
        AccessProbe::Read { path }
        | AccessProbe::Write { path }
        | AccessProbe::Run { path }
        | AccessProbe::Mode { path } => path.display().to_string(),
        AccessProbe::Signal { pid } | AccessProbe::Trace { pid } => format!("pid {pid}"),
        AccessProbe::SetUid { uid } => format!("uid {uid}"),
        AccessProbe::Program { argv } => argv.join(" "),
    }
}

fn errno_said(answer: &AccessAnswer) -> String {
    match answer.errno_text() {
        Some(text) => format!("{text} ({})", answer.detail),
        None => answer.detail.clone(),
    }
}

/// The verdict on one answer, and what it showed.
fn judge_one(judge: Judge, answer: &AccessAnswer) -> (Verdict, String) {
    match judge {
        Judge::Denied if answer.ok => (Verdict::Fail, format!("succeeded: {}", answer.detail)),
        Judge::Denied if answer.denied_by_kernel() => (Verdict::Pass, errno_said(answer)),
        Judge::Denied => (
            Verdict::Inconclusive,
            format!("inconclusive: {}", errno_said(answer)),
        ),
        Judge::Allowed if answer.ok => (Verdict::Pass, answer.detail.clone()),
        Judge::Allowed => (Verdict::Fail, errno_said(answer)),
        Judge::Private => match (answer.ok, answer.value) {
            (true, Some(mode)) if mode & 0o077 == 0 => (Verdict::Pass, format!("mode {mode:04o}")),
            (true, Some(mode)) => (Verdict::Fail, format!("mode {mode:04o}, {}", answer.detail)),
            _ if answer.errno == Some(libc::ENOENT) => {
                (Verdict::Pass, format!("absent: {}", errno_said(answer)))
            }
            _ => (
                Verdict::Inconclusive,
                format!("inconclusive: {}", errno_said(answer)),
            ),
        },
        Judge::ProgramRefuses => match (answer.ok, answer.errno, answer.value) {
            (true, _, _) => (
                Verdict::Fail,
                format!("exit 0: it let the user in {}", answer.detail),
            ),
            (_, Some(_), _) => (
                Verdict::Inconclusive,
                format!("inconclusive: {}", errno_said(answer)),
            ),
            (_, None, Some(code)) if code != 126 && code != 127 => (
                Verdict::Pass,
                format!("refused, exit {code}: {}", answer.detail),
            ),
            (_, None, code) => (
                Verdict::Inconclusive,
                format!("inconclusive: exit {code:?}: {}", answer.detail),
            ),
        },
        Judge::NoNewPrivs => match judge_one(Judge::ProgramRefuses, answer) {
            (Verdict::Pass, said) if answer.detail.contains("\"no new privileges\" flag") => {
                (Verdict::Pass, said)
            }
            (Verdict::Pass, said) => (
                Verdict::Inconclusive,
                format!("inconclusive: not refused for no_new_privs: {said}"),
            ),
            other => other,
        },
    }
}

/// The verdict on an ask: any failure fails it, naming the first entries;
/// else any inconclusive answer makes it inconclusive; else it passed.
fn judge_ask(ask: &Ask, answers: &[AccessAnswer]) -> (Verdict, String) {
    let judged: Vec<(Verdict, String)> = answers.iter().map(|a| judge_one(ask.judge, a)).collect();
    if let [(verdict, said)] = judged.as_slice() {
        return (*verdict, said.clone());
    }
    let count = judged.len();
    for worst in [Verdict::Fail, Verdict::Inconclusive] {
        let hits: Vec<String> = ask
            .probes
            .iter()
            .zip(&judged)
            .filter(|(_, (v, _))| *v == worst)
            .map(|(p, (_, said))| format!("{}: {said}", target_of(p)))
            .collect();
        if !hits.is_empty() {
            let mut text = format!("{} of {count} entries: ", hits.len());
            text.push_str(
                &hits
                    .iter()
                    .take(SHOWN)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; "),
            );
            return (worst, text);
        }
    }
    let mut errnos: Vec<String> = answers
        .iter()
        .filter_map(|a| {
            a.errno_text()
                .map(|t| t.split(':').next().unwrap_or("").to_owned())
        })
        .collect();
    errnos.sort();
    errnos.dedup();
    (
        Verdict::Pass,
        format!(
            "all {count} entries: {}",
            if errnos.is_empty() {
                "as expected".into()
            } else {
                errnos.join(", ")
            }
        ),
    )
}

/// Where a program is, searched as root in the system's own folders.
fn installed(name: &str) -> Option<PathBuf> {
    [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
    .iter()
    .map(|d| Path::new(d).join(name))
    .find(|p| p.is_file())
}

/// Every attempt `me` makes, as report lines.
fn asks(me: &TargetUser, plan: &VerifyPlan, pids: &[(String, u32)]) -> Vec<Ask> {
    let mut out = Vec::new();
    for path in [
        me.home.clone(),
        me.home.join(".tono"),
        me.home.join(".tono/identity"),
    ] {
        out.push(Ask::one(
            format!("{} has no group/other access", path.display()),
            Judge::Private,
            AccessProbe::Mode { path },
        ));
    }
    for other in plan.users.iter().filter(|o| o.uid != me.uid) {
        let h = &other.home;
        for (what, path) in [
            ("home", h.clone()),
            ("identity", h.join(".tono/identity")),
            ("secrets folder", h.join(".tono/secrets")),
            ("recipient", h.join(".tono/recipient")),
        ] {
            out.push(Ask::one(
                format!("read {}'s {what}", other.name),
                Judge::Denied,
                AccessProbe::Read { path },
            ));
        }
        for (what, path) in [("home", h.clone()), ("secrets", h.join(".tono/secrets"))] {
            out.push(Ask::one(
                format!("write {}'s {what}", other.name),
                Judge::Denied,
                AccessProbe::Write { path },
            ));
        }
    }
    for worker in [
        crate::turn::state::DEFAULT_STATE_DIR,
        crate::turn::turn_dir::DEFAULT_TURN_BASE,
    ] {
        if Path::new(worker).exists() {
            out.push(Ask::one(
                format!("write worker folder {worker}"),
                Judge::Denied,
                AccessProbe::Write {
                    path: worker.into(),
                },
            ));
        }
    }
    if plan.tenant_secrets.exists() {
        let path = plan.tenant_secrets.clone();
        out.push(Ask::one(
            format!("read tenant secrets {}", path.display()),
            Judge::Denied,
            AccessProbe::Read { path: path.clone() },
        ));
        out.push(Ask::one(
            format!("write tenant secrets {}", path.display()),
            Judge::Denied,
            AccessProbe::Write { path },
        ));
    }
    let (may_read, may_write) = match plan.roles {
        Some(r) if r.gate == me.uid => (true, true),
        Some(r) if r.executor == me.uid => (true, false),
        _ => (false, false),
    };
    for tree in &plan.protect {
        // Root lists the tree (never through a link); the user tries each
        // entry. The bound is reported like the code walk's.
        let (entries, stopped) = walk(tree, MAX_ENTRIES);
        let note = if stopped {
            format!(" (first {MAX_ENTRIES} entries)")
        } else {
            String::new()
        };
        for (may, kind) in [(may_read, "read"), (may_write, "write")] {
            if may {
                continue;
            }
            let probes = entries
                .iter()
                .map(|path| {
                    let path = path.clone();
                    if kind == "read" {
                        AccessProbe::Read { path }
                    } else {
                        AccessProbe::Write { path }
                    }
                })
                .collect();
            out.push(Ask {
                tried: format!("{kind} protected {}{note}", tree.display()),
                judge: Judge::Denied,
                probes,
            });
        }
    }
    for code in &plan.code {
        out.push(Ask::one(
            format!("write code {}", code.display()),
            Judge::Denied,
            AccessProbe::Write { path: code.clone() },
        ));
        out.push(Ask::one(
            format!("read and run code {}", code.display()),
            Judge::Allowed,
            AccessProbe::Run { path: code.clone() },
        ));
    }
    for (who, pid) in pids {
        let pid = *pid as i32;
        out.push(Ask::one(
            format!("signal {who} (pid {pid})"),
            Judge::Denied,
            AccessProbe::Signal { pid },
        ));
        out.push(Ask::one(
            format!("ptrace {who} (pid {pid})"),
            Judge::Denied,
            AccessProbe::Trace { pid },
        ));
    }
    out.push(Ask::one(
        "setuid(0)",
        Judge::Denied,
        AccessProbe::SetUid { uid: 0 },
    ));
    // `sudo` in a call shows only that no_new_privs holds; whether the user
    // is a sudoer at all is root's question (`super::privilege`).
    for (program, args, judge, what) in [
        (
            "sudo",
            &["-n", "true"][..],
            Judge::NoNewPrivs,
            " (shows no_new_privs holds in a call, not that the user is no sudoer)",
        ),
        ("su", &["-c", "true", "root"][..], Judge::ProgramRefuses, ""),
    ] {
        if let Some(path) = installed(program) {
            let mut argv = vec![path.display().to_string()];
            argv.extend(args.iter().map(|a| a.to_string()));
            out.push(Ask::one(
                format!("{program} {}{what}", args.join(" ")),
                judge,
                AccessProbe::Program { argv },
            ));
        }
    }
    for d in ["/tmp", "/var/tmp", "/dev/shm"] {
        if Path::new(d).is_dir() {
            out.push(Ask::one(
                format!("write {d}"),
                Judge::Allowed,
                AccessProbe::Write { path: d.into() },
            ));
        }
    }
    out
}

/// Has the launcher, as `user`, make every attempt of `asks` (in launches
/// of at most [`PROBES_PER_LAUNCH`]); one answer per attempt, or why the
/// answers are missing.
async fn attempt(
    launcher: &Launcher,
    user: &TargetUser,
    asks: &[Ask],
    options: &RunOptions,
) -> Result<Vec<AccessAnswer>, String> {
    let all: Vec<AccessProbe> = asks.iter().flat_map(|a| a.probes.iter().cloned()).collect();
    let mut answers = Vec::with_capacity(all.len());
    for batch in all.chunks(PROBES_PER_LAUNCH) {
        let action = Action::Probe {
            probes: batch.to_vec(),
        };
        let (done, _) = launch_as(
            launcher,
            user,
            action,
            options,
            Duration::from_secs(60),
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
        let got: Vec<AccessAnswer> = match done.report {
            StatusReport::Done(value) => serde_json::from_value(value)
                .map_err(|e| format!("the launcher's answers are not readable: {e}"))?,
            StatusReport::Failed(e) => return Err(e.to_string()),
            other => return Err(format!("the launcher ended without answers: {other:?}")),
        };
        let short = got.len() < batch.len();
        answers.extend(got);
        if short {
            // setuid(0) worked: the launcher stopped there.
            break;
        }
    }
    Ok(answers)
}

/// Runs every probe; the error says why verify could not run at all.
pub async fn verify(launcher: &Launcher, plan: &VerifyPlan) -> Result<Vec<Probe>, String> {
    let mut probes = machine_facts(plan);
    let policy = Policy::default();
    let options = RunOptions {
        audit: plan.audit.clone(),
        env: plan.env.clone(),
        network: plan.network,
        home: plan.home,
        ..RunOptions::default()
    };
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
    // A user whose target was never seen: the probes aimed at it could not
    // run, and each is reported as such, never left out.
    let mut unseen: Vec<String> = Vec::new();
    for u in &plan.users {
        let mut found = None;
        for _ in 0..SLEEPER_LOOKS {
            found = find_sleeper(u.uid);
            if found.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        match found {
            Some(pid) => pids.push((u.name.clone(), pid)),
            None => unseen.push(u.name.clone()),
        }
    }
    let sudo = installed("sudo");
    for u in &plan.users {
        probes.extend(super::privilege::privilege_probes(u, sudo.as_deref()));
    }
    for (program, _) in [("sudo", ()), ("su", ())] {
        if installed(program).is_none() {
            probes.push(fact(
                format!("{program} cannot make a probed user root"),
                format!("{program} is not installed (searched /usr/local/sbin, /usr/local/bin, /usr/sbin, /usr/bin, /sbin, /bin)"),
                true,
            ));
        }
    }
    for me in &plan.users {
        let targets: Vec<(String, u32)> = pids
            .iter()
            .filter(|(who, _)| who != &me.name)
            .cloned()
            .collect();
        for who in unseen.iter().filter(|who| *who != &me.name) {
            for kind in ["signal", "ptrace"] {
                probes.push(Probe::of(
                    me,
                    format!("{kind} {who} (no pid)"),
                    Expect::Denied,
                    format!(
                        "inconclusive: could not run: {who}'s target (a call's `sleep 30`) \
                         was not seen in /proc in {SLEEPER_LOOKS} looks"
                    ),
                    Verdict::Inconclusive,
                ));
            }
        }
        let asks = asks(me, plan, &targets);
        let expected: usize = asks.iter().map(|a| a.probes.len()).sum();
        let answers = match attempt(launcher, me, &asks, &options).await {
            Ok(answers) => answers,
            Err(e) => {
                probes.push(Probe::of(
                    me,
                    "launch the probes as the user",
                    Expect::Allowed,
                    e,
                    Verdict::Fail,
                ));
                continue;
            }
        };
        // Every attempt must have an answer: a launcher that stopped early
        // would otherwise pass by saying nothing.
        if answers.len() != expected {
            probes.push(Probe::of(
                me,
                "every probe answered",
                Expect::Holds,
                format!("{} of {expected} answered", answers.len()),
                Verdict::Fail,
            ));
        }
        let mut rest = answers.as_slice();
        for ask in &asks {
            let n = ask.probes.len().min(rest.len());
            let (mine, after) = rest.split_at(n);
            rest = after;
            if mine.len() < ask.probes.len() {
                break;
            }
            let (verdict, got) = judge_ask(ask, mine);
            let expected = match ask.judge {
                Judge::Denied | Judge::ProgramRefuses | Judge::NoNewPrivs => Expect::Denied,
                Judge::Allowed => Expect::Allowed,
                Judge::Private => Expect::Holds,
            };
            probes.push(Probe::of(me, ask.tried.clone(), expected, got, verdict));
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
        probes.extend(containment_probes(launcher, first, &options).await);
        probes.extend(network_probes(launcher, first, &options).await);
        probes.extend(side_door_probes(launcher, first, plan.users.get(1), &options).await);
        probes.push(super::broker::broker_probe(launcher, first, &options).await);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(ok: bool, errno: Option<i32>) -> AccessAnswer {
        AccessAnswer {
            ok,
            errno,
            detail: "open".into(),
            value: None,
        }
    }

    #[test]
    fn only_eacces_and_eperm_are_denials_and_other_errnos_are_inconclusive() {
        let j = |a| judge_one(Judge::Denied, &a).0;
        assert_eq!(j(answer(false, Some(libc::EACCES))), Verdict::Pass);
        assert_eq!(j(answer(false, Some(libc::EPERM))), Verdict::Pass);
        assert_eq!(j(answer(true, None)), Verdict::Fail);
        for errno in [
            libc::ENOENT,
            libc::EROFS,
            libc::EISDIR,
            libc::ESRCH,
            libc::ELOOP,
        ] {
            let (verdict, said) = judge_one(Judge::Denied, &answer(false, Some(errno)));
            assert_eq!(verdict, Verdict::Inconclusive, "{errno}");
            assert!(said.starts_with("inconclusive: E"), "{said}");
        }
    }

    #[test]
    fn a_program_that_is_missing_or_cannot_run_proves_nothing() {
        let program = |ok, errno, value| {
            judge_one(
                Judge::ProgramRefuses,
                &AccessAnswer {
                    ok,
                    errno,
                    detail: String::new(),
                    value,
                },
            )
            .0
        };
        assert_eq!(program(false, None, Some(1)), Verdict::Pass);
        assert_eq!(program(true, None, Some(0)), Verdict::Fail);
        assert_eq!(program(false, None, Some(127)), Verdict::Inconclusive);
        assert_eq!(program(false, None, Some(126)), Verdict::Inconclusive);
        assert_eq!(program(false, None, None), Verdict::Inconclusive);
        assert_eq!(
            program(false, Some(libc::ENOENT), None),
            Verdict::Inconclusive
        );
    }

    #[test]
    fn sudo_in_a_call_passes_only_when_no_new_privs_refused_it() {
        let sudo = |detail: &str| {
            judge_one(
                Judge::NoNewPrivs,
                &AccessAnswer {
                    ok: false,
                    errno: None,
                    detail: detail.into(),
                    value: Some(1),
                },
            )
        };
        let nnp = "sudo: The \"no new privileges\" flag is set, which prevents sudo from running as root.";
        assert_eq!(sudo(nnp).0, Verdict::Pass);
        let (verdict, said) = sudo("sudo: a password is required");
        assert_eq!(verdict, Verdict::Inconclusive);
        assert!(
            said.starts_with("inconclusive: not refused for no_new_privs"),
            "{said}"
        );
    }

    #[test]
    fn a_tree_fails_on_any_entry_and_names_it() {
        let ask = Ask {
            tried: "read protected /p".into(),
            judge: Judge::Denied,
            probes: ["/p", "/p/a", "/p/b"]
                .iter()
                .map(|p| AccessProbe::Read { path: p.into() })
                .collect(),
        };
        let denied = answer(false, Some(libc::EACCES));
        let all = [denied.clone(), denied.clone(), denied.clone()];
        assert_eq!(
            judge_ask(&ask, &all),
            (Verdict::Pass, "all 3 entries: EACCES".into())
        );
        let one_open = [denied.clone(), answer(true, None), denied.clone()];
        let (verdict, said) = judge_ask(&ask, &one_open);
        assert_eq!(verdict, Verdict::Fail);
        assert!(
            said.starts_with("1 of 3 entries: /p/a: succeeded"),
            "{said}"
        );
        let one_gone = [denied.clone(), denied, answer(false, Some(libc::ENOENT))];
        assert_eq!(judge_ask(&ask, &one_gone).0, Verdict::Inconclusive);
    }
}
