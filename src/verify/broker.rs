//! The broker probe: a call naming a secret bound to hosts holds only its
//! placeholder, and cannot read the broker that holds the value.
//!
//! Guarantees: the probe has the user's launcher seal a throwaway secret
//! ([`PROBE_SECRET`], a random value the launcher makes as the user, which
//! verify never holds) into the user's store, and removes it after; it
//! binds it, for the probe's calls only, to a host under `.invalid` that
//! no request can reach. A user without a key store gives no evidence
//! (inconclusive, naming `keygen`). Two calls of the same user run the same script:
//! a control with the secret unbound, whose environment holds the value,
//! and the probe with it bound. The script prints the SHA-256 of the
//! variable and of every value in every `/proc/*/environ` it can read;
//! the probe passes only where the control's own variable hash is among
//! the control's findings (the finder finds the value where it is) and
//! absent from every finding of the bound call, whose variable has the
//! value's length but another hash. In the same bound call the broker's
//! `/proc/1/environ`, `/proc/1/mem` and `/proc/1/fd` must be refused with
//! `EACCES` or `EPERM`, beside the call's own `/proc/self/…`, read by the
//! same script. The hashes stay in verify's memory; none is printed.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::sync::Arc;

use super::probe::{Expect, Probe, Verdict};
use crate::drop::{drop_and_run, DropRequest, Launcher, Outcome, RunOptions, SecretGrant};
use crate::env::{Binding, BoundHosts};
use crate::launch::plan::{Action, KeysOp, LaunchPlan};
use crate::launch::report::StatusReport;
use crate::user::TargetUser;

/// The host the probe binds its secret to: `.invalid` never resolves.
const PROBE_HOST: &str = "broker-probe.tono-seal.invalid";
/// The variable the probe's secret goes into.
const VARIABLE: &str = "TONO_VERIFY_BOUND";

/// What the script says; see the module docs.
const SCRIPT: &str = r#"v="$TONO_VERIFY_BOUND"
echo "len ${#v}"
echo "var $(printf %s "$v" | sha256sum | cut -c1-64)"
for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done \
  | sed 's/^[^=]*=//' | while IFS= read -r l; do printf %s "$l" | sha256sum | cut -c1-64; done \
  | sort -u | sed 's/^/found /'
exec perl -e 'for my $w ("self", "1") { for my $p ("environ", "mem") {
  my $r = open(my $f, "<", "/proc/$w/$p") ? "ok" : "errno " . ($! + 0); print "$w-$p $r\n" }
  my $r = opendir(my $d, "/proc/$w/fd") ? "ok" : "errno " . ($! + 0); print "$w-fd $r\n" }'
"#;

/// The throwaway secret's name in the probed user's store.
pub const PROBE_SECRET: &str = "tono-verify-broker-probe";

/// Runs a key store operation as `user`; `Ok` if it did, or why not.
async fn keys(launcher: &Launcher, user: &TargetUser, op: KeysOp) -> Result<(), String> {
    let plan = LaunchPlan::for_user(user, Action::Keys { op });
    let done = crate::drop::spawn::launch(
        launcher,
        plan,
        crate::drop::spawn::Input::Null,
        crate::drop::spawn::Output::Capture(64 * 1024),
        std::time::Duration::from_secs(60),
    )
    .await
    .map_err(|e| e.to_string())?;
    match done.report {
        StatusReport::Done(_) => Ok(()),
        StatusReport::Failed(e) => Err(format!("{}: {}", e.code, e.message)),
        other => Err(format!("{other:?}")),
    }
}

async fn run(
    launcher: &Launcher,
    user: &TargetUser,
    grant: &SecretGrant,
    options: RunOptions,
) -> Outcome {
    let call = serde_json::to_vec(&serde_json::json!({
        "tool": "shell",
        "args": {"command": SCRIPT, "secrets": [grant.name.as_str()]}
    }))
    .unwrap_or_default();
    drop_and_run(&DropRequest {
        launcher,
        policy: &crate::classify::Policy::default(),
        user,
        grants: std::slice::from_ref(grant),
        call: &call,
        options,
    })
    .await
}

fn said<'a>(out: &'a Outcome, key: &str) -> Option<&'a str> {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
}

fn found(out: &Outcome) -> BTreeSet<&str> {
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("found "))
        .collect()
}

fn refused(answer: Option<&str>) -> bool {
    matches!(answer, Some("errno 13") | Some("errno 1"))
}

/// The broker probe for `user` (see the module docs).
pub async fn broker_probe(launcher: &Launcher, user: &TargetUser, base: &RunOptions) -> Probe {
    let tried = "a call given a secret bound to hosts holds only its placeholder, and the \
                 broker's environ, memory and descriptors are refused to it";
    let inconclusive =
        |got: String| Probe::of(user, tried, Expect::Holds, got, Verdict::Inconclusive);
    let name = PROBE_SECRET.to_string();
    let sealed = keys(
        launcher,
        user,
        KeysOp::SealRandom {
            name: name.clone(),
            bytes: 40,
        },
    )
    .await;
    if let Err(why) = sealed {
        return inconclusive(format!(
            "no throwaway secret could be sealed for {} ({why}; a user needs a key store: \
             tono-seal keygen --user {})",
            user.name, user.name
        ));
    }
    let probe = bound_and_unbound(launcher, user, base, &name).await;
    let _ = keys(launcher, user, KeysOp::Remove { name }).await;
    probe
}

async fn bound_and_unbound(
    launcher: &Launcher,
    user: &TargetUser,
    base: &RunOptions,
    name: &str,
) -> Probe {
    let tried = "a call given a secret bound to hosts holds only its placeholder, and the \
                 broker's environ, memory and descriptors are refused to it";
    let inconclusive =
        |got: String| Probe::of(user, tried, Expect::Holds, got, Verdict::Inconclusive);
    let Ok(grant) = SecretGrant::parse(&format!("{name}={VARIABLE}")) else {
        return inconclusive(format!("the secret name {name:?} cannot be granted"));
    };
    let unbound = RunOptions {
        view: crate::launch::view::View::Private,
        ..base.clone()
    };
    let mut config = (*base.env.config).clone();
    let hosts = BoundHosts::try_from(vec![PROBE_HOST.to_string()]);
    let Ok(hosts) = hosts else {
        return inconclusive("the probe's host is not a bindable name".into());
    };
    config
        .bind_for_users
        .entry(user.name.clone())
        .or_default()
        .insert(name.to_string(), Binding { hosts, body: false });
    let mut bound_options = unbound.clone();
    bound_options.env.config = Arc::new(config);
    let control = run(launcher, user, &grant, unbound).await;
    let bound = run(launcher, user, &grant, bound_options).await;
    let (Some(value_hash), Some(value_len)) = (said(&control, "var"), said(&control, "len")) else {
        return inconclusive(format!(
            "the unbound control gave no answer (exit {:?}, {:?})",
            control.exit_code,
            control.launch_error.as_ref().map(|e| &e.code)
        ));
    };
    if let Some(e) = &bound.launch_error {
        return inconclusive(format!(
            "the bound call did not run: {} ({})",
            e.code, e.message
        ));
    }
    let finder_works = found(&control).contains(value_hash);
    let bound_hash = said(&bound, "var");
    let bound_len = said(&bound, "len");
    let placeholder_only = bound_hash.is_some_and(|h| h != value_hash)
        && bound_len == Some(value_len)
        && !found(&bound).contains(value_hash);
    let own_readable = ["self-environ", "self-mem", "self-fd"]
        .iter()
        .all(|k| said(&bound, k) == Some("ok"));
    let broker_refused = ["1-environ", "1-mem", "1-fd"]
        .iter()
        .all(|k| refused(said(&bound, k)));
    let mut got = vec![
        format!(
            "bound call: ${VARIABLE} {} bytes, {}",
            bound_len.unwrap_or("?"),
            match (placeholder_only, bound_hash == Some(value_hash)) {
                (true, _) => "not the value, and the value in no readable environ",
                (false, true) => "THE VALUE itself",
                (false, false) =>
                    "not a placeholder of the value's length, or the value \
                                   found in a readable environ",
            }
        ),
        format!(
            "control (unbound): the value {} in its own environ",
            if finder_works { "found" } else { "NOT found" }
        ),
    ];
    for k in [
        "1-environ",
        "1-mem",
        "1-fd",
        "self-environ",
        "self-mem",
        "self-fd",
    ] {
        let a = said(&bound, k).unwrap_or("no answer");
        let shown = match a.strip_prefix("errno ").map(str::parse::<i32>) {
            Some(Ok(n)) => format!("errno {n} ({:?})", nix::errno::Errno::from_raw(n)),
            _ => a.to_string(),
        };
        got.push(format!("/proc/{} {shown}", k.replacen('-', "/", 1)));
    }
    let verdict = match (
        finder_works && own_readable,
        placeholder_only && broker_refused,
    ) {
        (false, _) => Verdict::Inconclusive,
        (true, true) => Verdict::Pass,
        (true, false) => Verdict::Fail,
    };
    Probe::of(user, tried, Expect::Holds, got.join(", "), verdict)
}
