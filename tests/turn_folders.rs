//! Users as allotted, turn folders and the worker state, against real users
//! and a real kernel — with `fs.protected_symlinks` and
//! `fs.protected_hardlinks` turned off, so the tests prove the code and not
//! the sysctl.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{launcher, rt, tono, TestUser};
use serde_json::json;
use tono_seal::classify::Policy;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions};
use tono_seal::env::provider::Provider;
use tono_seal::fs::root_dir::{Component, RootDir};
use tono_seal::turn::account::{self, AccountError};
use tono_seal::turn::state::{ProviderSession, WorkerState};
use tono_seal::turn::turn_dir::{TurnBase, TurnError, TurnId};
use tono_seal::user::{TargetUser, UserSpec};

/// Sysctls are global: one test at a time changes them.
static SYSCTL: Mutex<()> = Mutex::new(());

/// Turns the kernel's link protections off while alive, restoring them.
struct NoLinkProtection {
    saved: Vec<(&'static str, String)>,
    _guard: std::sync::MutexGuard<'static, ()>,
}

impl NoLinkProtection {
    fn new() -> Self {
        let guard = SYSCTL.lock().unwrap_or_else(|p| p.into_inner());
        let mut saved = Vec::new();
        for path in [
            "/proc/sys/fs/protected_symlinks",
            "/proc/sys/fs/protected_hardlinks",
        ] {
            if let Ok(old) = std::fs::read_to_string(path) {
                match std::fs::write(path, "0") {
                    Ok(()) => saved.push((path, old)),
                    Err(e) => eprintln!(
                        "*** could not turn off {path}: {e}; the test runs with it on ***"
                    ),
                }
            }
        }
        Self {
            saved,
            _guard: guard,
        }
    }
}

impl Drop for NoLinkProtection {
    fn drop(&mut self) {
        for (path, old) in &self.saved {
            let _ = std::fs::write(path, old.trim());
        }
    }
}

/// A fresh worker root under /var/lib (root-owned ancestors), removed after.
struct WorkerRoot {
    root: PathBuf,
    base: TurnBase,
    state: WorkerState,
}

impl WorkerRoot {
    fn new(tag: &str) -> Self {
        let root = PathBuf::from(format!("/var/lib/tono-test-{}-{tag}", std::process::id()));
        let base = TurnBase::open(&root.join("turns")).unwrap();
        let state = WorkerState::open(&root.join("state")).unwrap();
        Self { root, base, state }
    }
}

impl Drop for WorkerRoot {
    fn drop(&mut self) {
        let name = self
            .root
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let lib = RootDir::open(Path::new("/var/lib"), None).unwrap();
        let _ = lib.remove_tree(&Component::parse(&name).unwrap());
    }
}

fn mode_of(p: &Path) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.gid(), m.mode() & 0o7777)
}

/// A user made by `ensure_user` (numbers in 61900–61999), removed after.
struct Allotted(String);

impl Drop for Allotted {
    fn drop(&mut self) {
        let _ = account::remove_user(&self.0, &launcher());
    }
}

fn passwd_and_group() -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read("/etc/passwd").unwrap(),
        std::fs::read("/etc/group").unwrap(),
    )
}

#[test]
fn users_are_made_exactly_as_allotted_or_not_at_all() {
    need_root!();
    let home = Path::new("/home");
    let name = "tonotest61970";
    let _cleanup = Allotted(name.into());
    let _other = Allotted("tonotest61973".into());
    let u = account::ensure_user(name, 61970, 61971, home).unwrap();
    assert_eq!((u.uid, u.gid), (61970, 61971));
    assert_eq!(mode_of(&u.home), (61970, 61971, 0o700));
    assert_eq!(
        std::fs::read_dir(&u.home).unwrap().count(),
        0,
        "no skel copied"
    );
    // Its own group and no other.
    let id = Command::new("id").args(["-G", name]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&id.stdout).trim(), "61971");
    // Idempotent with the same numbers.
    assert_eq!(account::ensure_user(name, 61970, 61971, home).unwrap(), u);

    let before = passwd_and_group();
    let refused = |r: Result<TargetUser, AccountError>, says: &str| match r {
        Err(AccountError::Refused { reason, .. }) => {
            assert!(reason.contains(says), "{reason:?} does not say {says:?}")
        }
        other => panic!("expected a refusal saying {says:?}, got {other:?}"),
    };
    refused(
        account::ensure_user(name, 61972, 61971, home),
        "exists with uid 61970",
    );
    refused(
        account::ensure_user("tonotest61973", 61970, 61973, home),
        "uid 61970 belongs to",
    );
    refused(
        account::ensure_user("tonotest61973", 61973, 61971, home),
        "gid 61971 belongs to group",
    );
    refused(
        account::ensure_user("tonotest61973", 0, 61973, home),
        "uid 0",
    );
    refused(
        account::ensure_user("tonotest61973", 61973, 0, home),
        "gid 0",
    );
    refused(
        account::ensure_user("tonotest61973", 999, 61973, home),
        "system range",
    );
    refused(
        account::ensure_user("tonotest61973", u32::MAX, 61973, home),
        "-1",
    );
    refused(
        account::ensure_user("../etc", 61973, 61973, home),
        "lowercase",
    );
    refused(
        account::ensure_user(
            "tonotest61973",
            61973,
            61973,
            Path::new("/var/lib/tono/homes"),
        ),
        "inside the worker's folders",
    );
    // A home base others may write, and one inside a world-writable /tmp.
    let open_base = tempfile::tempdir_in("/var/lib").unwrap();
    std::fs::set_permissions(open_base.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    refused(
        account::ensure_user("tonotest61973", 61973, 61973, open_base.path()),
        "mode 0777",
    );
    let in_tmp = tempfile::tempdir().unwrap();
    refused(
        account::ensure_user("tonotest61973", 61973, 61973, in_tmp.path()),
        "/tmp is not a folder owned by root",
    );
    assert_eq!(passwd_and_group(), before, "a refusal changed nothing");
    assert!(TargetUser::lookup(&UserSpec::Name("tonotest61973".into())).is_err());

    // Removal: the home is emptied as the user, then removed by root.
    std::fs::write(u.home.join("f"), b"x").unwrap();
    std::os::unix::fs::symlink("/etc/shadow", u.home.join("shadow")).unwrap();
    let shadow = shadow_of_others();
    account::remove_user(name, &launcher()).unwrap();
    assert!(!u.home.exists());
    assert_eq!(shadow_of_others(), shadow);
    assert!(TargetUser::lookup(&UserSpec::Name(name.into())).is_err());
}

#[test]
fn the_account_lock_is_never_a_file_a_user_could_plant() {
    need_root!();
    let _off = NoLinkProtection::new();
    // The lock of earlier versions: a file in the world-writable /run/lock.
    let planted = Path::new("/run/lock/tono-accounts.lock");
    let canary = PathBuf::from(format!(
        "/var/lib/tono-test-lock-canary-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(planted);
    let _ = std::fs::remove_file(&canary);
    std::os::unix::fs::symlink(&canary, planted).unwrap();
    nix::unistd::fchownat(
        None,
        planted,
        Some(nix::unistd::Uid::from_raw(65534)),
        None,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .unwrap();
    // Positive control: a root open of that path goes where the link says.
    drop(
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(planted)
            .unwrap(),
    );
    assert!(canary.exists(), "the planted link leads a by-path open");
    std::fs::remove_file(&canary).unwrap();

    let name = "tonotest61974";
    let _user = Allotted(name.into());
    account::ensure_user(name, 61974, 61974, Path::new("/home")).unwrap();
    account::remove_user(name, &launcher()).unwrap();
    std::fs::remove_file(planted).unwrap();
    assert!(
        !canary.exists(),
        "making and removing a user followed the planted lock link"
    );
    let lock = std::fs::metadata(account::ACCOUNT_LOCK_DIR).unwrap();
    assert_eq!((lock.uid(), lock.mode() & 0o7777), (0, 0o700));
}

#[test]
fn two_workers_racing_to_make_the_same_user_agree() {
    need_root!();
    let names = ["tonotest61960", "tonotest61961"];
    let _cleanup = names.map(|n| Allotted(n.into()));
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let name = names[i % 2];
                let id = 61960 + (i % 2) as u32;
                s.spawn(move || account::ensure_user(name, id, id, Path::new("/home")))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, r) in results.iter().enumerate() {
        let u = r.as_ref().unwrap_or_else(|e| panic!("worker {i}: {e}"));
        assert_eq!(u.uid, 61960 + (i % 2) as u32);
    }
}

fn sh_as(u: &TestUser, script: &str) -> (bool, String) {
    let o = u.sh(script);
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn turn_folders_are_handed_over_by_fd_and_the_user_cannot_move_them() {
    need_root!();
    let w = WorkerRoot::new("perm");
    let (a, b) = (TestUser::bare(), TestUser::bare());
    let base_path = w.base.dir().path().to_path_buf();
    assert_eq!(mode_of(&base_path), (0, 0, 0o711));
    assert_eq!(mode_of(&w.root.join("state")).2, 0o700);

    for bad in ["../x", "a/b", ".", "", &"x".repeat(300), "a\0b"] {
        assert!(TurnId::parse(bad).is_err(), "{bad:?}");
    }
    let ta = w
        .base
        .create(&w.state, &TurnId::parse("turn-a").unwrap(), &a.user)
        .unwrap();
    let tb = w
        .base
        .create(&w.state, &TurnId::parse("turn-b").unwrap(), &b.user)
        .unwrap();
    assert_eq!(mode_of(&ta.path), (a.user.uid, a.user.gid, 0o700));
    assert_eq!(w.state.handover("turn-a").unwrap().unwrap().uid, a.user.uid);
    // A second create of the same turn: refused, nothing changed.
    let again = w
        .base
        .create(&w.state, &TurnId::parse("turn-a").unwrap(), &b.user);
    assert!(matches!(again, Err(TurnError::Exists(_))), "{again:?}");
    assert_eq!(mode_of(&ta.path), (a.user.uid, a.user.gid, 0o700));

    let (ta_p, tb_p, base) = (ta.path.display(), tb.path.display(), base_path.display());
    let state_file = w.root.join("state/state.json");
    let code = common::tono_bin();
    // The owner works inside…
    let (ok, out) = sh_as(
        &a,
        &format!("echo hi > {ta_p}/f && mkdir {ta_p}/d && cat {ta_p}/f"),
    );
    assert!(ok, "{out}");
    // …but can never change where its folder is, nor touch the base, the
    // other user's folder or home, the state, or the installed code.
    for (what, script) in [
        ("rename its folder", format!("mv {ta_p} {base}/moved")),
        ("rename it in place", format!("mv {ta_p} {ta_p}.x")),
        (
            "remove its folder",
            format!("rmdir {ta_p}/d && rm -f {ta_p}/f && rmdir {ta_p}"),
        ),
        ("create in the base", format!("mkdir {base}/mine")),
        ("link in the base", format!("ln -s /etc {base}/turn-c")),
        ("list the base", format!("ls {base}")),
        ("read the other's folder", format!("ls {tb_p}")),
        (
            "read the other's home",
            format!("ls {}", b.home().display()),
        ),
        (
            "write the state",
            format!("echo x >> {}", state_file.display()),
        ),
        ("read the state", format!("cat {}", state_file.display())),
        ("write the code", format!("echo x >> {}", code.display())),
    ] {
        let (ok, out) = sh_as(&a, &script);
        assert!(!ok, "user could {what}: {out}");
    }
    assert_eq!(mode_of(&ta.path), (a.user.uid, a.user.gid, 0o700));
    assert_eq!(mode_of(&state_file), (0, 0, 0o600));

    // Removal: emptied as the user (even a 0500 folder and a link to
    // /etc/shadow), then the entry removed by root.
    let shadow = shadow_of_others();
    let (ok, out) = sh_as(
        &a,
        &format!("ln -s /etc/shadow {ta_p}/shadow; ln /etc/shadow {ta_p}/hard 2>/dev/null; mkdir -p {ta_p}/ro/x && touch {ta_p}/ro/x/y && chmod 0500 {ta_p}/ro {ta_p}/ro/x"),
    );
    assert!(ok, "{out}");
    let rt = rt();
    rt.block_on(w.base.remove(&w.state, &launcher(), &ta.id))
        .unwrap();
    rt.block_on(w.base.remove(&w.state, &launcher(), &tb.id))
        .unwrap();
    assert!(!ta.path.exists() && !tb.path.exists());
    assert_eq!(shadow_of_others(), shadow);
    assert!(w.state.read().unwrap().handovers.is_empty());

    // Provider sessions are kept here, root's, never in a home.
    let conversation = Component::parse("conv-17").unwrap();
    let session = ProviderSession {
        provider: Provider::Openai,
        session: "0199a7c2-codex-session".into(),
    };
    w.state
        .set_provider_session(&conversation, session.clone())
        .unwrap();
    assert_eq!(
        w.state.provider_session(&conversation).unwrap(),
        Some(session)
    );
    assert_eq!(mode_of(&state_file), (0, 0, 0o600));
}

/// `/etc/shadow` without the lines of test users (other tests make and
/// remove theirs meanwhile).
fn shadow_of_others() -> Vec<String> {
    std::fs::read_to_string("/etc/shadow")
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("tonotest"))
        .map(String::from)
        .collect()
}

/// Owner, group, mode and (for a file) content.
type Entry = (u32, u32, u32, Option<Vec<u8>>);

/// Names, owners, modes and (for files) contents of `/root`'s top level.
fn snapshot_root() -> BTreeMap<String, Entry> {
    std::fs::read_dir("/root")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| {
            let m = e.path().symlink_metadata().unwrap();
            let content = m
                .is_file()
                .then(|| std::fs::read(e.path()).unwrap_or_default());
            (
                e.file_name().to_string_lossy().into_owned(),
                (m.uid(), m.gid(), m.mode(), content),
            )
        })
        .collect()
}

/// Root-owned entries under `dir`, except the attacker's own hard links to
/// the files it targets (same inode: made by the user, not by root).
fn root_owned_under(dir: &Path, targets: &[(u64, u64)], found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let p = e.path();
        let Ok(m) = p.symlink_metadata() else {
            continue;
        };
        if m.uid() == 0 && !targets.contains(&(m.dev(), m.ino())) {
            found.push(p.clone());
        }
        if m.is_dir() {
            root_owned_under(&p, targets, found);
        }
    }
}

const ATTACKER: &str = r#"
use strict;
my ($home, $base, $state, $canary, $stop) = @ARGV;
my @targets = ("/etc/shadow", "/root/.bashrc", $state, "/root", "/etc", $canary);
my ($ops, $escapes, $i) = (0, 0, 0);
# Until root has done its count of turns and says so.
until (-e $stop) {
  for my $n (0 .. 10) {
    my $t = $targets[$i++ % @targets];
    # The home: the store and its files become links to root's files.
    for my $p ("$home/.tono", "$home/.tono/identity", "$home/.tono/secrets",
               "$home/.tono/secrets/s.age", "$home/.tono/.lock") {
      unlink $p; symlink $t, $p; link $t, $p; $ops += 3;
    }
    rename "$home/.tono", "$home/.tono.old"; symlink "/root", "$home/.tono"; $ops += 2;
    unlink "$home/.tono"; rename "$home/.tono.old", "$home/.tono"; $ops += 2;
    # Turn folders: plant links inside our own, swap sub-folders for links.
    for my $k (0 .. 40) {
      my $d = "$base/turn-$k";
      next unless -d $d && -w $d;
      symlink $t, "$d/link"; link $t, "$d/hard"; mkdir "$d/sub";
      rename "$d/sub", "$d/sub.x"; symlink "/etc", "$d/sub"; $ops += 5;
      unlink "$d/link", "$d/hard", "$d/sub"; rmdir "$d/sub.x"; $ops += 2;
    }
    # The base itself: every one of these must fail.
    for my $k (0 .. 40) {
      $escapes++ if symlink "/etc", "$base/turn-$k";
      $escapes++ if rename "$base/turn-$k", "$base/x-$k";
      $escapes++ if rmdir "$base/turn-$k";
      $ops += 3;
    }
    $escapes++ if open(my $fh, ">>", $state);
    $ops++;
  }
}
print "$ops $escapes\n";
"#;

#[test]
fn root_is_never_led_by_links_a_racing_user_plants() {
    need_root!();
    let _no_protection = NoLinkProtection::new();
    let w = WorkerRoot::new("race");
    let u = TestUser::with_key();
    u.seal("s", b"first");
    let shadow = shadow_of_others();
    let root_before = snapshot_root();
    // A root-only canary the attacker also aims at, and a positive control:
    // root writing by a path the user controls does reach it.
    let canary = w.root.join("canary");
    std::fs::write(&canary, b"canary").unwrap();
    let planted = u.home().join("planted");
    let (ok, out) = sh_as(
        &u,
        &format!("ln -s {} {}", canary.display(), planted.display()),
    );
    assert!(ok, "{out}");
    std::fs::write(&planted, b"followed").unwrap();
    assert_eq!(
        std::fs::read(&canary).unwrap(),
        b"followed",
        "the control must reach the canary"
    );
    std::fs::write(&canary, b"canary").unwrap();
    std::fs::remove_file(&planted).unwrap();
    let state_file = w.root.join("state/state.json");
    w.state.update(|_| ()).unwrap();

    // Bounded by a count of root's turns against an attacker that runs
    // until they are done, never by a clock: a slower host makes both
    // slower, and the test the same.
    const TURNS: usize = 100;
    let stop = std::env::temp_dir().join(format!("tono-race-stop-{}", std::process::id()));
    let _ = std::fs::remove_file(&stop);
    let attacker = Command::new("setpriv")
        .args([
            "--reuid",
            &u.user.uid.to_string(),
            "--regid",
            &u.user.gid.to_string(),
            "--clear-groups",
            "--",
            "perl",
            "-e",
            ATTACKER,
            &u.home().display().to_string(),
            &w.base.dir().path().display().to_string(),
            &state_file.display().to_string(),
            &canary.display().to_string(),
            &stop.display().to_string(),
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdout(Stdio::piped())
        .spawn()
        .expect("perl attacker");

    let rt = rt();
    let launcher = launcher();
    let policy = Policy::default();
    let started = Instant::now();
    let (mut turns, mut removed, mut remove_failures) = (0, 0, 0);
    let (mut seal_tries, mut sealed) = (0, 0);
    let mut refused_views = 0;
    let mut left = Vec::new();
    let mut i = 0;
    while turns < TURNS {
        assert!(
            i < TURNS * 20,
            "turn folders kept existing: {i} tries for {turns} turns"
        );
        let id = TurnId::parse(&format!("turn-{}", i % 40)).unwrap();
        i += 1;
        let dir = match w.base.create(&w.state, &id, &u.user) {
            Ok(d) => d,
            Err(TurnError::Exists(_)) => continue,
            Err(e) => panic!("create {}: {e}", id.as_str()),
        };
        turns += 1;
        // Use it: a tool call as the user, inside the folder.
        let call = json!({"tool": "shell", "args": {"command": "echo work > out; ln -sf /etc/shadow shadow", "cwd": dir.path}});
        let raw = call.to_string();
        let out = rt.block_on(drop_and_run(&DropRequest {
            launcher: &launcher,
            policy: &policy,
            user: &u.user,
            grants: &[],
            call: raw.as_bytes(),
            options: RunOptions::default(),
        }));
        // While the attacker has ~/.tono swapped for a link, the call's
        // view refuses to start (root follows no link to hide a store);
        // any other refusal is a failure.
        match &out.launch_error {
            None => {}
            Some(e) if e.code == "store_insecure" => refused_views += 1,
            Some(_) => panic!("{out:?}"),
        }
        // Provision the home while the attacker swaps its entries.
        if turns % 4 == 0 {
            let o = tono(&["seal", "--user", u.name(), "s"], b"again");
            seal_tries += 1;
            sealed += usize::from(o.status.success());
        }
        match rt.block_on(w.base.remove(&w.state, &launcher, &id)) {
            Ok(()) => removed += 1,
            Err(e) => {
                remove_failures += 1;
                if remove_failures == 1 {
                    eprintln!("first removal refused during the attack: {e}");
                }
                left.push(id);
            }
        }
    }
    std::fs::write(&stop, b"").unwrap();
    let attack = attacker.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&stop);
    let took = started.elapsed();
    let report = String::from_utf8_lossy(&attack.stdout);
    let mut fields = report
        .split_whitespace()
        .map(|n| n.parse::<u64>().unwrap_or(0));
    let (ops, escapes) = (
        fields.next().unwrap_or(0),
        fields.next().unwrap_or(u64::MAX),
    );
    // With the attacker gone, every folder left behind is removed cleanly.
    for id in left {
        match rt.block_on(w.base.remove(&w.state, &launcher, &id)) {
            Ok(()) | Err(TurnError::Missing(_)) => {}
            Err(e) => panic!("removing {} after the attack: {e}", id.as_str()),
        }
    }
    eprintln!(
        "attacker: {ops} ops during {turns} turns ({took:?}), {escapes} escapes; worker: {turns} turn folders made and used, \
         {removed} removed during the attack ({remove_failures} refused and removed after), {sealed} of {seal_tries} seals into the attacked home succeeded, \
         {refused_views} calls refused while ~/.tono was a link"
    );
    // It raced throughout: many link swaps for each of root's turns.
    assert!(
        ops >= 50 * TURNS as u64,
        "the attacker ran only {ops} operations during {TURNS} turns"
    );
    assert_eq!(escapes, 0, "the user changed the base or opened the state");
    assert_eq!(shadow_of_others(), shadow, "/etc/shadow changed");
    assert_eq!(
        std::fs::read(&canary).unwrap(),
        b"canary",
        "the canary changed"
    );
    assert_eq!(snapshot_root(), root_before, "/root changed");
    assert_eq!(mode_of(&state_file), (0, 0, 0o600));
    assert!(w.state.read().unwrap().handovers.is_empty());
    assert_eq!(std::fs::read_dir(w.base.dir().path()).unwrap().count(), 0);
    let targets: Vec<(u64, u64)> = ["/etc/shadow", "/root/.bashrc", state_file.to_str().unwrap()]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| (m.dev(), m.ino()))
        .collect();
    let mut found = Vec::new();
    root_owned_under(u.home(), &targets, &mut found);
    assert!(
        found.is_empty(),
        "root-owned entries under the home: {found:?}"
    );
}

#[test]
fn removing_a_user_leaves_no_process_of_its_uid_even_mid_fork() {
    need_root!();
    let name = "tonotest61976";
    let _cleanup = Allotted(name.into());
    account::ensure_user(name, 61976, 61976, Path::new("/home")).unwrap();
    // A storm of double-forked sleepers, still forking while the user is
    // removed: a pid-by-pid kill misses the ones forked after its scan.
    let storm = "setsid sh -c 'i=0; while [ $i -lt 3000 ]; do (sleep 1000 &); i=$((i+1)); done' \
                 >/dev/null 2>&1 &";
    let started = Command::new("setpriv")
        .args([
            "--reuid",
            "61976",
            "--regid",
            "61976",
            "--clear-groups",
            "--",
        ])
        .args(["/bin/sh", "-c", storm])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .status()
        .unwrap();
    assert!(started.success());
    let mut running = 0;
    for _ in 0..200 {
        running = common::live_processes_of(61976);
        if running >= 50 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        running >= 50,
        "positive control: the storm runs ({running})"
    );
    account::remove_user(name, &launcher()).unwrap();
    let left = common::live_processes_of(61976);
    // Whatever is left must not pass to the next user of the uid.
    let _ = Command::new("pkill")
        .args(["-KILL", "-U", "61976"])
        .status();
    assert_eq!(
        left, 0,
        "processes of the removed uid 61976 are still alive"
    );
}
