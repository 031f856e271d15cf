//! The fresh environment, as a real user sees it: the worker's environment
//! is stuffed with canaries and the tool's `/proc/$$/environ` must be
//! exactly the set `EnvBuilder` makes, for no provider, each provider, a
//! proxy with a password, and a turn's own credential.

mod common;

use std::sync::Arc;

use common::{launcher, rt, stderr, tono, tono_env, TestUser};
use serde_json::json;
use tono_seal::classify::Policy;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions};
use tono_seal::env::{EnvConfig, RunEnv, TurnCredential};
use tono_seal::Outcome;

/// What a compromised or careless worker might have in its environment.
const CANARIES: &[(&str, &str)] = &[
    ("AWS_SECRET_ACCESS_KEY", "canary-worker-aws-secret"),
    ("AWS_ACCESS_KEY_ID", "canary-worker-aws-id"),
    ("AWS_REGION", "canary-region"),
    ("LD_PRELOAD", "/tmp/canary.so"),
    ("BASH_ENV", "/tmp/canary.sh"),
    ("PROMPT_COMMAND", "canary-prompt"),
    ("GIT_SSH_COMMAND", "canary-ssh"),
    ("NODE_OPTIONS", "--require /tmp/canary.js"),
    ("http_proxy", "http://worker:canary-pw@proxy.canary:3128"),
    ("HTTPS_PROXY", "http://worker:canary-pw@proxy.canary:3128"),
    ("CODEX_HOME", "/root/.codex"),
    ("CLAUDE_CONFIG_DIR", "/root/.claude"),
    ("TONO_TURN_TOKEN", "canary-turn-token"),
    ("PATH", "/tmp/canary:/usr/bin:/bin"),
    ("HOME", "/root"),
];

const CONFIG: &str = r#"{
  "proxy": "http://egress:pr0xy-pw@proxy.test:3128",
  "no_proxy": "localhost,127.0.0.1",
  "bedrock": {
    "region": "eu-central-1",
    "access_key_id": "AKIAINFERENCEONLY",
    "secret_access_key": "configured-inference-secret"
  }
}"#;

const SHOW_ENV: &str = "tr '\\0' '\\n' < /proc/$$/environ | sort";

fn base(u: &TestUser) -> Vec<String> {
    let home = u.home().display().to_string();
    vec![
        format!("HOME={home}"),
        "LANG=C.UTF-8".into(),
        format!("LOGNAME={}", u.name()),
        "PATH=/usr/local/bin:/usr/bin:/bin".into(),
        "SHELL=/bin/sh".into(),
        "TMPDIR=/tmp".into(),
        format!("USER={}", u.name()),
    ]
}

const PROXY: [&str; 6] = [
    "HTTPS_PROXY=http://proxy.test:3128",
    "HTTP_PROXY=http://proxy.test:3128",
    "NO_PROXY=localhost,127.0.0.1",
    "http_proxy=http://proxy.test:3128",
    "https_proxy=http://proxy.test:3128",
    "no_proxy=localhost,127.0.0.1",
];

/// Runs the env-printing shell tool through the CLI worker with the
/// canaries in its own environment.
fn tool_env(u: &TestUser, extra: &[&str]) -> Vec<String> {
    let call = json!({"tool": "shell", "args": {"command": SHOW_ENV}});
    let mut args = vec!["call", "--user", u.name()];
    args.extend_from_slice(extra);
    let o = tono_env(&args, call.to_string().as_bytes(), CANARIES);
    let out: Outcome =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    out.stdout.lines().map(String::from).collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn the_tool_sees_exactly_the_built_environment_for_each_provider() {
    need_root!();
    let u = TestUser::bare();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("env.json");
    std::fs::write(&config, CONFIG).unwrap();
    // It holds the proxy's password: root's and closed to others, or refused.
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let config = config.to_str().unwrap();
    let home = u.home().display().to_string();

    // No config, no provider: the base seven and nothing of the worker's.
    assert_eq!(tool_env(&u, &[]), sorted(base(&u)));

    // A proxy with a password, by default network proxy: the call's own
    // end of it, and nothing of the proxy's address or credentials.
    let mut behind = base(&u);
    behind.extend(
        [
            "ALL_PROXY",
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "all_proxy",
            "http_proxy",
            "https_proxy",
        ]
        .map(|name| format!("{name}=http://127.0.0.1:3128")),
    );
    behind.extend(["NO_PROXY", "no_proxy"].map(|name| format!("{name}=localhost,127.0.0.1,::1")));
    assert_eq!(tool_env(&u, &["--env-config", config]), sorted(behind));

    // On the host's network: the proxy's own address, with the password
    // (and the user name) gone.
    let config_host = ["--env-config", config, "--network", "host"];
    let mut want = base(&u);
    want.extend(PROXY.map(String::from));
    assert_eq!(tool_env(&u, &config_host), sorted(want.clone()));

    // OpenAI: its login folder in the home, and no AWS_* at all although
    // the worker has AWS variables and a Bedrock config.
    let mut openai = want.clone();
    openai.push(format!("CODEX_HOME={home}/.codex"));
    let got = tool_env(&u, &[&config_host[..], &["--provider", "openai"]].concat());
    assert_eq!(got, sorted(openai));

    let mut anthropic = want.clone();
    anthropic.push(format!("CLAUDE_CONFIG_DIR={home}/.claude"));
    let got = tool_env(
        &u,
        &[&config_host[..], &["--provider", "anthropic"]].concat(),
    );
    assert_eq!(got, sorted(anthropic));

    // Bedrock: the configured inference-only settings, never the worker's.
    let mut bedrock = want;
    bedrock.extend([
        format!("CLAUDE_CONFIG_DIR={home}/.claude"),
        "CLAUDE_CODE_USE_BEDROCK=1".into(),
        "AWS_REGION=eu-central-1".into(),
        "AWS_DEFAULT_REGION=eu-central-1".into(),
        "AWS_ACCESS_KEY_ID=AKIAINFERENCEONLY".into(),
        "AWS_SECRET_ACCESS_KEY=configured-inference-secret".into(),
    ]);
    let got = tool_env(&u, &[&config_host[..], &["--provider", "bedrock"]].concat());
    assert_eq!(got, sorted(bedrock));
    for line in tool_env(&u, &[&config_host[..], &["--provider", "bedrock"]].concat()) {
        assert!(
            !line.contains("canary"),
            "a canary reached the tool: {line}"
        );
    }
}

#[test]
fn bad_settings_are_refused_with_a_clear_error() {
    need_root!();
    let u = TestUser::bare();
    let dir = tempfile::tempdir().unwrap();
    let call = json!({"tool": "shell", "args": {"command": "true"}});
    for (config, says) in [
        (r#"{"proxy": "ftp://proxy:21"}"#, "scheme \"ftp\""),
        (r#"{"proxy": "proxy:3128"}"#, "proxy address is not usable"),
        (r#"{"proxies": "x"}"#, "unknown field"),
        (
            r#"{"providers": {"openai": {"login_var": "CODEX_HOME", "login_dir": "../../root"}}}"#,
            "not a plain path inside the home",
        ),
        (
            r#"{"providers": {"openai": {"login_var": "BAD=NAME", "login_dir": ".codex"}}}"#,
            "not a valid environment variable name",
        ),
    ] {
        let path = dir.path().join("bad.json");
        std::fs::write(&path, config).unwrap();
        let o = tono(
            &[
                "call",
                "--user",
                u.name(),
                "--env-config",
                path.to_str().unwrap(),
            ],
            call.to_string().as_bytes(),
        );
        assert_eq!(o.status.code(), Some(2), "{config}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{config}: {}", stderr(&o));
    }
    let o = tono(
        &["call", "--user", u.name(), "--provider", "OpenAI"],
        call.to_string().as_bytes(),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown provider"), "{}", stderr(&o));
    // Bedrock without the worker's Bedrock settings: refused, not run.
    let o = tono(
        &["call", "--user", u.name(), "--provider", "bedrock"],
        call.to_string().as_bytes(),
    );
    let out: Outcome = serde_json::from_slice(&o.stdout).unwrap();
    let error = out.launch_error.expect("a typed launch error");
    assert_eq!(error.code, "env_invalid");
    assert!(error.message.contains("bedrock settings"), "{error:?}");
    assert_eq!(out.exit_code, None, "nothing ran");
}

#[test]
fn the_turn_credential_arrives_by_its_name_and_nothing_else_is_added() {
    need_root!();
    let u = TestUser::bare();
    let credential = TurnCredential::new("TONO_TURN_TOKEN", "turn-7f3a-own".into()).unwrap();
    let options = RunOptions {
        env: RunEnv {
            config: Arc::new(EnvConfig::default()),
            provider: None,
            credential: Some(credential),
        },
        ..RunOptions::default()
    };
    let launcher = launcher();
    let policy = Policy::default();
    let raw = json!({"tool": "shell", "args": {"command": SHOW_ENV}}).to_string();
    let out = rt().block_on(drop_and_run(&DropRequest {
        launcher: &launcher,
        policy: &policy,
        user: &u.user,
        grants: &[],
        call: raw.as_bytes(),
        options,
    }));
    let mut want = base(&u);
    want.push("TONO_TURN_TOKEN=turn-7f3a-own".into());
    let got: Vec<String> = out.stdout.lines().map(String::from).collect();
    assert_eq!(got, sorted(want), "{out:?}");
}
