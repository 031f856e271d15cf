//! What a tool sees in the private view (the default): no key store, no
//! other call, and no secret of its own in what it prints. Each denial is
//! shown next to the same probe in the shared view, where it works.

mod common;

use common::{launcher, rt, TestUser};
use serde_json::json;
use tono_seal::classify::Policy;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use tono_seal::launch::view::View;
use tono_seal::user::TargetUser;
use tono_seal::Outcome;

const ALPHA: &str = "alpha-s3cr3t \"quoted/path\" +caf\u{e9}!";
const BRAVO: &str = "bravo-s3cr3t-value-not-granted";

async fn shell_in(user: &TargetUser, grants: &[&str], command: &str, view: View) -> Outcome {
    let grants: Vec<SecretGrant> = grants
        .iter()
        .map(|g| SecretGrant::parse(g).unwrap())
        .collect();
    let names: Vec<String> = grants.iter().map(|g| g.name.as_str().to_owned()).collect();
    let call = json!({"tool": "shell", "args": {"command": command, "secrets": names}});
    let raw = serde_json::to_vec(&call).unwrap();
    drop_and_run(&DropRequest {
        launcher: &launcher(),
        policy: &Policy::default(),
        user,
        grants: &grants,
        call: &raw,
        options: RunOptions {
            view,
            ..RunOptions::default()
        },
    })
    .await
}

fn shell(user: &TargetUser, grants: &[&str], command: &str, view: View) -> Outcome {
    rt().block_on(shell_in(user, grants, command, view))
}

fn user_with_two_secrets() -> TestUser {
    let u = TestUser::with_key();
    u.seal("A", ALPHA.as_bytes());
    u.seal("B", BRAVO.as_bytes());
    u
}

#[test]
fn a_tool_sees_no_key_store_and_only_the_secret_its_call_named() {
    need_root!();
    let u = user_with_two_secrets();
    let probe = "cat ~/.tono/identity; echo \"identity rc=$?\"; \
                 ls -A ~/.tono | wc -l; \
                 cat ~/.tono/secrets/B.age >/dev/null; echo \"B rc=$?\"; \
                 echo \"found: $(find / -xdev -name '*.age' -user \"$(id -u)\" 2>/dev/null | wc -l)\"; \
                 test -n \"$A\" && echo A-set; \
                 age -d -i ~/.tono/identity ~/.tono/secrets/B.age; echo \"age rc=$?\"";
    // Positive control: in the shared view the same probes reach the store.
    let shared = shell(&u.user, &["A"], probe, View::Shared);
    assert!(shared.stdout.contains("identity rc=0"), "{shared:?}");
    assert!(
        shared.stdout.contains(BRAVO),
        "the control must reach B: {shared:?}"
    );
    assert!(
        shared.stdout.contains("found: 2"),
        "the control must find A.age and B.age: {shared:?}"
    );
    assert!(shared.masks.is_none(), "{shared:?}");

    let private = shell(&u.user, &["A"], probe, View::Private);
    assert!(private.launch_error.is_none(), "{private:?}");
    let lines: Vec<&str> = private.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "identity rc=1",
            "0",
            "B rc=1",
            "found: 0",
            "A-set",
            "age rc=1"
        ],
        "{private:?}"
    );
    assert!(
        private
            .stderr
            .contains("/.tono/identity: No such file or directory"),
        "{}",
        private.stderr
    );
    assert!(!private.stdout.contains(BRAVO) && !private.stderr.contains(BRAVO));
    // The folder is an empty read-only one: nothing can be put in it.
    let write = shell(
        &u.user,
        &[],
        "touch ~/.tono/x; echo rc=$?; stat -c '%U %a' ~/.tono",
        View::Private,
    );
    assert_eq!(write.stdout, "rc=1\nroot 555\n", "{write:?}");
    assert!(
        write.stderr.contains("Read-only file system"),
        "{}",
        write.stderr
    );
    // The store itself is untouched and still works for the next call.
    let again = shell(&u.user, &["B"], "printf %s \"$B\" | wc -c", View::Private);
    assert_eq!(again.stdout.trim(), BRAVO.len().to_string(), "{again:?}");
}

/// Host pid of a process of `uid` whose command line is `sleep <arg>`.
fn find_sleep(uid: u32, arg: &str) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let want = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_string_lossy().parse::<u32>().ok()?;
        let owned = e.metadata().ok()?.uid() == uid;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        (owned && cmd == want.as_bytes()).then_some(pid)
    })
}

#[test]
fn two_calls_of_one_user_cannot_see_or_signal_each_other() {
    need_root!();
    let u = user_with_two_secrets();
    let rt = rt();
    // Call one holds A and sleeps.
    let user = u.user.clone();
    let first =
        rt.spawn(async move { shell_in(&user, &["A"], "exec sleep 31", View::Private).await });
    let mut pid = None;
    for _ in 0..500 {
        pid = find_sleep(u.user.uid, "31");
        if pid.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let pid = pid.expect("the first call's sleep started");
    let probe = format!(
        "ps -e -o args= | grep -c -x 'sleep 31'; \
         cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c '^A=' ; \
         kill -0 {pid} 2>&1; echo \"kill rc=$?\"; \
         cat /proc/{pid}/environ >/dev/null 2>&1; echo \"environ rc=$?\""
    );
    // Positive control: in the shared view call two sees call one's A.
    let shared = rt.block_on(shell_in(&u.user, &["B"], &probe, View::Shared));
    let shared_lines: Vec<&str> = shared.stdout.lines().collect();
    assert_eq!(
        shared_lines[0], "1",
        "the control must see the sleep: {shared:?}"
    );
    assert_eq!(shared_lines[1], "1", "the control must see A: {shared:?}");
    assert!(shared.stdout.contains("kill rc=0") && shared.stdout.contains("environ rc=0"));

    let private = rt.block_on(shell_in(&u.user, &["B"], &probe, View::Private));
    let lines: Vec<&str> = private.stdout.lines().collect();
    assert_eq!(lines[0], "0", "{private:?}");
    assert_eq!(lines[1], "0", "{private:?}");
    assert!(
        private.stdout.contains("No such process") && private.stdout.contains("kill rc=1"),
        "{private:?}"
    );
    assert!(private.stdout.contains("environ rc=1"), "{private:?}");
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    let first = rt.block_on(first).unwrap();
    assert_eq!(first.signal, Some(9), "{first:?}");
}

/// Every encoding of the value that the masker must catch.
fn printed_forms(value: &str) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use base64::Engine;
    let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
    let mut forms = vec![
        value.to_owned(),
        hex.clone(),
        hex.to_uppercase(),
        serde_json::to_string(value)
            .unwrap()
            .trim_matches('"')
            .to_owned(),
    ];
    // Percent-encoding (Python's `quote(safe="")`: upper-case hex, every
    // byte but letters, digits and `_.-~`) and JSON with every non-ASCII
    // character as `\uXXXX` (`json.dumps`' default).
    let percent: String = value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    forms.push(percent);
    let ascii_json: String = serde_json::to_string(value)
        .unwrap()
        .trim_matches('"')
        .chars()
        .map(|c| match c {
            c if c.is_ascii() => c.to_string(),
            c => format!("\\u{:04x}", c as u32),
        })
        .collect();
    forms.push(ascii_json);
    for prefix in ["", "a", "ab"] {
        let text = format!("{prefix}{value}\n");
        forms.push(STANDARD.encode(&text)[4 * prefix.len().min(1)..20].to_owned());
        forms.push(URL_SAFE_NO_PAD.encode(&text)[4 * prefix.len().min(1)..20].to_owned());
    }
    forms
}

#[test]
fn a_tool_that_prints_its_secret_in_any_common_form_hands_over_none() {
    need_root!();
    let u = user_with_two_secrets();
    let script = r#"
printf '%s\n' "$A"
printf '%s\n' "$A" | base64
printf '%s\n' "$A" | base64 -w0; echo
printf 'a%s\n' "$A" | base64 -w0; echo
printf 'ab%s\n' "$A" | base64 -w0; echo
printf '%s\n' "$A" | basenc --base64url
printf '%s' "$A" | xxd -p
printf '%s' "$A" | od -An -v -tx1
printf '%s' "$A$A" | base64
python3 -c 'import os,urllib.parse; print(urllib.parse.quote(os.environ["A"], safe=""))'
python3 -c 'import json,os; print(json.dumps(os.environ["A"]))'
python3 -c 'import json,os; print(json.dumps(os.environ["A"], ensure_ascii=False))'
python3 -c '
import os, sys, time
v = os.environ["A"].encode()
for i in range(len(v)):
    for out in (sys.stdout.buffer, sys.stderr.buffer):
        out.write(v[i:i+1]); out.flush()
    time.sleep(0.002)
print()
'
"#;
    let out = shell(&u.user, &["A"], script, View::Private);
    assert!(
        out.launch_error.is_none() && out.exit_code == Some(0),
        "{out:?}"
    );
    let both = format!("{}\n{}", out.stdout, out.stderr);
    // Wrapped (xxd -p at 30 bytes, base64 at 76 characters) or spaced
    // (od): the forms are looked for with all whitespace taken out.
    let solid = |text: &str| text.replace([' ', '\n', '\r', '\t'], "");
    for form in printed_forms(ALPHA) {
        assert!(
            !solid(&both).contains(&solid(&form)),
            "{form:?} leaked in:\n{both}"
        );
    }
    assert!(
        out.stdout.lines().filter(|l| l.len() > 60).count() == 0,
        "a wrapped line went out unmasked:\n{both}"
    );
    // One mask per printed form, exactly: 11 lines of one form each, the
    // doubled value in base64 twice, and the byte-at-a-time value once on
    // each stream.
    let masks = out.masks.as_ref().expect("mask counts");
    assert_eq!(masks["A"], 15, "{masks:?}\n{both}");
    assert_eq!(out.stdout.lines().next(), Some("[masked:A]"), "{both}");
    // Positive control: the shared view hands the raw value over.
    let shared = shell(&u.user, &["A"], "printf '%s\\n' \"$A\"", View::Shared);
    assert_eq!(shared.stdout.trim_end(), ALPHA);
}

#[test]
fn a_secret_too_short_to_mask_is_refused_not_passed_through() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("PIN", b"123");
    let out = shell(&u.user, &["PIN"], "echo ran", View::Private);
    let error = out.launch_error.as_ref().expect("a typed refusal");
    assert_eq!(error.code, "secret_too_short", "{out:?}");
    assert!(!out.stdout.contains("ran"));
}

#[test]
fn the_store_mount_cannot_be_undone_from_inside_the_call() {
    need_root!();
    let u = user_with_two_secrets();
    let script = "umount ~/.tono >/dev/null 2>&1; echo \"umount rc=$?\"; \
                  unshare -U -m -r sh -c 'umount ~/.tono; ls -A ~/.tono | wc -l' 2>&1 \
                    | sed 's/.*: /unshare: /'; \
                  ls -A /proc/1/root/$HOME/.tono 2>&1 | sed 's/.*: /proc1: /' | head -1; \
                  ls -A ~/.tono | wc -l";
    let out = shell(&u.user, &["A"], script, View::Private);
    let lines: Vec<&str> = out.stdout.lines().collect();
    // Each way round the cover, with what stopped it: umount(8)'s failure
    // code (32, no CAP_SYS_ADMIN), the syscall filter's EPERM for a user
    // namespace, the launcher's /proc/1/root closed (EACCES), and the
    // cover still empty.
    assert_eq!(
        lines,
        [
            "umount rc=32",
            "unshare: Operation not permitted",
            "proc1: Permission denied",
            "0"
        ],
        "{out:?}"
    );
    // Control: the store the cover hides is there, as root sees it.
    let entries = std::fs::read_dir(u.home().join(".tono")).unwrap().count();
    assert!(entries >= 2, "the real store has {entries} entries");
}

fn mount_lines() -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn a_thousand_calls_leave_the_hosts_view_as_it_was() {
    need_root!();
    let u = user_with_two_secrets();
    let before = mount_lines();
    let rt = rt();
    let mut ran = 0;
    for _ in 0..1000 {
        let out = rt.block_on(shell_in(&u.user, &["A"], "test -n \"$A\"", View::Private));
        assert!(out.succeeded(), "{out:?}");
        ran += 1;
    }
    assert_eq!(ran, 1000);
    assert_eq!(mount_lines(), before, "the host's mounts changed");
    assert!(!std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .contains("tono-view"));
    assert_eq!(
        common::processes_of(u.user.uid, true),
        0,
        "a process of the calls is left"
    );
}

/// [`common::launch_by_hand`] in a PID namespace of its own or not.
fn launch_by_hand(
    plan: &tono_seal::launch::plan::LaunchPlan,
    own_namespaces: bool,
) -> tono_seal::launch::report::StatusReport {
    let pid_only = tono_seal::sys::NewNamespaces {
        pid: own_namespaces,
        net: false,
    };
    common::launch_by_hand(plan, pid_only)
}

#[test]
fn a_launcher_runs_a_call_only_in_the_namespaces_its_view_needs() {
    need_root!();
    let u = TestUser::with_key();
    let marker = common::marker_path(&format!("tono-view-mismatch-{}", std::process::id()));
    let touch = |view: View| tono_seal::launch::plan::LaunchPlan {
        view,
        ..common::touch_plan(&u.user, &marker)
    };
    use tono_seal::launch::report::StatusReport;
    for (view, own) in [(View::Private, false), (View::Shared, true)] {
        match launch_by_hand(&touch(view), own) {
            StatusReport::Failed(e) => assert_eq!(e.code, "view_mismatch", "{view} {own}: {e:?}"),
            other => panic!("{view} in own namespaces {own}: not refused: {other:?}"),
        }
        assert!(!std::path::Path::new(&marker).exists(), "{view} {own}: ran");
    }
    // Controls: each view in the launcher started for it runs the program.
    for (view, own) in [(View::Private, true), (View::Shared, false)] {
        let report = launch_by_hand(&touch(view), own);
        common::assert_ran(&report, &marker, &view.to_string());
    }
}

/// The line `field` of `/proc/PID/status` (e.g. `Uid:`), or "" once gone.
fn proc_status(pid: i32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_default()
        .to_owned()
}

/// The worker sends a plan at once and its go only once the call's begin
/// record is durable. A launcher holds before the first key and the
/// program until it reads [`GO`]: seen here past its drop (its real uid is
/// the user's) and asleep reading the plan pipe with the marker not made,
/// then, sent the go, it runs. Closing the pipe instead, or sending any
/// other byte, refuses the call (`begin_not_durable`) and nothing runs.
#[test]
fn a_launcher_prepares_the_call_but_runs_nothing_before_its_go() {
    use std::io::{Read, Write};
    use tono_seal::launch::plan::{frame, LaunchPlan, GO};
    use tono_seal::launch::report::StatusReport;
    need_root!();
    let u = TestUser::with_key();
    let marker = common::marker_path(&format!("tono-go-{}", std::process::id()));
    let plan = LaunchPlan {
        view: View::Private,
        ..common::touch_plan(&u.user, &marker)
    };
    let json = serde_json::to_vec(&plan).unwrap();
    let start = || {
        let null = tono_seal::drop::start::open_null().unwrap();
        let private = tono_seal::sys::NewNamespaces {
            pid: true,
            net: false,
        };
        let started =
            tono_seal::drop::start::start(&common::launch_bin(), Some(&null), true, private, false)
                .unwrap();
        (
            started.pid,
            std::fs::File::from(started.plan),
            started.status,
            (started.stdout, started.stderr),
        )
    };
    let finish = |pid: i32, status: std::os::fd::OwnedFd| {
        let mut bytes = Vec::new();
        std::fs::File::from(status).read_to_end(&mut bytes).unwrap();
        tono_seal::sys::reap(pid).unwrap();
        StatusReport::decode(&bytes)
    };
    let user_uid = format!("\t{}\t", u.user.uid);

    // Held: past the drop, asleep on the pipe, nothing run; then the go.
    let (pid, mut pipe, status, _output) = start();
    pipe.write_all(&frame(&json)).unwrap();
    let mut seen = (String::new(), String::new());
    for _ in 0..20_000 {
        seen = (proc_status(pid, "Uid:"), proc_status(pid, "State:"));
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        if seen.0.contains(&user_uid) && seen.1.contains("S (sleeping)") && wchan.contains("pipe") {
            break;
        }
        std::thread::yield_now();
    }
    assert!(seen.0.contains(&user_uid), "never dropped: {seen:?}");
    assert!(seen.1.contains("S (sleeping)"), "not waiting: {seen:?}");
    assert!(
        !std::path::Path::new(&marker).exists(),
        "the program ran before its go"
    );
    pipe.write_all(&[GO]).unwrap();
    drop(pipe);
    common::assert_ran(&finish(pid, status), &marker, "after its go");

    // No go: the pipe's end, or another byte, refuses the call.
    for tail in [&b""[..], b"X"] {
        let (pid, mut pipe, status, _output) = start();
        let mut framed = frame(&json).to_vec();
        framed.extend_from_slice(tail);
        pipe.write_all(&framed).unwrap();
        drop(pipe);
        match finish(pid, status) {
            StatusReport::Failed(e) => assert_eq!(e.code, "begin_not_durable", "{tail:?}: {e:?}"),
            other => panic!("{tail:?}: not refused: {other:?}"),
        }
        assert!(!std::path::Path::new(&marker).exists(), "{tail:?}: ran");
    }
}

#[test]
fn a_program_that_cannot_be_executed_is_reported_with_its_errno_in_both_views() {
    need_root!();
    let u = TestUser::with_key();
    u.sh("printf 'echo ran\\n' > noshebang; chmod 0755 noshebang; printf x > plain; chmod 0644 plain");
    let home = u.user.home.display().to_string();
    for view in [View::Private, View::Shared] {
        for (file, errno) in [("noshebang", libc::ENOEXEC), ("plain", libc::EACCES)] {
            let call = json!({"tool": "spawn", "args": {"argv": [format!("{home}/{file}")]}});
            let out = rt().block_on(drop_and_run(&DropRequest {
                launcher: &launcher(),
                policy: &Policy::default(),
                user: &u.user,
                grants: &[],
                call: &serde_json::to_vec(&call).unwrap(),
                options: RunOptions {
                    view,
                    ..RunOptions::default()
                },
            }));
            let error = out.launch_error.as_ref().expect("refused");
            assert_eq!(
                (error.code.as_str(), error.errno),
                ("exec_failed", Some(errno)),
                "{view} {file}: {out:?}"
            );
            assert!(!out.stdout.contains("ran"), "{out:?}");
        }
    }
    // Control: a program that can run, runs, in both views.
    for view in [View::Private, View::Shared] {
        let out = shell(&u.user, &[], "echo ran", view);
        assert_eq!(out.stdout, "ran\n", "{view}: {out:?}");
    }
}
