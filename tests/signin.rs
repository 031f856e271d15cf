//! Provider programs as real users: fake sign-in programs (shell scripts,
//! root-owned, run as the user through the launcher) print good and bad
//! links; only the good one gives a prompt, each bad one its own error, and
//! nothing is ever read from a file the user could write.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use std::time::{Duration, Instant};

use common::{launcher, live_processes_of, rt, TestUser};
use tono_seal::env::provider::{Provider, ProviderSpec};
use tono_seal::env::EnvConfig;
use tono_seal::turn::run_as::{
    resolve, AgentAnswer, AgentKind, AllottedUser, Answer, PersonAnswer, Question, Resolution,
    RunKind, Speaker,
};
use tono_seal::turn::signin::{ProviderAction, ProviderRun, SignInLimits};
use tono_seal::turn::signin_error::SignInError;
use tono_seal::turn::RunAs;

/// A root-owned folder of fake provider programs, readable by everyone.
struct Fakes {
    dir: tempfile::TempDir,
}

impl Fakes {
    fn new() -> Self {
        let dir = common::tempdir();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { dir }
    }

    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

fn allotted(u: &TestUser) -> AllottedUser {
    AllottedUser {
        name: u.name().into(),
        uid: u.user.uid,
        gid: u.user.gid,
    }
}

/// Asks a fixed "Cloud answer" for `kind`: `u` is a member of a per-person
/// agent, or `person` says otherwise.
fn run_as(u: &TestUser, kind: RunKind, person: PersonAnswer) -> Resolution {
    let question = Question {
        tenant: "t".into(),
        agent: "a".into(),
        speaker: Speaker::Person("p".into()),
        kind,
    };
    let answer = Answer {
        agent: AgentAnswer::Active {
            kind: AgentKind::PerPerson,
            user: allotted(u),
        },
        person: Some(person),
    };
    resolve(&question, &answer)
}

fn member_run(u: &TestUser, kind: RunKind) -> RunAs {
    match run_as(u, kind, PersonAnswer::Member { user: allotted(u) }) {
        Resolution::Run(r) => r,
        Resolution::NoTurn(n) => panic!("{n:?}"),
    }
}

fn config_with(program: &Path, action: ProviderAction) -> Arc<EnvConfig> {
    let mut spec = ProviderSpec::builtin(Provider::Openai);
    let argv = Some(vec![program.display().to_string()]);
    match action {
        ProviderAction::SignIn => spec.sign_in = argv,
        ProviderAction::SignOut => spec.sign_out = argv,
        ProviderAction::Status => spec.status = argv,
    }
    let mut config = EnvConfig::default();
    config.providers.insert(Provider::Openai, spec);
    Arc::new(config)
}

const LIMITS: SignInLimits = SignInLimits {
    wait: Duration::from_secs(3),
    max_bytes: 64 * 1024,
    session: Duration::from_secs(60),
};

#[test]
fn only_the_providers_own_link_from_the_pipe_is_a_prompt() {
    need_root!();
    let u = TestUser::bare();
    let fakes = Fakes::new();
    let rt = rt();
    let launcher = launcher();
    let receipts = Receipts::new("signin");
    let sign_in = |name: &str, body: &str| {
        let program = fakes.script(name, body);
        let config = config_with(&program, ProviderAction::SignIn);
        let run = ProviderRun::new(
            &member_run(&u, RunKind::SignIn),
            Provider::Openai,
            ProviderAction::SignIn,
            &config,
        )
        .unwrap()
        .with_audit(receipts.log.clone());
        let started = Instant::now();
        let result = rt.block_on(run.sign_in(&launcher, LIMITS));
        (result, started.elapsed())
    };

    // The good link: a prompt, while the sign-in goes on running as the
    // user; stopping the session kills it.
    let (result, _) = sign_in(
        "good",
        "echo 'Follow these steps to sign in:'\n\
         echo '1. Open this link: https://auth.openai.com/codex/device'\n\
         echo '2. Enter this one-time code (expires in 15 minutes): WXYZ-98765'\n\
         exec sleep 1000",
    );
    let (prompt, session) = result.unwrap();
    assert_eq!(prompt.url, "https://auth.openai.com/codex/device");
    assert_eq!(prompt.code.as_deref(), Some("WXYZ-98765"));
    assert!(
        live_processes_of(u.user.uid) >= 1,
        "the sign-in still runs as the user"
    );
    let stopping = Instant::now();
    rt.block_on(session.stop());
    eprintln!("stopping the good sign-in took {:?}", stopping.elapsed());
    assert_eq!(
        live_processes_of(u.user.uid),
        0,
        "stopping the session kills the sign-in"
    );

    let code = "echo 'code: WXYZ-98765'";
    let bad: &[(&str, String, &str)] = &[
        ("suffix", format!("echo 'https://auth.openai.com.evil.example/codex/device'\n{code}\nsleep 1000"), "link_host_prefix"),
        ("path", format!("echo 'https://evil.example/auth.openai.com'\n{code}\nsleep 1000"), "link_host"),
        ("userinfo", format!("echo 'https://auth.openai.com@evil.example/'\n{code}\nsleep 1000"), "link_userinfo"),
        ("http", format!("echo 'http://auth.openai.com/codex/device'\n{code}\nsleep 1000"), "link_not_https"),
        ("punycode", format!("echo 'https://xn--uth-8cd.openai.com/codex/device'\n{code}\nsleep 1000"), "link_idna"),
        ("cyrillic", format!("echo 'https://аuth.openai.com/codex/device'\n{code}\nsleep 1000"), "link_idna"),
        ("port", format!("echo 'https://auth.openai.com:8443/codex/device'\n{code}\nsleep 1000"), "link_port"),
        ("javascript", format!("echo 'javascript:alert(document.cookie)'\n{code}\nsleep 1000"), "link_scheme"),
        // Two writes: the first alone looks like the real host.
        ("split", format!("printf 'Open https://auth.openai.com'\nsleep 0.5\nprintf '.evil.example/codex/device\\n'\n{code}\nsleep 1000"), "link_host_prefix"),
        // 10 MiB of noise before the good link: the cap stops it first.
        ("noise", format!("head -c 10485760 /dev/zero | tr '\\0' x\necho\necho 'https://auth.openai.com/codex/device'\n{code}\nsleep 1000"), "too_much_output"),
        ("silent", "exec sleep 1000".into(), "timed_out"),
        // The link goes to a file the user owns; the worker never reads it.
        ("file", "mkdir -p \"$CODEX_HOME\"\necho 'https://auth.openai.com/codex/device WXYZ-98765' > \"$CODEX_HOME/login-link\"\nexit 0".to_string(), "no_link"),
        ("nocode", "echo 'https://auth.openai.com/codex/device'\nexit 0".into(), "no_code"),
    ];
    let mut wrong = Vec::new();
    for (name, body, want) in bad {
        let (result, took) = sign_in(name, body);
        match result {
            Ok((p, _)) => wrong.push(format!("{name}: accepted {p:?}")),
            Err(e) if e.code() != *want => {
                wrong.push(format!("{name}: want {want}, got {} ({e})", e.code()))
            }
            Err(e) => {
                eprintln!("{name:<10} -> {:<18} {took:?} {e}", e.code());
                assert!(took < Duration::from_secs(8), "{name} took {took:?}");
            }
        }
        // Every refused sign-in was killed and reaped before its error.
        assert_eq!(
            live_processes_of(u.user.uid),
            0,
            "{name}: the sign-in outlived its refusal"
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The file the fake wrote exists: it was there to be read, and was not.
    assert!(u.home().join(".codex/login-link").exists());
    // A receipt for each: the stopped good sign-in, then each refusal's code.
    let mut want = vec!["stopped"];
    want.extend(bad.iter().map(|(_, _, code)| *code));
    let got: Vec<String> = receipts
        .records()
        .iter()
        .map(|r| {
            assert_eq!(r["kind"], "provider", "{r}");
            assert_eq!(r["tool"], "provider sign-in", "{r}");
            assert_eq!(r["uid"], u.user.uid, "{r}");
            r["launch_error"].as_str().unwrap_or("-").to_owned()
        })
        .collect();
    assert_eq!(got, want);
}

/// An audit log of the test's own, in a root-only folder.
struct Receipts {
    dir: common::AuditDir,
    log: Arc<tono_seal::audit::AuditLog>,
}

impl Receipts {
    fn new(tag: &str) -> Self {
        let dir = common::AuditDir::new(tag);
        let config = tono_seal::audit::AuditConfig::at(dir.log());
        let log = Arc::new(tono_seal::audit::AuditLog::open(config).unwrap());
        Self { dir, log }
    }

    fn records(&self) -> Vec<serde_json::Value> {
        self.dir.records()
    }
}

#[test]
fn provider_programs_run_only_as_the_run_the_cloud_named() {
    need_root!();
    let u = TestUser::bare();
    let fakes = Fakes::new();
    let status = fakes.script(
        "status",
        "id -u; id -g; id -G; tr '\\0' '\\n' < /proc/$$/environ | sort",
    );
    let config = config_with(&status, ProviderAction::Status);
    let rt = rt();

    // A run resolved for a turn cannot start a sign-in or a status check.
    let turn = member_run(&u, RunKind::Turn);
    let err =
        ProviderRun::new(&turn, Provider::Openai, ProviderAction::Status, &config).unwrap_err();
    assert!(matches!(err, SignInError::WrongRun { .. }), "{err}");
    // Someone who left, or is unknown, gets no sign-in at all.
    for person in [PersonAnswer::Left, PersonAnswer::AllowedNoAccount] {
        match run_as(&u, RunKind::SignIn, person) {
            Resolution::NoTurn(n) => assert_eq!(n.code, "login_not_allowed"),
            Resolution::Run(r) => panic!("{r:?}"),
        }
    }
    // Bedrock has no link sign-in.
    let err = ProviderRun::new(
        &member_run(&u, RunKind::SignIn),
        Provider::Bedrock,
        ProviderAction::SignIn,
        &config,
    )
    .unwrap_err();
    assert_eq!(err.code(), "no_program");

    // The status check runs as the user, no groups, with the built env.
    let run = ProviderRun::new(
        &member_run(&u, RunKind::StatusCheck),
        Provider::Openai,
        ProviderAction::Status,
        &config,
    )
    .unwrap();
    // A Bedrock run's environment holds the worker's AWS secret: the run's
    // Debug (as a log line would print it) names it and shows no value.
    let canary = format!("aws-secret-{:016x}", rand::random::<u64>());
    let mut bedrock = EnvConfig {
        bedrock: Some(tono_seal::env::BedrockSettings {
            region: "eu-west-1".into(),
            access_key_id: Some("AKIAEXAMPLE".into()),
            secret_access_key: Some(zeroize::Zeroizing::new(canary.clone())),
            session_token: None,
        }),
        ..EnvConfig::default()
    };
    let mut spec = ProviderSpec::builtin(Provider::Bedrock);
    spec.status = Some(vec!["/bin/true".into()]);
    bedrock.providers.insert(Provider::Bedrock, spec);
    let aws = ProviderRun::new(
        &member_run(&u, RunKind::StatusCheck),
        Provider::Bedrock,
        ProviderAction::Status,
        &Arc::new(bedrock),
    )
    .unwrap();
    assert!(
        aws.env()
            .iter()
            .any(|(k, v)| k == "AWS_SECRET_ACCESS_KEY" && *v == canary),
        "positive control: the run carries the secret"
    );
    let shown = format!("{aws:?}");
    assert!(shown.contains("AWS_SECRET_ACCESS_KEY=…"), "{shown}");
    assert!(
        !shown.contains(&canary),
        "the secret is in the run's Debug: {shown}"
    );

    let receipts = Receipts::new("status");
    let run = run.with_audit(receipts.log.clone());
    let outcome = rt.block_on(run.run(&launcher(), Duration::from_secs(10)));
    assert_eq!(outcome.exit_code, Some(0), "{outcome:?}");
    let records = receipts.records();
    assert_eq!(records.len(), 1, "one receipt for the status check");
    assert_eq!(
        (
            &records[0]["kind"],
            &records[0]["tool"],
            &records[0]["exit_code"]
        ),
        (&json!("provider"), &json!("provider status"), &json!(0))
    );
    assert_eq!(records[0]["stdout_bytes"], outcome.stdout.len());
    let id = u.user.uid.to_string();
    let lines: Vec<&str> = outcome.stdout.lines().collect();
    assert_eq!(&lines[..3], &[id.as_str(), id.as_str(), id.as_str()]);
    let home = u.home().display().to_string();
    let mut want = [
        format!("CODEX_HOME={home}/.codex"),
        format!("HOME={home}"),
        "LANG=C.UTF-8".to_string(),
        format!("LOGNAME={}", u.name()),
        "PATH=/usr/local/bin:/usr/bin:/bin".into(),
        "SHELL=/bin/sh".into(),
        "TMPDIR=/tmp".into(),
        format!("USER={}", u.name()),
    ];
    want.sort();
    assert_eq!(
        &lines[3..],
        want.iter().map(String::as_str).collect::<Vec<_>>()
    );

    // The allotment must match the passwd entry exactly.
    let other = AllottedUser {
        uid: u.user.uid + 1,
        ..allotted(&u)
    };
    let q = Question {
        tenant: "t".into(),
        agent: "a".into(),
        speaker: Speaker::Schedule,
        kind: RunKind::StatusCheck,
    };
    let answer = Answer {
        agent: AgentAnswer::Active {
            kind: AgentKind::SharedLogin,
            user: other,
        },
        person: None,
    };
    let Resolution::Run(wrong) = resolve(&q, &answer) else {
        panic!("resolves")
    };
    let err =
        ProviderRun::new(&wrong, Provider::Openai, ProviderAction::Status, &config).unwrap_err();
    assert_eq!(err.code(), "setup_failed", "{err}");
}
