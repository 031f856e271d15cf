//! `tono-seal mcp` driven through the official Rust SDK's client side
//! (`rmcp`): initialize, list, each tool as a real user, errors, progress,
//! cancellation, a client that vanishes mid-call, and the server's memory.

mod common;

use std::time::{Duration, Instant};

use common::{launcher, live_processes_of, rt, sha256_hex, tono_bin, TestUser};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, JsonObject, ProgressNotificationParam,
    Request,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// A client that hands progress notifications to the test.
#[derive(Clone)]
struct Probe {
    progress: mpsc::UnboundedSender<ProgressNotificationParam>,
}

impl ClientHandler for Probe {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.progress.send(params);
    }
}

type Client = RunningService<RoleClient, Probe>;

async fn connect(
    args: &[&str],
) -> (
    Client,
    mpsc::UnboundedReceiver<ProgressNotificationParam>,
    u32,
) {
    connect_env(args, &[]).await
}

async fn connect_env(
    args: &[&str],
    env: &[(&str, &str)],
) -> (
    Client,
    mpsc::UnboundedReceiver<ProgressNotificationParam>,
    u32,
) {
    let mut cmd = tokio::process::Command::new(tono_bin());
    cmd.arg("--launcher")
        .arg(launcher().path())
        .arg("mcp")
        .args(args);
    cmd.envs(env.iter().copied());
    let transport = TokioChildProcess::new(cmd).expect("start tono-seal mcp");
    let pid = transport.id().expect("server pid");
    let (tx, rx) = mpsc::unbounded_channel();
    let client = Probe { progress: tx }
        .serve(transport)
        .await
        .expect("initialize");
    (client, rx, pid)
}

fn args(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => panic!("arguments must be an object"),
    }
}

async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    client
        .peer()
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args(arguments)))
        .await
        .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"))
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_tool_runs_as_the_user_through_the_one_path() {
    need_root!();
    let (a, b) = (TestUser::with_key(), TestUser::with_key());
    a.seal("api", b"mcp-secret-value");
    rt().block_on(async {
        // A persistent home: the file tools below write in one call what
        // the next reads (the default, ephemeral, keeps no write).
        let (client, _, _) = connect(&[
            "--user",
            a.name(),
            "--secret",
            "api=API_KEY",
            "--home",
            "persistent",
        ])
        .await;
        let info = client.peer().peer_info().expect("server info");
        assert_eq!(
            info.server_info.as_ref().map(|i| i.name.as_str()),
            Some("tono-seal")
        );

        let tools = client.peer().list_all_tools().await.unwrap();
        let mut names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "delete_file",
                "http_get",
                "http_head",
                "list_dir",
                "read_file",
                "shell",
                "spawn",
                "write_file"
            ]
        );
        for t in &tools {
            assert_eq!(
                t.input_schema.get("type"),
                Some(&json!("object")),
                "{}",
                t.name
            );
            assert!(t.description.as_deref().is_some_and(|d| d.len() > 10));
        }
        // The program tools name the granted secrets: an enum of exactly
        // them, and the variable each becomes.
        for t in tools
            .iter()
            .filter(|t| t.name == "shell" || t.name == "spawn")
        {
            let secrets = &t.input_schema["properties"]["secrets"];
            assert_eq!(secrets["items"]["enum"], json!(["api"]), "{}", t.name);
            assert!(
                t.description
                    .as_deref()
                    .is_some_and(|d| d.contains("api → $API_KEY")),
                "{t:?}"
            );
        }

        // shell: runs as A, unseals only what it names.
        let r = call(
            &client,
            "shell",
            json!({"command": "id -u; printf %s \"$API_KEY\" | sha256sum", "secrets": ["api"]}),
        )
        .await;
        assert_eq!(r.is_error, Some(false), "{r:?}");
        let out = text(&r);
        assert!(out.starts_with(&format!("{}\n", a.user.uid)), "{out}");
        assert!(out.contains(&sha256_hex(b"mcp-secret-value")), "{out}");
        let outcome = r.structured_content.clone().expect("structured outcome");
        assert_eq!(outcome["uid"], json!(a.user.uid));
        assert_eq!(outcome["verdict"], json!("drop"));

        let r = call(&client, "spawn", json!({"argv": ["/usr/bin/id", "-G"]})).await;
        assert_eq!(text(&r).trim(), a.user.gid.to_string(), "no other group");

        let r = call(
            &client,
            "write_file",
            json!({"path": "note.txt", "content": "hello"}),
        )
        .await;
        assert_eq!(r.is_error, Some(false), "{r:?}");
        let r = call(&client, "read_file", json!({"path": "note.txt"})).await;
        assert_eq!(text(&r), "hello");
        let r = call(&client, "list_dir", json!({"path": "."})).await;
        let listed = r.structured_content.unwrap();
        assert!(
            listed["result"]["entries"].to_string().contains("note.txt"),
            "{listed}"
        );
        let r = call(&client, "delete_file", json!({"path": "note.txt"})).await;
        assert_eq!(r.is_error, Some(false), "{r:?}");
        assert!(!a.home().join("note.txt").exists());

        // The other user's identity: the kernel says no.
        let theirs = b.home().join(".tono/identity");
        let r = call(&client, "read_file", json!({"path": theirs})).await;
        assert_eq!(r.is_error, Some(true));
        assert!(text(&r).contains("Permission denied"), "{}", text(&r));

        // A refused address is classified, not fetched in the worker: it
        // drops to the user (and nothing listens on the discard port).
        for tool in ["http_get", "http_head"] {
            let r = call(&client, tool, json!({"url": "http://127.0.0.1:9/"})).await;
            assert_eq!(r.is_error, Some(true), "{r:?}");
            let o = r.structured_content.unwrap();
            assert_eq!(o["verdict"], json!("drop"), "{o}");
            assert_eq!(o["uid"], json!(a.user.uid), "{o}");
        }

        // Errors are results, not protocol errors.
        let r = call(&client, "shell", json!({"command": "exit 3"})).await;
        assert_eq!(r.is_error, Some(true));
        assert!(text(&r).contains("exit status 3"));
        let r = call(
            &client,
            "shell",
            json!({"command": "true", "secrets": ["not_granted"]}),
        )
        .await;
        assert_eq!(r.is_error, Some(true));
        assert!(
            text(&r).contains("refused (secret_not_granted)"),
            "{}",
            text(&r)
        );
        let r = call(&client, "shell", json!({"command": "true", "extra": 1})).await;
        assert!(text(&r).starts_with("refused"), "{}", text(&r));
        let r = call(&client, "Shell", json!({"command": "id"})).await;
        assert_eq!(r.is_error, Some(true), "an unknown tool never runs: {r:?}");

        client.cancel().await.unwrap();
    });
}

#[test]
fn progress_is_reported_and_cancellation_kills_the_call() {
    need_root!();
    let u = TestUser::with_key();
    rt().block_on(async {
        let (client, mut progress, _) = connect(&["--user", u.name()]).await;
        let request = ClientRequest::CallToolRequest(Request::new(
            CallToolRequestParams::new("shell")
                .with_arguments(args(json!({"command": "setsid sleep 1000 & sleep 1000"}))),
        ));
        let options = PeerRequestOptions::default();
        let handle = client
            .peer()
            .send_cancellable_request(request, options)
            .await
            .unwrap();
        let first = tokio::time::timeout(Duration::from_secs(10), progress.recv())
            .await
            .expect("a progress notification within 10 s")
            .unwrap();
        // rmcp's client puts its own progress token on every request.
        let _ = first.progress_token;
        assert!(first.message.unwrap_or_default().contains("shell running"));
        assert!(live_processes_of(u.user.uid) >= 2, "the call runs");
        handle.cancel(Some("test".into())).await.unwrap();
        let t = Instant::now();
        while live_processes_of(u.user.uid) > 0 && t.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            live_processes_of(u.user.uid),
            0,
            "cancel killed the call and its setsid child"
        );
        // The server goes on serving.
        let r = call(&client, "shell", json!({"command": "echo still here"})).await;
        assert_eq!(text(&r).trim(), "still here");
        client.cancel().await.unwrap();
    });
}

#[test]
fn a_client_that_vanishes_mid_call_leaves_no_process() {
    need_root!();
    let u = TestUser::with_key();
    rt().block_on(async {
        let (client, _, server_pid) = connect(&["--user", u.name()]).await;
        let peer = client.peer().clone();
        let pending = tokio::spawn(async move {
            let _ = peer
                .call_tool(
                    CallToolRequestParams::new("shell")
                        .with_arguments(args(json!({"command": "sleep 1000"}))),
                )
                .await;
        });
        let t = Instant::now();
        while live_processes_of(u.user.uid) == 0 && t.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(live_processes_of(u.user.uid) > 0, "the call started");
        // The client goes away as the MCP stdio shutdown says: it closes
        // the server's stdin, waits, then SIGTERMs and at last SIGKILLs it.
        let t = Instant::now();
        client.cancel().await.unwrap();
        pending.abort();
        eprintln!("the client's shutdown took {:?}", t.elapsed());
        let t = Instant::now();
        let alive = || {
            std::path::Path::new(&format!("/proc/{server_pid}")).exists()
                && !std::fs::read_to_string(format!("/proc/{server_pid}/status"))
                    .unwrap_or_default()
                    .contains("State:\tZ")
        };
        while (alive() || live_processes_of(u.user.uid) > 0)
            && t.elapsed() < Duration::from_secs(20)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!alive(), "the server exited");
        assert_eq!(live_processes_of(u.user.uid), 0, "no orphaned tool process");
    });
}

#[test]
fn the_policy_hides_tools_and_the_server_holds_no_plaintext() {
    need_root!();
    let u = TestUser::with_key();
    let canary = format!("mcp-canary-{}-{}", std::process::id(), u.user.uid);
    u.seal("c", canary.as_bytes());
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.json");
    std::fs::write(&policy, r#"{"hide": ["delete_file", "write_file"]}"#).unwrap();
    // Positive controls: strings the server does hold — in its
    // environment, and on its heap (a value it parsed from its env config).
    let control = format!("mcp-control-{}", std::process::id());
    let heap_control = format!("mcp-heap-control-{}", std::process::id());
    let config = dir.path().join("env.json");
    std::fs::write(&config, json!({ "no_proxy": heap_control }).to_string()).unwrap();
    rt().block_on(async {
        let (client, _, pid) = connect_env(
            &[
                "--user",
                u.name(),
                "--secret",
                "c=CANARY",
                "--policy",
                policy.to_str().unwrap(),
                "--env-config",
                config.to_str().unwrap(),
            ],
            &[("MCP_TEST_CONTROL", &control)],
        )
        .await;
        let names: Vec<String> = client
            .peer()
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n == "delete_file" || n == "write_file"),
            "{names:?}"
        );
        for _ in 0..20 {
            let r = call(
                &client,
                "shell",
                json!({"command": "test -n \"$CANARY\" && echo ok", "secrets": ["c"]}),
            )
            .await;
            assert_eq!(text(&r).trim(), "ok");
        }
        let scan = tono_seal::demo::memscan::scan_process(
            pid,
            &[
                canary.as_bytes(),
                control.as_bytes(),
                heap_control.as_bytes(),
            ],
        )
        .expect("scan the server");
        assert!(scan.complete(), "the scan missed too much: {scan}");
        let hits = &scan.counts;
        assert!(
            hits[1] > 0 && hits[2] > 0,
            "both positive controls must be found, or the scan proves nothing: {hits:?}"
        );
        assert_eq!(hits[0], 0, "the MCP server's memory holds the plaintext");
        client.cancel().await.unwrap();
    });
}
