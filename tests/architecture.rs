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
        "record" | "error" | "librdkafka_log" => 10,
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
