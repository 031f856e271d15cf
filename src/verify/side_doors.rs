//! Probes of the doors around a call, run as a probed user through
//! `drop_and_run` like any call: the syscall filter (a user namespace, the
//! keyring calls, `bpf`, `io_uring`, … each refused with its errno), the
//! verifying root process's keyring out of reach, a call's SysV shared
//! memory gone after it and invisible to the next call, the home's writes
//! as its mode says, and a provider's login folder empty for a tool.
//!
//! Guarantees: each attempt is a syscall the tool makes itself (perl's
//! `syscall`, `shmget`, `open`), reported as `ok` or the errno; a denial
//! passes only with the exact errno the door's closing gives (`EPERM`,
//! `ENOSYS` for `clone3`, `ENOENT` for what must be gone, `EROFS` for a
//! read-only home) and only beside its positive control — the same probe
//! working where it should (a plain syscall in the same call, root's own
//! view of its key, the shared view's segment in the host's IPC, a
//! persistent call's write, the provider's own view of its folder).
//! Without the control a probe is inconclusive.
#![forbid(unsafe_code)]

use super::containment::shell;
use super::network::answer;
use super::probe::{Expect, Probe, Verdict};
use crate::drop::{Launcher, RunOptions};
use crate::env::HomeMode;
use crate::user::TargetUser;

fn verdict(control: bool, pass: bool) -> Verdict {
    match (control, pass) {
        (false, _) => Verdict::Inconclusive,
        (true, true) => Verdict::Pass,
        (true, false) => Verdict::Fail,
    }
}

/// Whether a probe's answer ([`answer`]) is exactly `errno` .
fn errno_is(answer: &str, errno: nix::errno::Errno) -> bool {
    answer == format!("errno {} ({errno:?})", errno as i32)
}

/// The filtered syscalls a probe tries, by x86_64 number, with the errno
/// the filter gives.
const FILTERED: &[(&str, &str, nix::errno::Errno)] = &[
    (
        "unshare(CLONE_NEWUSER)",
        "272, 0x10000000",
        nix::errno::Errno::EPERM,
    ),
    ("clone3", "435, 0, 0", nix::errno::Errno::ENOSYS),
    ("keyctl", "250, 0, -3, 0", nix::errno::Errno::EPERM),
    (
        "add_key",
        "248, $user, $desc, 0, 0, -3",
        nix::errno::Errno::EPERM,
    ),
    ("setns", "308, -1, 0", nix::errno::Errno::EPERM),
    ("bpf", "321, 0, 0, 0", nix::errno::Errno::EPERM),
    (
        "perf_event_open",
        "298, 0, 0, -1, -1, 0",
        nix::errno::Errno::EPERM,
    ),
    ("userfaultfd", "323, 0", nix::errno::Errno::EPERM),
    ("io_uring_setup", "425, 1, 0", nix::errno::Errno::EPERM),
];

/// Runs the side-door probes as `user` (and `other`, a second probed user
/// if there is one, for the IPC probe), with `base`'s options otherwise.
pub async fn side_door_probes(
    launcher: &Launcher,
    user: &TargetUser,
    other: Option<&TargetUser>,
    base: &RunOptions,
) -> Vec<Probe> {
    let tag = format!("{}-{}", std::process::id(), rand::random::<u32>());
    let mut out = vec![
        filter_probe(launcher, user, base).await,
        keyring_probe(launcher, user, base, &tag).await,
        ipc_probe(launcher, user, other.unwrap_or(user), base).await,
    ];
    out.extend(home_probes(launcher, user, base, &tag).await);
    out
}

async fn filter_probe(launcher: &Launcher, user: &TargetUser, base: &RunOptions) -> Probe {
    let mut script = String::from(
        "exec perl -e 'sub t { my ($n, $nr, @a) = @_; my $r = syscall($nr, @a); \
         print \"$n \", ($r >= 0 ? \"ok\" : \"errno \" . ($! + 0)), \"\\n\" } \
         my ($user, $desc) = (\"user\", \"tono-verify\"); t(\"getpid\", 39); ",
    );
    for (name, args, _) in FILTERED {
        script.push_str(&format!("t(\"{name}\", {args}); "));
    }
    script.push_str(
        "open my $s, \"<\", \"/proc/self/status\"; \
         while (<$s>) { print \"seccomp $1\\n\" if /^Seccomp:\\s+(\\d+)/ }'",
    );
    let done = shell(launcher, user, script, base.clone()).await;
    let control = answer(&done, "getpid") == "ok";
    let mode = answer(&done, "seccomp");
    let mut got = vec![format!("Seccomp: {mode}")];
    let mut all = mode == "2";
    for (name, _, want) in FILTERED {
        let answer = answer(&done, name);
        all &= errno_is(&answer, *want);
        got.push(format!("{name} {}", answer));
    }
    got.push(format!("control: getpid {}", answer(&done, "getpid")));
    Probe::of(
        user,
        "a call's syscall filter refuses a user namespace, setns, the keyring calls, bpf, perf, userfaultfd and io_uring",
        Expect::Denied,
        got.join(", "),
        verdict(control, all),
    )
}

async fn keyring_probe(
    launcher: &Launcher,
    user: &TargetUser,
    base: &RunOptions,
    tag: &str,
) -> Probe {
    let tried = "the verifying root process's session keyring is not a call's";
    let description = format!("tono-verify-{tag}");
    let Ok(c_description) = std::ffi::CString::new(description.clone()) else {
        return Probe::of(
            user,
            tried,
            Expect::Denied,
            "bad tag",
            Verdict::Inconclusive,
        );
    };
    // This process's own session keyring, holding a key of root's, as a
    // worker started from a root login or as a service holds one.
    let key = crate::sys::join_anonymous_session_keyring()
        .and_then(|_| crate::sys::add_session_key(&c_description, tag.as_bytes()));
    let key = match key {
        Ok(serial) => serial,
        Err(e) => {
            return Probe::of(
                user,
                tried,
                Expect::Denied,
                format!("root could not make a key to aim at: {e}"),
                Verdict::Inconclusive,
            )
        }
    };
    let count = |text: &str| text.lines().filter(|l| l.contains(&description)).count();
    let root_sees = std::fs::read_to_string("/proc/keys")
        .map(|t| count(&t))
        .unwrap_or(0);
    // Docker and Kubernetes mask the worker's /proc/keys (a bind of
    // /dev/null): there the control is root's own search for the key, the
    // same call the probe makes in a call (a child possesses root's
    // session keyring).
    let root_search = std::process::Command::new("perl")
        .arg("-e")
        .arg(format!(
            "my ($t, $d) = (\"user\", \"{description}\"); my $r = syscall(250, 10, -3, $t, $d, 0); \
             print($r >= 0 ? \"ok\" : \"errno \" . ($! + 0))"
        ))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("not run: {e}"));
    let script = format!(
        "exec perl -e 'open my $k, \"<\", \"/proc/keys\" or die; \
         my $n = grep {{ /{description}/ }} <$k>; print \"listed $n\\n\"; \
         my ($t, $d) = (\"user\", \"{description}\"); my $r = syscall(250, 10, -3, $t, $d, 0); \
         print \"search \", ($r >= 0 ? \"ok\" : \"errno \" . ($! + 0)), \"\\n\"'"
    );
    let done = shell(launcher, user, script, base.clone()).await;
    let _ = crate::sys::invalidate_key(key);
    let (listed, search) = (answer(&done, "listed"), answer(&done, "search"));
    Probe::of(
        user,
        tried,
        Expect::Denied,
        format!(
            "in a call: root's key listed {listed} time(s) in /proc/keys, keyctl search {}; \
             control: root lists it {root_sees} time(s), its own search {root_search}",
            search
        ),
        verdict(
            root_sees == 1 || root_search == "ok",
            listed == "0" && errno_is(&search, nix::errno::Errno::EPERM),
        ),
    )
}

/// Whether the host's IPC namespace holds a segment of `key`.
fn host_has_segment(key: u32) -> bool {
    std::fs::read_to_string("/proc/sysvipc/shm").is_ok_and(|t| {
        t.lines()
            .skip(1)
            .any(|l| l.split_whitespace().next() == Some(&key.to_string()))
    })
}

async fn ipc_probe(
    launcher: &Launcher,
    user: &TargetUser,
    other: &TargetUser,
    base: &RunOptions,
) -> Probe {
    let key = 0x7000_0000 | (rand::random::<u32>() & 0x00ff_ffff);
    let make = format!(
        "exec perl -e 'my $id = shmget({key}, 4096, 01000 | 0666); \
         print \"made \", (defined $id ? \"ok\" : \"errno \" . ($! + 0)), \"\\n\"'"
    );
    let find = format!(
        "exec perl -e 'my $id = shmget({key}, 0, 0); \
         print \"found \", (defined $id ? \"ok\" : \"errno \" . ($! + 0)), \"\\n\"'"
    );
    let shared = RunOptions {
        view: crate::launch::view::View::Shared,
        home: None,
        ..base.clone()
    };
    // The control: in the shared view the segment outlives its call in the
    // host's IPC namespace, where root sees it.
    let made_shared = shell(launcher, user, make.clone(), shared).await;
    let control = answer(&made_shared, "made") == "ok" && host_has_segment(key);
    let _ = std::process::Command::new("ipcrm")
        .args(["-M", &key.to_string()])
        .output();
    let made = shell(launcher, user, make, base.clone()).await;
    let in_host = host_has_segment(key);
    let found = shell(launcher, other, find, base.clone()).await;
    let (made, found) = (answer(&made, "made"), answer(&found, "found"));
    Probe::of(
        user,
        "a call's SysV shared memory is gone after it and not seen by the next call",
        Expect::Denied,
        format!(
            "a 0666 segment made in a call: {made}, in the host's IPC after it: {in_host}; \
             {}'s next call looking for it: {}; control: made in the shared view, root sees it: {control}",
            other.name,
            found
        ),
        verdict(
            control && made == "ok",
            !in_host && errno_is(&found, nix::errno::Errno::ENOENT),
        ),
    )
}

async fn home_probes(
    launcher: &Launcher,
    user: &TargetUser,
    base: &RunOptions,
    tag: &str,
) -> Vec<Probe> {
    let mode = match base.home_view(&user.name) {
        Ok(view) => view.mode,
        Err(e) => {
            return vec![Probe::of(
                user,
                "a call's home",
                Expect::Holds,
                format!("refused: {e}"),
                Verdict::Fail,
            )]
        }
    };
    let file = format!(".tono-verify-{tag}");
    let write = format!(
        "exec perl -e 'my $f = \"$ENV{{HOME}}/{file}\"; \
         if (open my $h, \">\", $f) {{ print \"write ok\\n\"; close $h; \
         print \"self \", (-e $f ? \"ok\" : \"errno \" . ($! + 0)), \"\\n\" }} \
         else {{ print \"write errno \", $! + 0, \"\\n\" }}'"
    );
    let look = format!(
        "exec perl -e 'my $f = \"$ENV{{HOME}}/{file}\"; \
         print \"next \", (-e $f ? \"ok\" : \"errno \" . ($! + 0)), \"\\n\"; unlink $f'"
    );
    let persistent = RunOptions {
        home: Some(HomeMode::Persistent),
        ..base.clone()
    };
    let wrote = shell(launcher, user, write.clone(), base.clone()).await;
    let next = shell(launcher, user, look.clone(), base.clone()).await;
    let (w, own, nx) = (
        answer(&wrote, "write"),
        answer(&wrote, "self"),
        answer(&next, "next"),
    );
    let mut out = Vec::new();
    match mode {
        HomeMode::Ephemeral => out.push(Probe::of(
            user,
            "home ephemeral: what a call writes to the home is gone for the next call",
            Expect::Denied,
            format!(
                "written: {w}, seen by the writing call: {own}; the next call: {}",
                nx
            ),
            verdict(
                w == "ok" && own == "ok",
                errno_is(&nx, nix::errno::Errno::ENOENT),
            ),
        )),
        HomeMode::ReadOnly => {
            let control = shell(launcher, user, write, persistent.clone()).await;
            let _ = shell(launcher, user, look, persistent).await;
            let control = answer(&control, "write");
            out.push(Probe::of(
                user,
                "home read-only: a call cannot write its home",
                Expect::Denied,
                format!(
                    "written: {}; control: a persistent call's write {}",
                    w, control
                ),
                verdict(control == "ok", errno_is(&w, nix::errno::Errno::EROFS)),
            ));
        }
        HomeMode::Persistent => out.push(Probe::of(
            user,
            "home persistent (the weakest): what a call writes to the home, the next call finds",
            Expect::Allowed,
            format!("written: {w}; the next call: {}", nx),
            if w == "ok" && nx == "ok" {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
        )),
    }
    out.push(login_probe(launcher, user, base, tag).await);
    out
}

/// A provider's login folder, seen by the provider's own program (the
/// control, which leaves a marker in it) and by a tool call (empty).
async fn login_probe(
    launcher: &Launcher,
    user: &TargetUser,
    base: &RunOptions,
    tag: &str,
) -> Probe {
    let dir = base
        .env
        .config
        .provider(crate::env::Provider::Openai)
        .login_dir;
    let marker = format!(".tono-verify-{tag}");
    let list = format!(
        "exec perl -e 'my $d = \"$ENV{{HOME}}/{dir}\"; my $made = 0; \
         if ($ARGV[0] eq \"mark\") {{ $made = mkdir($d) ? 1 : 0; open my $h, \">\", \"$d/{marker}\"; \
         print \"made $made\\n\" }} \
         opendir(my $h, $d) or do {{ print \"entries errno \", $! + 0, \"\\n\"; exit }}; \
         my @e = grep {{ !/^\\.\\.?$/ }} readdir $h; print \"entries \", scalar(@e), \"\\n\"; \
         print \"marker \", (-e \"$d/{marker}\" ? \"ok\" : \"errno \" . ($! + 0)), \"\\n\"; \
         if ($ARGV[0] eq \"clean\") {{ unlink \"$d/{marker}\"; rmdir $d if $ARGV[1] }}' "
    );
    let provider = RunOptions {
        provider_program: true,
        ..base.clone()
    };
    let marked = shell(launcher, user, format!("{list} mark"), provider.clone()).await;
    let made_dir = answer(&marked, "made") == "1";
    let seen = shell(launcher, user, format!("{list} look"), base.clone()).await;
    let _ = shell(
        launcher,
        user,
        format!("{list} clean {}", u8::from(made_dir)),
        provider,
    )
    .await;
    let (control, entries, found) = (
        answer(&marked, "marker"),
        answer(&seen, "entries"),
        answer(&seen, "marker"),
    );
    Probe::of(
        user,
        "a provider's login folder is empty for a tool call",
        Expect::Denied,
        format!(
            "~/{dir} in a tool call: {entries} entries, the marker {}; \
             control: the provider's own program finds the marker {control}",
            found
        ),
        verdict(
            control == "ok",
            entries == "0" && errno_is(&found, nix::errno::Errno::ENOENT),
        ),
    )
}
