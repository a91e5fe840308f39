//! The module graph of a crate, read from its sources: which module refers to which, for the
//! structure test (`tests/tests/structure.rs`) that fails on an import cycle and keeps the
//! module map in `docs/architecture.md` true.
//!
//! A module is a file under `src/` (`a/b.rs` and `a/b/mod.rs` are `a::b`, `lib.rs` is the
//! crate root, shown as `crate`); `src/bin/` and test modules (`tests.rs`, and an inline
//! `#[cfg(test)] mod … {` to the end of its file) are left out: a test may reach anywhere.
//! A module refers to another when a `use` or a `crate::`/`super::`/`self::` path in its code
//! names an item of it. A name re-exported by `pub use` (also `pub use m::*`) counts as its
//! defining module's, so a facade does not hide a cycle. Every reference counts, to the
//! module's own parent too: a parent that uses a child, and a child that uses the parent's
//! item, make a cycle (the item belongs in a module of its own).
//!
//! The parse is textual, not a Rust parser: comments are dropped, string contents are not,
//! so a path inside a string literal counts (none of ours does that).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One module: its path (`""` for the crate root), file, first doc sentence, and the modules
/// it refers to, each with the first path that did.
#[derive(Debug, Clone)]
pub struct Module {
    /// `a::b`, or `""` for the crate root.
    pub path: String,
    /// The file it is read from.
    pub file: PathBuf,
    /// The first sentence of its `//!` doc comment (empty when it has none).
    pub summary: String,
    /// Modules it refers to, with the first path in its text that does.
    pub refers: BTreeMap<String, String>,
}

/// Every module of the crate whose `src/` is `src`, by path.
///
/// # Panics
/// When `src` cannot be read (a test helper: the sources are ours).
pub fn graph(src: &Path) -> BTreeMap<String, Module> {
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut texts = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        if parts.first().is_some_and(|p| p == "bin") || parts.iter().any(|p| p == "tests") {
            continue;
        }
        if matches!(parts.last().map(String::as_str), Some("lib" | "main" | "mod")) {
            parts.pop();
        }
        let text = std::fs::read_to_string(&f).unwrap();
        texts.insert(parts.join("::"), (f, code_of(&text), text));
    }
    let known: BTreeSet<String> = texts.keys().cloned().collect();
    let mut defined: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut exports: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut globs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (m, (_, code, _)) in &texts {
        defined.insert(m.clone(), definitions(code));
        for stmt in statements(code, true) {
            for (path, alias) in expand(&stmt) {
                let Some(target) = resolve(m, &path, &known) else { continue };
                let name = alias.unwrap_or_else(|| path.rsplit("::").next().unwrap_or_default().to_string());
                if name == "*" {
                    globs.entry(m.clone()).or_default().push(target);
                } else {
                    exports.entry((m.clone(), name)).or_insert(target);
                }
            }
        }
    }
    // The module that defines `name` as seen from `module` (following re-exports).
    let owner = |module: &str, name: &str| -> String {
        let mut at = module.to_string();
        for _ in 0..8 {
            if defined.get(&at).is_some_and(|d| d.contains(name)) {
                return at;
            }
            if let Some(next) = exports.get(&(at.clone(), name.to_string())) {
                at = next.clone();
                continue;
            }
            match globs
                .get(&at)
                .and_then(|g| g.iter().find(|t| defined.get(*t).is_some_and(|d| d.contains(name))))
            {
                Some(t) => return t.clone(),
                None => return at,
            }
        }
        at
    };
    let mut out = BTreeMap::new();
    for (m, (file, code, text)) in &texts {
        let mut refers = BTreeMap::new();
        let mut paths: Vec<String> =
            statements(code, false).iter().flat_map(|s| expand(s)).map(|(p, _)| p).collect();
        paths.extend(inline_paths(code));
        for path in paths {
            let Some(target) = resolve(m, &path, &known) else { continue };
            let rest = path.rsplit("::").next().unwrap_or_default();
            let target = if known.contains(&format!("{}{rest}", prefix(&target))) {
                target
            } else {
                owner(&target, rest)
            };
            if &target != m {
                refers.entry(target).or_insert(path);
            }
        }
        out.insert(m.clone(), Module { path: m.clone(), file: file.clone(), summary: summary(text), refers });
    }
    out
}

/// `m::` (or nothing for the crate root), to name a child of `m`.
fn prefix(m: &str) -> String {
    if m.is_empty() { String::new() } else { format!("{m}::") }
}

/// The cycles of `graph`: each a set of two or more modules that reach one another (Tarjan's
/// strongly connected components), sorted.
pub fn cycles(graph: &BTreeMap<String, Module>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, Module>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.graph[v].refers.keys() {
            let w = w.as_str();
            if !s.graph.contains_key(w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The text without comments and without the inline test module at its end.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines.peek().is_some_and(|n| {
                let n = n.trim_start();
                (n.starts_with("mod ") || n.starts_with("pub mod ")) && n.trim_end().ends_with('{')
            })
        {
            break;
        }
        let code = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The first sentence of the file's `//!` doc comment.
fn summary(text: &str) -> String {
    let doc: Vec<&str> = text
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim())
        .collect();
    let doc = doc.join(" ");
    let end = doc.find(". ").map_or(doc.len(), |i| i + 1);
    doc[..end].trim().to_string()
}

/// The bodies of the `use` statements (only the `pub use` ones when `public`): a statement
/// starts a line (`use`, `pub use`, `pub(crate) use`) and ends at its `;`.
fn statements(code: &str, public: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        let (is_pub, rest) = if let Some(r) = t.strip_prefix("use ") {
            (false, r)
        } else if let Some(r) = t.strip_prefix("pub ").and_then(|r| r.strip_prefix("use ")) {
            (true, r)
        } else if let Some(r) = t.strip_prefix("pub(").and_then(|r| r.split_once(") use ")).map(|(_, r)| r) {
            (true, r)
        } else {
            continue;
        };
        let mut stmt = rest.to_string();
        while !stmt.contains(';') {
            let Some(next) = lines.next() else { break };
            stmt.push(' ');
            stmt.push_str(next.trim());
        }
        if !public || is_pub {
            let body = stmt.split(';').next().unwrap_or_default();
            out.push(body.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    out
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// A `use` tree expanded into `(path, alias)` pairs: `a::{b, c::{d as e}}` is `a::b`,
/// `a::c::d` (alias `e`).
fn expand(tree: &str) -> Vec<(String, Option<String>)> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p.trim(), Some(a.trim().to_string())),
            None => (tree, None),
        };
        return vec![(path.replace(' ', ""), alias)];
    };
    let close = tree.rfind('}').filter(|c| *c > open).unwrap_or(tree.len());
    let (head, body) = (&tree[..open], &tree[open + 1..close]);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(p.trim()))
        .map(|(p, a)| {
            let p = if p == "self" { head.trim_end_matches("::").to_string() } else { format!("{head}{p}") };
            (p.replace(' ', ""), a)
        })
        .collect()
}

/// Paths in code that start at `crate`, `super` or `self` (`crate::a::b(…)`).
fn inline_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start).map(|i| i + from) {
            from = i + start.len();
            // `crate::{…}` is a `use` tree (read by `statements`), not a path.
            if i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b':') || !b.get(from).is_some_and(|c| is_ident(*c))
            {
                continue;
            }
            let mut end = i;
            while end < b.len() && (is_ident(b[end]) || b[end] == b':') {
                end += 1;
            }
            out.push(code[i..end].trim_end_matches(':').to_string());
        }
    }
    out
}

/// The names `pub` items of a module define (`pub struct X`, `pub(crate) fn f`, …), and the
/// type kube's `CustomResource` derive makes (`#[kube(… kind = "X" …)]`).
fn definitions(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        if let Some((_, kind)) = line.split_once("kind = \"") {
            out.insert(kind.split('"').next().unwrap_or_default().to_string());
        }
        const ITEMS: [&str; 9] = ["struct", "enum", "fn", "const", "static", "type", "trait", "mod", "union"];
        if !line.trim_start().starts_with("pub") {
            continue;
        }
        if let Some(name) = line.split_whitespace().skip_while(|w| !ITEMS.contains(w)).nth(1) {
            let name: String = name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// The module `path` (as written in `module`) refers to: the longest known module its
/// segments name; `None` for a path outside the crate.
fn resolve(module: &str, path: &str, known: &BTreeSet<String>) -> Option<String> {
    let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    let mut base: Vec<&str> = if module.is_empty() { Vec::new() } else { module.split("::").collect() };
    match parts.first().copied() {
        Some("crate") => {
            base.clear();
            parts.remove(0);
        }
        Some("super" | "self") => {
            while let Some(&p) = parts.first() {
                match p {
                    "super" => drop(base.pop()),
                    "self" => {}
                    _ => break,
                }
                parts.remove(0);
            }
        }
        // A child module named by its plain name (`use child::Item;`).
        Some(first) if known.contains(&format!("{}{first}", prefix(module))) => {}
        _ => return None,
    }
    let full: Vec<&str> = base.into_iter().chain(parts).collect();
    (0..=full.len()).rev().map(|k| full[..k].join("::")).find(|c| known.contains(c))
}
