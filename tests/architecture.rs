//! The layering of `src/`, checked on every `cargo test`: dependencies
//! between the crate's top-level modules run one way,
//!
//! ```text
//! consumer -> engine -> monitor -> config -> output -> {failure, health} -> otlp -> trace -> metrics -> leaves
//! ```
//!
//! (`output`, the handler outputs, takes its producer rules from `failure`.)
//!
//! (`monitor`, the group monitor, sits beside the engine: it uses the
//! configuration's property checks and the metric names, never the engine
//! or the consumer.)
//!
//! (leaves: `record`, `clock`, `handler`, `error`, `ordering`, `summary`,
//! `slo`, `control`, which import only `record` and `error` among
//! themselves; the binaries under `src/bin/` are crates of their own and not
//! checked). A module
//! may import only modules of a lower layer, so no import circle can form.
//! Read from the source text: every `crate::<module>` path outside comments
//! and `#[cfg(test)]` modules counts. Print the graph with
//! `cargo test --test architecture -- --nocapture`.
//!
//! Inside a module, **files** form no circle either
//! (`files_form_no_import_circle`): a file's edges are its `mod` children
//! and every file its `crate::`, `super::`, `self::` and child-module paths
//! name (the deepest module file on the path), so a child never imports
//! from its parent (the parent declares it): it imports from the file that
//! defines the item.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Layer of each top-level module: a module may import only lower layers.
fn layer(module: &str) -> Option<u32> {
    Some(match module {
        "lib" => 100,
        "__bench" | "testing" => 90,
        "consumer" => 80,
        "engine" => 70,
        "monitor" => 65,
        "config" => 60,
        "output" => 55,
        "failure" | "health" => 50,
        "otlp" => 45,
        "trace" => 42,
        "metrics" => 40,
        "slo" | "handler" | "ordering" | "summary" | "clock" | "control" | "signal" => 20,
        "record" | "error" | "librdkafka_log" | "guide" => 10,
        _ => return None,
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/a.rs` and `src/a/**` belong to module `a`.
fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src/");
    let first = rel.components().next().expect("a component");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_owned()
}

/// The source without comments and without a trailing `#[cfg(test)] mod`.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module named right after `crate::`, also inside `use crate::{a, b}`.
fn imported_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find("};").unwrap_or(group.len());
            let mut depth = 0;
            let mut item = String::new();
            for c in group[..end].chars().chain(std::iter::once(',')) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let name: String = item
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if !name.is_empty() {
                            out.insert(name);
                        }
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(name);
        }
    }
    out
}

#[test]
fn modules_import_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    // `src/bin/` holds binaries (`fresh-monitor`): crates of their own that
    // use the library from outside (`fresh_consumer::...`), not modules.
    let bin = src.join("bin");
    files.retain(|f| !f.starts_with(&bin));
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut errors = Vec::new();
    for file in &files {
        let from = top_module(&src, file);
        let text = fs::read_to_string(file).expect("read a source file");
        let Some(from_layer) = layer(&from) else {
            errors.push(format!(
                "{}: module `{from}` has no layer in tests/architecture.rs",
                file.display()
            ));
            continue;
        };
        for to in imported_modules(&code(&text)) {
            if to == from {
                continue;
            }
            graph.entry(from.clone()).or_default().insert(to.clone());
            match layer(&to) {
                None => errors.push(format!(
                    "{}: `crate::{to}` is not a module path (import from the defining module, not a root re-export)",
                    file.display()
                )),
                Some(l) if l >= from_layer => errors.push(format!(
                    "{}: `{from}` imports `{to}`, which is not below it",
                    file.display()
                )),
                Some(_) => {}
            }
        }
    }
    for (from, to) in &graph {
        let to: Vec<&str> = to.iter().map(String::as_str).collect();
        println!("{from:>9} -> {}", to.join(", "));
    }
    assert!(
        graph.len() >= 10,
        "read only {} modules: did the layout change?",
        graph.len()
    );
    assert!(errors.is_empty(), "layering broken:\n{}", errors.join("\n"));
}

/// The module path of a source file: `src/a/b.rs` and `src/a/b/mod.rs`
/// are `["a", "b"]`, `src/lib.rs` is `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src/");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

/// The paths (as segments) a file's code names: `crate::a::b`,
/// `super::x`, `self::x`, and paths starting with one of `children` (its
/// own `mod`s), also inside `use` groups (`use crate::a::{b, c::d}`).
fn named_paths(code: &str, children: &BTreeSet<String>) -> Vec<(usize, Vec<String>)> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    // Expands `prefix::{a, b::{c, d}}` into whole paths.
    fn expand(prefix: &str, rest: &str, out: &mut Vec<String>) {
        let Some(group) = rest.strip_prefix('{') else {
            out.push(format!("{prefix}{rest}"));
            return;
        };
        let group = group.strip_suffix('}').unwrap_or(group);
        let mut depth = 0;
        let mut item = String::new();
        for c in group.chars().chain(std::iter::once(',')) {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    let it = item.trim();
                    if !it.is_empty() {
                        match it.find("::{") {
                            Some(i) => {
                                expand(&format!("{prefix}{}::", &it[..i]), &it[i + 2..], out)
                            }
                            None => out.push(format!("{prefix}{it}")),
                        }
                    }
                    item.clear();
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
    }
    let mut paths = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    // How many inline `mod name { .. }` blocks enclose each position (a
    // `super::` inside one names the file's own module first).
    let mut inline = vec![0usize; chars.len() + 1];
    {
        let mut braces = 0usize;
        let mut opened: Vec<usize> = Vec::new();
        let mut pending_mod = false;
        let mut word = String::new();
        for (k, &c) in chars.iter().enumerate() {
            if is_ident(c) {
                word.push(c);
            } else {
                if word == "mod" {
                    pending_mod = true;
                }
                word.clear();
                match c {
                    '{' => {
                        braces += 1;
                        if pending_mod {
                            opened.push(braces);
                        }
                        pending_mod = false;
                    }
                    '}' => {
                        if opened.last() == Some(&braces) {
                            opened.pop();
                        }
                        braces = braces.saturating_sub(1);
                    }
                    ';' => pending_mod = false,
                    _ => {}
                }
            }
            inline[k] = opened.len();
        }
    }
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':');
        if !starts_word || !is_ident(chars[i]) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && is_ident(chars[j]) {
            j += 1;
        }
        let first: String = chars[i..j].iter().collect();
        let anchored =
            matches!(first.as_str(), "crate" | "super" | "self") || children.contains(&first);
        if !anchored || j + 1 >= chars.len() || chars[j] != ':' || chars[j + 1] != ':' {
            i = j;
            continue;
        }
        // The whole path, with a brace group if one follows.
        let mut k = j;
        let mut depth = 0;
        while k < chars.len() {
            let c = chars[k];
            if c == '{' {
                depth += 1;
            } else if c == '}' {
                if depth == 0 {
                    break;
                }
                depth -= 1;
                if depth == 0 {
                    k += 1;
                    break;
                }
            } else if depth == 0 && !(is_ident(c) || c == ':') {
                break;
            }
            k += 1;
        }
        let text: String = chars[i..k].iter().filter(|c| !c.is_whitespace()).collect();
        let mut expanded = Vec::new();
        match text.find("::{") {
            Some(b) => expand(&text[..b + 2], &text[b + 2..], &mut expanded),
            None => expanded.push(text),
        }
        for p in expanded {
            paths.push((
                inline[i],
                p.split("::")
                    .map(|s| s.split(" as ").next().unwrap_or(s).trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect(),
            ));
        }
        i = k.max(j);
    }
    paths
}

/// Strongly connected components with more than one file (Tarjan).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(next) = s.graph.get(v) {
            for w in next {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if s.on_stack.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn files_form_no_import_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let bin = src.join("bin");
    files.retain(|f| !f.starts_with(&bin));
    // A `#[cfg(test)]` child (`tests.rs`, `tests/`) sees its parent by
    // design (`use super::*`) and is not part of the build.
    files.retain(|f| {
        !f.strip_prefix(&src)
            .expect("under src/")
            .components()
            .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "tests.rs")
    });
    let by_module: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| {
            let name = f
                .strip_prefix(&src)
                .expect("under src/")
                .display()
                .to_string();
            (module_path(&src, f), name)
        })
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let here = module_path(&src, file);
        let name = &by_module[&here];
        let text = code(&fs::read_to_string(file).expect("read a source file"));
        let children: BTreeSet<String> = by_module
            .keys()
            .filter(|m| m.len() == here.len() + 1 && m.starts_with(&here))
            .map(|m| m[here.len()].clone())
            .collect();
        let edges = graph.entry(name.clone()).or_default();
        for child in &children {
            let mut m = here.clone();
            m.push(child.clone());
            edges.insert(by_module[&m].clone());
        }
        for (mut inline, path) in named_paths(&text, &children) {
            let mut abs: Vec<String> = Vec::new();
            let mut segments = path.iter().peekable();
            match segments.peek().map(|s| s.as_str()) {
                Some("crate") => {
                    segments.next();
                }
                Some("self") => {
                    segments.next();
                    abs = here.clone();
                }
                Some("super") => {
                    abs = here.clone();
                    while segments.peek().is_some_and(|s| *s == "super") {
                        segments.next();
                        // Out of an inline module first: still this file.
                        if inline > 0 {
                            inline -= 1;
                        } else {
                            abs.pop();
                        }
                    }
                    if inline > 0 {
                        // Still inside an inline module of this file.
                        continue;
                    }
                }
                _ => abs = here.clone(),
            }
            abs.extend(segments.cloned());
            // The deepest module file the path goes through.
            let target = (0..=abs.len())
                .rev()
                .find_map(|n| by_module.get(&abs[..n]))
                .expect("lib.rs at least");
            if target != name {
                edges.insert(target.clone());
            }
        }
    }
    let found = circles(&graph);
    let mut details = Vec::new();
    for c in &found {
        details.push(format!("circle: {}", c.join(" <-> ")));
        for from in c {
            for to in graph[from].iter().filter(|t| c.contains(t)) {
                details.push(format!("    {from} -> {to}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} circles of files (a child importing from its parent, or two files importing each other):\n{}",
        found.len(),
        details.join("\n")
    );
}
