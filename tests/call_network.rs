//! A call's network, as the operator chose it: `none` reaches nothing
//! outside the call, `proxy` reaches the configured proxy only through the
//! worker (which adds the proxy's password the tool never sees), `host` is
//! the host's. Every denial comes with its errno, beside the same probe on
//! the host's network, where it works. All traffic stays on this machine:
//! the test runs its own HTTP server, UDP echo "resolver" and CONNECT proxy
//! on the host's loopback.

mod common;
#[path = "common/connect_proxy.rs"]
mod connect_proxy;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use common::{launcher, rt, TestUser};
use connect_proxy::{expected_authorization, Proxy, PROXY_PASSWORD, PROXY_USER};
use serde_json::json;
use tono_seal::classify::Policy;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use tono_seal::env::{EnvConfig, Network, RunEnv};
use tono_seal::user::TargetUser;
use tono_seal::Outcome;

/// An HTTP server on the host's loopback: `/` answers `hello-server`;
/// `/together` answers only once two requests wait at once (or `alone`
/// after 20 s), so two calls that both get `together` ran at once.
struct Server {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Server {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let waiting = Arc::new((Mutex::new(0usize), Condvar::new()));
        let counted = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (hits, waiting) = (counted.clone(), waiting.clone());
                std::thread::spawn(move || serve_http(stream, &hits, &waiting));
            }
        });
        Self { port, hits }
    }
}

fn serve_http(stream: TcpStream, hits: &AtomicUsize, waiting: &(Mutex<usize>, Condvar)) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
    }
    hits.fetch_add(1, Ordering::SeqCst);
    let body = if request_line.contains("/together") {
        let (count, cv) = waiting;
        let mut n = count.lock().unwrap();
        *n += 1;
        cv.notify_all();
        let (n, _) = cv
            .wait_timeout_while(n, Duration::from_secs(20), |n| *n < 2)
            .unwrap();
        if *n >= 2 {
            "together"
        } else {
            "alone"
        }
    } else {
        "hello-server"
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// A UDP server on the host's loopback that answers every datagram with
/// itself: a stand-in for the host's resolver.
fn udp_echo() -> u16 {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let _ = socket.send_to(&buf[..n], from);
        }
    });
    port
}

/// An env config naming the test proxy with its credentials.
fn proxy_config(proxy_port: u16) -> Arc<EnvConfig> {
    Arc::new(
        EnvConfig::from_json(
            json!({ "proxy": format!("http://{PROXY_USER}:{PROXY_PASSWORD}@127.0.0.1:{proxy_port}") })
                .to_string()
                .as_bytes(),
        )
        .unwrap(),
    )
}

async fn shell_on(
    user: &TargetUser,
    command: &str,
    network: Option<Network>,
    config: Arc<EnvConfig>,
    grants: &[&str],
) -> Outcome {
    let grants: Vec<SecretGrant> = grants
        .iter()
        .map(|g| SecretGrant::parse(g).unwrap())
        .collect();
    let names: Vec<&str> = grants.iter().map(|g| g.name.as_str()).collect();
    let raw = serde_json::to_vec(
        &json!({"tool": "shell", "args": {"command": command, "secrets": names}}),
    )
    .unwrap();
    drop_and_run(&DropRequest {
        launcher: &launcher(),
        policy: &Policy::default(),
        user,
        grants: &grants,
        call: &raw,
        options: RunOptions {
            network,
            env: RunEnv {
                config,
                ..RunEnv::default()
            },
            timeout: Duration::from_secs(60),
            ..RunOptions::default()
        },
    })
    .await
}

/// A Python probe that tries each `name=kind:host:port` and prints
/// `name ok` or `name errno NAME`: `tcp` connects, `udp` sends a DNS-shaped
/// query and waits for the answer.
fn probes(targets: &[(&str, &str, &str, u16)]) -> String {
    let list: Vec<String> = targets
        .iter()
        .map(|(name, kind, host, port)| format!("({name:?},{kind:?},{host:?},{port})"))
        .collect();
    format!(
        r#"python3 - <<'EOF'
import errno, socket
for name, kind, host, port in [{}]:
    try:
        if kind == "tcp":
            s = socket.socket(); s.settimeout(5); s.connect((host, port))
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
            s.connect((host, port))
            s.send(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01")
            s.recv(512)
        print(name, "ok")
    except socket.timeout:
        print(name, "errno ETIMEDOUT")
    except OSError as e:
        print(name, "errno", errno.errorcode.get(e.errno, e.errno))
EOF
echo "interfaces: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' ')"
echo "netns: $(readlink /proc/self/ns/net)""#,
        list.join(",")
    )
}

fn line_of<'a>(out: &'a Outcome, name: &str) -> &'a str {
    out.stdout
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no line for {name}: {out:?}"))
}

#[test]
fn a_call_without_network_reaches_nothing_outside_itself_and_the_host_control_does() {
    need_root!();
    let server = Server::start();
    let resolver = udp_echo();
    let proxy = Proxy::start();
    let u = TestUser::bare();
    let probe = probes(&[
        ("server", "tcp", "127.0.0.1", server.port),
        ("proxy", "tcp", "127.0.0.1", proxy.port),
        ("resolver", "udp", "127.0.0.1", resolver),
        ("metadata", "tcp", "169.254.169.254", 80),
    ]);
    let rt = rt();
    let config = Arc::new(EnvConfig::default());
    // Positive control: on the host's network the same probes reach the
    // host's loopback services.
    let host = rt.block_on(shell_on(
        &u.user,
        &probe,
        Some(Network::Host),
        config.clone(),
        &[],
    ));
    assert_eq!(
        host.limits.as_ref().and_then(|l| l.network.as_deref()),
        Some("host")
    );
    for name in ["server", "proxy", "resolver"] {
        assert_eq!(line_of(&host, name), format!("{name} ok"), "{host:?}");
    }
    let none = rt.block_on(shell_on(&u.user, &probe, Some(Network::None), config, &[]));
    assert!(none.launch_error.is_none(), "{none:?}");
    assert_eq!(
        none.limits.as_ref().and_then(|l| l.network.as_deref()),
        Some("none")
    );
    for name in ["server", "proxy", "resolver"] {
        assert_eq!(
            line_of(&none, name),
            format!("{name} errno ECONNREFUSED"),
            "nothing listens on the call's own loopback: {none:?}"
        );
    }
    assert_eq!(
        line_of(&none, "metadata"),
        "metadata errno ENETUNREACH",
        "no route leaves the call: {none:?}"
    );
    // The call's namespace is not the host's; on the host's network the
    // same probe reads the host's own (this process's) namespace and
    // interfaces, whatever they are (a guest may have only `lo`).
    let ours = format!(
        "netns: {}",
        std::fs::read_link("/proc/self/ns/net").unwrap().display()
    );
    let mut interfaces: Vec<String> = std::fs::read_to_string("/proc/net/dev")
        .unwrap()
        .lines()
        .skip(2)
        .filter_map(|l| Some(l.split(':').next()?.trim().to_owned()))
        .collect();
    interfaces.sort();
    let ours_interfaces = format!("interfaces: {} ", interfaces.join(" "));
    assert_eq!(line_of(&host, "netns:"), ours, "{host:?}");
    assert_eq!(line_of(&host, "interfaces:"), ours_interfaces, "{host:?}");
    assert_ne!(line_of(&none, "netns:"), ours, "{none:?}");
    assert_eq!(line_of(&none, "interfaces:"), "interfaces: lo ", "{none:?}");
    // The call's own loopback works: a server of its own is reachable.
    let own = rt.block_on(shell_on(
        &u.user,
        "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); c=socket.create_connection(s.getsockname()); print(\"own loopback ok\")'",
        Some(Network::None),
        Arc::new(EnvConfig::default()),
        &[],
    ));
    assert_eq!(own.stdout, "own loopback ok\n", "{own:?}");
    assert_eq!(
        server.hits.load(Ordering::SeqCst),
        1,
        "only the control's connection reached the server"
    );
}

#[test]
fn a_call_behind_the_proxy_reaches_it_only_through_the_worker_and_never_holds_its_password() {
    need_root!();
    let server = Server::start();
    let proxy = Proxy::start();
    let u = TestUser::with_key();
    let canary = "call-memory-canary-7d1f9e";
    u.seal("CANARY", canary.as_bytes());
    let config = proxy_config(proxy.port);
    let rt = rt();
    let url = format!("http://127.0.0.1:{}/", server.port);
    // `--noproxy ''`: the call's NO_PROXY keeps loopback direct; this asks
    // for the proxy even so. `-p` tunnels with CONNECT.
    let script = format!(
        "echo \"env: $HTTPS_PROXY $http_proxy $ALL_PROXY\"; \
         curl -sS --noproxy '' {url}; echo; \
         curl -sS --noproxy '' -p {url}; echo; \
         {}",
        probes(&[("direct", "tcp", "127.0.0.1", server.port)])
    );
    let out = rt.block_on(shell_on(&u.user, &script, None, config.clone(), &[]));
    assert!(out.launch_error.is_none(), "{out:?}");
    assert_eq!(
        out.limits.as_ref().and_then(|l| l.network.as_deref()),
        Some("proxy")
    );
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        &lines[..4],
        [
            "env: http://127.0.0.1:3128 http://127.0.0.1:3128 http://127.0.0.1:3128",
            "hello-server",
            "hello-server",
            "direct errno ECONNREFUSED",
        ],
        "{out:?}"
    );
    let seen = proxy.seen();
    assert_eq!(
        seen,
        [
            (format!("GET {url} HTTP/1.1"), true),
            (format!("CONNECT 127.0.0.1:{} HTTP/1.1", server.port), true),
        ],
        "the proxy saw both requests, each with the worker's credentials"
    );
    assert_eq!(server.hits.load(Ordering::SeqCst), 2);

    // The worker's end speaks only to the proxy, and only in the one shape:
    // an origin-form request (no proxy target) and a bare-LF head are
    // answered 400 by the worker and reach neither the proxy nor the server.
    let raw = format!(
        r#"python3 - <<'EOF'
import socket
for head in [b'GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n', b'GET {url} HTTP/1.1\nX: y\r\n\r\n']:
    s = socket.create_connection(('127.0.0.1', 3128)); s.sendall(head)
    print(s.recv(64).split(b'\r\n')[0].decode())
EOF"#,
        port = server.port
    );
    let refused = rt.block_on(shell_on(&u.user, &raw, None, config.clone(), &[]));
    assert_eq!(
        refused.stdout, "HTTP/1.1 400 Bad Request\nHTTP/1.1 400 Bad Request\n",
        "{refused:?}"
    );
    assert_eq!(proxy.seen().len(), 2, "nothing more reached the proxy");
    assert_eq!(server.hits.load(Ordering::SeqCst), 2, "nor the server");

    // No trace of the password where the call can look: the environment of
    // every process of the call, and the memory of the tool and of its
    // launcher (scanned by root while the call waits), beside a control —
    // a secret the call unsealed, which the same scan must find.
    let basic = expected_authorization();
    let needles: [&[u8]; 4] = [
        PROXY_PASSWORD.as_bytes(),
        basic.as_bytes(),
        &basic.as_bytes()["Basic ".len()..],
        canary.as_bytes(),
    ];
    let uid = u.user.uid;
    let call = {
        let (user, config) = (u.user.clone(), config.clone());
        rt.spawn(async move {
            shell_on(
                &user,
                "cat /proc/[0-9]*/environ | tr '\\0' '\\n'; \
                 curl -sS --noproxy '' http://127.0.0.1:1/ >/dev/null 2>&1; sleep 600.5; echo scanned",
                None,
                config,
                &["CANARY"],
            )
            .await
        })
    };
    // The call waits for the scan (its `sleep` is ended by root once every
    // process is scanned: an event, not a clock).
    let scanned = scan_call_processes(uid, "600.5", &needles);
    let sleeping = scanned
        .iter()
        .find(|s| s.role == Role::Sleep)
        .map(|s| s.pid);
    if let Some(pid) = sleeping {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    }
    let out = rt.block_on(call).unwrap();
    assert!(out.launch_error.is_none(), "{out:?}");
    assert!(out.stdout.ends_with("scanned\n"), "{out:?}");
    // (The canary is masked in this output; the password would not be.)
    let environ = &out.stdout;
    assert!(
        environ.contains("HTTPS_PROXY=http://127.0.0.1:3128"),
        "{environ}"
    );
    assert!(
        !environ.contains(PROXY_PASSWORD) && !environ.contains(&basic[6..]),
        "{environ}"
    );
    assert!(!environ.contains(PROXY_USER), "{environ}");
    // The call's processes, each by role: its launcher (the worker's
    // child, found by pid: while it is not dumpable its /proc entry is
    // root's, so a filter by owner would miss it), the
    // tool the launcher started with the canary in its environment, and
    // the tool's `sleep`. Every scan read at least 90% of what is readable.
    let role = |r: Role| {
        let found: Vec<&Scanned> = scanned.iter().filter(|s| s.role == r).collect();
        assert_eq!(found.len(), 1, "one {r:?}: {scanned:#?}");
        found[0]
    };
    let (launcher, tool, sleep) = (role(Role::Launcher), role(Role::Tool), role(Role::Sleep));
    for p in [launcher, tool, sleep] {
        assert_eq!(p.real_uid, uid, "dropped to the user: {p:?}");
    }
    for p in &scanned {
        assert!(
            p.scan.complete(),
            "pid {} ({:?}): {}",
            p.pid,
            p.role,
            p.scan
        );
    }
    // The control, in the processes it was put in: the launcher unsealed
    // the canary, holds it to mask the output and put it in the tool's
    // environment (the `sleep` inherits it); the same scans find the
    // password in none.
    assert!(
        launcher.scan.counts[3] > 0,
        "the canary in the launcher: {launcher:?}"
    );
    assert!(tool.scan.counts[3] > 0, "the canary in the tool: {tool:?}");
    assert!(
        sleep.scan.counts[3] > 0,
        "the canary in the sleep: {sleep:?}"
    );
    for p in &scanned {
        assert_eq!(
            &p.scan.counts[..3],
            [0, 0, 0],
            "pid {} ({:?}) holds the proxy's password",
            p.pid,
            p.role
        );
    }
}

/// Which process of a call a scan was of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The worker's (this process's) child.
    Launcher,
    /// The launcher's child: the tool it started.
    Tool,
    /// The `sleep` the scan waited for.
    Sleep,
    /// Any other descendant of the launcher.
    Other,
}

/// One process of the call, scanned by root.
#[derive(Debug)]
struct Scanned {
    pid: u32,
    role: Role,
    /// The real uid, from `/proc/<pid>/status`.
    real_uid: u32,
    scan: tono_seal::demo::memscan::Scan,
}

/// The parent of `pid` (field 4 of `/proc/<pid>/stat`, read after the
/// command's closing parenthesis).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Root's scan of every process of the call once its `sleep ARG` (of
/// `uid`) runs: its launcher, found by pid as this process's child on the
/// sleep's line of parents (never by the owner of its `/proc` entry, which
/// is root's while it is not dumpable), and every descendant of it. A scan that
/// fails is a failure, not a process left out.
fn scan_call_processes(uid: u32, sleep_arg: &str, needles: &[&[u8]]) -> Vec<Scanned> {
    use std::os::unix::fs::MetadataExt;
    let want = format!("sleep\0{sleep_arg}\0");
    let worker = std::process::id();
    let all_pids = || -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
            .collect()
    };
    // Bounded by a count of looks, not a clock.
    let sleep = (0..2000)
        .find_map(|_| {
            let found = all_pids().into_iter().find(|pid| {
                std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == uid)
                    && std::fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| c == want.as_bytes())
            });
            if found.is_none() {
                std::thread::sleep(Duration::from_millis(5));
            }
            found
        })
        .expect("the call's sleep never ran");
    let mut launcher = sleep;
    loop {
        match parent_of(launcher) {
            Some(parent) if parent == worker => break,
            Some(parent) if parent > 1 => launcher = parent,
            other => panic!("pid {sleep}'s line of parents never reached the worker: {other:?}"),
        }
    }
    let parents: Vec<(u32, u32)> = all_pids()
        .into_iter()
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut call = vec![launcher];
    let mut i = 0;
    while i < call.len() {
        let parent = call[i];
        call.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(pid, _)| *pid),
        );
        i += 1;
    }
    call.into_iter()
        .map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .unwrap_or_else(|e| panic!("pid {pid} of {launcher}'s call ({sleep} sleeps): {e}"));
            let real_uid = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next()?.parse().ok())
                .unwrap();
            let role = if pid == launcher {
                Role::Launcher
            } else if pid == sleep {
                Role::Sleep
            } else if parent_of(pid) == Some(launcher) {
                Role::Tool
            } else {
                Role::Other
            };
            let scan = tono_seal::demo::memscan::scan_process(pid, needles)
                .unwrap_or_else(|e| panic!("scanning pid {pid} ({role:?}): {e}"));
            Scanned {
                pid,
                role,
                real_uid,
                scan,
            }
        })
        .collect()
}

#[test]
fn two_users_behind_the_proxy_at_once_each_reach_it_through_their_own_end() {
    need_root!();
    let server = Server::start();
    let proxy = Proxy::start();
    let (a, b) = (TestUser::bare(), TestUser::bare());
    let config = proxy_config(proxy.port);
    let script = format!(
        "curl -sS --noproxy '' -p http://127.0.0.1:{}/together; echo; \
         echo \"listening: $(awk '$4 == \"0A\"' /proc/net/tcp | wc -l) $(awk '$4 == \"0A\" {{print $2}}' /proc/net/tcp)\"",
        server.port
    );
    let rt = rt();
    let (out_a, out_b) = rt.block_on(async {
        tokio::join!(
            shell_on(&a.user, &script, None, config.clone(), &[]),
            shell_on(&b.user, &script, None, config.clone(), &[])
        )
    });
    for out in [&out_a, &out_b] {
        // `together`: the server held both requests at once, so each call
        // had its own end open while the other's was.
        assert_eq!(
            out.stdout, "together\nlistening: 1 0100007F:0C38\n",
            "each call sees one listening socket, its own 127.0.0.1:3128: {out:?}"
        );
    }
    assert_eq!(proxy.seen().iter().filter(|(_, ok)| *ok).count(), 2);
}

/// Descriptors and threads of this process.
fn fds_and_threads() -> (usize, usize) {
    let fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
    let threads = std::fs::read_dir("/proc/self/task").unwrap().count();
    (fds, threads)
}

#[test]
fn a_thousand_calls_behind_the_proxy_leave_nothing_behind() {
    need_root!();
    let server = Server::start();
    let proxy = Proxy::start();
    let u = TestUser::bare();
    let config = proxy_config(proxy.port);
    // Each call opens a tunnel through its end and leaves it open: the
    // call's end must still close it.
    let script = format!(
        "exec bash -c \"exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT 127.0.0.1:{} HTTP/1.1\\r\\n\\r\\n' >&3; head -c 12 <&3\"",
        server.port
    );
    let rt = rt();
    let run = |n: usize| {
        let mut ok = 0;
        for _ in 0..n {
            let out = rt.block_on(shell_on(&u.user, &script, None, config.clone(), &[]));
            if out.stdout == "HTTP/1.1 200" {
                ok += 1;
            } else {
                panic!("{out:?}");
            }
        }
        ok
    };
    // Warm up: the launcher pool of this kind is made and filled. Each
    // count is taken with the pool drained (its waiting launchers ended, a
    // start in progress waited for), so a refill under way on a busy
    // machine is not counted as a leak.
    assert_eq!(run(10), 10);
    tono_seal::drop::pool::drain();
    let before = fds_and_threads();
    assert_eq!(run(1000), 1000);
    tono_seal::drop::pool::drain();
    let after = fds_and_threads();
    assert_eq!(common::live_processes_of(u.user.uid), 0);
    assert_eq!(proxy.seen().len(), 1010);
    // One descriptor or thread kept per call would be 1,000; the pool is
    // drained at both counts, so little but the runtime's own may differ.
    assert!(
        after.0 <= before.0 + 2 && after.1 <= before.1 + 2,
        "descriptors {} -> {}, threads {} -> {}",
        before.0,
        after.0,
        before.1,
        after.1
    );
    eprintln!(
        "1,000 calls: descriptors {} -> {}, threads {} -> {}",
        before.0, after.0, before.1, after.1
    );
}

#[test]
fn a_launcher_runs_a_call_only_on_the_network_its_plan_names() {
    use tono_seal::launch::plan::LaunchPlan;
    use tono_seal::launch::report::StatusReport;
    use tono_seal::sys::NewNamespaces;
    need_root!();
    let u = TestUser::bare();
    let marker = common::marker_path(&format!("tono-net-mismatch-{}", std::process::id()));
    let plan = |network: Network| LaunchPlan {
        network,
        worker_netns: Some(tono_seal::sys::current_netns().unwrap()),
        ..common::touch_plan(&u.user, &marker)
    };
    let own = |net: bool| NewNamespaces { pid: true, net };
    // A call of network none in a launcher on the host's network, and one
    // of host in a launcher with a network of its own: both refused before
    // anything runs.
    for (network, net) in [
        (Network::None, false),
        (Network::Proxy, false),
        (Network::Host, true),
    ] {
        match common::launch_by_hand(&plan(network), own(net)) {
            StatusReport::Failed(e) => {
                assert_eq!(e.code, "network_mismatch", "{network} {net}: {e:?}")
            }
            other => panic!("{network} with a network of its own {net}: not refused: {other:?}"),
        }
        assert!(
            !std::path::Path::new(&marker).exists(),
            "{network} {net}: ran"
        );
    }
    // A plan that asks for a network of its own must name the worker's.
    let unnamed = LaunchPlan {
        worker_netns: None,
        ..plan(Network::None)
    };
    match common::launch_by_hand(&unnamed, own(true)) {
        StatusReport::Failed(e) => assert_eq!(e.code, "network_mismatch", "{e:?}"),
        other => panic!("not refused: {other:?}"),
    }
    // Controls: each in the launcher started for it runs the program.
    for (network, net) in [(Network::None, true), (Network::Host, false)] {
        let report = common::launch_by_hand(&plan(network), own(net));
        common::assert_ran(&report, &marker, &network.to_string());
    }
}

#[test]
fn verify_reports_each_network_mode_with_the_errno_it_got() {
    need_root!();
    let proxy = Proxy::start();
    let u = TestUser::bare();
    let dir = common::AuditDir::new("netverify");
    std::fs::create_dir_all(&dir.0).unwrap();
    let config = dir.0.join("env.json");
    std::fs::write(
        &config,
        json!({ "proxy": format!("http://{PROXY_USER}:{PROXY_PASSWORD}@127.0.0.1:{}", proxy.port) })
            .to_string(),
    )
    .unwrap();
    let config = config.display().to_string();
    // A config that holds the password and that others can read is refused.
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let open = common::tono(
        &["verify", "--user", u.name(), "--env-config", &config],
        b"",
    );
    assert_eq!(open.status.code(), Some(2), "{}", common::stderr(&open));
    assert!(common::stderr(&open).contains("must be root's and closed to others"));
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let out = common::tono(
        &[
            "verify",
            "--user",
            u.name(),
            "--env-config",
            &config,
            "--json",
        ],
        b"",
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["network"], "proxy", "{report}");
    let probe = |start: &str| {
        report["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["tried"].as_str().unwrap().starts_with(start))
            .unwrap_or_else(|| panic!("no {start} probe: {report}"))
            .clone()
    };
    let none = probe("network none");
    assert_eq!(none["pass"], true, "{none}");
    let got = none["got"].as_str().unwrap();
    assert!(
        got.contains("errno 111 (ECONNREFUSED)") && got.contains("errno 101 (ENETUNREACH)"),
        "{got}"
    );
    assert!(
        got.contains("host control: 127.0.0.1:") && got.ends_with(" ok"),
        "{got}"
    );
    let behind = probe("network proxy");
    assert_eq!(behind["pass"], true, "{behind}");
    assert!(
        behind["got"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:3128 ok, "),
        "{behind}"
    );
    assert_eq!(probe("network host")["pass"], true);
}

#[test]
fn behind_the_proxy_a_call_asks_only_for_the_hosts_the_operator_allowed() {
    need_root!();
    let server = Server::start();
    let proxy = Proxy::start();
    let u = TestUser::bare();
    let config = Arc::new(
        EnvConfig::from_json(
            json!({
                "proxy": format!("http://{PROXY_USER}:{PROXY_PASSWORD}@127.0.0.1:{}", proxy.port),
                "proxy_allow_hosts": ["127.0.0.1", "*.allowed.test"],
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap(),
    );
    let ask = |host: &str| {
        format!(
            "curl -sS -p --noproxy '' -o /dev/null -w '{host} %{{http_connect}} %{{http_code}}\\n' http://{host}:{}/ 2>/dev/null; ",
            server.port
        )
    };
    let script = format!(
        "{}{}{}",
        ask("127.0.0.1"),
        ask("localhost"),
        ask("169.254.169.254")
    );
    let out = rt().block_on(shell_on(&u.user, &script, None, config, &[]));
    assert_eq!(
        out.stdout, "127.0.0.1 200 200\nlocalhost 403 000\n169.254.169.254 403 000\n",
        "the control passes, the others are refused by the worker's end: {out:?}"
    );
    assert_eq!(
        proxy.seen(),
        [(format!("CONNECT 127.0.0.1:{} HTTP/1.1", server.port), true)],
        "only the allowed request reached the proxy"
    );
}

#[test]
fn verify_fails_the_line_of_each_mode_that_leaks() {
    use tono_seal::verify::network::network_probes_on;
    need_root!();
    let proxy = Proxy::start();
    let u = TestUser::bare();
    let base = RunOptions {
        env: RunEnv {
            config: proxy_config(proxy.port),
            ..RunEnv::default()
        },
        timeout: Duration::from_secs(60),
        ..RunOptions::default()
    };
    let rt = rt();
    let probes_with = |runs_on: fn(Network) -> Network| {
        rt.block_on(network_probes_on(&launcher(), &u.user, &base, runs_on))
    };
    let line = |probes: &[tono_seal::verify::Probe], mode: &str| {
        probes
            .iter()
            .find(|p| p.tried.starts_with(&format!("network {mode}")))
            .unwrap_or_else(|| panic!("no line for {mode}: {probes:?}"))
            .clone()
    };
    let failed = |p: &tono_seal::verify::Probe| !p.pass && !p.inconclusive;
    // Control: each mode on its own network passes, and the host's
    // loopback port the probes aim at is the one each line names.
    let held = probes_with(|mode| mode);
    assert_eq!(held.len(), 3, "{held:?}");
    for p in &held {
        assert!(p.pass, "{p:?}");
    }
    // The host's loopback address a run's lines name (each run listens on
    // a port of its own): the one its host control reached.
    let loopback = |p: &tono_seal::verify::Probe| -> String {
        p.got
            .rsplit_once("host control: ")
            .and_then(|(_, s)| s.strip_suffix(" ok"))
            .unwrap_or_else(|| panic!("no reached host control: {p:?}"))
            .to_owned()
    };
    // None leaks: its calls run on the host's network. Its line fails with
    // what the connect got: the host's loopback reached.
    let leaked = probes_with(|mode| match mode {
        Network::None => Network::Host,
        other => other,
    });
    let none = line(&leaked, "none");
    assert!(failed(&none), "{none:?}");
    assert!(
        none.got.starts_with(&format!("{} ok, ", loopback(&none))),
        "{none:?}"
    );
    assert!(line(&leaked, "proxy").pass && line(&leaked, "host").pass);
    // Proxy leaks: its calls run on the host's network, where no worker's
    // end listens and the host's loopback is reached.
    let leaked = probes_with(|mode| match mode {
        Network::Proxy => Network::Host,
        other => other,
    });
    let behind = line(&leaked, "proxy");
    assert!(failed(&behind), "{behind:?}");
    assert!(
        behind.got.starts_with(&format!(
            "127.0.0.1:3128 errno 111 (ECONNREFUSED), {} ok; ",
            loopback(&behind)
        )),
        "{behind:?}"
    );
    assert!(line(&leaked, "none").pass && line(&leaked, "host").pass);
    // Host "leaks" the other way: its calls get no network, so the control
    // fails with the errno it got, and the other lines, without their
    // control, prove nothing.
    let shut = probes_with(|mode| match mode {
        Network::Host => Network::None,
        other => other,
    });
    let host = line(&shut, "host");
    assert!(failed(&host), "{host:?}");
    assert!(
        host.got.starts_with("host control: 127.0.0.1:")
            && host.got.ends_with(" errno 111 (ECONNREFUSED)"),
        "{host:?}"
    );
    for mode in ["none", "proxy"] {
        let p = line(&shut, mode);
        assert!(p.inconclusive, "{p:?}");
    }
}
