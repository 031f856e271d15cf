//! The operator's terminal is never the tool's (issue 33): `tono-seal run`
//! started on a terminal gives the launcher, and so the tool, pipes as its
//! stdin, stdout and stderr, never the terminal itself. In the private view
//! what the tool writes to any of them reaches the terminal only through
//! the masking relay, so a granted secret never shows; in the shared view
//! (no relay) the tool still cannot write to the terminal through its
//! stdin. What the operator types still reaches the tool, the program's
//! exit code is `run`'s, and `run` ends when the program does, whatever its
//! stdin still holds.
//!
//! Each test makes a real pseudo-terminal (its echo off, so that what the
//! terminal shows is what the processes wrote), starts `tono-seal` as the
//! leader of a session whose controlling terminal it is (`setsid -c`),
//! with the terminal as its fds 0, 1 and 2, and reads the raw bytes the
//! terminal shows until the process exits.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{tono, tono_bin, TestUser, CLI_STARTS};

/// What the terminal showed while `tono-seal ARGS` ran on it, and how it
/// exited; `typed` is written to the terminal as the operator's keys.
fn on_terminal(args: &[&str], typed: &[u8]) -> (Vec<u8>, Option<i32>) {
    use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let mut modes = tcgetattr(&pty.slave).expect("tcgetattr");
    modes.local_flags.remove(LocalFlags::ECHO);
    tcsetattr(&pty.slave, SetArg::TCSANOW, &modes).expect("tcsetattr");
    let slave = || Stdio::from(pty.slave.try_clone().expect("dup the terminal"));
    let mut child = {
        let _starting = CLI_STARTS.read().unwrap_or_else(|p| p.into_inner());
        // The `Command` (and its copies of the terminal) ends with this block.
        Command::new("setsid")
            .arg("--ctty")
            .arg(tono_bin())
            .args(args)
            .stdin(slave())
            .stdout(slave())
            .stderr(slave())
            .spawn()
            .expect("start tono-seal on the terminal")
    };
    drop(pty.slave);
    let mut master = File::from(pty.master);
    // The line discipline keeps the line until a reader takes it.
    master.write_all(typed).expect("type on the terminal");
    let reader = std::thread::spawn(move || {
        let mut shown = Vec::new();
        let mut buf = [0u8; 4096];
        // EIO once every copy of the terminal's other side is closed.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            shown.extend_from_slice(&buf[..n]);
        }
        shown
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tono-seal run did not end within 60 s on a terminal");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (reader.join().unwrap(), status.code())
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Prints where each of the tool's (the shell's, `$$`) fds 0-2 leads, one
/// `fdN=` line each (`/proc/self` would be the command substitution's).
const WHERE_FDS: &str = "for n in 0 1 2; do echo \"fd$n=$(readlink /proc/$$/fd/$n)\"; done";

/// The lines the terminal showed (the terminal turns `\n` into `\r\n`).
fn lines(shown: &str) -> Vec<&str> {
    shown.lines().map(|l| l.trim_end_matches('\r')).collect()
}

/// Asserts that `lines` are `fd0=`, `fd1=`, `fd2=` lines that each name a
/// pipe, then `then`.
fn assert_pipes_then(lines: &[&str], then: &[&str], shown: &str) {
    assert_eq!(lines.len(), 3 + then.len(), "{shown}");
    for (n, line) in lines[..3].iter().enumerate() {
        assert!(
            line.starts_with(&format!("fd{n}=pipe:[")) && !line.contains("/dev/pts"),
            "the tool's {line}, not a pipe:\n{shown}"
        );
    }
    assert_eq!(&lines[3..], then, "{shown}");
}

#[test]
fn a_tool_run_from_a_terminal_gets_pipes_and_its_writes_to_stdin_never_show_a_secret() {
    need_root!();
    let u = TestUser::with_key();
    let value = format!("tty-canary-{:016x}", rand::random::<u64>());
    u.seal("tok", value.as_bytes());
    // Its one line of stderr is masked, held back (shorter than the longest
    // pattern) and written in one piece when the program ends, so it
    // cannot split a line of stdout; errors of the writes that must fail
    // are not shown.
    let script = format!(
        "echo \"$tok\" >&0 2>/dev/null; \
         (echo \"$tok\" >/dev/tty) 2>/dev/null && echo tty-opened; \
         echo \"$tok\"; echo \"$tok\" >&2; \
         {WHERE_FDS}; read line; echo \"got:$line\"; exit 7"
    );
    let (shown, code) = on_terminal(
        &[
            "run",
            "--user",
            u.name(),
            "--secret",
            "tok",
            "--timeout",
            "30",
            "--",
            "/bin/sh",
            "-c",
            &script,
        ],
        b"typed-by-the-operator\n",
    );
    let text = String::from_utf8_lossy(&shown);
    assert!(
        !contains(&shown, value.as_bytes()),
        "the secret's value reached the operator's terminal:\n{text}"
    );
    // Positive control: the value written to stdout and to stderr came
    // through, masked.
    let masked = "[masked:tok]\r\n";
    assert_eq!(text.matches(masked).count(), 2, "{text}");
    let rest = text.replace(masked, "");
    assert_pipes_then(&lines(&rest), &["got:typed-by-the-operator"], &text);
    assert_eq!(code, Some(7), "run's exit code is the program's:\n{text}");
}

#[test]
fn in_the_shared_view_too_the_tool_never_holds_the_terminal() {
    need_root!();
    let u = TestUser::with_key();
    let value = format!("tty-canary-{:016x}", rand::random::<u64>());
    u.seal("tok", value.as_bytes());
    // No relay masks in the shared view: the value goes only to fd 0.
    let script = format!(
        "echo \"$tok\" >&0 2>/dev/null; echo marker-on-stdout; {WHERE_FDS}; \
         read line; echo \"got:$line\"; exit 5"
    );
    let (shown, code) = on_terminal(
        &[
            "run",
            "--user",
            u.name(),
            "--view",
            "shared",
            "--secret",
            "tok",
            "--timeout",
            "30",
            "--",
            "/bin/sh",
            "-c",
            &script,
        ],
        b"typed-in-shared\n",
    );
    let text = String::from_utf8_lossy(&shown);
    assert!(
        !contains(&shown, value.as_bytes()),
        "the tool wrote to the operator's terminal through its stdin:\n{text}"
    );
    let shown_lines = lines(&text);
    assert_eq!(shown_lines.first(), Some(&"marker-on-stdout"), "{text}");
    assert_pipes_then(&shown_lines[1..], &["got:typed-in-shared"], &text);
    assert_eq!(code, Some(5), "{text}");
}

#[test]
fn run_passes_its_stdin_to_the_tool_to_the_end_and_ends_when_the_tool_does() {
    need_root!();
    let u = TestUser::bare();
    // All of a large stdin arrives, its end is the tool's end of file, and
    // all the tool writes back comes out, uncapped and unchanged.
    let big: Vec<u8> = (0..3 * 1024 * 1024 + 17).map(|i| (i % 251) as u8).collect();
    let o = {
        let _starting = CLI_STARTS.read().unwrap_or_else(|p| p.into_inner());
        let mut child = Command::new(tono_bin())
            .args(["run", "--user", u.name(), "--timeout", "60", "--"])
            .args(["/bin/sh", "-c", "cat; echo done >&2; exit 3"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = big.clone();
        // Written beside the read of stdout: the pipes are smaller than both.
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let o = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        o
    };
    assert_eq!(o.status.code(), Some(3), "{}", common::stderr(&o));
    assert!(
        o.stdout == big,
        "stdout: {} bytes of {}",
        o.stdout.len(),
        big.len()
    );
    assert_eq!(common::stderr(&o), "done\n");
    // A tool that never reads its stdin: run ends with it, however much the
    // worker's stdin still holds.
    let started = Instant::now();
    let o = tono(
        &[
            "run",
            "--user",
            u.name(),
            "--timeout",
            "60",
            "--",
            "/bin/true",
        ],
        &vec![b'y'; 16 * 1024 * 1024],
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "run waited for its stdin after the tool ended: {:?}",
        started.elapsed()
    );
}
