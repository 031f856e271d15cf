//! The crate's layout as `ARCHITECTURE.md` states it, checked on the
//! crate's own source (parsed with `syn`, no root needed):
//!
//! - every room is in the layer table below, and `ARCHITECTURE.md` names it;
//! - layers only point down: a file refers (by `crate::…` or `super::…`
//!   path, in code or `use`) only to its own room or a room of a lower
//!   layer;
//! - no import cycle between files;
//! - `unsafe` appears only in `src/sys/`, and every other room's root says
//!   `#![forbid(unsafe_code)]`.
//!
//! A path is resolved to the file that defines its module, following the
//! `pub use` re-exports of `mod.rs` files, so `crate::drop::Launcher` counts
//! as a use of `src/drop/start.rs`. Paths inside macro calls are not seen
//! (syn does not parse macro bodies); the few there are name lower rooms.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The rooms, bottom layer first. A room may use only rooms of a lower
/// layer; rooms of one layer do not use each other.
const LAYERS: &[&[&str]] = &[
    &["sys"],
    &["user", "fs", "host"],
    &["keys", "classify", "env", "mask"],
    &["broker"],
    &["launch", "contain", "stay", "audit"],
    &["drop"],
    &["turn"],
    &["verify"],
    &["mcp", "demo"],
    &["cli"],
];

fn layer_of(room: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&room))
}

/// A source file and the module path it defines (`["drop", "start"]`).
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
    ast: syn::File,
}

impl SourceFile {
    fn room(&self) -> &str {
        self.module.first().map_or("", String::as_str)
    }

    fn is_mod_root(&self) -> bool {
        let name = self.path.file_name().and_then(|n| n.to_str());
        matches!(name, Some("mod.rs") | Some("lib.rs"))
    }

    fn display(&self) -> String {
        self.path
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(&self.path)
            .display()
            .to_string()
    }
}

fn read_sources() -> Vec<SourceFile> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path != src.join("bin") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&src).unwrap();
            let mut module: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|m| m == "mod" || m == "lib") {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let ast = syn::parse_file(&text)
                .unwrap_or_else(|e| panic!("{}: does not parse: {e}", path.display()));
            files.push(SourceFile { path, module, ast });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// Every path a file names, as written (`crate::a::b`, `super::c`), with
/// the depth of inline modules it was written in.
#[derive(Default)]
struct PathCollector {
    depth: usize,
    paths: Vec<(usize, Vec<String>)>,
    unsafe_lines: Vec<String>,
}

impl PathCollector {
    fn push(&mut self, segments: Vec<String>) {
        if matches!(
            segments.first().map(String::as_str),
            Some("crate" | "super")
        ) {
            self.paths.push((self.depth, segments));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                if n.ident != "self" {
                    full.push(n.ident.to_string());
                }
                self.push(full);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                self.push(full);
            }
            syn::UseTree::Glob(_) => self.push(prefix.clone()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    fn found_unsafe(&mut self, what: &str) {
        self.unsafe_lines.push(what.to_owned());
    }
}

impl<'ast> Visit<'ast> for PathCollector {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, path);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        self.depth += 1;
        syn::visit::visit_item_mod(self, item);
        self.depth -= 1;
    }

    fn visit_expr_unsafe(&mut self, e: &'ast syn::ExprUnsafe) {
        self.found_unsafe("an unsafe block");
        syn::visit::visit_expr_unsafe(self, e);
    }

    fn visit_signature(&mut self, sig: &'ast syn::Signature) {
        if sig.unsafety.is_some() {
            self.found_unsafe(&format!("unsafe fn {}", sig.ident));
        }
        syn::visit::visit_signature(self, sig);
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if item.unsafety.is_some() {
            self.found_unsafe("an unsafe impl");
        }
        syn::visit::visit_item_impl(self, item);
    }

    fn visit_item_foreign_mod(&mut self, item: &'ast syn::ItemForeignMod) {
        self.found_unsafe("an extern block");
        syn::visit::visit_item_foreign_mod(self, item);
    }
}

/// The crate, as modules and their re-exports.
struct Crate {
    /// Module path → index in `files`.
    modules: BTreeMap<Vec<String>, usize>,
    /// (module of a mod root, name) → the module path it re-exports from.
    reexports: BTreeMap<(Vec<String>, String), Vec<String>>,
}

impl Crate {
    fn new(files: &[SourceFile]) -> Self {
        let modules = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect();
        let mut reexports = BTreeMap::new();
        for f in files.iter().filter(|f| f.is_mod_root()) {
            for item in &f.ast.items {
                let syn::Item::Use(u) = item else { continue };
                if !matches!(u.vis, syn::Visibility::Public(_)) {
                    continue;
                }
                let mut c = PathCollector::default();
                c.use_tree(&mut Vec::new(), &u.tree);
                // `pub use child::Name` is not a crate/super path: collect
                // relative ones by hand.
                let mut relative = Vec::new();
                collect_relative(&mut Vec::new(), &u.tree, &mut relative);
                for path in relative {
                    let Some((name, from)) = path.split_last() else {
                        continue;
                    };
                    let mut target = f.module.clone();
                    target.extend(from.iter().cloned());
                    reexports.insert((f.module.clone(), name.clone()), target);
                }
            }
        }
        Crate { modules, reexports }
    }

    /// The file a module path refers to: the longest prefix that is a
    /// module, then through re-exports of a mod root.
    fn resolve(&self, path: &[String]) -> Option<usize> {
        let mut path = path.to_vec();
        for _ in 0..8 {
            let (len, &file) = (0..=path.len())
                .rev()
                .find_map(|n| self.modules.get(&path[..n]).map(|f| (n, f)))?;
            let Some(next) = path.get(len) else {
                return Some(file);
            };
            match self.reexports.get(&(path[..len].to_vec(), next.clone())) {
                Some(target) => {
                    let mut redirected = target.clone();
                    redirected.push(next.clone());
                    redirected.extend(path[len + 1..].iter().cloned());
                    path = redirected;
                }
                None => return Some(file),
            }
        }
        None
    }
}

fn collect_relative(prefix: &mut Vec<String>, tree: &syn::UseTree, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            collect_relative(prefix, &p.tree, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut full = prefix.clone();
            full.push(n.ident.to_string());
            out.push(full);
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix.clone();
            full.push(r.rename.to_string());
            out.push(full);
        }
        syn::UseTree::Glob(_) => {}
        syn::UseTree::Group(g) => {
            for t in &g.items {
                collect_relative(prefix, t, out);
            }
        }
    }
}

/// The module path a written path means, seen from `file`'s module at
/// inline-module `depth`; `None` for a path that stays inside the file.
fn absolute(file: &SourceFile, depth: usize, written: &[String]) -> Option<Vec<String>> {
    if written.first().is_some_and(|s| s == "crate") {
        return Some(written[1..].to_vec());
    }
    let supers = written.iter().take_while(|s| *s == "super").count();
    if supers <= depth {
        return None;
    }
    let up = supers - depth;
    let mut base = file.module.clone();
    if base.len() < up {
        return None;
    }
    base.truncate(base.len() - up);
    base.extend(written[supers..].iter().cloned());
    Some(base)
}

/// Every file-to-file reference: (from, to), with the path that made it.
fn references(files: &[SourceFile], krate: &Crate) -> BTreeMap<(usize, usize), String> {
    let mut edges = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        let mut c = PathCollector::default();
        c.visit_file(&f.ast);
        for (depth, written) in c.paths {
            let Some(abs) = absolute(f, depth, &written) else {
                continue;
            };
            let Some(j) = krate.resolve(&abs) else {
                continue;
            };
            if i != j {
                edges.entry((i, j)).or_insert_with(|| written.join("::"));
            }
        }
    }
    edges
}

#[test]
fn every_room_is_in_a_layer_and_in_the_map() {
    let files = read_sources();
    let architecture =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .expect("ARCHITECTURE.md at the crate root");
    let rooms: BTreeSet<&str> = files
        .iter()
        .map(SourceFile::room)
        .filter(|r| !r.is_empty())
        .collect();
    let mut problems = Vec::new();
    for room in &rooms {
        if layer_of(room).is_none() {
            problems.push(format!(
                "room {room} is in no layer of tests/architecture.rs"
            ));
        }
        let named = [format!("`src/{room}/`"), format!("`src/{room}.rs`")];
        if !named.iter().any(|n| architecture.contains(n.as_str())) {
            problems.push(format!("ARCHITECTURE.md does not name room {room}"));
        }
    }
    for layer in LAYERS {
        for room in *layer {
            if !rooms.contains(room) {
                problems.push(format!("the layer table names {room}, which is not a room"));
            }
        }
    }
    // The line counts, for whoever keeps ARCHITECTURE.md true.
    let mut lines: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for f in &files {
        let n = std::fs::read_to_string(&f.path).unwrap().lines().count();
        let e = lines.entry(f.room()).or_default();
        e.0 += 1;
        e.1 += n;
    }
    for (room, (count, n)) in &lines {
        println!(
            "{:<10} {count:>3} files {n:>6} lines",
            if room.is_empty() { "lib.rs" } else { room }
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn layers_only_point_down() {
    let files = read_sources();
    let krate = Crate::new(&files);
    let edges = references(&files, &krate);
    assert!(
        edges.len() > 100,
        "the resolver found only {} references: it is broken",
        edges.len()
    );
    let mut upward = Vec::new();
    for ((i, j), via) in &edges {
        let (from, to) = (&files[*i], &files[*j]);
        if from.room() == to.room() || from.room().is_empty() || to.room().is_empty() {
            continue;
        }
        let (Some(a), Some(b)) = (layer_of(from.room()), layer_of(to.room())) else {
            continue; // the room test names it
        };
        if b >= a {
            upward.push(format!(
                "{} (room {}, layer {a}) uses {} (room {}, layer {b}) via {via}",
                from.display(),
                from.room(),
                to.display(),
                to.room()
            ));
        }
    }
    assert!(
        upward.is_empty(),
        "references that do not point down:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_two_files_import_each_other() {
    let files = read_sources();
    let krate = Crate::new(&files);
    let edges = references(&files, &krate);
    // A positive control: the resolver sees a known edge through a
    // re-export, so an empty cycle list is not an empty graph.
    let index = |p: &str| {
        files
            .iter()
            .position(|f| f.path.ends_with(p))
            .unwrap_or_else(|| panic!("{p} is not a source file"))
    };
    assert!(
        edges.contains_key(&(index("src/cli/mod.rs"), index("src/drop/start.rs"))),
        "crate::drop::Launcher in cli/mod.rs must resolve to drop/start.rs"
    );
    let mut graph: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for (i, j) in edges.keys() {
        graph.entry(*i).or_default().insert(*j);
    }
    let cycles = strongly_connected(files.len(), &graph);
    let report: Vec<String> = cycles
        .iter()
        .map(|c| {
            c.iter()
                .map(|&i| files[i].display())
                .collect::<Vec<_>>()
                .join(" <-> ")
        })
        .collect();
    assert!(report.is_empty(), "import cycles:\n{}", report.join("\n"));
}

#[test]
fn unsafe_lives_only_in_sys() {
    let files = read_sources();
    let mut found = Vec::new();
    let mut seen_in_sys = 0;
    for f in &files {
        let mut c = PathCollector::default();
        c.visit_file(&f.ast);
        if f.room() == "sys" {
            seen_in_sys += c.unsafe_lines.len();
            continue;
        }
        for what in c.unsafe_lines {
            found.push(format!("{}: {what}", f.display()));
        }
        let forbids = f.ast.attrs.iter().any(|a| {
            a.path().is_ident("forbid")
                && a.parse_args::<syn::Path>()
                    .is_ok_and(|p| p.is_ident("unsafe_code"))
        });
        let is_room_root = f.module.len() == 1;
        if is_room_root && !forbids {
            found.push(format!("{}: no #![forbid(unsafe_code)]", f.display()));
        }
    }
    // The positive control: the same visitor finds the syscalls' blocks.
    assert!(
        seen_in_sys >= 10,
        "only {seen_in_sys} unsafe items found in src/sys: the check is broken"
    );
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// Tarjan's strongly connected components of more than one node.
fn strongly_connected(n: usize, graph: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<Vec<usize>> {
    struct State<'g> {
        graph: &'g BTreeMap<usize, BTreeSet<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        let empty = BTreeSet::new();
        let next: Vec<usize> = s.graph.get(&v).unwrap_or(&empty).iter().copied().collect();
        for w in next {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}
