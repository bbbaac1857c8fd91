//! Each schedule runs in a child process forked from one that has just
//! loaded the modules, so every run starts from freshly loaded modules
//! (their thread-local registries, timers and counters included) at the
//! cost of a fork. The child sends back its violation, if any, and its
//! coverage counts, as text through a pipe.

use crate::coverage;
use crate::invariant::{Invariant, Violation};
use std::collections::BTreeMap;

/// What a run in a child gave: its violation (None: clean) and what it
/// covered.
pub struct Outcome {
    pub violation: Option<Violation>,
    pub coverage: BTreeMap<String, u64>,
}

fn harness(detail: String) -> Outcome {
    Outcome {
        violation: Some(Violation {
            step: 0,
            what: Invariant::Harness,
            detail,
        }),
        coverage: BTreeMap::new(),
    }
}

/// The child's report: a line per coverage count (`C\tname\tn`), then
/// `OK`, or `V\tstep\tinvariant` and the detail.
fn encode(v: &Option<Violation>, counts: &BTreeMap<String, u64>) -> String {
    let mut out = String::new();
    for (k, n) in counts {
        out.push_str(&format!("C\t{k}\t{n}\n"));
    }
    match v {
        None => out.push_str("OK\n"),
        Some(v) => out.push_str(&format!("V\t{}\t{}\n{}", v.step, v.what.name(), v.detail)),
    }
    out
}

fn decode(text: &str, status: i32) -> Outcome {
    let mut coverage = BTreeMap::new();
    let mut rest = text;
    while let Some(line) = rest.strip_prefix("C\t") {
        let (line, tail) = line.split_once('\n').unwrap_or((line, ""));
        if let Some((k, n)) = line.rsplit_once('\t') {
            coverage.insert(k.to_owned(), n.parse().unwrap_or(0));
        }
        rest = tail;
    }
    if rest.starts_with("OK") {
        return Outcome {
            violation: None,
            coverage,
        };
    }
    if let Some(v) = rest.strip_prefix("V\t") {
        let (head, detail) = v.split_once('\n').unwrap_or((v, ""));
        let (step, name) = head.split_once('\t').unwrap_or(("0", head));
        return Outcome {
            violation: Some(Violation {
                step: step.parse().unwrap_or(0),
                what: Invariant::from_name(name).unwrap_or(Invariant::Harness),
                detail: detail.to_owned(),
            }),
            coverage,
        };
    }
    Outcome {
        violation: Some(Violation {
            step: 0,
            what: Invariant::ServerCrashed,
            detail: format!(
                "the simulated server's process ended with status {status} (a module abort or panic); \
                 its last output:\n{rest}"
            ),
        }),
        coverage,
    }
}

/// Runs `f` in a child process forked from this one: what it returned,
/// with the coverage it counted.
pub fn in_child(f: impl FnOnce() -> Option<Violation>) -> Outcome {
    let mut fds = [0i32; 2];
    // SAFETY: a two-int array for the pipe's ends.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return harness(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: this process is single-threaded; the child runs `f` and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return harness(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: the read end is the parent's.
        unsafe { libc::close(fds[0]) };
        coverage::take();
        let v = f();
        let out = encode(&v, &coverage::take());
        let b = out.as_bytes();
        let mut off = 0;
        while off < b.len() {
            // SAFETY: writing our buffer to the pipe.
            let n = unsafe { libc::write(fds[1], b[off..].as_ptr().cast(), b.len() - off) };
            if n <= 0 {
                break;
            }
            off += n as usize;
        }
        // SAFETY: end the child without running the parent's exit handlers.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: the write end is the child's.
    unsafe { libc::close(fds[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into our buffer.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    // SAFETY: our read end.
    unsafe { libc::close(fds[0]) };
    let mut status = 0;
    // SAFETY: reaping our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    decode(&String::from_utf8_lossy(&out), status)
}
