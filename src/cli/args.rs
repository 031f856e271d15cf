//! The command line's arguments, as `clap` types: every command and flag
//! of `tono-seal`, and nothing that acts.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::exit::CliError;
use crate::env::{EnvConfig, Provider, RunEnv};

/// The documentation, in the source tree's order: each file with what it
/// holds. `--help` and the manual page's SEE ALSO name these;
/// `tests/docs.rs` checks that each exists and that no chapter of `docs/`
/// is left out.
pub const DOCS: &[(&str, &str)] = &[
    (
        "README.md",
        "what tono-seal is, set-up, a first call, install",
    ),
    (
        "docs/calls.md",
        "run, call and serve; what a tool sees; the doors around it; its network",
    ),
    (
        "docs/broker.md",
        "secrets bound to hosts: the placeholder and the call's broker",
    ),
    (
        "docs/provisioning.md",
        "keys and secrets, the store, the exit codes",
    ),
    (
        "docs/turns.md",
        "whose user a run goes as, providers and sign-ins, turn folders",
    ),
    ("docs/verify.md", "tono-seal verify: every probe"),
    ("docs/audit.md", "receipts: the hash-chained audit log"),
    ("docs/mcp.md", "tono-seal mcp, the MCP server"),
    ("docs/classifier.md", "stay, drop or refuse"),
    (
        "docs/performance.md",
        "the benchmarks and what each part costs",
    ),
    (
        "docs/threat-model.md",
        "what each guarantee rests on, and what it does not do",
    ),
    ("docs/testing.md", "what the tests prove"),
    (
        "docs/containers.md",
        "the worker in Docker, Podman and Kubernetes: the profile",
    ),
    ("ARCHITECTURE.md", "where the code lives"),
];

/// `--help`'s closing lines: the documentation in [`DOCS`].
fn docs_help() -> String {
    let mut text = String::from("Documentation, in the source (read in this order):");
    for (path, what) in DOCS {
        text.push_str(&format!("\n  {path:<22} {what}"));
    }
    text
}

/// Per-user age-sealed secrets, and tools run as their user.
#[derive(Debug, Parser)]
#[command(name = "tono-seal", version, about, long_about = None, after_help = docs_help())]
pub struct Cli {
    /// Path of the `tono-launch` binary (default: beside this program).
    #[arg(long, global = true, hide = true)]
    pub launcher: Option<PathBuf>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// A user named by login name or `#UID`.
#[derive(Debug, Args)]
pub struct UserArg {
    /// The user: a login name or #UID (never root).
    #[arg(long, short = 'u')]
    pub user: String,
}

/// Output as JSON.
#[derive(Debug, Args)]
pub struct JsonArg {
    /// Print machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

/// Where a one-shot command writes its call's receipt (off by default).
#[derive(Debug, Args)]
pub struct AuditArg {
    /// Append the call's receipt to this audit log (root's alone).
    #[arg(long = "audit", value_name = "FILE")]
    pub audit: Option<PathBuf>,
}

/// Which users calls may run as, and what their programs see.
#[derive(Debug, Args)]
pub struct ScopeArgs {
    /// What a program sees: `private` (its own namespaces: the key store
    /// hidden, only its own processes, its output masked) or `shared` (the
    /// host's, as in a login of the user).
    #[arg(long, value_enum, default_value_t = ViewArg::Private)]
    pub view: ViewArg,
    /// A program's network: `none` (only its own loopback), `proxy` (the
    /// configured proxy at 127.0.0.1:3128 inside its own namespace, the
    /// proxy's password added by the worker) or `host`. Default: the env
    /// config's `network`, else `proxy` if a proxy is configured, else
    /// `host`.
    #[arg(long, value_enum)]
    pub network: Option<NetworkArg>,
    /// The uids and gids calls may run as, FIRST-LAST (default 1000 up to
    /// 2147483647; system accounts, nobody and users with a shared primary
    /// group are refused whatever the range).
    #[arg(long = "allotted-uids", value_name = "FIRST-LAST", value_parser = crate::user::AllottedRange::parse)]
    pub allotted_uids: Option<crate::user::AllottedRange>,
    /// What a program's writes to the home become (private view):
    /// `ephemeral` (gone when the call ends), `read-only`, or `persistent`
    /// (the real home: what one call writes, the next runs from). Default:
    /// the env config's `home_for_users`/`home`, else `ephemeral`; the
    /// shared view has only `persistent`.
    #[arg(long, value_enum)]
    pub home: Option<HomeArg>,
    /// Narrow the hosts root's env config binds a secret to, for these
    /// calls: NAME=HOST[,HOST…], each host one of the binding's (or within
    /// one of its wildcards). A binding is never widened, and a secret the
    /// config does not bind is refused (`binding_unknown`).
    #[arg(long = "bind", value_name = "NAME=HOSTS", value_parser = parse_narrowing)]
    pub bind: Vec<(String, Vec<String>)>,
}

/// `--bind NAME=HOST[,HOST…]`.
fn parse_narrowing(text: &str) -> Result<(String, Vec<String>), String> {
    let (name, hosts) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: write NAME=HOST[,HOST…]"))?;
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(String::from)
        .collect();
    if name.is_empty() || hosts.is_empty() {
        return Err(format!("{text:?}: write NAME=HOST[,HOST…]"));
    }
    Ok((name.to_string(), hosts))
}

/// `--home`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HomeArg {
    /// Writable; every write vanishes with the call.
    Ephemeral,
    /// Not writable.
    ReadOnly,
    /// The real home.
    Persistent,
}

impl From<HomeArg> for crate::env::HomeMode {
    fn from(home: HomeArg) -> Self {
        match home {
            HomeArg::Ephemeral => Self::Ephemeral,
            HomeArg::ReadOnly => Self::ReadOnly,
            HomeArg::Persistent => Self::Persistent,
        }
    }
}

/// `--view`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewArg {
    /// Its own namespaces, the store hidden, the output masked.
    Private,
    /// The host's namespaces.
    Shared,
}

impl From<ViewArg> for crate::launch::view::View {
    fn from(view: ViewArg) -> Self {
        match view {
            ViewArg::Private => Self::Private,
            ViewArg::Shared => Self::Shared,
        }
    }
}

/// `--network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkArg {
    /// Only the call's own loopback.
    None,
    /// The configured proxy, through the worker.
    Proxy,
    /// The host's network.
    Host,
}

impl From<NetworkArg> for crate::env::Network {
    fn from(network: NetworkArg) -> Self {
        match network {
            NetworkArg::None => Self::None,
            NetworkArg::Proxy => Self::Proxy,
            NetworkArg::Host => Self::Host,
        }
    }
}

impl ScopeArgs {
    /// The range given, or the default.
    pub fn range(&self) -> crate::user::AllottedRange {
        self.allotted_uids.unwrap_or_default()
    }

    /// The network chosen, if any.
    pub fn network(&self) -> Option<crate::env::Network> {
        self.network.map(Into::into)
    }

    /// The options of calls in this scope, with their environment config
    /// and audit log; everything else as [`crate::drop::RunOptions`]'s
    /// default.
    pub fn options(
        &self,
        env: crate::env::RunEnv,
        audit: Option<std::sync::Arc<crate::audit::AuditLog>>,
    ) -> crate::drop::RunOptions {
        crate::drop::RunOptions {
            env,
            audit,
            allotted: self.range(),
            view: self.view.into(),
            network: self.network(),
            home: self.home.map(Into::into),
            narrow: self.bind.clone(),
            ..crate::drop::RunOptions::default()
        }
    }
}

/// Where a worker writes its receipts (on by default).
#[derive(Debug, Args)]
pub struct WorkerAuditArgs {
    /// The audit log every call's receipt goes to (root's alone).
    #[arg(long = "audit", value_name = "FILE", default_value = crate::audit::DEFAULT_PATH)]
    pub audit: PathBuf,
    /// Write no receipts.
    #[arg(long, conflicts_with = "audit")]
    pub no_audit: bool,
    /// `fsync` the log after this many receipts (1: each one; more trades
    /// the last few receipts on a power loss for less time per call).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub audit_fsync_every: u32,
}

/// `audit` subcommands.
#[derive(Debug, Subcommand)]
pub enum AuditAction {
    /// Check the hash chain of a log and its rotated files; exit 1 at the
    /// first break, naming its file and line. A chain cannot see records
    /// cut from its end (or start) by itself: give the anchor `audit
    /// anchor` printed earlier, kept off this host.
    Verify {
        /// The active log file (its rotated files `FILE.NNNNNN` are read
        /// first), or several files to check in the order given.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The record `SEQ` must be in the log with this hash (what `audit
        /// anchor` printed); the chain must then also start at its genesis
        /// (or at --expect-first).
        #[arg(long, value_name = "SEQ:HASH")]
        expect_last: Option<crate::audit::Anchor>,
        /// The chain's first record must be `SEQ` after a record hashing to
        /// `PREV` (older files removed on purpose); needs --expect-last.
        #[arg(long, value_name = "SEQ:PREV", requires = "expect_last")]
        expect_first: Option<crate::audit::Anchor>,
    },
    /// Print the anchor of an intact log: its last record as `SEQ:HASH`,
    /// to keep off this host for `audit verify --expect-last`.
    Anchor {
        /// The active log file (its rotated files are read first).
        file: PathBuf,
    },
    /// Print a log's records (and its rotated files') as a table.
    Show {
        /// The active log file.
        file: PathBuf,
        /// Only this user's records (name or uid).
        #[arg(long)]
        user: Option<String>,
        /// Only records written at or after this time (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        #[command(flatten)]
        json: JsonArg,
    },
}

/// What a launched program's environment is made of, beside its user.
#[derive(Debug, Args)]
pub struct EnvArgs {
    /// The agent's provider (openai, anthropic, bedrock): sets its login
    /// location in the home, and for bedrock only the AWS settings.
    #[arg(long)]
    pub provider: Option<String>,
    /// The operator's environment settings (JSON: proxy, no_proxy,
    /// network, bedrock, providers).
    #[arg(long)]
    pub env_config: Option<PathBuf>,
}

impl EnvArgs {
    /// Loads the settings into a [`RunEnv`].
    pub fn load(&self) -> Result<RunEnv, CliError> {
        let provider = match &self.provider {
            Some(name) => Some(Provider::parse(name).ok_or_else(|| {
                CliError::usage(format!(
                    "unknown provider {name:?}: use openai, anthropic or bedrock"
                ))
            })?),
            None => None,
        };
        let config = match &self.env_config {
            Some(path) => {
                use std::io::Read;
                use std::os::unix::fs::MetadataExt;
                let unreadable = |e: std::io::Error| {
                    CliError::usage(format!("cannot read {}: {e}", path.display()))
                };
                let mut file = std::fs::File::open(path).map_err(unreadable)?;
                let meta = file.metadata().map_err(unreadable)?;
                let mut bytes = zeroize::Zeroizing::new(Vec::new());
                file.read_to_end(&mut bytes).map_err(unreadable)?;
                let config = EnvConfig::from_json(&bytes)
                    .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
                // A proxy's password is kept from every call; a file that
                // any user can read would hand it over anyway.
                let has_password = config
                    .proxy
                    .as_deref()
                    .and_then(|p| url::Url::parse(p).ok())
                    .is_some_and(|u| !u.username().is_empty() || u.password().is_some());
                if has_password && (meta.uid() != 0 || meta.mode() & 0o077 != 0) {
                    return Err(CliError::usage(format!(
                        "{} holds the proxy's credentials, so it must be root's and closed to others (mode 0600), not uid {} mode {:o}",
                        path.display(),
                        meta.uid(),
                        meta.mode() & 0o7777
                    )));
                }
                config
            }
            None => EnvConfig::default(),
        };
        Ok(RunEnv {
            config: std::sync::Arc::new(config),
            provider,
            credential: None,
        })
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a user's key store and print its recipient.
    ///
    /// See docs/provisioning.md in the source.
    Keygen {
        #[command(flatten)]
        user: UserArg,
        /// Replace an existing identity (it is kept beside the new one).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        json: JsonArg,
        #[command(flatten)]
        audit: AuditArg,
    },
    /// Print a user's age recipient (age1…).
    ///
    /// See docs/provisioning.md in the source.
    Recipient {
        #[command(flatten)]
        user: UserArg,
        #[command(flatten)]
        json: JsonArg,
        #[command(flatten)]
        audit: AuditArg,
    },
    /// Seal the value on stdin as NAME (never from argv or env).
    ///
    /// See docs/provisioning.md in the source.
    Seal {
        #[command(flatten)]
        user: UserArg,
        /// The secret's name.
        name: String,
        /// Accept an empty value.
        #[arg(long)]
        allow_empty: bool,
        #[command(flatten)]
        json: JsonArg,
        #[command(flatten)]
        audit: AuditArg,
    },
    /// Install an age file from stdin (made with `age -r RECIPIENT`) as NAME.
    ///
    /// See docs/provisioning.md in the source.
    Import {
        #[command(flatten)]
        user: UserArg,
        /// The secret's name.
        name: String,
        #[command(flatten)]
        json: JsonArg,
        #[command(flatten)]
        audit: AuditArg,
    },
    /// List a user's identity and secrets, each marked ok, weak (group or
    /// other bits, a foreign owner, a symlink, over the size cap, an
    /// identity with a key left from a rotation) or unreadable (the
    /// identity cannot open it); never a value.
    ///
    /// See docs/provisioning.md in the source.
    List {
        /// The user: a login name or #UID (never root).
        #[arg(
            long,
            short = 'u',
            required_unless_present = "all",
            conflicts_with = "all"
        )]
        user: Option<String>,
        /// Every user a worker may run as that has a store, each inspected
        /// as itself through the launcher (no receipts).
        #[arg(long, conflicts_with = "audit")]
        all: bool,
        #[command(flatten)]
        json: JsonArg,
        #[command(flatten)]
        audit: AuditArg,
    },
    /// Remove a secret.
    ///
    /// See docs/provisioning.md in the source.
    Remove {
        #[command(flatten)]
        user: UserArg,
        /// The secret's name.
        name: String,
        #[command(flatten)]
        json: JsonArg,
        #[command(flatten)]
        audit: AuditArg,
    },
    /// New identity; every secret re-sealed to it; safe to kill and re-run.
    ///
    /// See docs/provisioning.md in the source.
    Rotate {
        #[command(flatten)]
        user: UserArg,
        #[command(flatten)]
        json: JsonArg,
        #[command(flatten)]
        audit: AuditArg,
    },
    /// Print one secret's value, read as the user (for operators only).
    ///
    /// See docs/provisioning.md in the source.
    Reveal {
        #[command(flatten)]
        user: UserArg,
        /// The secret's name.
        name: String,
        #[command(flatten)]
        audit: AuditArg,
    },
    /// Run a program as the user with the named secrets in its environment.
    ///
    /// See docs/calls.md in the source.
    Run {
        #[command(flatten)]
        user: UserArg,
        /// A secret to unseal: NAME (into the variable NAME), NAME=ENV, or
        /// as a file of the call's own $CREDENTIALS_DIRECTORY: NAME=@,
        /// NAME=@FILE, NAME=ENV@FILE (ENV holds the file's path).
        #[arg(long = "secret", short = 's')]
        secrets: Vec<String>,
        /// Working folder (absolute; default the user's home).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Timeout in seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
        #[command(flatten)]
        env: EnvArgs,
        #[command(flatten)]
        audit: AuditArg,
        #[command(flatten)]
        scope: ScopeArgs,
        /// The program and its arguments.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Run one tool call (JSON on stdin) as the user; print its Outcome JSON.
    ///
    /// See docs/calls.md in the source.
    Call {
        #[command(flatten)]
        user: UserArg,
        /// A secret the call may ask for: NAME, NAME=ENV, or as a file in
        /// $CREDENTIALS_DIRECTORY: NAME=@, NAME=@FILE, NAME=ENV@FILE.
        #[arg(long = "secret", short = 's')]
        secrets: Vec<String>,
        /// Timeout in seconds.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
        #[command(flatten)]
        env: EnvArgs,
        #[command(flatten)]
        audit: AuditArg,
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// A long-running worker: JSON-lines requests on stdin, outcomes on stdout.
    ///
    /// See docs/calls.md in the source.
    Serve {
        /// Serve on stdin/stdout (the only transport).
        #[arg(long, required = true)]
        stdio: bool,
        /// Most calls running at once.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        #[command(flatten)]
        env: EnvArgs,
        #[command(flatten)]
        audit: WorkerAuditArgs,
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// An MCP server on stdio whose every tools/call runs as the user.
    ///
    /// See docs/mcp.md in the source.
    Mcp {
        #[command(flatten)]
        user: UserArg,
        /// A secret calls may ask for: NAME, NAME=ENV, or as a file in
        /// $CREDENTIALS_DIRECTORY: NAME=@, NAME=@FILE, NAME=ENV@FILE.
        #[arg(long = "secret", short = 's')]
        secrets: Vec<String>,
        /// A policy file (JSON); the built-in default otherwise.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Working folder of shell and spawn calls that name none.
        #[arg(long)]
        cwd: Option<PathBuf>,
        #[command(flatten)]
        env: EnvArgs,
        #[command(flatten)]
        audit: WorkerAuditArgs,
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Check or read an audit log of call receipts.
    ///
    /// See docs/audit.md in the source.
    Audit {
        /// What to do.
        #[command(subcommand)]
        action: AuditAction,
    },
    /// Show the guarantees on this machine with two throwaway users.
    ///
    /// See README.md in the source.
    Demo,
    /// Prove on this machine that the isolation between users is real.
    ///
    /// See docs/verify.md in the source.
    Verify {
        /// A user to probe (repeat for several).
        #[arg(long = "user", short = 'u', required_unless_present = "agent")]
        users: Vec<String>,
        /// Three-uid mode: the agent user.
        #[arg(long, requires_all = ["executor", "gate"])]
        agent: Option<String>,
        /// Three-uid mode: the executor user.
        #[arg(long, requires_all = ["agent", "gate"])]
        executor: Option<String>,
        /// Three-uid mode: the gate user (its assets are the --protect paths).
        #[arg(long, requires_all = ["agent", "executor"])]
        gate: Option<String>,
        /// Tenant secret folder, probed if present.
        #[arg(long, default_value = "/etc/tonoman/secrets")]
        tenant_secrets: PathBuf,
        /// A path no probed user may read or write (repeatable).
        #[arg(long)]
        protect: Vec<PathBuf>,
        /// Installed code no probed user may write (besides tono-seal and tono-launch).
        #[arg(long)]
        code: Vec<PathBuf>,
        #[command(flatten)]
        json: JsonArg,
        /// Append a receipt of every probe call to this audit log.
        #[command(flatten)]
        audit: AuditArg,
        /// The settings calls get (the proxy is probed if one is set).
        #[command(flatten)]
        env: EnvArgs,
        /// The network the probe calls get, as `run --network`.
        #[arg(long, value_enum)]
        network: Option<NetworkArg>,
        /// The home the probe calls get, as `run --home` (default: the env
        /// config's, else `ephemeral`).
        #[arg(long, value_enum)]
        home: Option<HomeArg>,
    },
    /// Classify raw tool calls, one JSON line each on stdin.
    ///
    /// See docs/classifier.md in the source.
    Classify {
        /// A policy file (JSON); the built-in default otherwise.
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Policy files.
    ///
    /// See docs/classifier.md in the source.
    Policy {
        /// What to do.
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Write the manual page and shell completions, generated from these
    /// very definitions, into a folder (for packaging).
    #[command(hide = true)]
    GenerateDocs {
        /// The folder: `man/tono-seal.1` and `completions/` go below it.
        #[arg(long)]
        out: PathBuf,
    },
}

/// `policy` subcommands.
#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Load a policy file and say whether it is valid.
    Check {
        /// The policy file (JSON).
        file: PathBuf,
    },
}

impl AuditArg {
    /// Opens the log, if one was asked for.
    pub fn open(&self) -> Result<Option<std::sync::Arc<crate::audit::AuditLog>>, CliError> {
        self.audit
            .as_deref()
            .map(|path| open_log(crate::audit::AuditConfig::at(path), ""))
            .transpose()
    }
}

impl WorkerAuditArgs {
    /// Opens the log unless `--no-audit`.
    pub fn open(&self) -> Result<Option<std::sync::Arc<crate::audit::AuditLog>>, CliError> {
        let config = crate::audit::AuditConfig {
            fsync_every: self.audit_fsync_every,
            ..crate::audit::AuditConfig::at(&self.audit)
        };
        (!self.no_audit)
            .then(|| {
                open_log(
                    config,
                    " (--audit FILE for another log, --no-audit for none)",
                )
            })
            .transpose()
    }
}

fn open_log(
    config: crate::audit::AuditConfig,
    hint: &str,
) -> Result<std::sync::Arc<crate::audit::AuditLog>, CliError> {
    crate::audit::AuditLog::open(config)
        .map(std::sync::Arc::new)
        .map_err(|e| CliError::usage(format!("{e}{hint}")))
}
