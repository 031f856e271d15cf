//! The doors around a call that the private view's namespaces do not close
//! by themselves: root's keyring, the home the next call runs from, the
//! host's IPC, and the kernel's syscall surface. Each attack is reproduced
//! as described in issue 33, and each denial is shown with its errno
//! beside a control where the same probe works (the same program run as
//! the same user outside tono-seal with `setpriv`, the shared view, or the
//! `persistent` home).

mod common;

use std::process::{Command, Output, Stdio};

use common::{launcher, rt, tono_bin, TestUser};
use serde_json::{json, Value};
use tono_seal::classify::Policy;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use tono_seal::env::HomeMode;
use tono_seal::launch::view::View;
use tono_seal::user::TargetUser;
use tono_seal::Outcome;

const PYTHON: &str = "/usr/bin/python3";

/// Every syscall the filter refuses, tried once each with harmless
/// arguments; prints `{name: errno}` (0: it worked). `clone` with
/// `CLONE_NEWUSER` forks a child that exits at once; `unshare` comes last
/// (where it works, it moves this process into a new user namespace).
const SYSCALL_PROBE: &str = r#"
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    ctypes.set_errno(0)
    conv = [ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a) for a in args]
    r = libc.syscall(ctypes.c_long(nr), *conv)
    return r, (0 if r >= 0 else ctypes.get_errno())
NEWUSER = 0x10000000
SIGCHLD = 17
out = {}
out["keyctl"] = call(250, 0, -3, 0)[1]
out["request_key"] = call(249, b"user", b"tonotest-no-such-key", 0, 0)[1]
out["add_key"] = call(248, b"user", b"tonotest-probe", 0, 0, -3)[1] if os.environ.get("PROBE_ADD_KEY") else None
out["bpf"] = call(321, 0, 0, 0)[1]
out["perf_event_open"] = call(298, 0, 0, -1, -1, 0)[1]
out["userfaultfd"] = call(323, 0)[1]
out["io_uring_setup"] = call(425, 1, 0)[1]
out["io_uring_enter"] = call(426, -1, 0, 0, 0, 0, 0)[1]
out["io_uring_register"] = call(427, -1, 0, 0, 0)[1]
out["kexec_load"] = call(246, 0, 0, 0, 0)[1]
out["kexec_file_load"] = call(320, -1, -1, 0, 0, 0)[1]
out["init_module"] = call(175, 0, 0, 0)[1]
out["finit_module"] = call(313, -1, 0, 0)[1]
out["delete_module"] = call(176, 0, 0)[1]
out["clone3"] = call(435, 0, 0)[1]
out["setns"] = call(308, -1, 0)[1]
r, e = call(56, NEWUSER | SIGCHLD, 0, 0, 0, 0)
if r == 0:
    os._exit(0)
if r > 0:
    os.waitpid(r, 0)
out["clone_newuser"] = e
out["x32_unshare_newuser"] = call(0x40000000 | 272, NEWUSER)[1]
out["seccomp"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0]
out["unshare_newuser"] = call(272, NEWUSER)[1]
print(json.dumps(out))
"#;

async fn call_in(
    user: &TargetUser,
    grants: &[&str],
    argv: &[&str],
    options: RunOptions,
) -> Outcome {
    let grants: Vec<SecretGrant> = grants
        .iter()
        .map(|g| SecretGrant::parse(g).unwrap())
        .collect();
    let names: Vec<String> = grants.iter().map(|g| g.name.as_str().to_owned()).collect();
    let call = json!({"tool": "spawn", "args": {"argv": argv, "secrets": names}});
    let raw = serde_json::to_vec(&call).unwrap();
    drop_and_run(&DropRequest {
        launcher: &launcher(),
        policy: &Policy::default(),
        user,
        grants: &grants,
        call: &raw,
        options,
    })
    .await
}

fn spawn(user: &TargetUser, grants: &[&str], argv: &[&str], options: RunOptions) -> Outcome {
    rt().block_on(call_in(user, grants, argv, options))
}

fn sh(user: &TargetUser, grants: &[&str], script: &str, options: RunOptions) -> Outcome {
    spawn(user, grants, &["/bin/sh", "-c", script], options)
}

fn private() -> RunOptions {
    RunOptions::default()
}

fn with_home(mode: HomeMode) -> RunOptions {
    RunOptions {
        home: Some(mode),
        ..RunOptions::default()
    }
}

fn out(o: &Outcome) -> String {
    o.stdout.clone()
}

fn err(o: &Outcome) -> String {
    o.stderr.clone()
}

fn ran(o: &Outcome) -> String {
    assert!(
        o.launch_error.is_none() && o.exit_code == Some(0),
        "the call did not run cleanly: {o:?}\nstderr: {}",
        err(o)
    );
    out(o)
}

/// `argv` as `user` with `setpriv` (no tono-seal): the control.
fn as_user_outside(user: &TargetUser, argv: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("setpriv")
        .arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.gid))
        .arg("--clear-groups")
        .args(argv)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env.iter().copied())
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .expect("setpriv")
}

fn json_line(text: &str) -> Value {
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {text:?}"));
    serde_json::from_str(line).unwrap()
}

#[test]
fn every_filtered_syscall_fails_with_eperm_in_a_call_and_works_outside_it() {
    need_root!();
    let u = TestUser::bare();
    let user = u.user.clone();
    // The control first: the same program, the same user, no tono-seal.
    let outside = as_user_outside(&user, &[PYTHON, "-c", SYSCALL_PROBE], &[]);
    assert!(outside.status.success(), "{outside:?}");
    let outside = json_line(&String::from_utf8_lossy(&outside.stdout));
    assert_eq!(outside["seccomp"], "0", "{outside}");
    assert_eq!(
        outside["unshare_newuser"], 0,
        "user namespaces work here: {outside}"
    );
    assert_eq!(outside["clone_newuser"], 0, "{outside}");
    assert_eq!(
        outside["keyctl"], 0,
        "the keyring is reachable here: {outside}"
    );
    assert_eq!(outside["request_key"], libc::ENOKEY, "{outside}");
    assert_eq!(outside["clone3"], libc::EINVAL, "{outside}");
    assert_eq!(outside["io_uring_setup"], libc::EFAULT, "{outside}");
    assert_eq!(outside["io_uring_enter"], libc::EBADF, "{outside}");
    assert_eq!(outside["setns"], libc::EBADF, "{outside}");

    for (what, options) in [
        ("private", private()),
        (
            "shared",
            RunOptions {
                view: View::Shared,
                ..RunOptions::default()
            },
        ),
    ] {
        let o = spawn(&user, &[], &[PYTHON, "-c", SYSCALL_PROBE], options);
        let inside = json_line(&ran(&o));
        assert_eq!(inside["seccomp"], "2", "{what}: {inside}");
        for name in [
            "keyctl",
            "request_key",
            "bpf",
            "perf_event_open",
            "userfaultfd",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
            "setns",
            "clone_newuser",
            "unshare_newuser",
        ] {
            assert_eq!(inside[name], libc::EPERM, "{what}: {name}: {inside}");
        }
        // The x32 door: the filter's EPERM where the kernel runs x32
        // syscalls, else the kernel's own ENOSYS (the filter leaves those
        // numbers out there), told apart by getpid with the x32 bit here,
        // outside any filter.
        let x32_door = if x32_runs() {
            libc::EPERM
        } else {
            libc::ENOSYS
        };
        assert_eq!(
            inside["x32_unshare_newuser"], x32_door,
            "{what}: x32_unshare_newuser: {inside}"
        );
        assert_eq!(inside["clone3"], libc::ENOSYS, "{what}: {inside}");
    }
    // A plain fork still works under the filter (clone without
    // CLONE_NEWUSER), and so does the util-linux command's own attempt,
    // refused by name.
    let o = sh(
        &user,
        &[],
        "echo forked $(echo child); unshare -U -r true; echo \"unshare rc=$?\"",
        private(),
    );
    let text = ran(&o);
    assert!(text.contains("forked child"), "{text}");
    assert!(text.contains("unshare rc=1"), "{text}");
    assert!(err(&o).contains("Operation not permitted"), "{}", err(&o));
    let outside = as_user_outside(&user, &["unshare", "-U", "-r", "id", "-u"], &[]);
    assert_eq!(String::from_utf8_lossy(&outside.stdout).trim(), "0");
}

/// Joins a new session keyring as root, puts a key in it, then runs argv
/// (a worker started from a root login or as a service holds one).
const KEYRING_HOLDER: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ses = libc.syscall(ctypes.c_long(250), ctypes.c_long(1), ctypes.c_char_p(b"tonotest-worker-session"))
assert ses > 0, ctypes.get_errno()
key = libc.syscall(ctypes.c_long(248), ctypes.c_char_p(b"user"), ctypes.c_char_p(b"tonotest-root-key"),
                   ctypes.c_char_p(b"root-only-value"), ctypes.c_long(15), ctypes.c_long(-3))
assert key > 0, ctypes.get_errno()
print("holder key", key, flush=True)
r = os.spawnv(os.P_WAIT, sys.argv[1], sys.argv[1:])
# How many keys the session keyring holds once the call is over.
buf = ctypes.create_string_buffer(4096)
n = libc.syscall(ctypes.c_long(250), ctypes.c_long(11), ctypes.c_long(-3), buf, ctypes.c_long(4096))
print("after", n // 4, flush=True)
sys.exit(r)
"#;

/// What a tool finds of its keyrings: the keys it can see in /proc/keys
/// (possessed keyrings show their keys there, whatever the uid), and
/// whether a search of its session keyring finds root's key.
const KEYRING_PROBE: &str = r#"
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ctypes.set_errno(0)
r = libc.syscall(ctypes.c_long(250), ctypes.c_long(10), ctypes.c_long(-3), ctypes.c_char_p(b"user"),
                 ctypes.c_char_p(b"tonotest-root-key"), ctypes.c_long(0))
search = 0 if r > 0 else ctypes.get_errno()
ctypes.set_errno(0)
r = libc.syscall(ctypes.c_long(248), ctypes.c_char_p(b"user"), ctypes.c_char_p(b"tonotest-call-key"),
                 ctypes.c_char_p(b"v"), ctypes.c_long(1), ctypes.c_long(-3))
add = 0 if r > 0 else ctypes.get_errno()
seen = [l for l in open("/proc/keys") if "tonotest-root-key" in l or "tonotest-worker-session" in l]
print(json.dumps({"search": search, "add": add, "seen": len(seen)}))
"#;

fn holder(argv: &[&str]) -> (String, String) {
    let o = Command::new(PYTHON)
        .args(["-c", KEYRING_HOLDER])
        .args(argv)
        .stdin(Stdio::null())
        .output()
        .expect("python3");
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_tool_under_a_worker_holding_a_session_keyring_finds_and_adds_nothing() {
    need_root!();
    let u = TestUser::bare();
    let user = u.user.clone();
    let uid = user.uid.to_string();
    let gid = user.gid.to_string();
    // The control: the same probe as the user, started by setpriv from the
    // same root process, possesses root's session keyring: it sees the
    // key, finds it, and could add one that root then holds.
    let (control, stderr) = holder(&[
        "/usr/bin/setpriv",
        &format!("--reuid={uid}"),
        &format!("--regid={gid}"),
        "--clear-groups",
        PYTHON,
        "-c",
        KEYRING_PROBE,
    ]);
    let probe = json_line(&control);
    assert_eq!(probe["search"], 0, "{control} {stderr}");
    assert_eq!(probe["add"], 0, "{control} {stderr}");
    assert!(probe["seen"].as_u64().unwrap() >= 2, "{control}");
    assert!(
        control.contains("after 2"),
        "the control added a key root holds: {control}"
    );

    for view in ["private", "shared"] {
        let (seen, stderr) = holder(&[
            common::tono_bin().to_str().unwrap(),
            "run",
            "--user",
            u.name(),
            "--view",
            view,
            "--",
            PYTHON,
            "-c",
            KEYRING_PROBE,
        ]);
        let probe = json_line(&seen);
        assert_eq!(probe["search"], libc::EPERM, "{view}: {seen} {stderr}");
        assert_eq!(probe["add"], libc::EPERM, "{view}: {seen} {stderr}");
        // Without the filter in the way: /proc/keys lists what the tool
        // possesses, and root's session keyring is no longer that.
        assert_eq!(probe["seen"], 0, "{view}: {seen}");
        assert!(
            seen.contains("after 1"),
            "{view}: root's keyring changed: {seen}"
        );
    }
}

#[test]
fn a_pth_planted_by_one_call_does_not_run_in_the_next_unless_the_home_is_persistent() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("aws_key", b"AKIA-tonotest-side-door-value");
    let user = u.user.clone();
    let plant = r#"site=$(/usr/bin/python3 -m site --user-site) && mkdir -p "$site" &&
        echo 'import os; open(os.path.expanduser("~/.stolen"), "a").write(os.environ.get("aws_key", "") + chr(10))' > "$site/tonotest.pth" &&
        ls "$site" && echo planted"#;
    let trigger = "/usr/bin/python3 -c 'print(\"python ran\")'";
    let collect = "cat ~/.stolen; echo \"cat rc=$?\"";

    // Ephemeral (the default): the call sees its own write, the next does not.
    let o = sh(&user, &[], plant, private());
    let text = ran(&o);
    assert!(
        text.contains("tonotest.pth") && text.contains("planted"),
        "{text}"
    );
    let home_of = |o: &Outcome| o.limits.as_ref().and_then(|l| l.home.clone());
    assert_eq!(home_of(&o).as_deref(), Some("ephemeral"), "{o:?}");
    let o = sh(&user, &["aws_key"], trigger, private());
    assert!(ran(&o).contains("python ran"));
    let o = sh(&user, &[], collect, private());
    let text = out(&o);
    assert!(text.contains("cat rc=1"), "{text}");
    assert!(err(&o).contains("No such file or directory"), "{}", err(&o));
    assert!(!text.contains("AKIA"), "{text}");
    let real = user.home.join(".local");
    assert!(!real.exists(), "the ephemeral call wrote the real home");

    // Read-only: the write is refused with EROFS.
    let o = sh(&user, &[], plant, with_home(HomeMode::ReadOnly));
    assert!(err(&o).contains("Read-only file system"), "{}", err(&o));
    assert!(!real.exists());

    // The control: a persistent home is the door, open.
    let o = sh(&user, &[], plant, with_home(HomeMode::Persistent));
    assert!(ran(&o).contains("planted"));
    assert_eq!(home_of(&o).as_deref(), Some("persistent"), "{o:?}");
    let o = sh(
        &user,
        &["aws_key"],
        trigger,
        with_home(HomeMode::Persistent),
    );
    assert!(ran(&o).contains("python ran"));
    let o = sh(&user, &[], collect, with_home(HomeMode::Persistent));
    assert!(
        ran(&o).contains("AKIA-tonotest-side-door-value"),
        "the control did not reproduce the attack: {}",
        out(&o)
    );
}

#[test]
fn provider_login_folders_are_empty_in_a_tool_call_and_whole_for_the_provider() {
    need_root!();
    let u = TestUser::bare();
    u.sh("mkdir -p ~/.codex ~/.claude && echo token > ~/.codex/auth.json && echo t > ~/.claude/.credentials.json");
    let user = u.user.clone();
    let probe = "ls -A ~/.codex | wc -l; cat ~/.codex/auth.json; echo \"rc=$?\"; \
                 touch ~/.codex/x; echo \"touch rc=$?\"; ls -A ~/.claude | wc -l";
    for mode in HomeMode::ALL {
        let o = sh(&user, &[], probe, with_home(mode));
        let text = out(&o);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines, ["0", "rc=1", "touch rc=1", "0"], "{mode}: {text}");
        assert!(
            err(&o).contains("No such file or directory"),
            "{mode}: {}",
            err(&o)
        );
        assert!(
            err(&o).contains("Read-only file system"),
            "{mode}: {}",
            err(&o)
        );
    }
    // The control: a provider's own program sees its login.
    let o = sh(
        &user,
        &[],
        "cat ~/.codex/auth.json",
        RunOptions {
            provider_program: true,
            ..RunOptions::default()
        },
    );
    assert_eq!(ran(&o), "token\n");
}

/// Makes (`make`) or looks up a SysV shared-memory segment of key 0x70a0
/// and a file in /dev/shm; prints what it found, with the errno.
const IPC_PROBE: &str = r#"
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
KEY = 0x70a0
if sys.argv[1] == "make":
    sid = libc.shmget(KEY, 4096, 0o1000 | 0o666)
    open("/dev/shm/tonotest-side-door", "w").write("x")
    os.chmod("/dev/shm/tonotest-side-door", 0o666)
    print(json.dumps({"made": sid >= 0, "errno": ctypes.get_errno()}))
else:
    ctypes.set_errno(0)
    sid = libc.shmget(KEY, 0, 0)
    print(json.dumps({"found": sid >= 0, "errno": ctypes.get_errno(),
                      "file": os.path.exists("/dev/shm/tonotest-side-door")}))
"#;

fn host_has_segment() -> bool {
    std::fs::read_to_string("/proc/sysvipc/shm")
        .unwrap()
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().next() == Some(&0x70a0.to_string()))
}

fn remove_host_ipc() {
    let _ = Command::new("ipcrm").args(["-M", "0x70a0"]).output();
    let _ = std::fs::remove_file("/dev/shm/tonotest-side-door");
}

#[test]
fn a_shared_memory_segment_of_one_users_call_is_gone_for_another_users_call() {
    need_root!();
    let (a, b) = (TestUser::bare(), TestUser::bare());
    let (ua, ub) = (a.user.clone(), b.user.clone());
    remove_host_ipc();
    let o = spawn(&ua, &[], &[PYTHON, "-c", IPC_PROBE, "make"], private());
    assert_eq!(json_line(&ran(&o))["made"], true, "{}", out(&o));
    assert!(
        !host_has_segment(),
        "the private call's segment is in the host's IPC"
    );
    let o = spawn(&ub, &[], &[PYTHON, "-c", IPC_PROBE, "find"], private());
    let found = json_line(&ran(&o));
    assert_eq!(found["found"], false, "{found}");
    assert_eq!(found["errno"], libc::ENOENT, "{found}");
    assert_eq!(found["file"], false, "{found}");

    // The control: the shared view has the host's IPC, and the door.
    let shared = || RunOptions {
        view: View::Shared,
        ..RunOptions::default()
    };
    let o = spawn(&ua, &[], &[PYTHON, "-c", IPC_PROBE, "make"], shared());
    assert_eq!(json_line(&ran(&o))["made"], true);
    assert!(host_has_segment(), "the control made no host segment");
    let o = spawn(&ub, &[], &[PYTHON, "-c", IPC_PROBE, "find"], shared());
    let found = json_line(&ran(&o));
    remove_host_ipc();
    assert_eq!(found["found"], true, "{found}");
    assert_eq!(found["file"], true, "{found}");
}

#[test]
fn a_home_mode_the_shared_view_cannot_make_is_refused_by_name() {
    need_root!();
    let u = TestUser::bare();
    let o = sh(
        &u.user,
        &[],
        "true",
        RunOptions {
            view: View::Shared,
            home: Some(HomeMode::Ephemeral),
            ..RunOptions::default()
        },
    );
    let e = o.launch_error.expect("refused");
    assert_eq!(e.code, "home_needs_private_view", "{e:?}");
    assert!(e.message.contains("--home persistent"), "{}", e.message);
}

/// Python finds a module in the folder of the script it runs first: a
/// module one user's call leaves in /tmp would run in the next call that
/// runs a script from there, of any user.
#[test]
fn a_module_planted_in_tmp_by_one_users_call_is_not_there_for_another_users_call() {
    need_root!();
    let (a, b) = (TestUser::bare(), TestUser::with_key());
    b.seal("tok", b"tonotest-tmp-door-value");
    let (ua, ub) = (a.user.clone(), b.user.clone());
    let tag = format!("tonotest_tmp_{}", std::process::id());
    let plant = format!(
        "echo 'import os; open(\"/tmp/{tag}.loot\", \"w\").write(os.environ.get(\"tok\", \"\")[::-1]); os.chmod(\"/tmp/{tag}.loot\", 0o644)' > /tmp/json.py && \
         chmod 644 /tmp/json.py && ls /tmp"
    );
    let victim = format!(
        "printf 'import json\\nprint(\"ok\")\\n' > $TMPDIR/{tag}_report.py && /usr/bin/python3 $TMPDIR/{tag}_report.py"
    );
    let look = format!("cat /tmp/{tag}.loot; echo \"rc=$?\"; ls /tmp | wc -l");
    let cleanup = || {
        let _ = std::fs::remove_file("/tmp/json.py");
        let _ = std::fs::remove_file(format!("/tmp/{tag}.loot"));
        let _ = std::fs::remove_file(format!("/tmp/{tag}_report.py"));
        let _ = std::fs::remove_dir_all("/tmp/__pycache__");
    };
    cleanup();
    // Private (the default): each call has a /tmp of its own.
    let o = sh(&ua, &[], &plant, private());
    assert!(ran(&o).contains("json.py"), "{}", out(&o));
    assert!(
        !std::path::Path::new("/tmp/json.py").exists(),
        "the call wrote the host's /tmp"
    );
    let o = sh(&ub, &["tok"], &victim, private());
    assert_eq!(ran(&o), "ok\n");
    let o = sh(&ua, &[], &look, private());
    let text = out(&o);
    assert!(text.contains("rc=1") && text.ends_with("0\n"), "{text}");
    assert!(err(&o).contains("No such file or directory"), "{}", err(&o));
    // The control: the shared view has the host's /tmp, and the door.
    let shared = || RunOptions {
        view: View::Shared,
        ..RunOptions::default()
    };
    let o = sh(&ua, &[], &plant, shared());
    assert!(ran(&o).contains("json.py"));
    let o = sh(&ub, &["tok"], &victim, shared());
    let _ = ran(&o);
    let o = sh(&ua, &[], &look, shared());
    let text = out(&o);
    cleanup();
    assert!(
        text.contains("eulav-rood-pmt-tsetonot"),
        "the control did not reproduce the attack: {text}"
    );
}

#[test]
fn a_login_folder_planted_as_a_link_is_refused_for_tools_and_for_the_provider() {
    need_root!();
    let u = TestUser::bare();
    u.sh("mkdir -p elsewhere && echo kept > elsewhere/auth.json && ln -s elsewhere .codex");
    let user = u.user.clone();
    for options in [
        private(),
        RunOptions {
            provider_program: true,
            ..RunOptions::default()
        },
    ] {
        let o = sh(&user, &[], "cat ~/.codex/auth.json", options);
        let e = o
            .launch_error
            .clone()
            .unwrap_or_else(|| panic!("ran: {o:?}"));
        assert_eq!(e.code, "home_view_refused", "{e:?}");
        assert_eq!(e.errno, Some(libc::ELOOP), "{e:?}");
        assert!(
            e.message.contains("~/.codex is a symbolic link"),
            "{}",
            e.message
        );
    }
    // The control: with the link gone, the same calls run.
    u.sh("rm .codex && mkdir .codex && echo t > .codex/auth.json");
    let o = sh(&user, &[], "ls -A ~/.codex | wc -l", private());
    assert_eq!(ran(&o), "0\n");
}

#[test]
fn a_nested_hidden_path_cannot_be_renamed_away_from_its_cover() {
    need_root!();
    let u = TestUser::bare();
    u.sh("mkdir -p .config/gcloud && echo refresh-token > .config/gcloud/credentials.db");
    let user = u.user.clone();
    let config = std::sync::Arc::new(
        tono_seal::env::EnvConfig::from_json(br#"{"hidden_in_home": [".config/gcloud"]}"#).unwrap(),
    );
    let with = |home: HomeMode| RunOptions {
        home: Some(home),
        env: tono_seal::env::RunEnv {
            config: config.clone(),
            ..tono_seal::env::RunEnv::default()
        },
        ..RunOptions::default()
    };
    let o = sh(
        &user,
        &[],
        "mv ~/.config ~/.cfg-moved; echo \"mv rc=$?\"; cat ~/.config/gcloud/credentials.db; echo \"cat rc=$?\"",
        with(HomeMode::Persistent),
    );
    let text = out(&o);
    assert!(
        text.contains("mv rc=1") && text.contains("cat rc=1"),
        "{text}"
    );
    assert!(err(&o).contains("Device or resource busy"), "{}", err(&o));
    let o = sh(
        &user,
        &[],
        "ls -A ~ ~/.config/gcloud",
        with(HomeMode::Ephemeral),
    );
    let text = ran(&o);
    assert!(
        !text.contains(".cfg-moved") && !text.contains("credentials"),
        "{text}"
    );
    // The control: the real folder is whole, and the user (outside any
    // call) can rename it.
    let moved = u.sh("mv .config .cfg-moved && cat .cfg-moved/gcloud/credentials.db");
    assert_eq!(String::from_utf8_lossy(&moved.stdout), "refresh-token\n");
}

/// Waits (by count, not time) until `path` exists.
fn wait_for(path: &str) {
    for _ in 0..100_000 {
        if std::path::Path::new(path).exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    panic!("{path} never appeared");
}

#[test]
fn a_login_made_while_a_call_runs_lands_under_its_cover_in_every_mode() {
    need_root!();
    let u = TestUser::bare();
    let user = u.user.clone();
    for mode in HomeMode::ALL {
        u.sh("rm -rf .codex");
        let tag = format!("login-{}-{mode}", std::process::id());
        let (started, go) = (
            common::marker_path(&format!("{tag}.started")),
            common::marker_path(&format!("{tag}.go")),
        );
        let script = format!(
            "touch {started}; n=0; while [ ! -e {go} ] && [ $n -lt 100000 ]; do sleep 0.01; n=$((n+1)); done; \
             cat ~/.codex/auth.json; echo \"rc=$?\""
        );
        let call = {
            let user = user.clone();
            std::thread::spawn(move || sh(&user, &[], &script, with_home(mode)))
        };
        wait_for(&started);
        // A sign-in, outside the call, while it runs.
        let signed =
            u.sh("mkdir -p .codex && echo signed-in-token > .codex/auth.json && ls -ld .codex");
        assert!(signed.status.success(), "{signed:?}");
        std::fs::write(&go, b"").unwrap();
        let o = call.join().unwrap();
        let _ = std::fs::remove_file(&started);
        let _ = std::fs::remove_file(&go);
        let text = out(&o);
        assert!(
            text.contains("rc=1") && !text.contains("signed-in-token"),
            "{mode}: {text}"
        );
        assert!(
            err(&o).contains("No such file or directory"),
            "{mode}: {}",
            err(&o)
        );
    }
    // The folder the launcher made is the user's, and the login is whole
    // for the provider (the control).
    let meta = std::fs::metadata(user.home.join(".codex")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), user.uid);
    let o = sh(
        &user,
        &[],
        "cat ~/.codex/auth.json",
        RunOptions {
            provider_program: true,
            ..RunOptions::default()
        },
    );
    assert_eq!(ran(&o), "signed-in-token\n");
}

#[test]
fn a_provider_program_is_refused_a_login_folder_holding_a_planted_link() {
    need_root!();
    let u = TestUser::bare();
    let user = u.user.clone();
    let provider = || RunOptions {
        provider_program: true,
        ..RunOptions::default()
    };
    for (plant, said) in [
        (
            "mkdir -p .codex leak && ln -s ~/leak/auth.json .codex/auth.json",
            "is a symbolic link",
        ),
        (
            "mkdir -p .codex/sub leak && echo x > leak/c && ln leak/c .codex/sub/c",
            "has 2 hard links",
        ),
        (
            "mkdir -p .codex && mkfifo .codex/auth.json",
            "is not a folder or a file",
        ),
    ] {
        u.sh("rm -rf .codex leak");
        assert!(u.sh(plant).status.success(), "{plant}");
        let o = sh(&user, &[], "echo provider ran", provider());
        let e = o
            .launch_error
            .clone()
            .unwrap_or_else(|| panic!("ran: {o:?}"));
        assert_eq!(e.code, "home_view_refused", "{plant}: {e:?}");
        assert!(e.message.contains(said), "{plant}: {}", e.message);
    }
    // The control: a plain login folder is the provider's.
    u.sh("rm -rf .codex leak && mkdir -p .codex/sessions && echo t > .codex/auth.json");
    let o = sh(&user, &[], "echo provider ran", provider());
    assert_eq!(ran(&o), "provider ran\n");
}

/// Runs argv under a seccomp filter of the kind a native-only libseccomp
/// filter is (a service manager's `SystemCallArchitectures=native`, a
/// runtime's profile without x32): any syscall with the x32 bit kills the
/// process (`SIGSYS`), every other is allowed.
const X32_KILLER: &str = r#"
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
# load nr; nr >= 0x40000000: SECCOMP_RET_KILL_PROCESS; else SECCOMP_RET_ALLOW
insns = [(0x20, 0, 0, 0), (0x35, 0, 1, 0x40000000), (0x06, 0, 0, 0x80000000), (0x06, 0, 0, 0x7fff0000)]
code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in insns))
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
prog = Prog(len(insns), ctypes.addressof(code))
# PR_SET_SECCOMP, SECCOMP_MODE_FILTER (root: no no_new_privs needed)
if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:
    sys.exit("prctl: errno %d" % ctypes.get_errno())
os.execv(sys.argv[1], sys.argv[1:])
"#;

/// `argv` run under [`X32_KILLER`].
fn under_x32_killer(argv: &[&std::ffi::OsStr]) -> Output {
    Command::new(PYTHON)
        .args(["-c", X32_KILLER])
        .args(argv)
        .stdin(Stdio::null())
        .output()
        .expect("python3")
}

#[test]
fn a_call_runs_under_an_outer_filter_that_kills_x32_syscalls() {
    need_root!();
    use std::ffi::OsStr;
    use std::os::unix::process::ExitStatusExt;
    let u = TestUser::bare();
    // The filter is in force: getpid with the x32 bit is killed under it
    // (SIGSYS), the same Python's plain getpid is not.
    let getpid = |nr: &str| {
        under_x32_killer(&[
            OsStr::new(PYTHON),
            OsStr::new("-c"),
            OsStr::new(&format!(
                "import ctypes; ctypes.CDLL(None).syscall({nr}); print('alive')"
            )),
        ])
    };
    let plain = getpid("39");
    assert!(plain.status.success(), "{plain:?}");
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "alive\n");
    let x32 = getpid("0x40000000 | 39");
    assert_eq!(x32.status.signal(), Some(libc::SIGSYS), "{x32:?}");
    // A call under it runs, in both views: the launcher asks nothing of
    // the x32 numbers under someone else's filter.
    for view in ["private", "shared"] {
        let o = under_x32_killer(&[
            tono_bin().as_os_str(),
            OsStr::new("run"),
            OsStr::new("--user"),
            OsStr::new(&u.user.name),
            OsStr::new("--view"),
            OsStr::new(view),
            OsStr::new("--"),
            OsStr::new("/bin/echo"),
            OsStr::new("ran"),
        ]);
        assert!(
            o.status.success(),
            "{view}: {:?}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&o.stdout), "ran\n", "{view}");
    }
    // An operator's refused syscalls (x86_64 numbers only) under it: a
    // typed refusal, since whether x32 runs is unknown there, where the
    // control, without the filter, runs on a kernel without x32.
    let config = std::env::temp_dir().join(format!("tonotest-x32-{}.json", std::process::id()));
    std::fs::write(&config, r#"{"refuse_syscalls": ["ptrace"]}"#).unwrap();
    let run_refusing = |wrap: bool| {
        let mut argv = vec![
            tono_bin().into_os_string(),
            "run".into(),
            "--env-config".into(),
            config.clone().into_os_string(),
            "--user".into(),
            u.user.name.clone().into(),
            "--".into(),
            "/bin/echo".into(),
            "ran".into(),
        ];
        if wrap {
            let argv: Vec<&OsStr> = argv.iter().map(|a| a.as_os_str()).collect();
            under_x32_killer(&argv)
        } else {
            Command::new(argv.remove(0))
                .args(argv)
                .stdin(Stdio::null())
                .output()
                .expect("tono-seal")
        }
    };
    let refused = run_refusing(true);
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.signal(), None, "{refused:?}");
    assert!(!refused.status.success(), "{refused:?}");
    assert!(said.contains("x32 syscalls may run here"), "{said}");
    assert_eq!(String::from_utf8_lossy(&refused.stdout), "", "{said}");
    if !x32_runs() {
        let control = run_refusing(false);
        assert!(control.status.success(), "{control:?}");
        assert_eq!(String::from_utf8_lossy(&control.stdout), "ran\n");
    }
    let _ = std::fs::remove_file(&config);
}

/// Whether this kernel runs x32 syscalls: `getpid` with the x32 bit, from
/// a Python of the test's own (no filter), so not by the code under test.
fn x32_runs() -> bool {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import ctypes; l = ctypes.CDLL(None); l.syscall.restype = ctypes.c_long; \
             print(l.syscall(0x40000000 | 39) >= 0)",
        ])
        .output()
        .expect("python3");
    match String::from_utf8_lossy(&out.stdout).trim() {
        "True" => true,
        "False" => false,
        other => panic!("the x32 probe said {other:?}"),
    }
}
