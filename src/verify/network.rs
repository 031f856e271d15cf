//! Probes of a call's network, run as a probed user through
//! `drop_and_run` like any call: in mode `none` a call reaches neither a
//! listener on the host's loopback nor any route out; in mode `proxy` it
//! reaches the worker's end at 127.0.0.1:3128 and still not the host's
//! loopback; in mode `host` it reaches the host's loopback (the weakest).
//!
//! Guarantees: each attempt is a `connect(2)` made by the tool, reported as
//! `ok` or the errno the kernel gave (never a program's exit status); a
//! denial passes only as `ECONNREFUSED` (nothing listens at that address in
//! the call's namespace) or `ENETUNREACH` (no route), and only beside the
//! positive control — the same connect to the same listener, made in mode
//! `host`, that worked. Without the control every probe is inconclusive.
#![forbid(unsafe_code)]

use std::net::TcpListener;

use super::probe::{Expect, Probe, Verdict};
use crate::drop::{Launcher, Outcome, RunOptions};
use crate::env::{Network, CALL_PROXY_ADDR};
use crate::user::TargetUser;

/// What a probe line `NAME ANSWER` of the call's output gave: `ok` (or
/// whatever else it said), `errno N (ENAME)`, or why there was none.
pub(super) fn answer(out: &Outcome, name: &str) -> String {
    let said = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")));
    match said.map(|s| (s, s.strip_prefix("errno ").map(str::parse::<i32>))) {
        Some((_, Some(Ok(n)))) => format!("errno {n} ({:?})", nix::errno::Errno::from_raw(n)),
        Some((said, _)) => said.to_owned(),
        None => format!(
            "no answer (exit {:?}{})",
            out.exit_code,
            out.launch_error
                .as_ref()
                .map(|e| format!(", {}", e.code))
                .unwrap_or_default()
        ),
    }
}

/// A perl script (perl is in every Debian) that connects to each
/// `(name, host, port)` and prints `name ok` or `name errno N`; a connect
/// that has no answer in 5 s is `errno 110` (`ETIMEDOUT`), so a probe
/// whose packets vanish ends as a failure, not as a call's timeout.
fn connects(targets: &[(&str, &str, u16)]) -> String {
    let list: Vec<String> = targets
        .iter()
        .map(|(name, host, port)| format!("[\"{name}\",\"{host}\",{port}]"))
        .collect();
    format!(
        "exec perl -MSocket -e 'for my $t ({}) {{ my ($n, $h, $p) = @$t; \
         socket(my $s, PF_INET, SOCK_STREAM, 0) or die; my $e = 0; \
         my $ok = eval {{ local $SIG{{ALRM}} = sub {{ die \"timeout\\n\" }}; alarm 5; \
         my $r = connect($s, pack_sockaddr_in($p, inet_aton($h))); $e = $!+0; alarm 0; $r }}; \
         if ($@) {{ print \"$n errno 110\\n\" }} elsif ($ok) {{ print \"$n ok\\n\" }} \
         else {{ print \"$n errno $e\\n\" }} close $s }}'",
        list.join(",")
    )
}

fn refused(said: &str) -> bool {
    [
        nix::errno::Errno::ECONNREFUSED,
        nix::errno::Errno::ENETUNREACH,
    ]
    .iter()
    .any(|e| said == format!("errno {} ({e:?})", *e as i32))
}

/// Runs the network probes as `user`, with `base`'s options otherwise.
pub async fn network_probes(
    launcher: &Launcher,
    user: &TargetUser,
    base: &RunOptions,
) -> Vec<Probe> {
    network_probes_on(launcher, user, base, |mode| mode).await
}

/// [`network_probes`], each mode's calls run on the network `runs_on`
/// gives for it: the identity, except in a test that makes a mode leak
/// (its calls on another network) to see its line fail.
pub async fn network_probes_on(
    launcher: &Launcher,
    user: &TargetUser,
    base: &RunOptions,
    runs_on: impl Fn(Network) -> Network,
) -> Vec<Probe> {
    let listener = match TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => {
            return vec![Probe::of(
                user,
                "a call's network (a listener on the host's loopback to aim at)",
                Expect::Holds,
                format!("no listener: {e}"),
                Verdict::Inconclusive,
            )]
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let host_loopback = format!("127.0.0.1:{port}");
    let script = connects(&[
        ("loopback", "127.0.0.1", port),
        ("metadata", "169.254.169.254", 80),
        ("proxy", "127.0.0.1", 3128),
    ]);
    let run = |network: Network| {
        let options = RunOptions {
            network: Some(runs_on(network)),
            view: crate::launch::view::View::Private,
            ..base.clone()
        };
        super::containment::shell(launcher, user, script.clone(), options)
    };
    let host = run(Network::Host).await;
    let control = answer(&host, "loopback") == "ok";
    let control_said = format!(
        "host control: {host_loopback} {}",
        answer(&host, "loopback")
    );
    let verdict = |pass: bool| match (control, pass) {
        (false, _) => Verdict::Inconclusive,
        (true, true) => Verdict::Pass,
        (true, false) => Verdict::Fail,
    };
    let mut out = Vec::new();
    let none = run(Network::None).await;
    let (lo, meta) = (answer(&none, "loopback"), answer(&none, "metadata"));
    out.push(Probe::of(
        user,
        "network none: a call reaches neither the host's loopback nor a route out",
        Expect::Denied,
        format!("{host_loopback} {lo}, 169.254.169.254:80 {meta}; {control_said}"),
        verdict(refused(&lo) && refused(&meta)),
    ));
    if base.env.config.proxy.is_some() {
        let proxy = run(Network::Proxy).await;
        let (end, lo) = (answer(&proxy, "proxy"), answer(&proxy, "loopback"));
        out.push(Probe::of(
            user,
            "network proxy: a call reaches the worker's end and not the host's loopback",
            Expect::Holds,
            format!("{CALL_PROXY_ADDR} {end}, {host_loopback} {lo}; {control_said}"),
            verdict(end == "ok" && refused(&lo)),
        ));
    }
    out.push(Probe::of(
        user,
        "network host (the weakest): a call reaches the host's loopback",
        Expect::Allowed,
        control_said.clone(),
        if control {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
    ));
    drop(listener);
    out
}
