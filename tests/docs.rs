//! The documentation, checked on the repository's own files (no root
//! needed; nothing outside the repository is read):
//!
//! - every relative link and image in `README.md` and `docs/*.md`
//!   resolves to a file inside the repository, and an `#anchor` to a
//!   heading of the file it names;
//! - the README's two set-up commands are the first section, and each of
//!   their steps is one that `.ci/run` runs, itself or through a script of
//!   the repository it starts (`packaging/test-deb`, `tests/vm/run`, …);
//! - every chapter of `docs/` is on the README's map and in the CLI's
//!   `--help` and manual page ([`tono_seal::cli::args::DOCS`]), and every
//!   file those name exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `README.md` and every `docs/*.md`, as repository-relative paths.
fn markdown_files() -> Vec<String> {
    let mut files = vec!["README.md".to_owned()];
    let mut chapters: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    chapters.sort();
    files.extend(chapters);
    files
}

/// The lines of a Markdown text outside fenced code blocks, with their
/// numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// A line without its inline code spans (`` `…` ``), which hold no links.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of `[text](target)`, `![alt](target)` and `[label]: target`
/// in one line of prose.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    if let Some(rest) = line.trim_start().strip_prefix('[') {
        if let Some((_, target)) = rest.split_once("]: ") {
            targets.push(target.trim().to_owned());
        }
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        // `[a](b "title")`: the target is the first word.
        let target = after[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.to_owned());
        rest = &after[end..];
    }
    targets
}

/// GitHub's anchor for a heading: lowercase, only letters, digits, `-`,
/// `_` and spaces kept, spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .flat_map(char::to_lowercase)
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a Markdown file's headings make (a repeated heading gets
/// `-1`, `-2`, … as on GitHub).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `base/rel` with `.` and `..` taken away, without touching the file
/// system; `None` if it leaves the repository.
fn join_inside(base: &Path, rel: &str) -> Option<PathBuf> {
    let mut parts: Vec<String> = base
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// What is wrong with each relative link of the files given, and how many
/// relative links were checked.
fn broken_links(files: &[String]) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in files {
        let text = read(file);
        let dir = Path::new(file).parent().unwrap_or(Path::new(""));
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let to = if path.is_empty() {
                    Some(PathBuf::from(file))
                } else {
                    join_inside(dir, path)
                };
                let Some(to) = to else {
                    problems.push(format!("{file}:{n}: {target} leaves the repository"));
                    continue;
                };
                if !root().join(&to).exists() {
                    problems.push(format!(
                        "{file}:{n}: {target}: no {} in the repository",
                        to.display()
                    ));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                let is_markdown = to.extension().is_some_and(|e| e == "md");
                if !is_markdown {
                    problems.push(format!(
                        "{file}:{n}: {target}: an anchor into a file that is not Markdown"
                    ));
                    continue;
                }
                let text = std::fs::read_to_string(root().join(&to)).unwrap();
                if !anchors(&text).contains(anchor) {
                    problems.push(format!(
                        "{file}:{n}: {target}: {} has no heading #{anchor}",
                        to.display()
                    ));
                }
            }
        }
    }
    (problems, checked)
}

#[test]
fn the_anchor_of_a_heading_is_githubs() {
    assert_eq!(
        slug(" Tools for any MCP host: `tono-seal mcp`"),
        "tools-for-any-mcp-host-tono-seal-mcp"
    );
    assert_eq!(
        slug(" A call's network: none, a proxy, or the host's"),
        "a-calls-network-none-a-proxy-or-the-hosts"
    );
    let twice = anchors("# A\n```\n# not a heading\n```\n## A\n");
    assert_eq!(twice, BTreeSet::from(["a".to_owned(), "a-1".to_owned()]));
    assert_eq!(
        link_targets("see [x](a.md#b), ![c](d.svg) and `[e](f)`"),
        ["a.md#b", "d.svg"]
    );
    assert_eq!(
        join_inside(Path::new("docs"), "../README.md"),
        Some("README.md".into())
    );
    assert_eq!(join_inside(Path::new("docs"), "../../x"), None);
}

#[test]
fn every_relative_link_resolves_inside_the_repository() {
    let files = markdown_files();
    assert!(
        files.len() >= 5,
        "only {files:?}: README.md and the chapters of docs/ were expected"
    );
    let (problems, checked) = broken_links(&files);
    // A positive control: the README's map alone links every chapter, so a
    // parser that finds no link cannot pass.
    assert!(
        checked >= files.len(),
        "only {checked} relative links found in {} files: the parser is broken",
        files.len()
    );
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

/// A shell command as `(program's file name, its arguments sorted)`, so
/// that `./target/release/tono-seal demo` and `/usr/bin/tono-seal demo`, or
/// `--locked --release` and `--release --locked`, are one command.
type Step = (String, Vec<String>);

fn step(words: &[&str]) -> Option<Step> {
    let words: Vec<String> = words
        .iter()
        .map(|w| w.trim_matches(|c| c == '"' || c == '\''))
        .filter(|w| !w.is_empty())
        .filter(|w| !w.starts_with('>') && !w.starts_with('<') && !w.starts_with("2>"))
        .map(str::to_owned)
        .collect();
    let (program, args) = words.split_first()?;
    let name = program.rsplit('/').next().unwrap_or(program).to_owned();
    let mut args = args.to_vec();
    args.sort();
    Some((name, args))
}

/// A shell line's simple commands, split at `&&`, `||`, `;`, `|` and
/// command substitutions (a comment after ` # ` dropped).
fn simple_commands(line: &str) -> Vec<String> {
    let line = line.split(" # ").next().unwrap_or(line);
    let mut text = line.to_owned();
    for sep in ["&&", "||", "$(", ";", "|", "`", "(", ")", "{", "}"] {
        text = text.replace(sep, "\n");
    }
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A shell line's simple commands, as steps.
fn steps_of_line(line: &str) -> Vec<Step> {
    simple_commands(line)
        .iter()
        .filter_map(|c| step(&c.split_whitespace().collect::<Vec<_>>()))
        .collect()
}

/// Every step `.ci/run` runs: its own lines and those of every script of
/// the repository it names, and they name, once each.
fn ci_steps() -> Vec<Step> {
    let mut steps = Vec::new();
    let mut queue = vec![".ci/run".to_owned()];
    let mut seen = BTreeSet::new();
    while let Some(script) = queue.pop() {
        if !seen.insert(script.clone()) {
            continue;
        }
        for line in read(&script).lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            for word in line
                .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')))
            {
                let named = word.contains('/')
                    && !word.starts_with('/')
                    && !word.split('/').any(|p| p == "..")
                    && root().join(word).is_file()
                    && Path::new(word).extension().is_none();
                if named {
                    queue.push(word.to_owned());
                }
            }
            steps.extend(steps_of_line(line));
        }
    }
    steps
}

/// The README's first `##` section: its heading and the commands of its
/// ```sh blocks (a plain ``` block there is output, not a command).
fn setup_commands(readme: &str) -> (String, Vec<String>) {
    let mut heading = None;
    let mut commands = Vec::new();
    // In a block: whether it is a ```sh block, and its lines.
    let mut block: Option<(bool, Vec<String>)> = None;
    for line in readme.lines() {
        if let Some((is_sh, lines)) = block.as_mut() {
            if line.starts_with("```") {
                if *is_sh {
                    commands.push(std::mem::take(lines).join("\n"));
                }
                block = None;
            } else {
                lines.push(line.to_owned());
            }
            continue;
        }
        if line.starts_with("```") {
            block = Some((heading.is_some() && line == "```sh", Vec::new()));
        } else if line.starts_with("## ") {
            if heading.is_some() {
                break;
            }
            heading = Some(line.to_owned());
        }
    }
    (heading.unwrap_or_default(), commands)
}

#[test]
fn the_readmes_setup_commands_are_the_ones_ci_runs() {
    let readme = read("README.md");
    let (heading, commands) = setup_commands(&readme);
    assert!(
        heading.starts_with("## Set up"),
        "the README's first section must be the set-up, not {heading:?}"
    );
    assert_eq!(
        commands.len(),
        2,
        "the set-up has exactly two commands (the demo, the tests): {commands:#?}"
    );
    assert!(
        commands.iter().all(|c| !c.contains('\n')),
        "each set-up command is one line: {commands:#?}"
    );
    assert!(
        commands[0].trim_end().ends_with("tono-seal demo"),
        "the first set-up command runs the demo: {}",
        commands[0]
    );
    assert!(
        commands[1]
            .trim_end()
            .ends_with("cargo test --locked --no-fail-fast"),
        "the second set-up command runs the tests: {}",
        commands[1]
    );
    let ci = ci_steps();
    let installed: BTreeSet<&str> = ci
        .iter()
        .filter(|(p, a)| p == "apt-get" && a.iter().any(|w| w == "install"))
        .flat_map(|(_, a)| a.iter())
        .filter(|w| !w.starts_with('-') && *w != "install")
        .map(String::as_str)
        .collect();
    let mut problems = Vec::new();
    for command in &commands {
        for written in simple_commands(command) {
            let Some(s) = step(&written.split_whitespace().collect::<Vec<_>>()) else {
                continue;
            };
            let ok = match (s.0.as_str(), s.1.as_slice()) {
                ("apt-get", args) if args.iter().any(|w| w == "install") => {
                    let missing: Vec<&String> = args
                        .iter()
                        .filter(|w| !w.starts_with('-') && *w != "install")
                        .filter(|w| !installed.contains(w.as_str()))
                        .collect();
                    if !missing.is_empty() {
                        problems.push(format!(
                            "the README installs {missing:?}, which .ci/run does not install"
                        ));
                    }
                    true
                }
                ("apt-get", args) if args.iter().any(|w| w == "update") => ci
                    .iter()
                    .any(|(p, a)| p == "apt-get" && a.iter().any(|w| w == "update")),
                _ => ci.contains(&s),
            };
            if !ok {
                problems.push(format!(
                    "the README's set-up runs `{written}`, which .ci/run does not run"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_chapter_is_on_the_map_and_in_the_help() {
    let readme = read("README.md");
    let named_by_cli: BTreeSet<&str> = tono_seal::cli::args::DOCS.iter().map(|(p, _)| *p).collect();
    let mut problems = Vec::new();
    for path in &named_by_cli {
        if !root().join(path).is_file() {
            problems.push(format!("the CLI's DOCS names {path}, which does not exist"));
        }
    }
    for chapter in markdown_files().iter().filter(|f| f.starts_with("docs/")) {
        if !named_by_cli.contains(chapter.as_str()) {
            problems.push(format!(
                "{chapter} is not in the CLI's DOCS (--help, the manual)"
            ));
        }
        if !readme.contains(&format!("]({chapter})")) {
            problems.push(format!("{chapter} is not on the README's map"));
        }
    }
    // The commands' own "See docs/….md in the source." lines.
    let args = read("src/cli/args.rs");
    for (i, _) in args.match_indices("docs/") {
        let name: String = args[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.'))
            .collect();
        let name = name.trim_end_matches('.');
        if name.ends_with(".md") && !root().join(name).is_file() {
            problems.push(format!(
                "src/cli/args.rs names {name}, which does not exist"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
