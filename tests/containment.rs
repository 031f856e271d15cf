//! No process outlives its call: every drop runs in its own cgroup, killed
//! as a whole when the call ends; a fork bomb hits its own `pids.max`.

mod common;
#[path = "common/group_escapes.rs"]
mod group_escapes;

use std::time::{Duration, Instant};

use common::{launcher, live_processes, rt, shell, TestUser, ESCAPES};
use serde_json::json;
use tono_seal::classify::Policy;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions};

/// The call cgroup an outcome names.
fn cgroup_of(out: &tono_seal::Outcome) -> String {
    out.limits
        .as_ref()
        .and_then(|l| l.cgroup.clone())
        .unwrap_or_else(|| panic!("the call had no cgroup: {out:?}"))
}

/// Which of the named call cgroups are still there, in any hierarchy, once
/// the background removal of emptied ones has settled.
fn cgroups_left(names: &[String]) -> Vec<String> {
    assert!(
        tono_seal::contain::settle(Duration::from_secs(5)),
        "emptied cgroups are removed"
    );
    let mounts = tono_seal::contain::mounts();
    let mut left = Vec::new();
    for base in [&mounts.v2, &mounts.v1_pids, &mounts.v1_memory]
        .into_iter()
        .flatten()
        .map(|m| m.join("tono"))
    {
        for name in names {
            if base.join(name).exists() {
                left.push(base.join(name).display().to_string());
            }
        }
    }
    left
}

#[test]
fn what_left_the_group_is_killed_by_the_calls_cgroup_and_a_concurrent_call_lives() {
    need_root!();
    let u = TestUser::with_key();
    let rt = rt();
    let names = rt.block_on(async {
        let user = u.user.clone();
        // The other call runs until the test says it is done (a file where
        // a private call sees the host's), at most 2,400 looks: bounded by
        // events, not by a clock. It says it runs with a file of its own.
        let done = common::marker_path(&format!("containment-done-{}", std::process::id()));
        let ready = common::marker_path(&format!("containment-ready-{}", std::process::id()));
        let _ = std::fs::remove_file(&done);
        let _ = std::fs::remove_file(&ready);
        let wait = format!(
            "touch {ready}; i=0; while [ ! -e {done} ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; \
             [ -e {done} ] && echo survived"
        );
        let long = tokio::spawn(async move {
            common::shell_shared(&user, &wait, Duration::from_secs(180)).await
        });
        let mut looks = 0;
        while !std::path::Path::new(&ready).exists() {
            looks += 1;
            assert!(looks < 10_000 && !long.is_finished(), "the other call never started");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The cgroup's kill, where nothing else can end an escapee: the
        // shared view and escapes out of the call's process group.
        let mut names = group_escapes::the_cgroup_kills_what_left_the_group(
            &u,
            &|| !long.is_finished(),
            &|how, out| assert!(out.limits.as_ref().unwrap().cgroup_v2, "{how}: {out:?}"),
        )
        .await;
        // The private view: its PID namespace and the cgroup together.
        for escape in ESCAPES {
            let out = shell(&u.user, escape, Duration::from_secs(10)).await;
            names.push(cgroup_of(&out));
            assert_eq!(out.stdout.trim(), "started", "{escape}: {out:?}");
            assert!(!long.is_finished(), "{escape}: waited for the other call");
            let left: Vec<String> = live_processes(u.user.uid)
                .into_iter()
                .filter(|p| p.contains("1000"))
                .collect();
            assert!(
                left.is_empty(),
                "{escape}: processes outlived the call: {left:?}"
            );
            assert!(out.limits.as_ref().unwrap().cgroup_v2, "{out:?}");
        }
        std::fs::write(&done, b"").unwrap();
        let long = long.await.unwrap();
        let _ = std::fs::remove_file(&done);
        let _ = std::fs::remove_file(&ready);
        assert_eq!(
            long.stdout.trim(),
            "survived",
            "the concurrent call was killed: {long:?}"
        );
        names.push(cgroup_of(&long));
        names
    });
    assert_eq!(cgroups_left(&names), Vec::<String>::new());
}

#[test]
fn a_fork_bomb_hits_its_own_pids_max_and_others_finish() {
    need_root!();
    let (bomber, other) = (TestUser::with_key(), TestUser::with_key());
    let rt = rt();
    rt.block_on(async {
        let o = other.user.clone();
        let calm =
            tokio::spawn(
                async move { shell(&o, "sleep 1; echo calm", Duration::from_secs(120)).await },
            );
        // The bomb grows in the background, and its processes die when
        // their forks fail, so it can die out on its own. The call's end is
        // an event that must come: a holder forks children that keep their
        // slots until one fork fails, which happens after at most pids.max
        // forks, and prints the errno. The timeout is only a net. The bomb
        // starts from one subshell: the main shell forks once, before the
        // bomb grows (for `bomb | bomb &` it forks twice itself, and the
        // second fork could fail, ending the call before the holder ran).
        let bomb = shell(
            &bomber.user,
            "bomb() { bomb | bomb & }; (bomb) & exec perl -e '\
             my $n = 0; \
             while (1) { my $p = fork; \
               if (!defined $p) { printf \"fork failed errno %d after %d\\n\", $!+0, $n; exit 0 } \
               if (!$p) { close STDOUT; close STDERR; sleep 1000; exit 0 } \
               $n++ }'",
            Duration::from_secs(300),
        )
        .await;
        assert!(!bomb.timed_out, "no fork failed: {bomb:?}");
        let held: usize = bomb
            .stdout
            .trim()
            .strip_prefix("fork failed errno 11 after ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("the holder's fork should fail with EAGAIN: {bomb:?}"));
        assert!(held < 256, "{held} forks held past pids.max 256: {bomb:?}");
        eprintln!("the holder held {held} forks before EAGAIN");
        let limits = bomb.limits.clone().unwrap();
        assert!(limits.pids_max.is_some(), "{bomb:?}");
        assert!(
            limits.pids_max_hits > 0,
            "the bomb should have hit pids.max: {limits:?}"
        );
        let calm = calm.await.unwrap();
        assert_eq!(calm.stdout.trim(), "calm", "{calm:?}");
        assert!(
            live_processes(bomber.user.uid).is_empty(),
            "{:?}",
            live_processes(bomber.user.uid)
        );
    });
}

#[test]
fn a_thousand_calls_leave_no_cgroup_behind() {
    need_root!();
    let u = TestUser::with_key();
    let rt = rt();
    let started = Instant::now();
    let names = rt.block_on(async {
        let mut names = Vec::new();
        for i in 0..1000 {
            let out = shell(&u.user, "true", Duration::from_secs(10)).await;
            assert_eq!(out.exit_code, Some(0), "call {i}: {out:?}");
            names.push(cgroup_of(&out));
        }
        names
    });
    eprintln!("1000 sequential calls in {:?}", started.elapsed());
    let distinct: std::collections::HashSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), 1000, "every call had a cgroup of its own");
    assert_eq!(cgroups_left(&names), Vec::<String>::new());
}

/// The probe a call runs on its own cgroups: paths from `/proc/self/cgroup`
/// and the mount table (whatever the host's layout), each attempt printed
/// as `name path ok`, `name path errno N`, or `name path missing` when
/// the path (or the folder to make in) is not there — so a denial is shown
/// on a path that exists.
const CGROUP_PROBE: &str = r#"exec perl -e '
use POSIX qw(EEXIST);
my (%mount, %mine);
open my $mi, "<", "/proc/self/mountinfo" or die;
while (<$mi>) {
  my @f = split / /; my ($dash) = grep { $f[$_] eq "-" } 0..$#f;
  my ($type, $opts) = ($f[$dash + 1], $f[$dash + 3]);
  $mount{v2} = $f[4] if $type eq "cgroup2";
  $mount{pids} = $f[4] if $type eq "cgroup" && $opts =~ /(^|,)pids(,|$)/;
}
open my $cg, "<", "/proc/self/cgroup" or die;
while (<$cg>) { chomp; my ($id, $c, $p) = split /:/, $_, 3; $mine{v2} = $p if $c eq ""; $mine{pids} = $p if $c eq "pids"; }
sub try { my ($name, $path, $ok) = @_; print "$name $path ", ($ok ? "ok" : "errno " . ($!+0)), "\n" }
sub put { my ($name, $path, $text) = @_; return print "$name $path missing\n" unless -e $path; my $fh; my $ok = open($fh, ">", $path) && print($fh $text) && close($fh); try($name, $path, $ok) }
sub make { my ($name, $path) = @_; (my $in = $path) =~ s{/[^/]*$}{}; return print "$name $path missing\n" unless -d $in; try($name, $path, mkdir($path)) }
for my $kind ("v2", "pids") {
  next unless $mount{$kind} && defined $mine{$kind};
  my ($m, $p) = ($mount{$kind}, $mine{$kind}); (my $parent = $p) =~ s{/[^/]*$}{};
  put("$kind-own", "$m$p/cgroup.procs", "$$\n");
  put("$kind-root", "$m/cgroup.procs", "$$\n");
  put("$kind-parent", "$m$parent/cgroup.procs", "$$\n");
  make("$kind-mkdir", "$m$p/sub");
  make("$kind-sibling", "$m$parent/x$$");
  put("$kind-limit", "$m$p/pids.max", "100000\n") if $kind eq "pids" || -e "$m$p/pids.max";
}'"#;

#[test]
fn the_user_cannot_leave_or_make_cgroups() {
    need_root!();
    let u = TestUser::with_key();
    let out = rt().block_on(shell(&u.user, CGROUP_PROBE, Duration::from_secs(10)));
    let lines: Vec<(&str, &str, &str)> = out
        .stdout
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ' ');
            Some((f.next()?, f.next()?, f.next()?))
        })
        .collect();
    assert!(
        lines.iter().any(|(name, ..)| name.ends_with("-own")),
        "the call found its own cgroup on this host: {out:?}"
    );
    let denied = [
        format!("errno {}", libc::EACCES),
        format!("errno {}", libc::EPERM),
    ];
    for (name, path, said) in &lines {
        // A denial is EACCES or EPERM; ENOENT (a path not on this host)
        // or anything else proves nothing and fails.
        assert!(
            denied.iter().any(|d| d == said),
            "{name} {path}: {said}, not EACCES/EPERM: {}",
            out.stdout
        );
    }
    // Positive control: root makes the same kind of move on this host —
    // a process of its own into the root cgroup of each hierarchy the call
    // probed — and a folder beside the call's, removed at once.
    for (name, path, _) in lines.iter().filter(|(n, ..)| n.ends_with("-root")) {
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let moved = std::fs::write(path, sleeper.id().to_string());
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        moved.unwrap_or_else(|e| panic!("control {name}: root cannot write {path}: {e}"));
    }
    for (name, path, _) in lines.iter().filter(|(n, ..)| n.ends_with("-sibling")) {
        let control = format!("{path}-root");
        std::fs::create_dir(&control)
            .unwrap_or_else(|e| panic!("control {name}: root cannot mkdir {control}: {e}"));
        std::fs::remove_dir(&control).unwrap();
    }
}

#[test]
fn a_memory_hog_is_killed_by_its_own_limit_and_others_finish() {
    need_root!();
    if tono_seal::contain::mounts().v1_memory.is_none() {
        eprintln!("*** no v1 memory controller here: the RLIMIT_AS fallback is tested instead ***");
    }
    let (hog, other) = (TestUser::bare(), TestUser::bare());
    let limit = 64 << 20;
    let rt = rt();
    let (hogged, fine) = rt.block_on(async {
        let launcher = launcher();
        let policy = Policy::default();
        // 300 MiB in one string, far over the call's 64 MiB.
        let raw = serde_json::to_vec(
            &json!({"tool": "shell", "args": {"command": "perl -e '$x = q(a) x (300*1024*1024); print length $x'"}}),
        )
        .unwrap();
        let options = RunOptions {
            memory_max: limit,
            timeout: Duration::from_secs(30),
            ..RunOptions::default()
        };
        let request = DropRequest {
            launcher: &launcher,
            policy: &policy,
            user: &hog.user,
            grants: &[],
            call: &raw,
            options,
        };
        let hogging = drop_and_run(&request);
        let meanwhile = shell(&other.user, "sleep 0.3; echo fine", Duration::from_secs(30));
        tokio::join!(hogging, meanwhile)
    });
    let limits = hogged.limits.clone().expect("limits reported");
    assert_ne!(
        hogged.exit_code,
        Some(0),
        "the hog must not succeed: {hogged:?}"
    );
    assert!(!hogged.stdout.contains("314572800"), "{hogged:?}");
    match limits.memory_max.as_ref().map(|(b, by)| (*b, by.as_str())) {
        // A memory cgroup, v1 (a hybrid host) or v2 (systemd's pure v2).
        Some((b, "cgroup v1 memory" | "cgroup v2 memory")) => {
            assert_eq!(b, limit);
            // perl is SIGKILLed; the shell above it reports 128 + 9.
            assert!(
                hogged.signal == Some(9) || hogged.exit_code == Some(137),
                "OOM-killed: {hogged:?}"
            );
            assert!(
                limits.oom_kills >= 1,
                "the outcome says the memory limit killed it: {limits:?}"
            );
        }
        Some((b, "RLIMIT_AS")) => {
            assert_eq!(b, limit);
            assert!(hogged.stderr.contains("Out of memory"), "{hogged:?}");
        }
        other => panic!("no memory limit reported: {other:?}"),
    }
    assert_eq!(fine.stdout.trim(), "fine", "{fine:?}");
    assert_eq!(fine.exit_code, Some(0));
}

/// `run` makes one call and exits: it removes its call's cgroups itself,
/// before it exits, with no remover thread (`contain::remove_in_place`).
/// While the program runs, the call's folder `call-PID-0` is there in each
/// hierarchy (the control: the probe sees it); once `run` has exited,
/// `stat` of each says `ENOENT`.
#[test]
fn a_run_removes_its_call_cgroups_before_it_exits() {
    use std::io::{BufRead, Write};
    use std::process::Stdio;
    need_root!();
    let u = TestUser::bare();
    let _starting = common::CLI_STARTS.read().unwrap_or_else(|p| p.into_inner());
    let mut run = std::process::Command::new(common::tono_bin())
        .args(["run", "--user", u.name(), "--", "/bin/sh", "-c"])
        .arg("echo running; read line; echo \"got $line\"")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(run.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "running\n", "the program runs");
    let name = format!("call-{}-0", run.id());
    let mounts = tono_seal::contain::mounts();
    let folders: Vec<std::path::PathBuf> = [&mounts.v2, &mounts.v1_pids, &mounts.v1_memory]
        .into_iter()
        .flatten()
        .map(|m| m.join("tono").join(&name))
        .collect();
    assert!(!folders.is_empty(), "this host has cgroups");
    for folder in &folders {
        assert!(
            folder.is_dir(),
            "the control: {} is there while the call runs",
            folder.display()
        );
    }
    let mut stdin = run.stdin.take().unwrap();
    stdin.write_all(b"done\n").unwrap();
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let status = run.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(rest, "got done\n");
    for folder in &folders {
        match std::fs::metadata(folder) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            other => panic!(
                "{} once run has exited: {other:?}, not ENOENT",
                folder.display()
            ),
        }
    }
}

#[test]
fn the_cgroups_of_a_killed_worker_are_swept_by_the_next() {
    need_root!();
    let u = TestUser::bare();
    // No other tono-seal may start (and sweep) until the dead worker's
    // cgroups have been seen.
    let no_sweeper = common::CLI_STARTS
        .write()
        .unwrap_or_else(|p| p.into_inner());
    let mut worker = std::process::Command::new(common::tono_bin())
        .args([
            "run",
            "--user",
            u.name(),
            // In the private view the worker's death would end the call's
            // PID namespace too; the shared one shows the cgroup sweep.
            "--view",
            "shared",
            "--",
            "/bin/sh",
            "-c",
            "setsid sleep 1000 & sleep 1000",
        ])
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while live_processes(u.user.uid).len() < 2 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The worker dies without cleaning up: what escaped survives it.
    worker.kill().unwrap();
    worker.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let survivors = live_processes(u.user.uid);
    assert!(
        !survivors.is_empty(),
        "the control: something must survive a SIGKILLed worker"
    );
    let dead = format!("call-{}-", worker.id());
    let of_dead = || -> Vec<String> {
        let mounts = tono_seal::contain::mounts();
        [&mounts.v2, &mounts.v1_pids, &mounts.v1_memory]
            .into_iter()
            .flatten()
            .filter_map(|m| std::fs::read_dir(m.join("tono")).ok())
            .flat_map(|d| d.flatten())
            .map(|e| e.path().display().to_string())
            .filter(|p| p.contains(&dead))
            .collect()
    };
    assert!(!of_dead().is_empty(), "its cgroup is still there");
    drop(no_sweeper);
    // The next worker to start sweeps them.
    let o = common::tono(&["list", "--user", u.name()], b"");
    let _ = o;
    let t = Instant::now();
    while !live_processes(u.user.uid).is_empty() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        live_processes(u.user.uid),
        Vec::<String>::new(),
        "survivors: {survivors:?}"
    );
    assert_eq!(of_dead(), Vec::<String>::new());
}

#[test]
fn without_a_memory_cgroup_the_address_space_limit_holds() {
    need_root!();
    let u = TestUser::bare();
    let out = rt().block_on(async {
        let launcher = launcher();
        let policy = Policy::default();
        let raw = serde_json::to_vec(
            &json!({"tool": "spawn", "args": {"argv": ["perl", "-e", "$x = q(a) x (300*1024*1024); print length $x"]}}),
        )
        .unwrap();
        let request = DropRequest {
            launcher: &launcher,
            policy: &policy,
            user: &u.user,
            grants: &[],
            call: &raw,
            options: RunOptions {
                cgroup: false,
                memory_max: 64 << 20,
                ..RunOptions::default()
            },
        };
        drop_and_run(&request).await
    });
    let limits = out.limits.clone().unwrap();
    assert_eq!(limits.memory_max, Some((64 << 20, "RLIMIT_AS".to_string())));
    assert_ne!(out.exit_code, Some(0), "{out:?}");
    assert!(out.stderr.contains("Out of memory"), "{out:?}");
}

/// A worker at the root of a private cgroup namespace (a container's
/// `--cgroupns=private` with a writable `/sys/fs/cgroup`) delegates `pids`
/// and `memory` to itself (`contain/delegate.rs`): the call's own cgroup
/// has its `pids.max`, as on a host. The namespace's root here is a cgroup
/// of the test's own, holding the worker, where enabling a controller for
/// children fails with `EBUSY` until the worker moves its processes into
/// a leaf. Only a pure cgroup v2 host can make such a namespace; elsewhere
/// (a hybrid host) it is a loud SKIPPED and runs in the Debian guest.
#[test]
fn a_worker_at_a_private_cgroup_namespaces_root_delegates_to_itself() {
    need_root!();
    let pure_v2 = std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
        m.lines()
            .any(|l| l.contains(" /sys/fs/cgroup ") && l.contains(" - cgroup2 "))
    });
    let root_gives =
        std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control").unwrap_or_default();
    if !pure_v2 || !root_gives.contains("pids") || !root_gives.contains("memory") {
        eprintln!(
            "\n*** SKIPPED {}: /sys/fs/cgroup is not a cgroup v2 root giving pids and memory \
             (a hybrid host); this runs in the Debian 12 guest (tests/vm/run) ***\n",
            module_path!()
        );
        return;
    }
    let u = TestUser::with_key();
    let ns_root =
        std::path::PathBuf::from(format!("/sys/fs/cgroup/tonotest-ns-{}", std::process::id()));
    std::fs::create_dir(&ns_root).unwrap();
    let controllers = std::fs::read_to_string(ns_root.join("cgroup.controllers")).unwrap();
    assert!(
        controllers.contains("pids") && controllers.contains("memory"),
        "{controllers}"
    );
    // What the call says of its own cgroup: its path in the namespace, and
    // that cgroup's pids.max. The scripts are files (no nested quoting),
    // where the user can read them.
    let scripts = tempfile::Builder::new()
        .prefix("tonotest-ns-")
        .tempdir_in("/var/lib")
        .unwrap();
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
    };
    mode(scripts.path(), 0o755);
    let tool = scripts.path().join("tool.sh");
    std::fs::write(
        &tool,
        "read -r line < /proc/self/cgroup; p=${line#0::}; echo \"cgroup $p\"\n\
         cat /sys/fs/cgroup$p/pids.max 2>&1 | sed 's/^/pids.max /'\n",
    )
    .unwrap();
    mode(&tool, 0o644);
    let inside = scripts.path().join("inside.sh");
    std::fs::write(
        &inside,
        format!(
            "umount -l /sys/fs/cgroup && mount -t cgroup2 tonotest-ns /sys/fs/cgroup || exit 3\n\
             exec {tono} run --user {user} -- /bin/sh {tool}\n",
            tono = common::tono_bin().display(),
            user = u.name(),
            tool = tool.display(),
        ),
    )
    .unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {procs} && exec unshare --cgroup --mount --propagation private /bin/sh {inside}",
            procs = ns_root.join("cgroup.procs").display(),
            inside = inside.display(),
        ))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let leaf = std::fs::read_to_string(ns_root.join("tono-worker/cgroup.procs"));
    let enabled = std::fs::read_to_string(ns_root.join("cgroup.subtree_control"));
    // Clean up: nothing runs there any more; the folders go, deepest first.
    let mut dirs: Vec<std::path::PathBuf> = walk(&ns_root);
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        let _ = std::fs::remove_dir(&d);
    }
    assert!(out.status.success(), "{said}{}", common::stderr(&out));
    assert!(
        said.lines().any(|l| l.starts_with("cgroup /tono/call-")),
        "the call ran in a call cgroup of the namespace: {said}"
    );
    assert!(
        said.lines().any(|l| l
            .strip_prefix("pids.max ")
            .is_some_and(|n| n.parse::<u64>().is_ok())),
        "the call's cgroup has its pids.max (not 'max', not missing): {said}"
    );
    assert!(
        enabled
            .as_deref()
            .is_ok_and(|e| e.contains("pids") && e.contains("memory")),
        "the namespace's root gives pids and memory to its children: {enabled:?}"
    );
    assert!(leaf.is_ok(), "the worker moved into its leaf: {leaf:?}");
}

/// Every folder under `dir`, itself included.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(walk(&e.path()));
            }
        }
    }
    out
}
