//! `tono-seal generate-docs --out DIR` (hidden): the manual page
//! `tono-seal(1)` and the bash, zsh and fish completions, generated from
//! the same `clap` definitions the command line parses with, so they never
//! drift from `--help`.
//!
//! The page has the usual sections from `clap_mangen`, then one section per
//! command (its description and every option), the exit codes (from
//! [`super::exit::EXIT_CODES`]), the files of a user's key store with
//! their modes, and SEE ALSO: the documentation in the source
//! ([`super::args::DOCS`]).
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap_mangen::roff::{bold, italic, roman, Roff};
use clap_mangen::Man;

use super::args::{Cli, DOCS};
use super::exit::{self, CliError};

/// The files of a user's store, with their modes.
const FILES: &[(&str, &str)] = &[
    ("~/.tono/", "the user's key store, 0700, owned by the user"),
    (
        "~/.tono/identity",
        "the user's age identity (one X25519 key; two only during a rotation), 0600",
    ),
    ("~/.tono/recipient", "the identity's public recipient, 0644"),
    ("~/.tono/secrets/", "sealed secrets, 0700"),
    (
        "~/.tono/secrets/NAME.age",
        "one secret sealed to the recipient (binary age), 0600",
    ),
    (
        crate::audit::DEFAULT_PATH,
        "the worker's hash-chained receipts, root's, 0600",
    ),
];

/// The whole page.
fn page(out: &mut dyn Write) -> std::io::Result<()> {
    let cmd = Cli::command();
    let man = Man::new(cmd.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    let mut roff = Roff::default();
    roff.control("SH", ["COMMANDS"]);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        command_section(&mut roff, &format!("tono-seal {}", sub.get_name()), sub);
        for nested in sub.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = format!("tono-seal {} {}", sub.get_name(), nested.get_name());
            command_section(&mut roff, &name, nested);
        }
    }
    roff.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in exit::EXIT_CODES {
        roff.control("TP", []);
        roff.text([bold(code.to_string())]);
        roff.text([roman(*meaning)]);
    }
    roff.control("SH", ["FILES"]);
    for (path, what) in FILES {
        roff.control("TP", []);
        roff.text([italic(*path)]);
        roff.text([roman(*what)]);
    }
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(
        "The documentation, in the source tree of tono-seal, read in this order:",
    )]);
    for (path, what) in DOCS {
        roff.control("TP", []);
        roff.text([italic(*path)]);
        roff.text([roman(*what)]);
    }
    roff.to_writer(out)?;
    man.render_version_section(out)
}

/// `.SS name`, the command's description, then each of its options.
fn command_section(roff: &mut Roff, name: &str, cmd: &clap::Command) {
    roff.control("SS", [name]);
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        roff.text([roman(about.to_string())]);
    }
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let mut spelled = Vec::new();
        if let Some(short) = arg.get_short() {
            spelled.push(format!("-{short}"));
        }
        if let Some(long) = arg.get_long() {
            spelled.push(format!("--{long}"));
        }
        let takes_value = arg.get_action().takes_values();
        let value = arg
            .get_value_names()
            .map(|v| {
                v.iter()
                    .map(|n| format!("<{n}>"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
        let head = match (spelled.is_empty(), takes_value) {
            (true, _) => value,
            (false, true) => format!("{} {value}", spelled.join(", ")),
            (false, false) => spelled.join(", "),
        };
        roff.control("TP", []);
        roff.text([bold(head)]);
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let values: Vec<String> = if takes_value {
            arg.get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_owned())
                .collect()
        } else {
            Vec::new()
        };
        let help = if values.is_empty() {
            help
        } else {
            format!("{help} [one of: {}]", values.join(", "))
        };
        roff.text([roman(help)]);
    }
}

/// Writes `man/tono-seal.1` and `completions/{tono-seal.bash,_tono-seal,
/// tono-seal.fish}` below `out`.
pub fn generate(out: &Path) -> Result<i32, CliError> {
    let fail = |what: &str, e: std::io::Error| {
        CliError::new(exit::FAILED, format!("{what} in {}: {e}", out.display()))
    };
    let (man_dir, completions) = (out.join("man"), out.join("completions"));
    for dir in [&man_dir, &completions] {
        std::fs::create_dir_all(dir).map_err(|e| fail("create a folder", e))?;
    }
    let mut text = Vec::new();
    page(&mut text).map_err(|e| fail("render the manual page", e))?;
    std::fs::write(man_dir.join("tono-seal.1"), text).map_err(|e| fail("write the page", e))?;
    use clap_complete::Shell;
    for (shell, file) in [
        (Shell::Bash, "tono-seal.bash"),
        (Shell::Zsh, "_tono-seal"),
        (Shell::Fish, "tono-seal.fish"),
    ] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "tono-seal", &mut script);
        std::fs::write(completions.join(file), script)
            .map_err(|e| fail("write a completion", e))?;
    }
    Ok(exit::OK)
}
