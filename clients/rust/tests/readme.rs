//! The README's quick starts (issue 45): each is an example — `examples/quickstart.rs`
//! (blocking) and `examples/quickstart_async.rs` (tokio) — that the README shows from its
//! first `use` on, run here against a real redis-server with the module.

mod support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

const QUICK_STARTS: [&str; 2] = ["quickstart", "quickstart_async"];

/// The example's code as the README shows it: from its first `use` line on.
fn shown(example: &str) -> String {
    let path = format!("{}/examples/{example}.rs", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let start = text.find("\nuse ").map_or(0, |i| i + 1);
    text[start..].to_string()
}

#[test]
fn the_readme_shows_each_quick_start_as_it_is() {
    let readme = std::fs::read_to_string(format!("{}/README.md", env!("CARGO_MANIFEST_DIR")))
        .expect("README.md");
    for example in QUICK_STARTS {
        let code = shown(example);
        assert!(
            readme.contains(&format!("```rust,no_run\n{code}```")),
            "README.md does not show examples/{example}.rs (from its first `use` on) in a \
             rust code block; it should read:\n{code}"
        );
    }
}

#[test]
fn each_quick_start_runs_against_a_server() {
    for example in QUICK_STARTS {
        let s = Server::start();
        let mut child = Command::new(example_bin(example))
            .env("REDIS_URL", s.url())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {example}: {e}"));
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{example} did not end within 60 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let (mut out, mut err) = (String::new(), String::new());
        child.stdout.take().map(|mut o| o.read_to_string(&mut out));
        child.stderr.take().map(|mut e| e.read_to_string(&mut err));
        assert!(status.success(), "{example}: {status}\n{out}\n{err}");
        assert!(
            out.contains("holding orders, fencing token") && out.contains("holding report"),
            "{example} printed:\n{out}\n{err}"
        );
        assert!(
            info_nil(&s, "orders") && info_nil(&s, "report"),
            "{example} let go"
        );
    }
}
