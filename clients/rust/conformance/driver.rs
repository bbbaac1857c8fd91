//! The Rust client's conformance driver (conformance/README.md): reads the suite's
//! requests (JSON Lines) on stdin, drives the client's public API — the blocking
//! `dlock_client::Client` (`driver blocking`, flavour `rust-blocking`) or the tokio
//! `dlock_client::aio::AsyncClient` (`driver async`, flavour `rust-async`) — and writes
//! one reply per request, and a `lost` event when a hold's lost signal fires, on
//! stdout. Each request runs in its own thread (blocking) or task (async), so a waiting
//! acquire never holds up the others.
//!
//! It uses nothing but what a user of the crate uses: options, handles, guards, their
//! lost signals (waited on, never polled), `unlock`, `close`, the error predicates.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_client::{Durable, Error, LostReason, Options, Unlock, WaitMode};
use serde_json::{json, Map, Value};

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("blocking") => blocking::run(),
        Some("async") => nonblocking::run(),
        other => {
            eprintln!("usage: driver blocking|async (got {other:?})");
            std::process::exit(2);
        }
    }
}

/// Writes one JSON object as a line on stdout, flushed.
fn send(v: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// The requests on stdin, one JSON object a line (a line that is not one is answered
/// with an error and skipped).
fn requests() -> impl Iterator<Item = Value> {
    std::io::stdin()
        .lock()
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| {
            if line.trim().is_empty() {
                return None;
            }
            match serde_json::from_str::<Value>(&line) {
                Ok(v) => Some(v),
                Err(e) => {
                    eprintln!("not a JSON request ({e}): {line}");
                    None
                }
            }
        })
}

/// A failed request: the error object of the protocol.
struct Failure(Value);

type Reply = Result<Map<String, Value>, Failure>;

fn ok(fields: Value) -> Reply {
    match fields {
        Value::Object(m) => Ok(m),
        _ => Ok(Map::new()),
    }
}

fn failure(kind: &str, message: impl Into<String>) -> Failure {
    Failure(json!({"kind": kind, "message": message.into()}))
}

/// Answers request `id` with `reply`.
fn answer(id: &Value, reply: Reply) {
    let v = match reply {
        Ok(mut fields) => {
            fields.insert("id".into(), id.clone());
            fields.insert("ok".into(), true.into());
            Value::Object(fields)
        }
        Err(Failure(error)) => json!({"id": id, "ok": false, "error": error}),
    };
    send(v);
}

/// The `lost` event of `handle`.
fn lost_event(handle: &str, reason: LostReason) {
    send(json!({"event": "lost", "handle": handle, "reason": reason.as_str()}));
}

/// The protocol's error for a client error, by the client's predicates.
fn error_of(e: &Error) -> Failure {
    let message = e.to_string();
    let kind = if e.is_invalid_argument() {
        "invalid_argument"
    } else if e.is_timeout() {
        "timeout"
    } else if e.is_wrong_kind() {
        "wrong_kind"
    } else if e.is_module_not_loaded() {
        "module_not_loaded"
    } else if e.is_deadlock() {
        "deadlock"
    } else if e.is_queue_full() {
        "queue_full"
    } else if e.is_not_durable() || e.is_no_replicas() {
        "not_durable"
    } else if e.is_connection() {
        "connection"
    } else {
        "other"
    };
    let mut error = json!({"kind": kind, "message": message});
    if let Some(d) = e.deadlock() {
        let cycle: Vec<Value> = d
            .cycle
            .iter()
            .map(|s| {
                json!([
                    String::from_utf8_lossy(&s.key),
                    String::from_utf8_lossy(&s.owner)
                ])
            })
            .collect();
        error["cycle"] = cycle.into();
    }
    if e.is_invalid_argument() {
        // The client's message names the argument; the protocol's name for it.
        let argument = [
            ("renew_interval", "renew_interval_ms"),
            ("watchdog_lease", "watchdog_lease_ms"),
            ("lease", "lease_ms"),
            ("key", "key"),
            ("owner", "owner"),
            ("permits", "permits"),
            ("limit", "limit"),
        ]
        .into_iter()
        .find(|(word, _)| message.contains(word));
        if let Some((_, name)) = argument {
            error["argument"] = name.into();
        }
    }
    Failure(error)
}

fn unlock_result(u: Unlock) -> Value {
    match u {
        Unlock::Released => json!({"result": "released"}),
        Unlock::StillHeld => json!({"result": "still_held"}),
        Unlock::Lost => json!({"result": "lost"}),
        Unlock::Unknown => json!({
            "result": "unknown",
            "error": "the release failed on its connection and once more on a fresh one",
        }),
    }
}

/// A string field.
fn text<'a>(req: &'a Value, name: &str) -> Result<&'a str, Failure> {
    req.get(name).and_then(Value::as_str).ok_or_else(|| {
        failure(
            "invalid_argument",
            format!("the request needs a string {name}"),
        )
    })
}

/// A duration in milliseconds (`None` when absent). A negative one cannot be given to
/// the Rust API at all (`Duration` has no negative values): it is refused as bad input
/// here, before anything is sent, as a Rust caller's conversion would.
fn millis(req: &Value, name: &str) -> Result<Option<Duration>, Failure> {
    millis_of(req.get(name), name)
}

fn millis_of(v: Option<&Value>, name: &str) -> Result<Option<Duration>, Failure> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            match (v.as_u64(), v.as_i64()) {
                (Some(ms), _) => Ok(Some(Duration::from_millis(ms))),
                (None, Some(ms)) => {
                    let mut f = failure(
                    "invalid_argument",
                    format!("{name} must not be negative, got {ms}: a Duration has no negative values"),
                );
                    f.0["argument"] = name.into();
                    Err(f)
                }
                _ => Err(failure(
                    "invalid_argument",
                    format!("{name} must be a whole number of milliseconds, got {v}"),
                )),
            }
        }
    }
}

fn number(req: &Value, name: &str) -> Option<u64> {
    req.get(name).and_then(Value::as_u64)
}

fn flag(req: &Value, name: &str) -> bool {
    req.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// What `open`'s options set beyond [`Options`].
#[derive(Clone, Copy, Debug, Default)]
struct Settings {
    wait_mode: WaitMode,
    replicas: Option<u32>,
    bind: bool,
}

/// The client options and settings of an `open` request; `unsupported` for an option
/// this driver does not know.
fn options(req: &Value) -> Result<(Options, Settings), Failure> {
    let mut opts = Options::default();
    let mut settings = Settings::default();
    let empty = Map::new();
    let given = req
        .get("options")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (name, v) in given {
        match name.as_str() {
            "watchdog_lease_ms" => {
                if let Some(d) = millis_of(Some(v), "watchdog_lease_ms")? {
                    opts = opts.watchdog_lease(d);
                }
            }
            "renew_interval_ms" => {
                if let Some(d) = millis_of(Some(v), "renew_interval_ms")? {
                    opts = opts.renew_interval(d);
                }
            }
            // The reply timeout of the connections the client makes: the Rust
            // client's transport timeout.
            "transport_timeout_ms" => {
                if let Some(d) = millis_of(Some(v), "transport_timeout_ms")? {
                    opts = opts.command_timeout(d);
                }
            }
            "wait_mode" => {
                settings.wait_mode = match v.as_str() {
                    Some("notify") => WaitMode::Notifications,
                    Some("server") => WaitMode::Server,
                    _ => return Err(failure("unsupported", format!("wait_mode {v}"))),
                }
            }
            "replicas" => {
                settings.replicas = v.as_u64().and_then(|n| u32::try_from(n).ok());
            }
            "bind" => settings.bind = v.as_bool().unwrap_or(false),
            other => {
                return Err(failure(
                    "unsupported",
                    format!("the Rust driver has no option {other}"),
                ))
            }
        }
    }
    Ok((opts, settings))
}

/// How long durable grants wait for the replicas' acknowledgement.
const REPLICA_TIMEOUT: Duration = Duration::from_secs(1);

/// The blocking flavour: `dlock_client::Client`, a thread per request.
mod blocking {
    use super::*;
    use dlock_client::recipes::{Election, Term};
    use dlock_client::{Client, Guard, Lock, LostSignal, MultiGuard, MultiLock};

    enum Held {
        Guard(Guard),
        Multi(MultiGuard),
        Term(Term),
    }

    impl Held {
        fn signal(&self) -> LostSignal {
            match self {
                Held::Guard(g) => g.lost_signal(),
                Held::Multi(g) => g.lost_signal(),
                Held::Term(t) => t.lost_signal(),
            }
        }
        fn is_lost(&self) -> bool {
            match self {
                Held::Guard(g) => g.is_lost(),
                Held::Multi(g) => g.is_lost(),
                Held::Term(t) => t.is_lost(),
            }
        }
        fn unlock(self) -> Unlock {
            match self {
                Held::Guard(g) => g.unlock().unwrap_or(Unlock::Unknown),
                Held::Term(t) => t.resign().unwrap_or(Unlock::Unknown),
                // One result for the MultiLock: the worst of its parts.
                Held::Multi(g) => {
                    let parts = g.unlock().unwrap_or_default();
                    [Unlock::Unknown, Unlock::Lost, Unlock::StillHeld]
                        .into_iter()
                        .find(|u| parts.contains(u))
                        .unwrap_or(Unlock::Released)
                }
            }
        }
    }

    #[derive(Default)]
    struct State {
        client: Mutex<Option<(Client, Settings)>>,
        held: Mutex<HashMap<String, Held>>,
    }

    pub(super) fn run() {
        let state = Arc::new(State::default());
        for req in requests() {
            let id = req.get("id").cloned().unwrap_or(Value::Null);
            if req.get("op").and_then(Value::as_str) == Some("exit") {
                answer(&id, ok(json!({})));
                return; // without closing anything
            }
            let state = state.clone();
            std::thread::spawn(move || answer(&id, handle(&state, &req)));
        }
    }

    fn client(state: &State) -> Result<(Client, Settings), Failure> {
        state
            .client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| failure("other", "no open client"))
    }

    fn keep(state: &State, handle: &str, held: Held) {
        let signal = held.signal();
        state
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(handle.to_string(), held);
        let handle = handle.to_string();
        // The signal's own wait: it fires when the hold is lost, never for a hold
        // that was let go (this thread then just ends with the process).
        std::thread::spawn(move || lost_event(&handle, signal.wait()));
    }

    fn lock_of(c: &Client, s: Settings, req: &Value) -> Result<Lock, Failure> {
        let key = text(req, "key")?;
        let mut lock = match req.get("kind").and_then(Value::as_str).unwrap_or("mutex") {
            "mutex" => c.mutex(key),
            "read" => c.rw(key).read(),
            "write" => c.rw(key).write(),
            "fair" => c.fair(key),
            "semaphore" => {
                let limit = number(req, "limit").unwrap_or(1);
                let permits = number(req, "permits").unwrap_or(1);
                let permits = u32::try_from(permits).unwrap_or(u32::MAX);
                c.semaphore(key, limit, permits)
            }
            other => return Err(failure("unsupported", format!("kind {other}"))),
        };
        if let Some(owner) = req.get("owner").and_then(Value::as_str) {
            lock = lock.with_owner(owner);
        }
        if flag(req, "bind") || s.bind {
            lock = lock.bind();
        }
        if let Some(n) = s.replicas {
            lock = lock.durable(Durable::new(n, REPLICA_TIMEOUT));
        }
        Ok(lock.wait_mode(s.wait_mode))
    }

    fn handle(state: &State, req: &Value) -> Reply {
        match req.get("op").and_then(Value::as_str).unwrap_or("") {
            "open" => {
                let (opts, settings) = options(req)?;
                let c = Client::with_options(text(req, "url")?, opts).map_err(|e| error_of(&e))?;
                *state.client.lock().unwrap_or_else(|e| e.into_inner()) = Some((c, settings));
                ok(json!({}))
            }
            "acquire" => {
                let (c, s) = client(state)?;
                let handle = text(req, "handle")?;
                let lock = lock_of(&c, s, req)?;
                let lease = millis(req, "lease_ms")?;
                let wait = millis(req, "wait_ms")?.unwrap_or(Duration::ZERO);
                match lock.try_lock(wait, lease) {
                    Ok(Some(g)) => {
                        let token = g.token();
                        keep(state, handle, Held::Guard(g));
                        ok(json!({"token": token}))
                    }
                    Ok(None) => Err(failure("timeout", format!("not granted within {wait:?}"))),
                    Err(e) => Err(error_of(&e)),
                }
            }
            "acquire_multi" => {
                let (c, s) = client(state)?;
                let handle = text(req, "handle")?;
                let keys = req
                    .get("keys")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let locks = keys.iter().filter_map(Value::as_str).map(|k| {
                    let lock = c.mutex(k).wait_mode(s.wait_mode);
                    if flag(req, "bind") || s.bind {
                        lock.bind()
                    } else {
                        lock
                    }
                });
                let multi = MultiLock::new(locks).map_err(|e| error_of(&e))?;
                let lease = millis(req, "lease_ms")?;
                let wait = millis(req, "wait_ms")?.unwrap_or(Duration::ZERO);
                match multi.try_lock(wait, lease) {
                    Ok(Some(g)) => {
                        let tokens = g.tokens();
                        keep(state, handle, Held::Multi(g));
                        ok(json!({"tokens": tokens}))
                    }
                    Ok(None) => Err(failure("timeout", format!("not granted within {wait:?}"))),
                    Err(e) => Err(error_of(&e)),
                }
            }
            "campaign" => {
                let (c, s) = client(state)?;
                let handle = text(req, "handle")?;
                let name = text(req, "name")?;
                let election = Election::new(&c, name).bind(s.bind);
                let term = match millis(req, "wait_ms")? {
                    Some(w) => election.try_campaign(Some(w)),
                    None => election.campaign().map(Some),
                };
                let term = match term {
                    Ok(Some(t)) => t,
                    Ok(None) => return Err(failure("timeout", "not elected in time")),
                    Err(e) => return Err(error_of(&e)),
                };
                if let Some(value) = req.get("value").and_then(Value::as_str) {
                    term.proclaim(value).map_err(|e| error_of(&e))?;
                }
                keep(state, handle, Held::Term(term));
                ok(json!({"key": name}))
            }
            "unlock" => {
                let handle = text(req, "handle")?;
                let held = state
                    .held
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(handle);
                match held {
                    Some(h) => ok(unlock_result(h.unlock())),
                    None => Err(failure(
                        "invalid_argument",
                        format!("the handle {handle} holds nothing"),
                    )),
                }
            }
            "held" => {
                let handle = text(req, "handle")?;
                let held = state.held.lock().unwrap_or_else(|e| e.into_inner());
                let answer = held.get(handle).is_some_and(|h| !h.is_lost());
                ok(json!({"held": answer}))
            }
            "close" => {
                if let Some((c, _)) = &*state.client.lock().unwrap_or_else(|e| e.into_inner()) {
                    c.close();
                }
                ok(json!({}))
            }
            other => Err(failure("unsupported", format!("op {other}"))),
        }
    }
}

/// The async flavour: `dlock_client::aio::AsyncClient` on a tokio runtime, a task per
/// request.
mod nonblocking {
    use super::*;
    use dlock_client::aio::{AsyncClient, AsyncGuard, AsyncLock, AsyncMultiGuard, AsyncMultiLock};
    use dlock_client::LostSignal;

    enum Held {
        Guard(AsyncGuard),
        Multi(AsyncMultiGuard),
    }

    impl Held {
        fn signal(&self) -> LostSignal {
            match self {
                Held::Guard(g) => g.lost_signal(),
                Held::Multi(g) => g.lost_signal(),
            }
        }
        fn is_lost(&self) -> bool {
            match self {
                Held::Guard(g) => g.is_lost(),
                Held::Multi(g) => g.is_lost(),
            }
        }
        async fn unlock(self) -> Unlock {
            match self {
                Held::Guard(g) => g.unlock().await.unwrap_or(Unlock::Unknown),
                Held::Multi(g) => {
                    let parts = g.unlock().await.unwrap_or_default();
                    [Unlock::Unknown, Unlock::Lost, Unlock::StillHeld]
                        .into_iter()
                        .find(|u| parts.contains(u))
                        .unwrap_or(Unlock::Released)
                }
            }
        }
    }

    #[derive(Default)]
    struct State {
        client: Mutex<Option<(AsyncClient, Settings)>>,
        held: Mutex<HashMap<String, Held>>,
    }

    pub(super) fn run() {
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("no tokio runtime: {e}");
                std::process::exit(2);
            }
        };
        let state = Arc::new(State::default());
        // Stdin is read on this (non-runtime) thread: a pending read would otherwise
        // keep the runtime from shutting down when main returns.
        for req in requests() {
            let id = req.get("id").cloned().unwrap_or(Value::Null);
            if req.get("op").and_then(Value::as_str) == Some("exit") {
                answer(&id, ok(json!({})));
                return; // without closing anything (the runtime drops its tasks)
            }
            let state = state.clone();
            rt.spawn(async move { answer(&id, handle(&state, &req).await) });
        }
    }

    fn client(state: &State) -> Result<(AsyncClient, Settings), Failure> {
        state
            .client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| failure("other", "no open client"))
    }

    fn keep(state: &State, handle: &str, held: Held) {
        let signal = held.signal();
        state
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(handle.to_string(), held);
        let handle = handle.to_string();
        tokio::spawn(async move { lost_event(&handle, signal.lost().await) });
    }

    fn lock_of(c: &AsyncClient, s: Settings, req: &Value) -> Result<AsyncLock, Failure> {
        let key = text(req, "key")?;
        let mut lock = match req.get("kind").and_then(Value::as_str).unwrap_or("mutex") {
            "mutex" => c.mutex(key),
            "read" => c.rw(key).read(),
            "write" => c.rw(key).write(),
            "fair" => c.fair(key),
            "semaphore" => {
                let limit = number(req, "limit").unwrap_or(1);
                let permits = number(req, "permits").unwrap_or(1);
                let permits = u32::try_from(permits).unwrap_or(u32::MAX);
                c.semaphore(key, limit, permits)
            }
            other => return Err(failure("unsupported", format!("kind {other}"))),
        };
        if let Some(owner) = req.get("owner").and_then(Value::as_str) {
            lock = lock.with_owner(owner);
        }
        if flag(req, "bind") || s.bind {
            lock = lock.bind();
        }
        if let Some(n) = s.replicas {
            lock = lock.durable(Durable::new(n, REPLICA_TIMEOUT));
        }
        Ok(lock.wait_mode(s.wait_mode))
    }

    async fn handle(state: &State, req: &Value) -> Reply {
        match req.get("op").and_then(Value::as_str).unwrap_or("") {
            "open" => {
                let (opts, settings) = options(req)?;
                let c =
                    AsyncClient::with_options(text(req, "url")?, opts).map_err(|e| error_of(&e))?;
                *state.client.lock().unwrap_or_else(|e| e.into_inner()) = Some((c, settings));
                ok(json!({}))
            }
            "acquire" => {
                let (c, s) = client(state)?;
                let handle = text(req, "handle")?;
                let lock = lock_of(&c, s, req)?;
                let lease = millis(req, "lease_ms")?;
                let wait = millis(req, "wait_ms")?.unwrap_or(Duration::ZERO);
                match lock.try_lock(wait, lease).await {
                    Ok(Some(g)) => {
                        let token = g.token();
                        keep(state, handle, Held::Guard(g));
                        ok(json!({"token": token}))
                    }
                    Ok(None) => Err(failure("timeout", format!("not granted within {wait:?}"))),
                    Err(e) => Err(error_of(&e)),
                }
            }
            "acquire_multi" => {
                let (c, s) = client(state)?;
                let handle = text(req, "handle")?;
                let keys = req
                    .get("keys")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let locks = keys.iter().filter_map(Value::as_str).map(|k| {
                    let lock = c.mutex(k).wait_mode(s.wait_mode);
                    if flag(req, "bind") || s.bind {
                        lock.bind()
                    } else {
                        lock
                    }
                });
                let multi = AsyncMultiLock::new(locks).map_err(|e| error_of(&e))?;
                let lease = millis(req, "lease_ms")?;
                let wait = millis(req, "wait_ms")?.unwrap_or(Duration::ZERO);
                match multi.try_lock(wait, lease).await {
                    Ok(Some(g)) => {
                        let tokens = g.tokens();
                        keep(state, handle, Held::Multi(g));
                        ok(json!({"tokens": tokens}))
                    }
                    Ok(None) => Err(failure("timeout", format!("not granted within {wait:?}"))),
                    Err(e) => Err(error_of(&e)),
                }
            }
            // The recipes (Election) are the blocking API's only.
            "campaign" => Err(failure(
                "unsupported",
                "the async client has no Election (dlock_client::recipes is blocking)",
            )),
            "unlock" => {
                let handle = text(req, "handle")?;
                let held = state
                    .held
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(handle);
                match held {
                    Some(h) => ok(unlock_result(h.unlock().await)),
                    None => Err(failure(
                        "invalid_argument",
                        format!("the handle {handle} holds nothing"),
                    )),
                }
            }
            "held" => {
                let handle = text(req, "handle")?;
                let held = state.held.lock().unwrap_or_else(|e| e.into_inner());
                let answer = held.get(handle).is_some_and(|h| !h.is_lost());
                ok(json!({"held": answer}))
            }
            "close" => {
                if let Some((c, _)) = &*state.client.lock().unwrap_or_else(|e| e.into_inner()) {
                    c.close();
                }
                ok(json!({}))
            }
            other => Err(failure("unsupported", format!("op {other}"))),
        }
    }
}
