//! Secrets given as files (`NAME=@FILE`, `NAME=ENV@FILE`): written by the
//! launcher, as the user, into a `ramfs` of the call's own at
//! `$CREDENTIALS_DIRECTORY`, gone with the call. Driven with real clients:
//! `ssh -i` against a loopback `sshd` of the test's own, and `git` over
//! it; each "gone" or "not seen" is an errno or an empty search beside a
//! control where the same probe finds what it looks for.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{launcher, rt, sha256_hex, AuditDir, TestUser};
use serde_json::json;
use tono_seal::audit::{AuditConfig, AuditLog};
use tono_seal::classify::Policy;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use tono_seal::env::Network;
use tono_seal::launch::view::View;
use tono_seal::user::TargetUser;
use tono_seal::Outcome;

/// `statfs`'s `f_type` of a ramfs (`RAMFS_MAGIC`), as `stat -f -c %t`
/// prints it.
const RAMFS_MAGIC: &str = "858458f6";

fn call(user: &TargetUser, grants: &[&str], script: &str, options: RunOptions) -> Outcome {
    let grants: Vec<SecretGrant> = grants
        .iter()
        .map(|g| SecretGrant::parse(g).unwrap())
        .collect();
    let names: Vec<&str> = grants.iter().map(|g| g.name.as_str()).collect();
    let raw = serde_json::to_vec(&json!({"tool": "spawn", "args": {
        "argv": ["/bin/sh", "-c", script], "secrets": names}}))
    .unwrap();
    rt().block_on(drop_and_run(&DropRequest {
        launcher: &launcher(),
        policy: &Policy::default(),
        user,
        grants: &grants,
        call: &raw,
        options,
    }))
}

fn ran(o: &Outcome) -> String {
    assert!(
        o.launch_error.is_none() && o.exit_code == Some(0),
        "the call did not run cleanly: {o:?}"
    );
    o.stdout.clone()
}

fn host_network() -> RunOptions {
    RunOptions {
        network: Some(Network::Host),
        ..RunOptions::default()
    }
}

/// A value no file on this machine holds by chance.
fn unique_value(tag: &str) -> String {
    let mut bytes = [0u8; 16];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").unwrap(),
        &mut bytes,
    )
    .unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("tonotest-{tag}-{hex}")
}

/// The files under `roots` (as root, not crossing into other file
/// systems' mounts of this namespace only by name) whose bytes hold
/// `needle`.
fn files_holding(roots: &[&Path], needle: &str) -> Vec<String> {
    let out = Command::new("grep")
        .args(["-r", "-l", "-F", "--devices=skip", "--", needle])
        .args(roots)
        .output()
        .expect("grep");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_file_secret_lives_in_a_ramfs_of_the_call_own_and_is_gone_after_it() {
    need_root!();
    let u = TestUser::with_key();
    let value = unique_value("file");
    u.seal("dk", value.as_bytes());
    let big: Vec<u8> = (0..512 * 1024u32)
        .map(|i| b"0123456789abcdef\n"[(i.wrapping_mul(2_654_435_761) >> 27) as usize % 17])
        .collect();
    u.seal("big", &big);
    let o = call(
        &u.user,
        &["dk=KEY_FILE@deploy_key", "big=@"],
        "d=$CREDENTIALS_DIRECTORY; echo \"dir $d file $KEY_FILE\"; \
         stat -c '%n %U %a %F' \"$d\" \"$d/deploy_key\" \"$d/big\"; \
         stat -f -c 'fs %t' \"$d\"; \
         grep \" $d \" /proc/self/mountinfo | sed 's/.* - /mount /'; \
         sha256sum \"$d/big\" | cut -d' ' -f1; \
         cat \"$d/deploy_key\"; echo; \
         touch \"$d/added\" 2>&1 | sed 's/.*: /add: /'; \
         grep -o 'call-[0-9]*-[0-9]*' /proc/self/cgroup | head -1",
        RunOptions::default(),
    );
    let out = ran(&o);
    let name = &u.user.name;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..8],
        [
            "dir /run/credentials file /run/credentials/deploy_key",
            &format!("/run/credentials {name} 500 directory"),
            &format!("/run/credentials/deploy_key {name} 400 regular file"),
            &format!("/run/credentials/big {name} 400 regular file"),
            &format!("fs {RAMFS_MAGIC}"),
            "mount ramfs tono-credentials rw,mode=700",
            &sha256_hex(&big),
            "[masked:dk]",
        ],
        "{o:?}"
    );
    // The folder is 0500: the tool adds nothing by its name (EACCES).
    assert_eq!(lines[8], "add: Permission denied", "{o:?}");
    // The masker counted the one `cat` of the file.
    assert_eq!(o.masks.as_ref().unwrap().get("dk"), Some(&1), "{o:?}");
    assert_eq!(o.secrets_as_files, ["dk", "big"], "{o:?}");
    // Control: the call ran in the cgroup its outcome names.
    let cgroup = o.limits.as_ref().and_then(|l| l.cgroup.clone()).unwrap();
    assert_eq!(lines[9], cgroup, "{o:?}");

    // After the call: the value is in no file of the home, /tmp, /var/tmp
    // or /dev/shm, the host's /run/credentials is empty, and the call's
    // cgroup is gone. Control: the same search finds the value planted in
    // the home, and the cgroup path existed during the call.
    let roots: [&Path; 5] = [
        u.home(),
        Path::new("/tmp"),
        Path::new("/var/tmp"),
        Path::new("/dev/shm"),
        Path::new("/run/credentials"),
    ];
    let planted = u.home().join("control");
    std::fs::write(&planted, &value).unwrap();
    assert_eq!(
        files_holding(&roots, &value),
        [planted.display().to_string()]
    );
    std::fs::remove_file(&planted).unwrap();
    assert_eq!(files_holding(&roots, &value), Vec::<String>::new());
    let host: Vec<_> = std::fs::read_dir("/run/credentials")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(
        host,
        Vec::<std::ffi::OsString>::new(),
        "host /run/credentials"
    );
    assert!(
        tono_seal::contain::settle(Duration::from_secs(5)),
        "emptied cgroups are removed"
    );
    let mounts = tono_seal::contain::mounts();
    let bases: Vec<PathBuf> = [&mounts.v2, &mounts.v1_pids, &mounts.v1_memory]
        .into_iter()
        .flatten()
        .map(|m| m.join("tono"))
        .collect();
    assert!(!bases.is_empty(), "this host has a cgroup hierarchy");
    for base in &bases {
        // Control: the folder of all calls is there; the call's is not.
        assert!(base.is_dir(), "{}", base.display());
        let errno = std::fs::metadata(base.join(&cgroup))
            .map(|_| 0)
            .unwrap_or_else(|e| e.raw_os_error().unwrap());
        assert_eq!(errno, libc::ENOENT, "{}/{cgroup} is gone", base.display());
    }

    // A value over what an environment variable takes arrives whole as a
    // file, and is refused by name as a variable.
    let o = call(&u.user, &["big=BIG"], "true", RunOptions::default());
    let e = o.launch_error.expect("refused");
    assert_eq!(e.code, "secret_too_large_for_env", "{e:?}");
}

#[test]
fn a_second_call_of_the_same_user_sees_nothing_of_the_first_calls_folder() {
    need_root!();
    let u = TestUser::with_key();
    let value = unique_value("other");
    u.seal("dk", value.as_bytes());
    let started = common::marker_path(&format!("creds-started-{}", std::process::id()));
    let go = common::marker_path(&format!("creds-go-{}", std::process::id()));
    let _ = std::fs::remove_file(&started);
    let _ = std::fs::remove_file(&go);
    let first = {
        let user = u.user.clone();
        let script = format!(
            "ls \"$CREDENTIALS_DIRECTORY\"; : > {started}; n=0; \
             while [ ! -e {go} ] && [ $n -lt 6000 ]; do sleep 0.05; n=$((n+1)); done; \
             [ -e {go} ] && echo waited"
        );
        std::thread::spawn(move || call(&user, &["dk=@deploy_key"], &script, RunOptions::default()))
    };
    let mut polls = 0;
    while !Path::new(&started).exists() {
        polls += 1;
        assert!(polls < 60_000, "the first call never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    // While the first holds its file: the second, same user, private view,
    // finds no such file by its path (ENOENT), nothing under any /proc/*/root,
    // and the value in no file it can read.
    let second = call(
        &u.user,
        &[],
        "ls -A /run/credentials | wc -l; \
         cat /run/credentials/deploy_key 2>&1 | sed 's/.*: /open: /'; \
         ls -d /proc/[0-9]*/root/run/credentials/deploy_key 2>/dev/null | wc -l; \
         echo \"[$CREDENTIALS_DIRECTORY]\"",
        RunOptions::default(),
    );
    std::fs::write(&go, b"").unwrap();
    let first = first.join().unwrap();
    assert_eq!(ran(&first), "deploy_key\nwaited\n", "control: {first:?}");
    assert_eq!(
        ran(&second),
        "0\nopen: No such file or directory\n0\n[]\n",
        "{second:?}"
    );
    let _ = std::fs::remove_file(&started);
    let _ = std::fs::remove_file(&go);
}

#[test]
fn a_file_secret_is_refused_where_no_folder_of_the_calls_own_can_hold_it() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("a", b"first-secret-value");
    u.seal("b", b"second-secret-value");
    // The shared view: refused, nothing run; control: the same grant runs
    // in the private view.
    let shared = RunOptions {
        view: View::Shared,
        ..RunOptions::default()
    };
    let o = call(&u.user, &["a=@f"], "echo ran", shared);
    let e = o.launch_error.as_ref().expect("refused");
    assert_eq!(e.code, "file_needs_private_view", "{o:?}");
    assert_eq!(o.exit_code, None);
    assert_eq!(
        ran(&call(
            &u.user,
            &["a=@f"],
            "cat $CREDENTIALS_DIRECTORY/f",
            RunOptions::default()
        )),
        "[masked:a]"
    );
    // Two secrets to one file name, or a secret setting the folder's own
    // variable beside a file: refused before a launch.
    let o = call(
        &u.user,
        &["a=@f", "b=@f"],
        "echo ran",
        RunOptions::default(),
    );
    assert_eq!(o.reason, "file_conflict", "{o:?}");
    let o = call(
        &u.user,
        &["a=@f", "b=CREDENTIALS_DIRECTORY"],
        "echo ran",
        RunOptions::default(),
    );
    assert_eq!(o.reason, "env_conflict", "{o:?}");
    // A file name that is not one name: refused by the CLI with its reason.
    for bad in ["a=@../x", "a=@.", "a=@a/b", "a=@"] {
        let out = common::tono(&["run", "--user", u.name(), "-s", bad, "--", "true"], b"");
        if bad == "a=@" {
            assert!(
                out.status.success(),
                "control {bad}: {}",
                common::stderr(&out)
            );
            continue;
        }
        assert_eq!(
            out.status.code(),
            Some(2),
            "{bad}: {}",
            common::stderr(&out)
        );
        assert!(
            common::stderr(&out).contains("is not one file name"),
            "{bad}: {}",
            common::stderr(&out)
        );
    }
}

#[test]
fn a_file_secret_is_named_in_the_receipt_never_its_value() {
    need_root!();
    let u = TestUser::with_key();
    let value = unique_value("receipt");
    u.seal("dk", value.as_bytes());
    let dir = AuditDir::new("credential-files");
    let log = AuditLog::open(AuditConfig::at(dir.log())).unwrap();
    let options = RunOptions {
        audit: Some(std::sync::Arc::new(log)),
        ..RunOptions::default()
    };
    ran(&call(
        &u.user,
        &["dk=@"],
        "cat $CREDENTIALS_DIRECTORY/dk >/dev/null",
        options,
    ));
    let records = dir.records();
    let last = records.last().unwrap();
    assert_eq!(last["secrets_granted"], json!(["dk"]));
    assert_eq!(last["secrets_as_files"], json!(["dk"]));
    let text = std::fs::read_to_string(dir.log()).unwrap();
    assert!(!text.contains(&value));
}

/// An `sshd` of the test's own on 127.0.0.1, its own host key, config and
/// port; stopped when dropped.
struct Sshd {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Sshd {
    fn start() -> Self {
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(
            sshd.exists(),
            "this test needs openssh-server (.ci/run installs it)"
        );
        std::fs::create_dir_all("/run/sshd").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let host_key = dir.path().join("host_key");
        let keygen = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&host_key)
            .status()
            .unwrap();
        assert!(keygen.success());
        // A free port: bound by the kernel's choice, then handed to sshd.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.path().join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "ListenAddress 127.0.0.1\nPort {port}\nHostKey {}\nPidFile {}\n\
                 UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PubkeyAuthentication yes\nAuthenticationMethods publickey\nStrictModes yes\n\
                 AllowUsers tonotest*\nLogLevel VERBOSE\n",
                host_key.display(),
                dir.path().join("sshd.pid").display()
            ),
        )
        .unwrap();
        let mut child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Ready when it says it listens (an event, not a time).
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            let n = err.read_line(&mut line).unwrap();
            assert!(n > 0, "sshd exited before it listened");
            if line.contains("Server listening on 127.0.0.1") {
                break;
            }
        }
        // Its later log goes nowhere, in a thread that drains it.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while err.read_line(&mut sink).unwrap_or(0) > 0 {
                sink.clear();
            }
        });
        assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
        Self { child, port, dir }
    }

    fn host_key_line(&self) -> String {
        let public = std::fs::read_to_string(self.dir.path().join("host_key.pub")).unwrap();
        format!("[127.0.0.1]:{} {}", self.port, public.trim())
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn ssh_and_git_log_in_with_a_deploy_key_given_as_a_file() {
    need_root!();
    let sshd = Sshd::start();
    let agent = TestUser::with_key();
    let account = TestUser::bare();
    // sshd refuses a locked account ('!' in shadow): '*' is no password
    // and not locked.
    let unlock = Command::new("usermod")
        .args(["-p", "*", account.name()])
        .status()
        .unwrap();
    assert!(unlock.success());
    // The deploy key: made here, sealed for the agent, its public half in
    // the account's authorized_keys; the host key in the agent's
    // known_hosts.
    let keys = tempfile::tempdir().unwrap();
    let key: PathBuf = keys.path().join("deploy_key");
    let made = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "tonotest-deploy",
            "-f",
        ])
        .arg(&key)
        .status()
        .unwrap();
    assert!(made.success());
    agent.seal("deploy_key", &std::fs::read(&key).unwrap());
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let set_up = account.sh(&format!(
        "umask 077 && mkdir -p .ssh && printf '%s\\n' '{}' > .ssh/authorized_keys && \
         git init -q --bare -b main repo.git && git init -q -b main work && cd work && \
         printf 'deployed\\n' > README && git add README && \
         git -c user.name=t -c user.email=t@t commit -q -m one && \
         git push -q ../repo.git HEAD:refs/heads/main",
        public.trim()
    ));
    assert!(set_up.status.success(), "{}", common::stderr(&set_up));
    let known = agent.sh(&format!(
        "umask 077 && mkdir -p .ssh && printf '%s\\n' '{}' > .ssh/known_hosts",
        sshd.host_key_line()
    ));
    assert!(known.status.success(), "{}", common::stderr(&known));

    let ssh = format!(
        "ssh -i \"$CREDENTIALS_DIRECTORY/deploy_key\" -o IdentitiesOnly=yes -o BatchMode=yes \
         -o StrictHostKeyChecking=yes -p {}",
        sshd.port
    );
    // Control: without the key the same login is refused.
    let o = call(
        &agent.user,
        &[],
        &format!(
            "ssh -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes -p {} \
             {}@127.0.0.1 id -un 2>&1 | tail -1",
            sshd.port,
            account.name()
        ),
        host_network(),
    );
    assert!(o.stdout.contains("Permission denied (publickey)"), "{o:?}");
    // With the key as a file: ssh logs in, and git clones over it.
    let o = call(
        &agent.user,
        &["deploy_key=@"],
        &format!(
            "{ssh} {account}@127.0.0.1 id -un && \
             GIT_SSH_COMMAND='{ssh}' git clone -q {account}@127.0.0.1:repo.git /tmp/clone && \
             cat /tmp/clone/README && head -2 \"$CREDENTIALS_DIRECTORY/deploy_key\"",
            account = account.name()
        ),
        host_network(),
    );
    assert_eq!(
        ran(&o),
        // The key file's first two lines, printed alone: each masked.
        format!(
            "{}\ndeployed\n[masked:deploy_key]\n[masked:deploy_key]\n",
            account.name()
        ),
        "{o:?}\nstderr: {}",
        o.stderr
    );
}
