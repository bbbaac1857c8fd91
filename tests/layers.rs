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

/// Code without the unit tests at a file's end (`#[cfg(test)] mod …`),
/// whose `super::` names the file itself.
fn non_test_code(text: &str) -> String {
    let code = code(text);
    let cut = code
        .find("#[cfg(test)]\nmod ")
        .or_else(|| code.find("#[cfg(test)]\npub mod "))
        .unwrap_or(code.len());
    code[..cut].to_string()
}

/// The module path of a file under src/: `services/commit.rs` ->
/// [services, commit]; `storage/mod.rs` -> [storage]; `lib.rs` -> [].
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The file a module path names: the longest prefix that is a file.
fn file_of(path: &[String], files: &BTreeSet<String>) -> Option<String> {
    for n in (0..=path.len()).rev() {
        let p = path[..n].join("/");
        let candidates = if n == 0 {
            vec!["lib.rs".to_string()]
        } else {
            vec![format!("{p}.rs"), format!("{p}/mod.rs")]
        };
        if let Some(f) = candidates.into_iter().find(|c| files.contains(c)) {
            return Some(f);
        }
    }
    None
}

/// The paths of a `use` tree after a prefix: `a::b`, `{a, b::{c, d}}`, as
/// lists of segments (words only; `self` and `*` end a path).
fn tree_paths(text: &str) -> Vec<Vec<String>> {
    fn word(s: &str) -> (String, &str) {
        let w: String = s
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let rest = &s[w.len()..];
        (w, rest)
    }
    fn walk(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
        // Returns how many bytes of `s` one tree took.
        let t = s.trim_start();
        let skipped = s.len() - t.len();
        if let Some(inner) = t.strip_prefix('{') {
            let mut used = 1;
            let mut rest = inner;
            loop {
                let r = rest.trim_start();
                used += rest.len() - r.len();
                rest = r;
                if let Some(after) = rest.strip_prefix('}') {
                    let _ = after;
                    return skipped + used + 1;
                }
                if rest.is_empty() {
                    return skipped + used;
                }
                let n = walk(rest, prefix, out);
                used += n;
                rest = &rest[n..];
                let r = rest.trim_start();
                used += rest.len() - r.len();
                rest = r;
                if let Some(after) = rest.strip_prefix(',') {
                    used += 1;
                    rest = after;
                } else if n == 0 {
                    // Not a tree we understand: stop.
                    return skipped + used;
                }
            }
        }
        let (w, rest) = word(t);
        if w.is_empty() {
            out.push(prefix.to_vec());
            return skipped;
        }
        let mut path = prefix.to_vec();
        if w != "self" {
            path.push(w.clone());
        }
        if let Some(after) = rest.strip_prefix("::") {
            let n = walk(after, &path, out);
            return skipped + w.len() + 2 + n;
        }
        out.push(path);
        skipped + w.len()
    }
    let mut out = Vec::new();
    walk(text, &[], &mut out);
    out
}

/// The src/ files that file `rel` refers to (`crate::…`, `super::…`, and in
/// lib.rs its own modules), without itself.
fn file_refs(rel: &str, text: &str, files: &BTreeSet<String>) -> BTreeSet<String> {
    let code = non_test_code(text);
    let here = module_of(rel);
    let mut out = BTreeSet::new();
    let mut add = |base: Vec<String>, after: &str| {
        for p in tree_paths(after) {
            let mut full = base.clone();
            full.extend(p);
            if let Some(f) = file_of(&full, files) {
                if f != rel {
                    out.insert(f);
                }
            }
        }
    };
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let boundary = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        if boundary {
            if let Some(after) = rest.strip_prefix("crate::") {
                add(Vec::new(), after);
            } else if let Some(after) = rest.strip_prefix("super::") {
                let mut base = here.clone();
                base.pop();
                add(base, after);
            } else if rel == "lib.rs" {
                for m in ["commands::", "services::", "storage::", "ffi::"] {
                    if let Some(after) = rest.strip_prefix(m) {
                        add(vec![m.trim_end_matches(':').to_string()], after);
                    }
                }
            }
        }
        i += rest.chars().next().map_or(1, char::len_utf8);
    }
    out
}

/// The import graph among src/ files.
fn file_graph() -> BTreeMap<String, BTreeSet<String>> {
    let sources = src();
    let files: BTreeSet<String> = sources.iter().map(|(r, _)| r.clone()).collect();
    sources
        .iter()
        .map(|(rel, text)| (rel.clone(), file_refs(rel, text, &files)))
        .collect()
}

#[test]
fn no_import_circle_among_src_files() {
    let graph = file_graph();
    // Depth-first search; a back edge closes a circle.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark: BTreeMap<&str, Mark> = graph.keys().map(|k| (k.as_str(), Mark::New)).collect();
    let mut circles = Vec::new();
    fn visit<'a>(
        f: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        mark: &mut BTreeMap<&'a str, Mark>,
        stack: &mut Vec<&'a str>,
        circles: &mut Vec<String>,
    ) {
        mark.insert(f, Mark::Open);
        stack.push(f);
        for to in graph.get(f).into_iter().flatten() {
            match mark.get(to.as_str()).copied().unwrap_or(Mark::Done) {
                Mark::New => visit(to, graph, mark, stack, circles),
                Mark::Open => {
                    let from = stack.iter().position(|s| *s == to).unwrap_or(0);
                    let mut c: Vec<&str> = stack[from..].to_vec();
                    c.push(to);
                    circles.push(c.join(" -> "));
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        mark.insert(f, Mark::Done);
    }
    let keys: Vec<&str> = graph.keys().map(String::as_str).collect();
    for k in keys {
        if mark.get(k) == Some(&Mark::New) {
            visit(k, &graph, &mut mark, &mut Vec::new(), &mut circles);
        }
    }
    println!("import edges among src/ files:");
    for (from, tos) in &graph {
        println!("  {from} -> {tos:?}");
    }
    assert!(
        circles.is_empty(),
        "import circles among src/ files: {circles:#?}"
    );
}

/// The sub-layer of a file of src/services/: registries below, commit and
/// the deadlock search in the middle, drivers above (beside commands/).
/// A file not named here is a driver.
fn service_rank(file: &str) -> (u8, &'static str) {
    let stem = file.trim_start_matches("services/").trim_end_matches(".rs");
    match stem {
        "state" | "hint" | "notify" | "cluster" | "observe" | "pause" => (0, "base"),
        "bound" | "jobq" | "waiters" | "expiry_index" => (1, "registry"),
        "grant" | "deadlock" | "commit" => (2, "middle"),
        _ => (3, "driver"),
    }
}

#[test]
fn services_sub_layers_are_one_directional() {
    let graph = file_graph();
    let mut bad = Vec::new();
    println!("edges among src/services/ files (sub-layer of each):");
    for (from, tos) in &graph {
        if !from.starts_with("services/") || from == "services/mod.rs" {
            continue;
        }
        let (rf, lf) = service_rank(from);
        for to in tos {
            if !to.starts_with("services/") || to == "services/mod.rs" {
                continue;
            }
            let (rt, lt) = service_rank(to);
            println!("  {from} ({lf}) -> {to} ({lt})");
            if rt > rf {
                bad.push(format!("{from} ({lf}) uses {to} ({lt})"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "services/ files using a higher sub-layer: {bad:#?}"
    );
}

/// Files outside `ffi/` and `storage/` allowed to hold `unsafe`, each with
/// why. Empty: every unsafe block lives in `ffi/` or `storage/` (the test
/// fails when an entry is no longer needed, so the list only shrinks).
const UNSAFE_EXCEPTIONS: &[(&str, &str)] = &[];

/// Occurrences of the keyword `unsafe` in code (not in comments, not as a
/// part of a longer word such as `unsafe_code`).
fn unsafe_count(text: &str) -> usize {
    let code = code(text);
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    code.match_indices("unsafe")
        .filter(|(i, _)| {
            let before = *i == 0 || !ident(b[i - 1]);
            let after = b.get(i + "unsafe".len()).is_none_or(|c| !ident(*c));
            before && after
        })
        .count()
}

#[test]
fn unsafe_only_in_ffi_and_storage() {
    let mut bad = Vec::new();
    let mut total = 0;
    for (rel, text) in src() {
        if rel.starts_with("ffi/") || rel.starts_with("storage/") {
            continue;
        }
        let n = unsafe_count(&text);
        total += n;
        let known = UNSAFE_EXCEPTIONS.iter().find(|(f, _)| *f == rel);
        match (n, known) {
            (0, Some((f, _))) => bad.push(format!("{f}: no `unsafe` left; drop its exception")),
            (0, None) => {}
            (n, Some((f, why))) => println!("  {f}: {n} `unsafe` (known exception: {why})"),
            (n, None) => bad.push(format!("{rel}: {n} `unsafe` outside ffi/ and storage/")),
        }
    }
    println!("`unsafe` outside ffi/ and storage/: {total}");
    assert!(
        bad.is_empty(),
        "`unsafe` outside ffi/ and storage/: {bad:#?}"
    );
}
