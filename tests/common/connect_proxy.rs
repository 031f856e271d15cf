//! A CONNECT and plain-HTTP proxy on the host's loopback, standing for an
//! operator's proxy in the network tests: it demands a password (which the
//! worker adds, and no call may hold) and records each request line with
//! whether its credentials were right.
//!
//! Included with `#[path = "common/connect_proxy.rs"] mod connect_proxy;`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use base64::Engine;

/// The user the proxy demands.
pub const PROXY_USER: &str = "tono-proxy-user";
/// The password the proxy demands.
pub const PROXY_PASSWORD: &str = "pr0xy-pa55word-never-in-a-call";

/// A CONNECT and plain-HTTP proxy on the host's loopback that demands
/// `PROXY_USER:PROXY_PASSWORD` and records each request line with the
/// credentials it came with.
pub struct Proxy {
    pub port: u16,
    seen: Arc<Mutex<Vec<(String, bool)>>>,
}

impl Proxy {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || proxy_one(stream, &log));
            }
        });
        Self { port, seen }
    }

    pub fn seen(&self) -> Vec<(String, bool)> {
        self.seen.lock().unwrap().clone()
    }
}

/// The `Proxy-Authorization` value the proxy accepts.
pub fn expected_authorization() -> String {
    let pair = format!("{PROXY_USER}:{PROXY_PASSWORD}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

fn proxy_one(stream: TcpStream, log: &Mutex<Vec<(String, bool)>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut authorized = false;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("proxy-authorization")
                && value.trim() == expected_authorization()
            {
                authorized = true;
            }
        }
    }
    let request_line = request_line.trim_end().to_owned();
    log.lock().unwrap().push((request_line.clone(), authorized));
    let mut client = stream;
    if !authorized {
        let _ = client.write_all(
            b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"t\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    }
    let parts: Vec<&str> = request_line.split(' ').collect();
    let (method, target) = (parts[0], parts[1]);
    let (authority, path) = if method == "CONNECT" {
        (target.to_owned(), None)
    } else {
        let rest = target.strip_prefix("http://").unwrap_or(target);
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        (authority.to_owned(), Some(format!("/{path}")))
    };
    let Ok(mut upstream) = TcpStream::connect(&authority) else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    match path {
        None => {
            let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
        }
        Some(path) => {
            let _ = write!(
                upstream,
                "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
            );
        }
    }
    // Whatever the client had already sent after its head, then both ways.
    let buffered = reader.buffer().to_vec();
    let _ = upstream.write_all(&buffered);
    let (mut up_read, mut client_write) =
        (upstream.try_clone().unwrap(), client.try_clone().unwrap());
    let back = std::thread::spawn(move || {
        let _ = std::io::copy(&mut up_read, &mut client_write);
        let _ = client_write.shutdown(Shutdown::Write);
    });
    let mut client_read = reader.into_inner();
    let _ = std::io::copy(&mut client_read, &mut upstream);
    let _ = upstream.shutdown(Shutdown::Write);
    let _ = back.join();
}
