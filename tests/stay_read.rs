//! The in-worker read tool against a local server reached only through an
//! explicit test-only allow of its loopback address, with a resolver the
//! test controls: rebinding, metadata redirects, loops, caps, and the
//! worker's proxy environment ignored.
#![cfg(feature = "read-tool")]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tono_seal::classify::{Policy, ToolKind};
use tono_seal::stay::fetch::{fetch, AddrResolver, FetchConfig, FetchError, Resolving};

struct FakeResolver(HashMap<&'static str, Vec<IpAddr>>);

impl AddrResolver for FakeResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> Resolving<'a> {
        let answer = self.0.get(host).cloned();
        Box::pin(async move { answer.ok_or_else(|| std::io::Error::other("NXDOMAIN")) })
    }
}

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

async fn serve(listener: tokio::net::TcpListener, port: u16) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut len = 0;
            while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                match sock.read(&mut buf[len..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => len += n,
                }
            }
            let head = String::from_utf8_lossy(&buf[..len]).to_string();
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
            let redirect = |to: String| {
                format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").into_bytes()
            };
            let ok = |body: &[u8]| {
                let mut r = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).into_bytes();
                r.extend_from_slice(body);
                r
            };
            let response = match path.as_str() {
                "/ok" => ok(b"hello from the test server"),
                "/headers" => ok(head.to_ascii_lowercase().as_bytes()),
                "/big" => ok(&vec![b'b'; 3 * 1024 * 1024]),
                // On the test server's own port, which the test allows: only
                // the address can refuse it.
                "/to-metadata" => {
                    redirect(format!("http://169.254.169.254:{port}/latest/meta-data/"))
                }
                "/to-rebind" => redirect(format!("http://rebind.example.com:{port}/ok")),
                "/to-good" => redirect(format!("http://good.example.com:{port}/ok")),
                "/to-same-headers" => redirect("/headers".into()),
                "/to-other-headers" => redirect(format!("http://other.example.com:{port}/headers")),
                "/to-userinfo" => redirect(format!("http://u:p@good.example.com:{port}/ok")),
                "/loop" => redirect("/loop".into()),
                _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_vec(),
            };
            let _ = sock.write_all(&response).await;
        });
    }
}

#[test]
fn the_read_tool_checks_every_hop_and_every_address() {
    // An ambient proxy that would break every request if it were used.
    std::env::set_var("HTTP_PROXY", "http://192.0.2.1:9");
    std::env::set_var("http_proxy", "http://192.0.2.1:9");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind((LOOPBACK, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(serve(listener, port));
        let policy = Policy::from_json(format!("{{\"stay_ports\":[{port}]}}").as_bytes()).unwrap();
        let resolver = FakeResolver(HashMap::from([
            ("good.example.com", vec![LOOPBACK]),
            ("other.example.com", vec![LOOPBACK]),
            (
                "rebind.example.com",
                vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))],
            ),
            (
                "mixed.example.com",
                vec![IpAddr::V4(Ipv4Addr::new(93, 184, 215, 14)), LOOPBACK],
            ),
        ]));
        let allowed = FetchConfig {
            test_only_allow: vec![LOOPBACK],
            ..FetchConfig::default()
        };
        let strict = FetchConfig::default();
        let get = |url: String, cfg: FetchConfig| {
            let (policy, resolver) = (&policy, &resolver);
            async move {
                fetch(
                    ToolKind::HttpGet,
                    &url,
                    &[("Accept".into(), "text/plain".into())],
                    policy,
                    &cfg,
                    resolver,
                )
                .await
            }
        };
        let base = format!("http://good.example.com:{port}");

        // Without the test-only allow, a public-looking name that resolves to
        // loopback is refused before any connection.
        let e = get(format!("{base}/ok"), strict.clone()).await.unwrap_err();
        assert!(
            matches!(e, FetchError::Refused(ref r) if r.code == "ip_not_public"),
            "{e:?}"
        );
        // With it, the server answers.
        let ok = get(format!("{base}/ok"), allowed.clone()).await.unwrap();
        assert_eq!(
            (ok.status, ok.body.as_slice()),
            (200, &b"hello from the test server"[..])
        );
        // One refused address among several refuses the hop.
        let e = get(
            format!("http://mixed.example.com:{port}/ok"),
            strict.clone(),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, FetchError::Refused(_)), "{e:?}");
        // Redirects: to metadata, to a name that rebinds to 10/8, with
        // userinfo: each refused for its own reason (the port is the
        // allowed one throughout).
        for (path, code) in [
            ("/to-metadata", "ip_not_public"),
            ("/to-rebind", "ip_not_public"),
            ("/to-userinfo", "userinfo_refused"),
        ] {
            let e = get(format!("{base}{path}"), allowed.clone())
                .await
                .unwrap_err();
            assert!(
                matches!(e, FetchError::Refused(ref r) if r.code == code),
                "{path}: {e:?}"
            );
        }
        let hop = get(format!("{base}/to-good"), allowed.clone())
            .await
            .unwrap();
        assert_eq!((hop.status, hop.redirects), (200, 1));
        // The caller's header goes to a hop on its own origin (positive
        // control), and not to one on another origin.
        let same = get(format!("{base}/to-same-headers"), allowed.clone())
            .await
            .unwrap();
        let same = String::from_utf8_lossy(&same.body).into_owned();
        assert!(same.contains("accept: text/plain"), "{same}");
        let other = get(format!("{base}/to-other-headers"), allowed.clone())
            .await
            .unwrap();
        assert_eq!(other.redirects, 1);
        let other = String::from_utf8_lossy(&other.body).into_owned();
        assert!(other.starts_with("get /headers"), "{other}");
        assert!(
            !other.contains("accept: text/plain"),
            "sent to another origin: {other}"
        );
        assert!(matches!(
            get(format!("{base}/loop"), allowed.clone()).await,
            Err(FetchError::TooManyRedirects)
        ));
        // Body cap.
        let big = get(format!("{base}/big"), allowed.clone()).await.unwrap();
        assert_eq!(big.body.len(), 1024 * 1024);
        assert!(big.truncated);
        // No proxy was used (the request reached the server directly) and no
        // ambient credential was sent.
        let echoed = String::from_utf8(
            get(format!("{base}/headers"), allowed.clone())
                .await
                .unwrap()
                .body,
        )
        .unwrap();
        assert!(echoed.contains("accept: text/plain"), "{echoed}");
        assert!(
            !echoed.contains("authorization")
                && !echoed.contains("cookie")
                && !echoed.contains("proxy"),
            "{echoed}"
        );
        // A literal loopback URL is refused by the URL rules themselves.
        let e = get(format!("http://127.0.0.1:{port}/ok"), strict.clone())
            .await
            .unwrap_err();
        assert!(matches!(e, FetchError::Refused(_)), "{e:?}");
    });
}
