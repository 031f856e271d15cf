//! `tono-seal mcp`: a Model Context Protocol server on stdio, built on the
//! official Rust SDK (`rmcp`), whose every `tools/call` is a
//! [`drop_and_run`].
//!
//! Guarantees:
//! - `tools/list` offers the policy's tool names (built-ins and aliases, less
//!   what the policy hides) with a JSON Schema and a description each;
//! - `tools/call` goes through the same classifier and `drop_and_run` as
//!   every other path — there is no second code path; a refusal, a launch
//!   error, a non-zero exit, a signal or a timeout is an error *result*
//!   (`isError`), never a protocol error; `structuredContent` is the
//!   [`Outcome`];
//! - a call whose client asked for progress gets a notification a second;
//!   `notifications/cancelled`, or the client going away, drops the call,
//!   which kills its processes (its cgroup) and reaps them before the server
//!   exits;
//! - the server names secrets and never holds a value; it logs to stderr
//!   only (stdout is the protocol).
//!
//! The CLI parses `tono-seal mcp`'s arguments into an [`McpServer`] and maps
//! a [`ServeError`] to its exit code; this room never imports `cli/`.
#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::watch;

use crate::classify::{Policy, ToolKind, VerdictKind};
use crate::drop::outcome::Outcome;
use crate::drop::Launcher;
use crate::drop::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use crate::user::TargetUser;

/// Why the server could not start or keep serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A handler for SIGTERM, SIGINT or SIGHUP could not be installed.
    #[error("signal handler: {0}")]
    Signal(#[source] std::io::Error),
    /// The MCP handshake with the client failed.
    #[error("MCP initialization failed: {0}")]
    Initialize(String),
}

/// How often a running call reports progress, when asked to.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How long the server waits, after the client is gone, for cancelled
/// calls to kill and reap their processes.
pub const DRAIN_ON_EXIT: Duration = Duration::from_secs(15);

/// The MCP server: one user, its granted secrets, one policy.
#[derive(Clone)]
pub struct McpServer {
    launcher: Launcher,
    policy: Arc<Policy>,
    user: Arc<TargetUser>,
    grants: Arc<Vec<SecretGrant>>,
    cwd: Option<PathBuf>,
    /// Every call's options: environment, receipts, allotted range.
    options: RunOptions,
    in_flight: Arc<AtomicUsize>,
    /// Becomes true when the client is gone (stdin ended) or a signal asks
    /// the server to stop: every running call is then killed.
    stop: watch::Receiver<bool>,
    stop_tx: Arc<watch::Sender<bool>>,
}

/// The client's side of stdin: says when it ends, so that running calls
/// are killed at once (the SDK first waits for their responses).
struct EofWatch<R> {
    inner: R,
    stop: Arc<watch::Sender<bool>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofWatch<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let ended = match &polled {
            Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            self.stop.send_replace(true);
        }
        polled
    }
}

/// A schema property.
fn prop(kind: &str, description: &str) -> Value {
    json!({ "type": kind, "description": description })
}

/// The hosts each granted secret is bound to by root's config, by name,
/// as a model reads them.
type BoundTo = std::collections::BTreeMap<String, String>;

/// The `secrets` property of a program tool: the granted names as an
/// `enum` (a name not granted fails the schema before a call is made; no
/// grant at all allows an empty list only), which variable each becomes,
/// and, for a secret bound to hosts, that the tool holds a placeholder
/// that works only toward them.
fn secrets_property(grants: &[SecretGrant], bound: &BoundTo) -> Value {
    let names: Vec<&str> = grants.iter().map(|g| g.name.as_str()).collect();
    if names.is_empty() {
        return json!({
            "type": "array", "maxItems": 0,
            "description": "no secret is granted to this server (--secret NAME grants one)"
        });
    }
    let becomes: Vec<String> = grants
        .iter()
        .map(|g| match bound.get(g.name.as_str()) {
            Some(hosts) => format!(
                "{} as {} (a placeholder: the real value is added only to HTTPS requests \
                 to {hosts}, through the call's proxy; anywhere else it is refused)",
                g.name.as_str(),
                g.delivery()
            ),
            None => format!("{} as {}", g.name.as_str(), g.delivery()),
        })
        .collect();
    json!({
        "type": "array", "uniqueItems": true,
        "items": { "type": "string", "enum": names },
        "description": format!(
            "sealed secrets to unseal into the environment, only these: {}",
            becomes.join(", ")
        )
    })
}

/// The JSON Schema of a tool kind's arguments and its description (a
/// program tool's `secrets` from [`secrets_property`]).
fn describe(kind: ToolKind, grants: &[SecretGrant], bound: &BoundTo) -> (Value, String) {
    let secrets = secrets_property(grants, bound);
    let cwd = prop(
        "string",
        "absolute working folder (default: the user's home, or --cwd)",
    );
    let timeout = json!({ "type": "integer", "minimum": 1, "description": "timeout in milliseconds (can only lower the server's)" });
    let path = prop("string", "path, absolute or relative to the user's home");
    let (properties, required, text) = match kind {
        ToolKind::Shell => (
            json!({ "command": prop("string", "a /bin/sh command line"), "cwd": cwd, "timeout_ms": timeout, "secrets": secrets }),
            vec!["command"],
            "Run a shell command as the user (never as root), with only the named secrets in its environment.",
        ),
        ToolKind::Spawn => (
            json!({ "argv": { "type": "array", "items": { "type": "string" }, "minItems": 1, "description": "program and arguments" }, "cwd": cwd, "timeout_ms": timeout, "secrets": secrets }),
            vec!["argv"],
            "Run a program (no shell) as the user, with only the named secrets in its environment.",
        ),
        ToolKind::ReadFile => (
            json!({ "path": path, "max_bytes": { "type": "integer", "minimum": 0, "description": "most bytes returned" } }),
            vec!["path"],
            "Read a file as the user.",
        ),
        ToolKind::WriteFile => (
            json!({ "path": path, "content": prop("string", "the new content") }),
            vec!["path", "content"],
            "Create or replace a file as the user.",
        ),
        ToolKind::ListDir => (
            json!({ "path": path }),
            vec!["path"],
            "List a folder as the user.",
        ),
        ToolKind::DeleteFile => (
            json!({ "path": path }),
            vec!["path"],
            "Delete a file as the user.",
        ),
        ToolKind::HttpGet | ToolKind::HttpHead => (
            json!({ "url": prop("string", "http(s) URL"), "headers": { "type": "object", "additionalProperties": { "type": "string" } } }),
            vec!["url"],
            if kind == ToolKind::HttpGet {
                "HTTP GET: in the worker if the address is public and checked hop by hop, otherwise as the user."
            } else {
                "HTTP HEAD: in the worker if the address is public and checked hop by hop, otherwise as the user."
            },
        ),
    };
    let schema = json!({
        "type": "object", "properties": properties, "required": required, "additionalProperties": false,
    });
    let mut text = text.to_owned();
    if matches!(kind, ToolKind::Shell | ToolKind::Spawn) {
        text.push_str(match grants.is_empty() {
            true => " No secret is granted.",
            false => " Secrets it may name, and the variable each becomes: ",
        });
        let becomes: Vec<String> = grants
            .iter()
            .map(|g| match bound.get(g.name.as_str()) {
                Some(hosts) => format!(
                    "{} → {} (a placeholder, worth its value only in HTTPS requests to {hosts})",
                    g.name.as_str(),
                    g.delivery()
                ),
                None => format!("{} → {}", g.name.as_str(), g.delivery()),
            })
            .collect();
        text.push_str(&becomes.join(", "));
    }
    (schema, text)
}

/// The text and error flag of an outcome, as an MCP result.
pub fn tool_result(outcome: &Outcome) -> CallToolResult {
    let mut content = Vec::new();
    let failed = !outcome.succeeded();
    if outcome.verdict == VerdictKind::Refuse {
        content.push(ContentBlock::text(format!(
            "refused ({}): {}",
            outcome.reason,
            outcome
                .detail
                .as_deref()
                .unwrap_or("the call is malformed or not allowed")
        )));
    }
    if let Some(e) = &outcome.launch_error {
        content.push(ContentBlock::text(format!(
            "did not run ({}): {}",
            e.code, e.message
        )));
    }
    if !outcome.stdout.is_empty() || outcome.stdout_truncated {
        let mut text = outcome.stdout.clone();
        if outcome.stdout_truncated {
            text.push_str("\n[stdout truncated]");
        }
        content.push(ContentBlock::text(text));
    }
    if !outcome.stderr.is_empty() || outcome.stderr_truncated {
        let mut text = format!("stderr:\n{}", outcome.stderr);
        if outcome.stderr_truncated {
            text.push_str("\n[stderr truncated]");
        }
        content.push(ContentBlock::text(text));
    }
    if let Some(l) = outcome.limits.as_ref().filter(|l| l.oom_kills > 0) {
        content.push(ContentBlock::text(format!(
            "the call's memory limit killed {} process(es)",
            l.oom_kills
        )));
    }
    if outcome.timed_out {
        content.push(ContentBlock::text("timed out: the call was killed"));
    }
    match (outcome.exit_code, outcome.signal) {
        (Some(code), _) if code != 0 => {
            content.push(ContentBlock::text(format!("exit status {code}")))
        }
        (None, Some(sig)) => content.push(ContentBlock::text(format!("killed by signal {sig}"))),
        _ => {}
    }
    let mut result = if failed {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = serde_json::to_value(outcome).ok();
    result
}

impl McpServer {
    /// A server for `user`.
    pub fn new(
        launcher: Launcher,
        policy: Policy,
        user: TargetUser,
        grants: Vec<SecretGrant>,
        cwd: Option<PathBuf>,
        options: RunOptions,
    ) -> Self {
        let (stop_tx, stop) = watch::channel(false);
        Self {
            launcher,
            policy: Arc::new(policy),
            user: Arc::new(user),
            grants: Arc::new(grants),
            cwd,
            options,
            in_flight: Arc::new(AtomicUsize::new(0)),
            stop,
            stop_tx: Arc::new(stop_tx),
        }
    }

    /// The hosts root's config binds each granted secret to, for this
    /// server's user.
    fn bound_to(&self) -> BoundTo {
        let bindings = self.options.env.config.bindings();
        self.grants
            .iter()
            .filter_map(|g| {
                let binding = bindings.for_user(&self.user.name, g.name.as_str())?;
                let hosts: Vec<String> = binding.hosts.clone().into();
                Some((g.name.as_str().to_string(), hosts.join(", ")))
            })
            .collect()
    }

    /// The tools the policy offers.
    pub fn tools(&self) -> Vec<Tool> {
        self.policy
            .tools()
            .map(|(name, kind)| {
                let (schema, text) = describe(kind, &self.grants, &self.bound_to());
                let schema = match schema {
                    Value::Object(map) => map,
                    _ => JsonObject::new(),
                };
                Tool::new(Cow::Owned(name.to_owned()), text, Arc::new(schema))
            })
            .collect()
    }

    /// Runs one call through the classifier and `drop_and_run`.
    async fn run(
        &self,
        name: &str,
        args: Option<JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut args = args.unwrap_or_default();
        if let (Some(cwd), Some(ToolKind::Shell | ToolKind::Spawn)) =
            (&self.cwd, self.policy.kind_of(name))
        {
            args.entry("cwd")
                .or_insert_with(|| Value::String(cwd.display().to_string()));
        }
        let raw = serde_json::to_vec(&json!({ "tool": name, "args": args })).unwrap_or_default();
        let options = self.options.clone();
        let request = DropRequest {
            launcher: &self.launcher,
            policy: &self.policy,
            user: &self.user,
            grants: &self.grants,
            call: &raw,
            options,
        };
        let call = drop_and_run(&request);
        tokio::pin!(call);
        let progress = ctx.meta.get_progress_token();
        let mut stop = self.stop.clone();
        let started = Instant::now();
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
        loop {
            tokio::select! {
                outcome = &mut call => return tool_result(&outcome),
                _ = ctx.ct.cancelled() => {
                    tracing::info!(tool = name, "call cancelled; its processes are killed");
                    // Dropping the call kills its cgroup and reaps it.
                    return CallToolResult::error(vec![ContentBlock::text("cancelled: the call's processes were killed")]);
                }
                _ = async { let _ = stop.wait_for(|stopped| *stopped).await; } => {
                    tracing::info!(tool = name, "the server stops; the call's processes are killed");
                    // Dropping the call kills its cgroup and reaps it.
                    return CallToolResult::error(vec![ContentBlock::text("cancelled: the call's processes were killed")]);
                }
                _ = tick.tick(), if progress.is_some() => {
                    if let Some(token) = progress.clone() {
                        let secs = started.elapsed().as_secs_f64();
                        let mut p = ProgressNotificationParam::new(token, secs);
                        p.message = Some(format!("{name} running for {secs:.0} s as {}", self.user.name));
                        let _ = ctx.peer.notify_progress(p).await;
                    }
                }
            }
        }
    }
}

/// Counts a call in flight for as long as it lives.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = rmcp::model::Implementation::new("tono-seal", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(format!(
            "Every tool runs as the Linux user {} (uid {}), never as root, with only the secrets a call names; \
             HTTP reads of public addresses may run in the worker.",
            self.user.name, self.user.uid
        ));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let _counted = InFlight::enter(&self.in_flight);
        let result = self.run(&request.name, request.arguments, &ctx).await;
        Ok(CallToolResponse::Complete(result))
    }
}

/// `tono-seal mcp`: serves until the client closes stdin (or SIGTERM,
/// SIGINT or SIGHUP), then kills every running call and waits until each is
/// reaped.
pub async fn serve_mcp(server: McpServer) -> Result<(), ServeError> {
    use tokio::signal::unix::{signal, SignalKind};
    let in_flight = server.in_flight.clone();
    let stop = server.stop_tx.clone();
    let mut signals = [
        signal(SignalKind::terminate()).map_err(ServeError::Signal)?,
        signal(SignalKind::interrupt()).map_err(ServeError::Signal)?,
        signal(SignalKind::hangup()).map_err(ServeError::Signal)?,
    ];
    let stdin = EofWatch {
        inner: tokio::io::stdin(),
        stop: stop.clone(),
    };
    let running = server
        .serve((stdin, tokio::io::stdout()))
        .await
        .map_err(|e| ServeError::Initialize(e.to_string()))?;
    let [term, int, hup] = &mut signals;
    let mut stopped = stop.subscribe();
    let service = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let ended = tokio::select! {
        reason = &mut waiting => {
            tracing::info!(?reason, "the MCP client is gone");
            true
        }
        _ = async { let _ = stopped.wait_for(|s| *s).await; } => {
            tracing::info!("stdin ended; stopping");
            false
        }
        _ = term.recv() => { tracing::info!("SIGTERM; stopping"); false }
        _ = int.recv() => { tracing::info!("SIGINT; stopping"); false }
        _ = hup.recv() => { tracing::info!("SIGHUP; stopping"); false }
    };
    stop.send_replace(true);
    let deadline = Instant::now() + DRAIN_ON_EXIT;
    while in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !ended {
        // Every call is reaped; let the SDK send what it still has and end.
        service.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), waiting).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secrets_property_lists_exactly_the_grants() {
        let grants = [
            SecretGrant::parse("api=API_KEY").unwrap(),
            SecretGrant::parse("db").unwrap(),
        ];
        let mut bound = BoundTo::new();
        let with = secrets_property(&grants, &bound);
        assert_eq!(with["items"]["enum"], json!(["api", "db"]));
        assert_eq!(with["uniqueItems"], json!(true));
        let text = with["description"].as_str().unwrap();
        assert!(
            text.contains("api as $API_KEY") && text.contains("db as $db"),
            "{text}"
        );
        // No grant: only the empty list passes (an empty enum is not valid).
        let none = secrets_property(&[], &bound);
        assert_eq!(none["maxItems"], json!(0));
        assert!(none["items"].is_null());
        let (_, text) = describe(ToolKind::Shell, &grants, &bound);
        assert!(text.ends_with("api → $API_KEY, db → $db"), "{text}");
        let (_, text) = describe(ToolKind::ReadFile, &grants, &bound);
        assert!(!text.contains("api"), "{text}");
        // A bound secret says where its placeholder works.
        bound.insert("api".into(), "api.example.com, *.example.net".into());
        let with = secrets_property(&grants, &bound);
        let text = with["description"].as_str().unwrap();
        assert!(
            text.contains("api as $API_KEY (a placeholder: the real value is added only to HTTPS requests to api.example.com, *.example.net")
                && text.contains("db as $db,") | text.ends_with("db as $db"),
            "{text}"
        );
    }
}
