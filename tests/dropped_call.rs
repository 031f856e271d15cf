//! `drop_and_run` and `tono-launch` against real users and a real kernel:
//! the drop, the fresh environment, fd hygiene, no controlling terminal,
//! signals and ptrace, typed refusals, and robustness.

mod common;

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::{launcher, rt, sha256_hex, stderr, stdout, tono, tono_env, TestUser};
use serde_json::{json, Value};
use tono_seal::classify::Policy;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use tono_seal::env::{EnvConfig, RunEnv, TurnCredential};
use tono_seal::launch::view::View;
use tono_seal::user::TargetUser;
use tono_seal::Outcome;

fn grants(specs: &[&str]) -> Vec<SecretGrant> {
    specs
        .iter()
        .map(|s| SecretGrant::parse(s).unwrap())
        .collect()
}

async fn call_as(
    user: &TargetUser,
    grants: &[SecretGrant],
    call: Value,
    options: RunOptions,
) -> Outcome {
    let launcher = launcher();
    let policy = Policy::default();
    let raw = serde_json::to_vec(&call).unwrap();
    drop_and_run(&DropRequest {
        launcher: &launcher,
        policy: &policy,
        user,
        grants,
        call: &raw,
        options,
    })
    .await
}

fn shell(user: &TargetUser, grants: &[SecretGrant], command: &str, secrets: &[&str]) -> Outcome {
    let call = json!({"tool": "shell", "args": {"command": command, "secrets": secrets}});
    rt().block_on(call_as(user, grants, call, RunOptions::default()))
}

#[test]
fn each_user_unseals_its_own_and_the_kernel_denies_the_other() {
    need_root!();
    let (a, b) = (TestUser::with_key(), TestUser::with_key());
    a.seal("tok", b"alpha-value");
    b.seal("tok", b"beta-value");
    for (u, v) in [(&a, "alpha-value"), (&b, "beta-value")] {
        let out = shell(
            &u.user,
            &grants(&["tok=TOK"]),
            "printf %s \"$TOK\" | sha256sum | cut -c1-64",
            &["tok"],
        );
        assert!(out.succeeded(), "{out:?}");
        assert_eq!(out.stdout.trim(), sha256_hex(v.as_bytes()));
        assert!(
            !out.stdout.contains(v),
            "the value itself is never printed here"
        );
    }
    let bh = b.home().display().to_string();
    for path in [
        bh.clone(),
        format!("{bh}/.tono"),
        format!("{bh}/.tono/identity"),
        format!("{bh}/.tono/secrets/tok.age"),
    ] {
        let out = shell(&a.user, &[], &format!("cat '{path}' || ls '{path}'"), &[]);
        assert_ne!(out.exit_code, Some(0), "{path}: {out:?}");
        assert!(
            out.stderr.contains("Permission denied"),
            "{path}: {}",
            out.stderr
        );
    }
    // A secret the turn did not grant is refused before any launch.
    let out = shell(&a.user, &grants(&["tok"]), "true", &["other"]);
    assert_eq!(out.reason, "secret_not_granted");
    assert_eq!(out.exit_code, None);
}

#[test]
fn no_variable_is_set_twice_and_nothing_is_unsealed_when_one_would_be() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("tok", b"alpha-value");
    u.seal("other", b"beta-value");
    let marker = "ran-anyway";
    let command = format!("echo {marker}");
    // Refused by the worker before any launch.
    for (grant, asked, code) in [
        (&["tok=TOK"][..], &["tok", "tok"][..], "secret_repeated"),
        (&["tok=TOK", "other=TOK"], &["tok", "other"], "env_conflict"),
    ] {
        let out = shell(&u.user, &grants(grant), &command, asked);
        assert_eq!(out.reason, code, "{grant:?} {asked:?}: {out:?}");
        assert_eq!(out.exit_code, None, "nothing ran: {out:?}");
        assert!(!out.stdout.contains(marker));
    }
    // A secret bound to the turn credential's variable: the launcher
    // refuses the plan after the drop and before it unseals anything.
    let options = RunOptions {
        env: RunEnv {
            config: std::sync::Arc::new(EnvConfig::default()),
            provider: None,
            credential: Some(TurnCredential::new("TOK", "turn-own".into()).unwrap()),
        },
        ..RunOptions::default()
    };
    let call = json!({"tool": "shell", "args": {"command": command, "secrets": ["tok"]}});
    let out = rt().block_on(call_as(&u.user, &grants(&["tok=TOK"]), call, options));
    let error = out.launch_error.as_ref().expect("a typed launch error");
    assert_eq!(error.code, "env_conflict", "{out:?}");
    assert!(error.message.contains("TOK is set twice"), "{error:?}");
    assert_eq!(out.exit_code, None, "nothing ran: {out:?}");
    // The same secrets, each once and on its own variable, still run.
    let out = shell(
        &u.user,
        &grants(&["tok=TOK", "other=OTHER"]),
        "test -n \"$TOK\" && test -n \"$OTHER\" && env | grep -c -e ^TOK= -e ^OTHER=",
        &["tok", "other"],
    );
    assert!(out.succeeded(), "{out:?}");
    assert_eq!(out.stdout.trim(), "2");
}

#[test]
fn the_worker_holds_no_plaintext_and_logs_none() {
    need_root!();
    let u = TestUser::with_key();
    let canary = format!("canary-{}", sha256_hex(&std::process::id().to_le_bytes()));
    u.seal("c", canary.as_bytes());
    let control = format!("control-{}", &sha256_hex(b"positive")[..24]);
    // A second control on the heap: a value the worker parsed (its env
    // config) and holds for its life.
    let heap_control = format!("heap-control-{}", &sha256_hex(b"heap")[..24]);
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        json!({ "no_proxy": heap_control }).to_string(),
    )
    .unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut worker = std::process::Command::new(common::tono_bin())
        .args(["serve", "--stdio", "--env-config"])
        .arg(config.path())
        .env_clear()
        .env("TONO_LOG", "trace")
        .env("TONO_TEST_CONTROL", &control)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    use std::io::{BufRead, Write};
    let mut input = worker.stdin.take().unwrap();
    let mut output = std::io::BufReader::new(worker.stdout.take().unwrap());
    // Fifty calls whose tool prints the value raw, in base64 and in hex:
    // the launcher masks each before the worker reads a byte.
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&canary);
    let hex: String = canary.bytes().map(|b| format!("{b:02x}")).collect();
    for i in 0..50 {
        let line = json!({"id": i, "user": u.name(), "secrets": ["c=C"],
            "call": {"tool": "shell", "args": {"command": "test -n \"$C\" && printf %s \"$C\" | wc -c; \
                printf '%s\\n' \"$C\"; printf %s \"$C\" | base64 -w0; echo; printf %s \"$C\" | xxd -p -c0", "secrets": ["c"]}}});
        writeln!(input, "{line}").unwrap();
        let mut answer = String::new();
        output.read_line(&mut answer).unwrap();
        let v: Value = serde_json::from_str(&answer).unwrap();
        let out = v["outcome"]["stdout"].as_str().unwrap();
        let lines: Vec<&str> = out.lines().collect();
        // The base64 line keeps what does not depend on the value alone:
        // its last character (a few bits of the value and the padding
        // bits) and the padding.
        assert_eq!(lines.len(), 4, "{answer}");
        assert_eq!(lines[0], canary.len().to_string(), "{answer}");
        assert_eq!([lines[1], lines[3]], ["[masked:c]"; 2], "{answer}");
        assert!(
            lines[2].starts_with("[masked:c]") && lines[2].len() <= "[masked:c]".len() + 3,
            "{answer}"
        );
        assert_eq!(v["outcome"]["masks"]["c"], 3, "{answer}");
        assert!(!answer.contains(&canary));
    }
    let scan = tono_seal::demo::memscan::scan_process(
        worker.id(),
        &[
            canary.as_bytes(),
            b64.as_bytes(),
            hex.as_bytes(),
            control.as_bytes(),
            heap_control.as_bytes(),
        ],
    )
    .unwrap();
    let counts = &scan.counts;
    assert!(scan.complete(), "the scan missed too much: {scan}");
    assert!(
        counts[3] > 0 && counts[4] > 0,
        "both positive controls (environment and heap) must be found, or the scan proves nothing: {counts:?}"
    );
    assert_eq!(
        counts[..3],
        [0, 0, 0],
        "the worker's memory holds the value (raw, base64, hex)"
    );
    drop(input);
    assert!(worker.wait().unwrap().success());
    let logs = std::fs::read_to_string(log.path()).unwrap();
    assert!(
        !logs.contains(&canary),
        "the canary is in the worker's trace log"
    );
}

#[test]
fn the_tool_environment_is_exactly_the_plan() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("k", b"env-secret");
    let call = json!({"tool": "shell", "args": {"command": "cat /proc/$$/environ | tr '\\0' '\\n' | sort", "secrets": ["k"]}});
    let stuffed = [
        ("LD_PRELOAD", "/tmp/evil.so"),
        ("LD_LIBRARY_PATH", "/tmp/evil"),
        ("BASH_ENV", "/tmp/evil.sh"),
        ("ENV", "/tmp/evil.sh"),
        ("IFS", "x"),
        ("PYTHONPATH", "/tmp/evil"),
        ("GCONV_PATH", "/tmp/evil"),
        ("AWS_SECRET_ACCESS_KEY", "worker-aws-secret"),
        ("TONO_CANARY", "worker-canary"),
        ("PATH", "/tmp/evil:/usr/bin:/bin"),
        ("HOME", "/root"),
    ];
    let o = tono_env(
        &["call", "--user", u.name(), "--secret", "k=API_KEY"],
        call.to_string().as_bytes(),
        &stuffed,
    );
    let out: Outcome =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    let home = u.home().display().to_string();
    // The value itself is there, masked on its way out (the tool printed
    // it; the launcher replaced it before the worker got the output).
    let mut want = vec![
        "API_KEY=[masked:k]".to_string(),
        format!("HOME={home}"),
        "LANG=C.UTF-8".into(),
        format!("LOGNAME={}", u.name()),
        "PATH=/usr/local/bin:/usr/bin:/bin".into(),
        "SHELL=/bin/sh".into(),
        "TMPDIR=/tmp".into(),
        format!("USER={}", u.name()),
    ];
    want.sort();
    let got: Vec<String> = out.stdout.lines().map(String::from).collect();
    assert_eq!(got, want, "{out:?}");
}

#[test]
fn the_tool_starts_with_no_signal_blocked_or_ignored() {
    need_root!();
    let u = TestUser::with_key();
    // `exec` so that grep reads its own status, not the shell's. The worker
    // (Rust) ignores SIGPIPE and tokio masks signals: neither may leak.
    let out = shell(
        &u.user,
        &[],
        "exec grep -E '^Sig(Blk|Ign):' /proc/self/status",
        &[],
    );
    let want = "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n";
    assert_eq!(out.stdout, want, "{out:?}");
    // A writer into a closed pipe dies of SIGPIPE, quietly, as in a shell.
    let out = shell(&u.user, &[], "yes | head -c 1", &[]);
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("y", ""),
        "{out:?}"
    );
}

#[test]
fn the_tool_runs_with_the_users_ids_no_groups_no_caps_and_cannot_rise() {
    need_root!();
    let u = TestUser::with_key();
    let id = u.user.uid;
    let out = shell(
        &u.user,
        &[],
        "grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status",
        &[],
    );
    let status = out.stdout;
    for want in [
        format!("Uid:\t{id}\t{id}\t{id}\t{id}"),
        format!("Gid:\t{id}\t{id}\t{id}\t{id}"),
        "Groups:\t".into(),
        "CapInh:\t0000000000000000".into(),
        "CapPrm:\t0000000000000000".into(),
        "CapEff:\t0000000000000000".into(),
        "CapBnd:\t0000000000000000".into(),
        "CapAmb:\t0000000000000000".into(),
        "NoNewPrivs:\t1".into(),
    ] {
        assert!(
            status.lines().any(|l| l.trim_end() == want.trim_end()),
            "missing {want:?} in\n{status}"
        );
    }
    // A setuid-root copy of `id` must not raise the euid.
    let dir = common::tempdir();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let suid = dir.path().join("id");
    std::fs::copy("/usr/bin/id", &suid).unwrap();
    std::fs::set_permissions(&suid, std::os::unix::fs::PermissionsExt::from_mode(0o4755)).unwrap();
    let out = shell(
        &u.user,
        &[],
        &format!(
            "{} -u; sudo -n true; echo sudo=$?; su -c true root </dev/null; echo su=$?",
            suid.display()
        ),
        &[],
    );
    let mut lines = out.stdout.lines();
    assert_eq!(
        lines.next(),
        Some(id.to_string().as_str()),
        "setuid-root id raised the euid: {out:?}"
    );
    assert!(out.stdout.contains("sudo=1"), "{out:?}");
    assert!(!out.stdout.contains("su=0"), "{out:?}");
}

#[test]
fn the_tool_gets_only_stdio_fds() {
    need_root!();
    let u = TestUser::with_key();
    // Leak a file and a socket into the worker without CLOEXEC.
    let file = std::fs::File::open("/etc/hostname").unwrap();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for fd in [file.as_raw_fd(), sock.as_raw_fd()] {
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        )
        .unwrap();
    }
    // The tool's fds are read from outside, by root, while it runs: a shell
    // listing its own fds races with the pipes of its own pipeline.
    let rt = rt();
    let user = u.user.clone();
    let sleeper = rt.spawn(async move {
        // A length no other process has, to find exactly this one.
        let call = json!({"tool": "spawn", "args": {"argv": ["sleep", "29.321"]}});
        call_as(&user, &[], call, RunOptions::default()).await
    });
    let mut fds: Vec<u32> = Vec::new();
    for _ in 0..300 {
        std::thread::sleep(Duration::from_millis(30));
        let o = std::process::Command::new("pgrep")
            .args(["-u", u.name(), "-f", "^sleep 29.321$"])
            .output()
            .unwrap();
        let Some(pid) = stdout(&o).split_whitespace().next().map(str::to_owned) else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        fds = entries
            .filter_map(|e| e.ok()?.file_name().to_string_lossy().parse().ok())
            .collect();
        if !fds.is_empty() {
            break;
        }
    }
    let _ = std::process::Command::new("pkill")
        .args(["-KILL", "-u", u.name(), "-x", "sleep"])
        .status();
    fds.sort();
    assert_eq!(fds, [0, 1, 2], "the tool's fds");
    let _ = rt.block_on(sleeper);
    drop((file, sock));
    // A cwd under /proc/self/fd is refused (runc CVE-2024-21626).
    let call = json!({"tool": "shell", "args": {"command": "pwd", "cwd": "/proc/self/fd/3"}});
    let out = rt.block_on(call_as(&u.user, &[], call, RunOptions::default()));
    assert_eq!(
        out.launch_error.as_ref().map(|e| e.code.as_str()),
        Some("cwd_invalid"),
        "{out:?}"
    );
}

#[test]
fn no_controlling_terminal_so_tiocsti_fails() {
    need_root!();
    let u = TestUser::with_key();
    // The tool inherits a real pty as stdio (through `tono-seal run` under
    // `script`), then tries to push keystrokes into it.
    let perl = r#"
for my $fd (0, 1, 2) {
    for my $req (0x5412, 0x100005412, 0x541C) {
        open(my $h, "+<&=", $fd) or next;
        my $arg = "\x0cINJECT";
        my $r = ioctl($h, $req, $arg);
        print "fd$fd req$req ", ($r ? "WORKED" : "failed"), "\n";
    }
}
if (open(my $t, "+<", "/dev/tty")) { print "tty OPENED\n" } else { print "tty failed: $!\n" }
"#;
    let dir = common::tempdir();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let script = dir.path().join("tiocsti.pl");
    std::fs::write(&script, perl).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let cmd = format!(
        "{} run --user {} -- /usr/bin/perl {}",
        common::tono_bin().display(),
        u.name(),
        script.display()
    );
    let o = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .unwrap();
    let text = stdout(&o);
    assert!(text.contains("tty failed"), "{text}");
    assert!(
        !text.contains("WORKED") && !text.contains("OPENED"),
        "{text}"
    );
    assert_eq!(text.matches("failed").count(), 10, "{text}");
    // Positive control: the same script with the pty as its controlling
    // terminal (no tono in between) does push keystrokes on this machine.
    let direct = format!("/usr/bin/perl {}", script.display());
    let o = std::process::Command::new("script")
        .args(["-qec", &direct, "/dev/null"])
        .output()
        .unwrap();
    assert!(
        stdout(&o).contains("WORKED"),
        "the control did not inject, so the test proves nothing: {}",
        stdout(&o)
    );
}

#[test]
fn the_user_cannot_signal_or_ptrace_the_worker_or_another_user() {
    need_root!();
    let (a, b) = (TestUser::with_key(), TestUser::with_key());
    let rt = rt();
    let b_user = b.user.clone();
    let sleeper = rt.spawn(async move {
        // A length no other process has, to find exactly this one.
        let call =
            json!({"tool": "spawn", "args": {"argv": ["sleep", "19.123"], "timeout_ms": 20000}});
        call_as(&b_user, &[], call, RunOptions::default()).await
    });
    let mut b_pid = String::new();
    for _ in 0..100 {
        let o = std::process::Command::new("pgrep")
            .args(["-u", b.name(), "-f", "^sleep 19.123$"])
            .output()
            .unwrap();
        b_pid = stdout(&o).trim().to_owned();
        if !b_pid.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!b_pid.is_empty(), "the other user's tool did not start");
    let me = std::process::id();
    // In the shared view the kernel refuses by uid (EPERM); in the private
    // view (the default) the pids do not even exist there (ESRCH, 3).
    for (view, errno) in [(View::Shared, 1), (View::Private, 3)] {
        for pid in [me.to_string(), b_pid.clone(), "1".into()] {
            if view == View::Private && pid == "1" {
                continue; // pid 1 there is the call's own init
            }
            let script = format!(
                "kill -0 {pid} 2>&1; echo kill=$?; cat /proc/{pid}/environ >/dev/null 2>&1; echo environ=$?; \
                 perl -e '$r = syscall(101, 16, {pid}, 0, 0); print \"ptrace=$r errno=\", $!+0, \"\\n\"'"
            );
            let out = rt.block_on(call_as(
                &a.user,
                &[],
                json!({"tool": "shell", "args": {"command": script}}),
                RunOptions {
                    view,
                    ..RunOptions::default()
                },
            ));
            assert!(out.stdout.contains("kill=1"), "signal {pid}: {out:?}");
            assert!(
                out.stdout.contains("environ=1"),
                "read environ of {pid}: {out:?}"
            );
            assert!(
                out.stdout.contains(&format!("ptrace=-1 errno={errno}")),
                "{view:?} ptrace {pid}: {out:?}"
            );
        }
    }
    let _ = std::process::Command::new("pkill")
        .args(["-u", b.name()])
        .status();
    let _ = rt.block_on(sleeper);
}

fn marker_call(marker: &str, extra: Value) -> Value {
    let mut args = json!({"command": format!("touch {marker}")});
    for (k, v) in extra.as_object().unwrap() {
        args[k] = v.clone();
    }
    json!({"tool": "shell", "args": args})
}

#[test]
fn refusals_are_typed_and_the_tool_never_runs() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("good", b"good-value");
    u.sh("echo garbage > .tono/secrets/bad.age");
    let rt = rt();
    let marker =
        |tag: &str| common::marker_path(&format!("tonotest-marker-{}-{tag}", std::process::id()));
    let run = |user: &TargetUser, grants: &[SecretGrant], tag: &str, extra: Value| {
        let m = marker(tag);
        let _ = std::fs::remove_file(&m);
        let out = rt.block_on(call_as(
            user,
            grants,
            marker_call(&m, extra),
            RunOptions::default(),
        ));
        assert!(
            !std::path::Path::new(&m).exists(),
            "{tag}: the tool ran: {out:?}"
        );
        out
    };
    let code = |o: &Outcome| {
        o.launch_error
            .as_ref()
            .map(|e| e.code.clone())
            .unwrap_or_else(|| format!("no error: {o:?}"))
    };
    // A target claiming uid 0, or disagreeing with passwd: the worker
    // refuses it before any launch...
    let mut root = u.user.clone();
    root.uid = 0;
    let mut wrong = u.user.clone();
    wrong.gid += 1;
    let mut ghost = u.user.clone();
    ghost.name = "tonotest-ghost".into();
    assert_eq!(code(&run(&root, &[], "root", json!({}))), "user_system");
    assert_eq!(
        code(&run(&wrong, &[], "gid", json!({}))),
        "user_group_shared"
    );
    assert_eq!(
        code(&run(&ghost, &[], "ghost", json!({}))),
        "user_group_shared"
    );
    // ...and the launcher, handed such a plan anyway, refuses it on its own.
    for (target, tag, want) in [
        (&root, "root-plan", "target_root"),
        (&wrong, "gid-plan", "target_mismatch"),
        (&ghost, "ghost-plan", "user_unknown"),
    ] {
        let m = marker(tag);
        let exec = tono_seal::launch::plan::ExecPlan {
            argv: vec!["/bin/sh".into(), "-c".into(), format!("touch {m}")],
            cwd: None,
            env: Vec::new().into(),
            secrets: Vec::new(),
            upstream_ca: None,
        };
        let plan = tono_seal::launch::plan::LaunchPlan::for_user(
            target,
            tono_seal::launch::plan::Action::Exec(exec),
        );
        let done = rt
            .block_on(tono_seal::drop::spawn::launch(
                &launcher(),
                plan,
                tono_seal::drop::spawn::Input::Null,
                tono_seal::drop::spawn::Output::Capture(4096),
                Duration::from_secs(10),
            ))
            .unwrap();
        match done.report {
            tono_seal::launch::report::StatusReport::Failed(e) => assert_eq!(e.code, want, "{tag}"),
            other => panic!("{tag}: the launcher did not refuse: {other:?}"),
        }
        assert!(!std::path::Path::new(&m).exists(), "{tag}: the tool ran");
    }
    // Missing, corrupt secrets; a missing cwd.
    let g = grants(&["good", "bad", "gone"]);
    assert_eq!(
        code(&run(&u.user, &g, "missing", json!({"secrets": ["gone"]}))),
        "secret_missing"
    );
    assert_eq!(
        code(&run(&u.user, &g, "corrupt", json!({"secrets": ["bad"]}))),
        "secret_corrupt"
    );
    assert_eq!(
        code(&run(
            &u.user,
            &g,
            "cwd",
            json!({"cwd": "/nonexistent/folder"})
        )),
        "cwd_unusable"
    );
    // An insecure identity.
    u.sh("chmod 0640 .tono/identity");
    let out = run(&u.user, &g, "insecure", json!({"secrets": ["good"]}));
    assert_eq!(code(&out), "identity_insecure");
    assert_eq!(
        out.launch_error.unwrap().stage,
        tono_seal::launch::report::Stage::Unseal
    );
    u.sh("chmod 0600 .tono/identity");
    // The same call with everything right does run: the markers meant something.
    let m = marker("ok");
    let out = rt.block_on(call_as(
        &u.user,
        &g,
        marker_call(&m, json!({"secrets": ["good"]})),
        RunOptions::default(),
    ));
    assert!(out.succeeded(), "{out:?}");
    assert!(std::path::Path::new(&m).exists());
    let _ = std::fs::remove_file(&m);
    // And the CLI refuses root before any syscall.
    assert_eq!(
        tono(&["run", "--user", "#0", "--", "true"], b"")
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn chatty_closing_stubborn_and_backgrounding_tools() {
    need_root!();
    let u = TestUser::with_key();
    let rt = rt();
    let run = |command: &str, timeout: Duration| {
        let options = RunOptions {
            timeout,
            ..RunOptions::default()
        };
        let started = Instant::now();
        let out = rt.block_on(call_as(
            &u.user,
            &[],
            json!({"tool": "shell", "args": {"command": command}}),
            options,
        ));
        (out, started.elapsed())
    };
    let (out, _) = run(
        "head -c 3000000 /dev/zero | tr '\\0' o & head -c 3000000 /dev/zero | tr '\\0' e >&2; wait",
        Duration::from_secs(30),
    );
    assert!(out.succeeded(), "{:?}", out.launch_error);
    assert_eq!(out.stdout.len(), 1024 * 1024);
    assert_eq!(out.stderr.len(), 1024 * 1024);
    assert!(out.stdout_truncated && out.stderr_truncated);
    let (out, _) = run(
        "exec 1>&-; sleep 0.1; echo still-here >&2; exit 3",
        Duration::from_secs(10),
    );
    assert_eq!((out.exit_code, out.stderr.trim()), (Some(3), "still-here"));
    let (out, took) = run("trap '' TERM; sleep 100", Duration::from_secs(1));
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.signal, Some(9));
    assert!(took < Duration::from_secs(5), "{took:?}");
    let (out, took) = run("sleep 100 & echo started", Duration::from_secs(30));
    assert_eq!((out.exit_code, out.stdout.trim()), (Some(0), "started"));
    assert!(
        took < Duration::from_secs(3),
        "a background child holding the pipes hung the call: {took:?}"
    );
    let (out, _) = run("exit 255", Duration::from_secs(10));
    assert_eq!(out.exit_code, Some(255));
    let (out, _) = run("kill -SEGV $$", Duration::from_secs(10));
    assert_eq!((out.exit_code, out.signal), (None, Some(11)));
    let (out, took) = run("setsid sleep 100 & echo escaped", Duration::from_secs(30));
    assert_eq!(out.stdout.trim(), "escaped");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let _ = std::process::Command::new("pkill")
        .args(["-u", u.name()])
        .status();
}

#[test]
fn sixty_four_concurrent_calls_across_eight_users() {
    need_root!();
    let users: Vec<TestUser> = (0..8).map(|_| TestUser::with_key()).collect();
    for (i, u) in users.iter().enumerate() {
        u.seal("s", format!("value-{i}").as_bytes());
    }
    let rt = rt();
    let outcomes = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..64 {
            let user = users[i % 8].user.clone();
            tasks.push(tokio::spawn(async move {
                let call = json!({"tool": "shell", "args": {"command": "sleep 0.2; printf %s \"$S\" | sha256sum | cut -c1-64; id -u", "secrets": ["s"]}});
                (i, call_as(&user, &grants(&["s=S"]), call, RunOptions::default()).await)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await.unwrap());
        }
        all
    });
    for (i, out) in outcomes {
        let want = format!(
            "{}\n{}",
            common::sha256_hex(format!("value-{}", i % 8).as_bytes()),
            users[i % 8].user.uid
        );
        assert_eq!(out.stdout.trim(), want, "call {i}: {out:?}");
    }
}

#[test]
fn file_tools_run_as_the_user() {
    need_root!();
    let (a, b) = (TestUser::with_key(), TestUser::with_key());
    let rt = rt();
    // A persistent home: what one call writes, the next reads, and root
    // looks at the real file (the default, ephemeral, keeps no write).
    let persistent = || RunOptions {
        home: Some(tono_seal::env::HomeMode::Persistent),
        ..RunOptions::default()
    };
    let call = |user: &TargetUser, v: Value| rt.block_on(call_as(user, &[], v, persistent()));
    let out = call(
        &a.user,
        json!({"tool": "write_file", "args": {"path": "notes.txt", "content": "hello"}}),
    );
    assert!(out.succeeded(), "{out:?}");
    let meta = std::fs::metadata(a.home().join("notes.txt")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        a.user.uid,
        "written as the user, not root"
    );
    let out = call(
        &a.user,
        json!({"tool": "read_file", "args": {"path": "notes.txt"}}),
    );
    assert_eq!(out.stdout, "hello");
    let out = call(&a.user, json!({"tool": "list_dir", "args": {"path": "."}}));
    let names: Vec<&str> = out.result.as_ref().unwrap()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"notes.txt") && names.contains(&".tono"),
        "{names:?}"
    );
    let other = b.home().join(".tono/identity").display().to_string();
    let out = call(
        &a.user,
        json!({"tool": "read_file", "args": {"path": other}}),
    );
    assert_eq!(
        out.launch_error.as_ref().map(|e| e.errno),
        Some(Some(13)),
        "{out:?}"
    );
    assert!(out.stdout.is_empty());
    let out = call(
        &a.user,
        json!({"tool": "delete_file", "args": {"path": "notes.txt"}}),
    );
    assert!(out.succeeded());
    assert!(!a.home().join("notes.txt").exists());
    // Unknown fields on a built-in tool are refused, not ignored.
    let out = call(
        &a.user,
        json!({"tool": "read_file", "args": {"path": "x", "mode": "root"}}),
    );
    assert_eq!(out.reason, "args_invalid");
}

#[test]
fn the_cli_run_passes_the_exit_code_and_serve_survives_garbage() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("a", b"1234");
    let o = tono(
        &[
            "run",
            "--user",
            u.name(),
            "--secret",
            "a=A",
            "--",
            "/bin/sh",
            "-c",
            "test \"$A\" = 1234 && exit 42",
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(42), "{}", stderr(&o));
    let input = format!(
        "not json\n{{\"id\": 7, \"user\": \"tonotest-none\", \"call\": {{}}}}\n{{\"id\": 8, \"user\": \"{}\", \"call\": {{\"tool\":\"shell\",\"args\":{{\"command\":\"echo ok\"}}}}}}\n{{\"id\": 9, \"user\": \"{}\", \"call\": {{\"tool\":\"shell\",\"tool\":\"x\",\"args\":{{}}}}}}\n",
        u.name(),
        u.name()
    );
    let o = tono(&["serve", "--stdio"], input.as_bytes());
    assert!(o.status.success());
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    let by_id = |id: Value| {
        lines
            .iter()
            .find(|l| l["id"] == id)
            .unwrap_or_else(|| panic!("no answer for {id}: {lines:?}"))
    };
    assert_eq!(by_id(Value::Null)["error"]["code"], "request_invalid");
    assert_eq!(by_id(json!(7))["error"]["code"], "user_unknown");
    assert_eq!(by_id(json!(8))["outcome"]["stdout"], "ok\n");
    assert_eq!(by_id(json!(9))["outcome"]["reason"], "call_duplicate_key");
}

#[test]
fn the_worker_has_no_core_file_limit_above_zero() {
    need_root!();
    use std::io::{BufRead, Write};
    let mut worker = std::process::Command::new(common::tono_bin())
        .args(["serve", "--stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Ready when it has answered a line (its limits are set before it
    // reads any): an event, not a sleep.
    let mut stdin = worker.stdin.take().unwrap();
    stdin.write_all(b"not a request\n").unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(worker.stdout.take().unwrap())
        .read_line(&mut answer)
        .unwrap();
    assert!(answer.contains("request_invalid"), "{answer}");
    worker.stdin = Some(stdin);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", worker.id())).unwrap();
    let core = limits
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .unwrap();
    assert!(
        core.split_whitespace().filter(|w| *w == "0").count() >= 2,
        "{core}"
    );
    // (PR_SET_DUMPABLE 0 is set too; for a root process it cannot be seen
    // from outside, and users are kept out by uid already.)
    drop(worker.stdin.take());
    assert!(worker.wait().unwrap().success());
}

#[test]
fn a_launcher_a_user_could_replace_is_refused_before_it_starts() {
    need_root!();
    use std::os::unix::fs::PermissionsExt;
    let u = TestUser::with_key();
    let base = std::path::PathBuf::from(format!(
        "/var/lib/tono-test-launcher-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let rt = rt();
    let call = br#"{"tool":"spawn","args":{"argv":["/bin/true"]}}"#;
    /// Case, folder mode and owner, binary mode and owner, the refusal.
    type Case<'a> = (&'a str, u32, u32, u32, u32, Option<&'a str>);
    let user = u.user.uid;
    let cases: [Case<'_>; 6] = [
        ("root's", 0o755, 0, 0o755, 0, None),
        ("sticky folder", 0o1777, 0, 0o755, 0, None),
        (
            "open folder",
            0o777,
            0,
            0o755,
            0,
            Some("writable by group or others (mode 0777)"),
        ),
        (
            "user's folder",
            0o755,
            user,
            0o755,
            0,
            Some(&format!("owned by uid {user}")),
        ),
        (
            "open binary",
            0o755,
            0,
            0o757,
            0,
            Some("writable by group or others (mode 0757)"),
        ),
        (
            "user's binary",
            0o755,
            0,
            0o755,
            user,
            Some(&format!("owned by uid {user}")),
        ),
    ];
    for (case, folder_mode, folder_owner, file_mode, file_owner, refusal) in cases {
        let folder = base.join(case.replace([' ', '\''], "-"));
        std::fs::create_dir(&folder).unwrap();
        let binary = folder.join("tono-launch");
        // Copied by `cp`, not by this process: a write descriptor of ours
        // could be inherited by another test thread's child until its
        // exec, and starting the copy would then fail with ETXTBSY.
        let copied = std::process::Command::new("cp")
            .arg(common::launch_bin())
            .arg(&binary)
            .status()
            .unwrap();
        assert!(copied.success());
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(file_mode)).unwrap();
        std::os::unix::fs::chown(&binary, Some(file_owner), None).unwrap();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(folder_mode)).unwrap();
        std::os::unix::fs::chown(&folder, Some(folder_owner), None).unwrap();
        let launcher = tono_seal::drop::Launcher::at(&binary);
        let out = rt.block_on(drop_and_run(&DropRequest {
            launcher: &launcher,
            policy: &Policy::default(),
            user: &u.user,
            grants: &[],
            call,
            options: RunOptions::default(),
        }));
        match refusal {
            None => assert_eq!(out.exit_code, Some(0), "{case}: {out:?}"),
            Some(why) => {
                let error = out.launch_error.as_ref().expect(case);
                assert_eq!(error.code, "launcher_insecure", "{case}: {error:?}");
                assert!(error.message.contains(why), "{case}: {}", error.message);
                assert_eq!(out.exit_code, None, "{case}: nothing ran");
            }
        }
    }
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_dropped_http_read_sends_its_headers_but_never_in_an_argv() {
    need_root!();
    use std::io::{Read, Write};
    let u = TestUser::with_key();
    let canary = format!("canary-{:016x}", rand::random::<u64>());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let looked_for = canary.clone();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            request.extend_from_slice(&buf[..n]);
        }
        // While curl waits for the answer, read every process's argv.
        let mut in_argv = Vec::new();
        let mut argvs_read = 0;
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
                argvs_read += 1;
                if cmdline
                    .windows(looked_for.len())
                    .any(|w| w == looked_for.as_bytes())
                {
                    in_argv.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
                }
            }
        }
        conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            .unwrap();
        (
            String::from_utf8_lossy(&request).into_owned(),
            in_argv,
            argvs_read,
        )
    });
    let url = format!("http://127.0.0.1:{port}/");
    let call = json!({"tool": "http_get", "args": {"url": url, "headers": {"X-Canary": canary}}});
    let out = rt().block_on(call_as(&u.user, &[], call, RunOptions::default()));
    let (request, in_argv, argvs_read) = server.join().unwrap();
    assert_eq!(
        (out.exit_code, out.stdout.as_str()),
        (Some(0), "ok"),
        "{out:?}"
    );
    assert!(
        request.contains(&format!("X-Canary: {canary}")),
        "positive control: the header was sent: {request}"
    );
    assert!(argvs_read > 10, "only {argvs_read} argvs read");
    assert!(in_argv.is_empty(), "the header is in an argv: {in_argv:?}");

    // A value that would smuggle a second header is refused, not sent (the
    // classifier's refusal; the plan's own header check is behind it).
    let smuggled = json!({"tool": "http_get", "args": {
        "url": format!("http://127.0.0.1:{port}/"), "headers": {"X-A": "v\r\nX-B: w"}}});
    let out = rt().block_on(call_as(&u.user, &[], smuggled, RunOptions::default()));
    assert_eq!(
        (out.verdict, out.reason.as_str()),
        (tono_seal::classify::VerdictKind::Refuse, "header_injection"),
        "{out:?}"
    );
}

#[test]
fn a_worker_acts_only_as_users_with_an_own_account_in_its_range() {
    need_root!();
    let a = TestUser::with_key();
    let code = |out: &Outcome| out.launch_error.as_ref().map(|e| e.code.clone());
    // Positive control: the user runs.
    let ok = shell(&a.user, &[], "true", &[]);
    assert_eq!((ok.exit_code, code(&ok)), (Some(0), None), "{ok:?}");
    // System accounts (daemon's home exists) and nobody: refused, nothing runs.
    for name in ["daemon", "nobody"] {
        let system = TargetUser::resolve(name).expect(name);
        let out = shell(&system, &[], "true", &[]);
        assert_eq!(
            (out.exit_code, code(&out)),
            (None, Some("user_system".into())),
            "{name}: {out:?}"
        );
    }
    // A range the operator narrowed.
    let narrowed = RunOptions {
        allotted: tono_seal::user::AllottedRange::parse("62000-62999").unwrap(),
        ..RunOptions::default()
    };
    let call = json!({"tool": "shell", "args": {"command": "true"}});
    let out = rt().block_on(call_as(&a.user, &[], call.clone(), narrowed));
    assert_eq!(code(&out), Some("user_outside_range".into()), "{out:?}");
    // Another user with the same primary group: its files would be reachable.
    let sharer = common::GroupSharer::of(&a);
    let out = shell(&a.user, &[], "true", &[]);
    assert_eq!(
        (out.exit_code, code(&out)),
        (None, Some("user_group_shared".into())),
        "{out:?}"
    );
    drop(sharer);
    let ok = shell(&a.user, &[], "true", &[]);
    assert_eq!(ok.exit_code, Some(0), "alone again: {ok:?}");
}
