//! Source rules of the module crate (src/), checked by reading the source:
//! - layers are one-directional: commands -> services -> storage -> ffi,
//!   with the pure leaves (config, error, stats) and `dlock_core` below
//!   all, and lib.rs (registration) above all;
//! - no global mutexes for main-thread state (`lazy_static`, `unsafe impl
//!   Send`/`Sync`);
//! - no safe function takes a raw pointer (a raw-pointer parameter makes a
//!   function `unsafe`, with its contract in a `# Safety` section).
//!
//! `cargo test --test layers -- --nocapture` prints the import edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn src() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or_default();
            (rel, std::fs::read_to_string(&p).unwrap_or_default())
        })
        .collect()
}

/// The layer of a file: its folder, or its name for a top-level file.
fn layer(rel: &str) -> String {
    let first = rel.split('/').next().unwrap_or(rel);
    first.trim_end_matches(".rs").to_string()
}

/// The layers a layer may use.
fn allowed(from: &str) -> &'static [&'static str] {
    match from {
        "lib" => &[
            "commands", "services", "storage", "ffi", "config", "error", "stats",
        ],
        "commands" => &["services", "storage", "ffi", "config", "error", "stats"],
        "services" => &["storage", "ffi", "config", "error", "stats"],
        "storage" => &["ffi", "stats"],
        _ => &[],
    }
}

/// Code lines only: comments dropped.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `crate::x` and `crate::{x, y::z}` references of a file: the x's.
fn crate_refs(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let text = code(text);
    let mut rest = text.as_str();
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
        rest = after;
    }
    out
}

#[test]
fn layers_are_one_directional() {
    let layers: BTreeSet<&str> = [
        "lib", "commands", "services", "storage", "ffi", "config", "error", "stats",
    ]
    .into_iter()
    .collect();
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in src() {
        let from = layer(&rel);
        for to in crate_refs(&text) {
            if to != from && layers.contains(to.as_str()) {
                edges
                    .entry((from.clone(), to))
                    .or_default()
                    .insert(rel.clone());
            }
        }
    }
    let mut bad = Vec::new();
    println!("import edges between src/ layers:");
    for ((from, to), files) in &edges {
        println!("  {from} -> {to}  ({} files)", files.len());
        if !allowed(from).contains(&to.as_str()) {
            bad.push(format!("{from} -> {to} in {files:?}"));
        }
    }
    assert!(bad.is_empty(), "edges against the layering: {bad:#?}");
}

#[test]
fn no_global_mutexes_for_main_thread_state() {
    for (rel, text) in src() {
        let code = code(&text);
        for banned in ["lazy_static", "unsafe impl Send", "unsafe impl Sync"] {
            assert!(!code.contains(banned), "{rel} uses {banned}");
        }
    }
}

/// Every `fn` signature of a text, with whether it is marked `unsafe`.
fn signatures(text: &str) -> Vec<(bool, String)> {
    let text = code(text);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    let mut offset = 0;
    while let Some(i) = rest.find("fn ") {
        let start = offset + i;
        let before = &text[..start];
        let word_start = before
            .chars()
            .last()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let after = &text[start..];
        let open = after.find('(');
        let body = after.find(['{', ';']);
        if let (true, Some(open), Some(body)) = (word_start, open, body) {
            if open < body {
                let head_start = before.rfind(['\n', '}', ';', '{']).map_or(0, |p| p + 1);
                let head = &text[head_start..start];
                let is_unsafe = head.contains("unsafe");
                out.push((is_unsafe, after[..body].to_string()));
            }
        }
        offset = start + 3;
        rest = &text[offset..];
    }
    out
}

#[test]
fn no_safe_fn_takes_a_raw_pointer() {
    let mut bad = Vec::new();
    for (rel, text) in src() {
        for (is_unsafe, sig) in signatures(&text) {
            let params = match (sig.find('('), sig.rfind("->")) {
                (Some(o), Some(r)) if r > o => &sig[o..r],
                (Some(o), _) => &sig[o..],
                _ => continue,
            };
            let raw = ["*mut ", "*const ", "RawCtx", "RawStr"]
                .iter()
                .any(|p| params.contains(p));
            if raw && !is_unsafe {
                bad.push(format!(
                    "{rel}: {}",
                    sig.split_whitespace().collect::<Vec<_>>().join(" ")
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "safe functions taking raw pointers: {bad:#?}"
    );
}
