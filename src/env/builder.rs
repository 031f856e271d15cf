//! The fresh environment of a launched program.
//!
//! [`EnvBuilder`] starts empty and adds variables by name; it is the only
//! source of a launch plan's environment. It never reads the worker's own
//! environment: `PATH` is a fixed system path; `HOME`, `USER`, `LOGNAME` and
//! `SHELL` come from the passwd entry; everything else comes from the
//! operator's [`EnvConfig`] or from the call ([`RunEnv`]):
//!
//! - the provider's login location inside the home (`CODEX_HOME`,
//!   `CLAUDE_CONFIG_DIR`, from the provider table);
//! - the turn's own credential, under the name the turn gave it;
//! - for a Bedrock agent only, `AWS_REGION` (and `AWS_DEFAULT_REGION`) and
//!   the worker's configured inference-only credentials; for any other
//!   provider, or none, no `AWS_*` variable at all;
//! - a proxy, as `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` and their lowercase
//!   forms (curl reads only `http_proxy` in lowercase): on the host's
//!   network the configured one with the whole userinfo removed
//!   (`http://u:p@proxy:3128` becomes `http://proxy:3128`; a user name
//!   alone can be a token, so it goes too); in network mode `proxy` the
//!   worker's end inside the call's namespace, `http://127.0.0.1:3128`
//!   (also as `ALL_PROXY`); in mode `none`, no proxy at all.
//!
//! Names are validated (non-empty, no `=`, no NUL) and values hold no NUL;
//! anything else is an [`EnvError`].
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use zeroize::Zeroizing;

use super::name::valid_env_name;
use super::network::Network;
use super::provider::{Provider, ProviderSpec};
use crate::user::TargetUser;

/// The `PATH` every launched program gets.
pub const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The locale every launched program gets.
pub const DEFAULT_LANG: &str = "C.UTF-8";

/// Why a variable was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// The name is empty or holds `=` or NUL.
    #[error("invalid environment variable name {0:?}")]
    BadName(String),
    /// The value holds NUL.
    #[error("the value of {0} holds a NUL byte")]
    BadValue(String),
    /// The proxy address is not a usable proxy URL.
    #[error("the proxy address is not usable: {0}")]
    BadProxy(String),
    /// The provider table entry is wrong.
    #[error("provider {provider}: {reason}")]
    BadProvider {
        /// The provider.
        provider: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A Bedrock agent ran without the worker's Bedrock settings.
    #[error("a Bedrock agent needs the worker's bedrock settings (region, credentials)")]
    BedrockUnconfigured,
}

/// The worker's AWS settings for Bedrock agents (inference-only keys).
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BedrockSettings {
    /// `AWS_REGION`.
    pub region: String,
    /// `AWS_ACCESS_KEY_ID`.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// `AWS_SECRET_ACCESS_KEY`, wiped when the settings are dropped.
    #[serde(default)]
    pub secret_access_key: Option<Zeroizing<String>>,
    /// `AWS_SESSION_TOKEN`, wiped when the settings are dropped.
    #[serde(default)]
    pub session_token: Option<Zeroizing<String>>,
}

impl fmt::Debug for BedrockSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BedrockSettings")
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "…"),
            )
            .field("session_token", &self.session_token.as_ref().map(|_| "…"))
            .finish()
    }
}

/// The operator's settings for launched programs (a JSON file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvConfig {
    /// The proxy every program uses, if any (`http://host:port`).
    #[serde(default)]
    pub proxy: Option<String>,
    /// `NO_PROXY`.
    #[serde(default)]
    pub no_proxy: Option<String>,
    /// The network of a call that chooses none (see
    /// [`EnvConfig::network_for`]).
    #[serde(default)]
    pub network: Option<super::network::Network>,
    /// In network `proxy`, the only destination hosts a call may ask the
    /// proxy for (exact names and `*.suffix`); all, if absent.
    #[serde(default)]
    pub proxy_allow_hosts: Option<super::network::AllowHosts>,
    /// Settings for Bedrock agents.
    #[serde(default)]
    pub bedrock: Option<BedrockSettings>,
    /// Entries that replace the built-in provider table.
    #[serde(default)]
    pub providers: BTreeMap<Provider, ProviderSpec>,
    /// The home of a tool call that chooses none (`ephemeral`,
    /// `read-only`, `persistent`); `ephemeral` if absent.
    #[serde(default)]
    pub home: Option<super::HomeMode>,
    /// The home per user (login name), over `home`.
    #[serde(default)]
    pub home_for_users: BTreeMap<String, super::HomeMode>,
    /// Paths inside every home that tool calls never see, besides
    /// `~/.tono` and each provider's login folder (plain relative paths).
    #[serde(default)]
    pub hidden_in_home: Vec<String>,
    /// Syscalls refused to every tool besides the launcher's built-in
    /// filter, by name (each with `EPERM`).
    #[serde(default)]
    pub refuse_syscalls: Vec<String>,
    /// Secret names bound to the hosts their values may be sent to: a
    /// call naming one gets a placeholder, and the call's broker adds the
    /// value only on the way to those hosts ([`crate::broker`]).
    #[serde(default)]
    pub bind: BTreeMap<String, super::Binding>,
    /// Bindings per user (login name), each replacing `bind`'s entry of
    /// the same secret for that user.
    #[serde(default)]
    pub bind_for_users: BTreeMap<String, BTreeMap<String, super::Binding>>,
    /// A PEM file of CA certificates the broker trusts for bound hosts
    /// besides the system's roots (a private CA; the tests' own).
    #[serde(default)]
    pub upstream_ca: Option<std::path::PathBuf>,
    /// Address ranges, by name ([`super::network::ALLOWABLE_RANGES`]),
    /// that the worker's end of a call holding a bound secret may connect
    /// to although the egress rules refuse them; none by default.
    #[serde(default)]
    pub egress_allow_ranges: Vec<String>,
}

impl EnvConfig {
    /// Parses and checks a JSON config.
    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        let config: Self = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        for (p, spec) in &config.providers {
            spec.check()
                .map_err(|e| format!("provider {}: {e}", p.name()))?;
        }
        if let Some(proxy) = &config.proxy {
            sanitize_proxy(proxy).map_err(|e| e.to_string())?;
        }
        for path in &config.hidden_in_home {
            super::home::valid_hidden_path(path).map_err(|e| format!("hidden_in_home: {e}"))?;
        }
        for name in &config.egress_allow_ranges {
            if !super::network::ALLOWABLE_RANGES.contains(&name.as_str()) {
                return Err(format!(
                    "egress_allow_ranges: {name:?} is not a range name (one of {})",
                    super::network::ALLOWABLE_RANGES.join(", ")
                ));
            }
        }
        if let Some(path) = &config.upstream_ca {
            if !path.is_absolute() {
                return Err(format!(
                    "upstream_ca: {} is not an absolute path",
                    path.display()
                ));
            }
        }
        // The default mode must work: `proxy` needs a proxy the worker can
        // speak to.
        let default = config.network_for(None).map_err(|e| e.to_string())?;
        if let (Network::Proxy, Some(proxy)) = (default, &config.proxy) {
            super::network::ProxyUpstream::parse(proxy)?;
        }
        Ok(config)
    }

    /// The network a call gets: `chosen` (the call's or the turn's), else
    /// this config's, else `proxy` if a proxy is configured and `host` if
    /// not. `proxy` needs a configured proxy.
    pub fn network_for(&self, chosen: Option<Network>) -> Result<Network, EnvError> {
        let mode = chosen.or(self.network).unwrap_or(match self.proxy {
            Some(_) => Network::Proxy,
            None => Network::Host,
        });
        if mode == Network::Proxy && self.proxy.is_none() {
            return Err(EnvError::BadProxy(
                "network mode proxy needs a proxy in the environment config".into(),
            ));
        }
        Ok(mode)
    }

    /// The bindings of `user`'s secrets: `bind`, with `bind_for_users`'s
    /// entries for that user over it.
    pub fn bindings(&self) -> super::Bindings<'_> {
        super::Bindings {
            all: &self.bind,
            for_users: &self.bind_for_users,
        }
    }

    /// The table entry of `provider`: the config's, else the built-in.
    /// The home mode the config gives `user`'s calls, if any.
    pub fn home_for(&self, user: &str) -> Option<super::HomeMode> {
        self.home_for_users.get(user).copied().or(self.home)
    }

    /// What the config says of `provider` (its entry, else the built-in).
    pub fn provider(&self, provider: Provider) -> ProviderSpec {
        self.providers
            .get(&provider)
            .cloned()
            .unwrap_or_else(|| ProviderSpec::builtin(provider))
    }
}

/// A turn's own credential: made by the turn, handed over by name, wiped
/// when dropped, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct TurnCredential {
    name: String,
    value: Zeroizing<String>,
}

impl TurnCredential {
    /// A credential for the variable `name`.
    pub fn new(name: &str, value: String) -> Result<Self, EnvError> {
        check_var(name, &value)?;
        Ok(Self {
            name: name.to_owned(),
            value: Zeroizing::new(value),
        })
    }

    /// The variable it goes to.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for TurnCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TurnCredential({}=…)", self.name)
    }
}

/// What one run's environment is made of, beside its user.
#[derive(Debug, Clone, Default)]
pub struct RunEnv {
    /// The operator's settings.
    pub config: Arc<EnvConfig>,
    /// The agent's provider, if the program is (or runs) a provider CLI.
    pub provider: Option<Provider>,
    /// The turn's own credential.
    pub credential: Option<TurnCredential>,
}

/// Removes the userinfo (user and password) and any path from a proxy URL.
pub fn sanitize_proxy(proxy: &str) -> Result<String, EnvError> {
    let url = url::Url::parse(proxy).map_err(|e| EnvError::BadProxy(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https" | "socks5" | "socks5h") {
        return Err(EnvError::BadProxy(format!(
            "scheme {:?} is not http, https, socks5 or socks5h",
            url.scheme()
        )));
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| EnvError::BadProxy("it names no host".into()))?;
    Ok(match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    })
}

fn check_var(name: &str, value: &str) -> Result<(), EnvError> {
    if valid_env_name(name).is_err() {
        return Err(EnvError::BadName(name.escape_debug().to_string()));
    }
    if value.contains('\0') {
        return Err(EnvError::BadValue(name.to_owned()));
    }
    Ok(())
}

/// An environment built by name. A value can be a turn's credential or the
/// worker's Bedrock secret, so a value replaced or left unbuilt is wiped,
/// and `Debug` shows names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EnvBuilder {
    vars: Vec<(String, String)>,
}

impl fmt::Debug for EnvBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.vars.iter().map(|(name, _)| format!("{name}=…")))
            .finish()
    }
}

impl Drop for EnvBuilder {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        for (_, value) in &mut self.vars {
            value.zeroize();
        }
    }
}

impl EnvBuilder {
    /// An empty environment.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The base environment of `user`: `PATH`, `HOME`, `USER`, `LOGNAME`,
    /// `SHELL`, `LANG`, `TMPDIR`.
    pub fn for_user(user: &TargetUser) -> Self {
        let mut env = Self::empty();
        let home = user.home.display().to_string();
        let shell = user.shell.display().to_string();
        for (k, v) in [
            ("PATH", SYSTEM_PATH),
            ("HOME", home.as_str()),
            ("USER", user.name.as_str()),
            ("LOGNAME", user.name.as_str()),
            ("SHELL", shell.as_str()),
            ("LANG", DEFAULT_LANG),
            ("TMPDIR", "/tmp"),
        ] {
            // Passwd fields hold neither NUL nor a bad name.
            let _ = env.set(k, v);
        }
        env
    }

    /// The whole environment of one run of `user` on `network`: the base,
    /// then the provider's login location and fixed variables, the Bedrock
    /// settings (Bedrock only), the proxy as the network reaches it, and
    /// the turn's credential.
    pub fn for_run(user: &TargetUser, run: &RunEnv, network: Network) -> Result<Self, EnvError> {
        let mut env = Self::for_user(user);
        if let Some(provider) = run.provider {
            let spec = run.config.provider(provider);
            env.provider(user, provider, &spec)?;
            if provider == Provider::Bedrock {
                let aws = run
                    .config
                    .bedrock
                    .as_ref()
                    .ok_or(EnvError::BedrockUnconfigured)?;
                env.bedrock(aws)?;
            }
        }
        match (network, &run.config.proxy) {
            (Network::Host, Some(proxy)) => {
                env.proxy(proxy, run.config.no_proxy.as_deref())?;
            }
            (Network::Proxy, _) => {
                env.call_proxy()?;
            }
            _ => {}
        }
        if let Some(credential) = &run.credential {
            env.set(&credential.name, &credential.value)?;
        }
        Ok(env)
    }

    /// Sets `name` to `value`, replacing an earlier value.
    pub fn set(&mut self, name: &str, value: &str) -> Result<&mut Self, EnvError> {
        check_var(name, value)?;
        match self.vars.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => {
                zeroize::Zeroize::zeroize(&mut slot.1);
                slot.1 = value.to_owned();
            }
            None => self.vars.push((name.to_owned(), value.to_owned())),
        }
        Ok(self)
    }

    /// The provider's login location inside `user`'s home, and its fixed
    /// variables.
    pub fn provider(
        &mut self,
        user: &TargetUser,
        provider: Provider,
        spec: &ProviderSpec,
    ) -> Result<&mut Self, EnvError> {
        spec.check().map_err(|reason| EnvError::BadProvider {
            provider: provider.name(),
            reason,
        })?;
        let dir = user.home.join(&spec.login_dir);
        self.set(&spec.login_var, &dir.display().to_string())?;
        for (k, v) in &spec.fixed_env {
            self.set(k, v)?;
        }
        Ok(self)
    }

    /// The AWS settings a Bedrock agent cannot run without.
    pub fn bedrock(&mut self, aws: &BedrockSettings) -> Result<&mut Self, EnvError> {
        self.set("AWS_REGION", &aws.region)?;
        self.set("AWS_DEFAULT_REGION", &aws.region)?;
        for (name, value) in [
            ("AWS_ACCESS_KEY_ID", aws.access_key_id.as_deref()),
            (
                "AWS_SECRET_ACCESS_KEY",
                aws.secret_access_key.as_deref().map(String::as_str),
            ),
            (
                "AWS_SESSION_TOKEN",
                aws.session_token.as_deref().map(String::as_str),
            ),
        ] {
            if let Some(value) = value {
                self.set(name, value)?;
            }
        }
        Ok(self)
    }

    /// The proxy, without its userinfo, in upper and lower case.
    pub fn proxy(&mut self, proxy: &str, no_proxy: Option<&str>) -> Result<&mut Self, EnvError> {
        let clean = sanitize_proxy(proxy)?;
        for name in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
            self.set(name, &clean)?;
        }
        if let Some(no_proxy) = no_proxy {
            self.set("NO_PROXY", no_proxy)?;
            self.set("no_proxy", no_proxy)?;
        }
        Ok(self)
    }

    /// The worker's end of the proxy inside the call's own network
    /// namespace (`http://127.0.0.1:3128`, no userinfo: the worker adds
    /// the proxy's credentials), in upper and lower case and as
    /// `ALL_PROXY`; loopback itself goes direct (`NO_PROXY`).
    pub fn call_proxy(&mut self) -> Result<&mut Self, EnvError> {
        let local = format!("http://{}", super::network::CALL_PROXY_ADDR);
        for name in super::network::PROXY_VARIABLES {
            self.set(name, &local)?;
        }
        for name in ["NO_PROXY", "no_proxy"] {
            self.set(name, "localhost,127.0.0.1,::1")?;
        }
        Ok(self)
    }

    /// The variables, in insertion order.
    pub fn build(mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.vars)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> TargetUser {
        TargetUser {
            name: "ann".into(),
            uid: 6000,
            gid: 6000,
            home: "/home/ann".into(),
            shell: "/bin/sh".into(),
        }
    }

    fn names(env: EnvBuilder) -> Vec<String> {
        let mut n: Vec<String> = env.build().into_iter().map(|(k, _)| k).collect();
        n.sort();
        n
    }

    #[test]
    fn proxies_lose_their_userinfo_and_path() {
        for (given, want) in [
            ("http://u:p@proxy:3128", "http://proxy:3128"),
            ("http://u@proxy:3128/", "http://proxy:3128"),
            ("http://:p@proxy:3128", "http://proxy:3128"),
            ("https://proxy.corp.example", "https://proxy.corp.example"),
            ("http://proxy:80/some/path?x=1", "http://proxy"),
            ("socks5h://u:p@[::1]:1080", "socks5h://[::1]:1080"),
            ("http://u%3Ax:p%40ss@10.0.0.1:3128", "http://10.0.0.1:3128"),
        ] {
            assert_eq!(sanitize_proxy(given).unwrap(), want, "{given}");
        }
        for bad in [
            "proxy:3128",
            "ftp://proxy",
            "file:///etc/passwd",
            "http://",
            "",
        ] {
            assert!(sanitize_proxy(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_and_values_are_checked() {
        let mut env = EnvBuilder::empty();
        assert!(matches!(env.set("", "x"), Err(EnvError::BadName(_))));
        assert!(matches!(env.set("A=B", "x"), Err(EnvError::BadName(_))));
        assert!(matches!(env.set("A\0B", "x"), Err(EnvError::BadName(_))));
        assert!(matches!(env.set("A", "x\0y"), Err(EnvError::BadValue(_))));
        assert!(TurnCredential::new("T=1", "v".into()).is_err());
        assert!(TurnCredential::new("T", "v\0".into()).is_err());
        assert_eq!(
            format!("{:?}", TurnCredential::new("T", "hunter2".into()).unwrap()),
            "TurnCredential(T=…)"
        );
    }

    #[test]
    fn the_bedrock_secret_is_wiped_and_no_built_value_is_ever_printed() {
        let settings: BedrockSettings = serde_json::from_str(
            r#"{"region":"r","access_key_id":"AKIA","secret_access_key":"s3cr3t","session_token":"t0k3n"}"#,
        )
        .unwrap();
        // The type wipes on drop (a compile-time check).
        let _: &Option<Zeroizing<String>> = &settings.secret_access_key;
        let _: &Option<Zeroizing<String>> = &settings.session_token;
        let mut env = EnvBuilder::empty();
        env.bedrock(&settings).unwrap();
        env.set("AWS_SESSION_TOKEN", "r3placed").unwrap();
        let shown = format!("{env:?} {settings:?}");
        for value in ["s3cr3t", "t0k3n", "r3placed"] {
            assert!(!shown.contains(value), "{shown}");
        }
        assert!(shown.contains("AWS_SECRET_ACCESS_KEY=…"), "{shown}");
        let built = env.build();
        assert!(built.contains(&("AWS_SECRET_ACCESS_KEY".into(), "s3cr3t".into())));
    }

    #[test]
    fn aws_only_for_bedrock() {
        let config = Arc::new(EnvConfig {
            bedrock: Some(BedrockSettings {
                region: "eu-west-1".into(),
                access_key_id: Some("AKIA".into()),
                secret_access_key: Some(Zeroizing::new("configured".into())),
                session_token: None,
            }),
            ..EnvConfig::default()
        });
        for provider in [None, Some(Provider::Openai), Some(Provider::Anthropic)] {
            let run = RunEnv {
                config: config.clone(),
                provider,
                credential: None,
            };
            let env = EnvBuilder::for_run(&user(), &run, Network::Host).unwrap();
            assert!(
                names(env).iter().all(|n| !n.starts_with("AWS_")),
                "{provider:?}"
            );
        }
        let run = RunEnv {
            config,
            provider: Some(Provider::Bedrock),
            credential: None,
        };
        let env = EnvBuilder::for_run(&user(), &run, Network::Host)
            .unwrap()
            .build();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("AWS_REGION"), Some("eu-west-1"));
        assert_eq!(get("AWS_SECRET_ACCESS_KEY"), Some("configured"));
        assert_eq!(get("CLAUDE_CONFIG_DIR"), Some("/home/ann/.claude"));
        assert_eq!(get("CLAUDE_CODE_USE_BEDROCK"), Some("1"));
        let unconfigured = RunEnv {
            provider: Some(Provider::Bedrock),
            ..RunEnv::default()
        };
        assert_eq!(
            EnvBuilder::for_run(&user(), &unconfigured, Network::Host).unwrap_err(),
            EnvError::BedrockUnconfigured
        );
    }

    #[test]
    fn a_config_with_a_bad_table_entry_or_proxy_is_refused() {
        assert!(EnvConfig::from_json(br#"{"proxy": "ftp://x"}"#).is_err());
        assert!(EnvConfig::from_json(
            br#"{"providers": {"openai": {"login_var": "CODEX_HOME", "login_dir": "../x"}}}"#
        )
        .is_err());
        assert!(EnvConfig::from_json(br#"{"proxie": "http://x"}"#).is_err());
        let ok =
            EnvConfig::from_json(br#"{"proxy": "http://u:p@proxy:3128", "no_proxy": "localhost"}"#)
                .unwrap();
        assert_eq!(ok.proxy.as_deref(), Some("http://u:p@proxy:3128"));
    }

    #[test]
    fn the_proxy_a_program_sees_follows_its_network_and_never_carries_the_password() {
        let config = EnvConfig::from_json(
            br#"{"proxy": "http://agent:hunter2@proxy:3128", "no_proxy": "corp"}"#,
        )
        .unwrap();
        let run = RunEnv {
            config: Arc::new(config),
            ..RunEnv::default()
        };
        let env_of = |network| EnvBuilder::for_run(&user(), &run, network).unwrap().build();
        let get = |env: &[(String, String)], k: &str| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        let host = env_of(Network::Host);
        assert_eq!(
            get(&host, "https_proxy").as_deref(),
            Some("http://proxy:3128")
        );
        assert_eq!(get(&host, "NO_PROXY").as_deref(), Some("corp"));
        let proxy = env_of(Network::Proxy);
        for name in ["HTTPS_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
            assert_eq!(
                get(&proxy, name).as_deref(),
                Some("http://127.0.0.1:3128"),
                "{name}"
            );
        }
        assert_eq!(
            get(&proxy, "no_proxy").as_deref(),
            Some("localhost,127.0.0.1,::1")
        );
        let none = env_of(Network::None);
        assert!(
            none.iter()
                .all(|(n, _)| !n.to_lowercase().contains("proxy")),
            "{none:?}"
        );
        for env in [host, proxy] {
            assert!(env
                .iter()
                .all(|(_, v)| !v.contains("hunter2") && !v.contains("agent")));
        }
        // A default of `proxy` needs a proxy, and one the worker speaks to.
        assert!(EnvConfig::from_json(br#"{"network": "proxy"}"#).is_err());
        assert!(EnvConfig::from_json(br#"{"proxy": "https://proxy:3128"}"#).is_err());
        assert!(
            EnvConfig::from_json(br#"{"proxy": "https://proxy:3128", "network": "host"}"#).is_ok()
        );
    }

    #[test]
    fn the_call_chooses_then_the_config_then_proxy_if_configured_else_host() {
        use Network as N;
        let config = |proxy: Option<&str>, network: Option<N>| EnvConfig {
            proxy: proxy.map(str::to_owned),
            network,
            ..EnvConfig::default()
        };
        let with = config(Some("http://p:3128"), None);
        let without = config(None, None);
        assert_eq!(with.network_for(None).unwrap(), N::Proxy);
        assert_eq!(without.network_for(None).unwrap(), N::Host);
        assert_eq!(with.network_for(Some(N::None)).unwrap(), N::None);
        assert_eq!(with.network_for(Some(N::Host)).unwrap(), N::Host);
        let none_by_config = config(Some("http://p:3128"), Some(N::None));
        assert_eq!(none_by_config.network_for(None).unwrap(), N::None);
        assert_eq!(
            none_by_config.network_for(Some(N::Proxy)).unwrap(),
            N::Proxy
        );
        assert!(without.network_for(Some(N::Proxy)).is_err());
        assert!(config(None, Some(N::Proxy)).network_for(None).is_err());
    }
}
