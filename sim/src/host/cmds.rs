//! The path of every command through the server (`processCommand`: the
//! refusals and the pause, in the server's order), and the server's own
//! commands that the simulation sends or the module calls: the keyspace
//! commands on lock keys, and a few string, list and stream commands for
//! FENCED's inner commands, each as Redis 7 runs it where it matters.

use super::{cluster, keyspace, propagate, rdb, run_module, with, Entry, Family, Reply, Value};
use redis_module::raw;

/// Who runs a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A client's connection.
    Client,
    /// The master link or an AOF being loaded: never refused nor paused.
    Master,
    /// EXEC of a client's MULTI: nothing blocks.
    Multi,
    /// A script (EVAL, FCALL): nothing blocks; `noscript` commands are
    /// refused.
    Script,
    /// `RedisModule_Call` of a module (its refusals are the call's own,
    /// see `call.rs`): nothing blocks; it propagates when `replicate` (the
    /// `!` flag).
    Call { replicate: bool },
}

impl Caller {
    fn propagates(self) -> bool {
        !matches!(self, Caller::Call { replicate: false })
    }

    /// The context flags a module command gets from this caller.
    fn ctx_flags(self) -> u32 {
        match self {
            Caller::Client => 0,
            Caller::Master => raw::REDISMODULE_CTX_FLAGS_REPLICATED,
            Caller::Multi => {
                raw::REDISMODULE_CTX_FLAGS_MULTI | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
            }
            Caller::Script | Caller::Call { .. } => {
                raw::REDISMODULE_CTX_FLAGS_LUA | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
            }
        }
    }
}

/// A server command: its flags (as the command table has them), arity and
/// first key.
struct Spec {
    flags: &'static str,
    arity: i32,
    first: usize,
}

fn builtin(name: &str) -> Option<Spec> {
    let (flags, arity, first) = match name {
        "del" => ("write", -2, 1),
        "unlink" => ("write fast", -2, 1),
        "rename" => ("write", 3, 1),
        "move" => ("write fast", 3, 1),
        "swapdb" => ("write fast", 3, 0),
        "flushdb" => ("write", -1, 0),
        "pexpireat" => ("write fast", -3, 1),
        "persist" => ("write fast", 2, 1),
        "dump" => ("readonly", 2, 1),
        "restore" => ("write denyoom", -4, 1),
        "copy" => ("write denyoom", -3, 1),
        "set" => ("write denyoom", -3, 1),
        "get" => ("readonly fast", 2, 1),
        "incr" => ("write denyoom fast", 2, 1),
        "append" => ("write denyoom fast", 3, 1),
        "blpop" => ("write blocking", -3, 1),
        "xread" => ("readonly blocking", -4, 0),
        "multi" => ("noscript loading stale fast", 1, 0),
        "exec" => ("noscript loading stale skip_slowlog", 1, 0),
        "subscribe" => ("pubsub noscript loading stale", -2, 0),
        "echo" => ("fast", 2, 0),
        "cluster" => ("", -2, 0),
        _ => return None,
    };
    Some(Spec {
        flags,
        arity,
        first,
    })
}

fn has(flags: &str, f: &str) -> bool {
    flags.split(' ').any(|w| w == f)
}

/// A command as the server knows it: its flags and first key (module
/// commands as registered), or None when unknown.
pub(super) fn lookup(server: usize, name: &str) -> Option<(String, usize, i32)> {
    if let Some(s) = builtin(name) {
        return Some((s.flags.to_owned(), s.first, s.arity));
    }
    with(|h| {
        h.servers[server]
            .cmd_info
            .get(name)
            .map(|(f, first)| (f.clone(), usize::try_from(*first).unwrap_or(0), 0))
    })
}

/// Whether a command with `flags` is a write or may replicate (what
/// CLIENT PAUSE WRITE postpones).
fn may_replicate(flags: &str) -> bool {
    has(flags, "write") || has(flags, "may-replicate")
}

fn deny_oom(flags: &str) -> bool {
    has(flags, "deny-oom") || has(flags, "denyoom")
}

/// The wrong-arity error, as the server words it.
pub(super) fn arity_ok(arity: i32, argc: usize) -> bool {
    let argc = argc as i32;
    arity == 0 || (arity > 0 && argc == arity) || (arity < 0 && argc >= -arity)
}

/// `processCommand` for a client's command: unknown command and arity,
/// MULTI's queue, cluster redirection, OOM, a read-only replica, loading,
/// the pause (the client is postponed: None), then the command (None when
/// it blocked).
pub(super) fn process(server: usize, client: u64, argv: &[&[u8]]) -> Option<Reply> {
    super::run_filters(server, client, argv);
    let name = String::from_utf8_lossy(argv.first().copied().unwrap_or_default()).to_lowercase();
    let Some((flags, first, arity)) = lookup(server, &name) else {
        return Some(Reply::Err(format!("ERR unknown command '{name}'")));
    };
    if !arity_ok(arity, argv.len()) {
        return Some(Reply::Err(format!(
            "ERR wrong number of arguments for '{name}' command"
        )));
    }
    let (replica, loading, oom, in_multi, pause, db) = with(|h| {
        let s = &h.servers[server];
        let c = s.clients.get(&client);
        (
            s.replica,
            s.loading,
            s.oom,
            c.is_some_and(|c| c.multi.is_some()),
            s.pause,
            c.map_or(0, |c| c.db),
        )
    });
    let in_queue = in_multi && !matches!(name.as_str(), "exec" | "multi");
    // EXEC is judged by what it will run.
    let flags = if name == "exec" {
        with(|h| {
            let queued = h.servers[server]
                .clients
                .get(&client)
                .and_then(|c| c.multi.clone())
                .unwrap_or_default();
            queued
                .iter()
                .map(|a| String::from_utf8_lossy(a.first().map_or(&[][..], |v| v)).to_lowercase())
                .collect::<Vec<_>>()
        })
        .iter()
        .filter_map(|n| lookup(server, n).map(|l| l.0))
        .collect::<Vec<_>>()
        .join(" ")
    } else {
        flags
    };
    let key = (first > 0).then(|| argv.get(first).copied()).flatten();
    if let Some(slot) = cluster::wrong_node(server, key) {
        return Some(Reply::Err(cluster::moved(slot)));
    }
    // In MULTI every queued command is refused under OOM (the queue itself
    // would grow without bound).
    if oom && (deny_oom(&flags) || in_queue) {
        return Some(Reply::Err(
            "OOM command not allowed when used memory > 'maxmemory'.".into(),
        ));
    }
    if replica && has(&flags, "write") {
        return Some(Reply::Err(
            "READONLY You can't write against a read only replica.".into(),
        ));
    }
    if loading && !has(&flags, "loading") && !has(&flags, "allow-loading") {
        return Some(Reply::Err(
            "LOADING Redis is loading the dataset in memory".into(),
        ));
    }
    if let Some((all, _)) = pause {
        if all || may_replicate(&flags) {
            with(|h| {
                let s = &mut h.servers[server];
                if let Some(c) = s.clients.get_mut(&client) {
                    c.postponed = true;
                    c.queue
                        .push_front((db, argv.iter().map(|a| a.to_vec()).collect()));
                }
                s.postponed.push_back(client);
            });
            return None;
        }
    }
    if in_queue {
        with(|h| {
            if let Some(q) = h.servers[server]
                .clients
                .get_mut(&client)
                .and_then(|c| c.multi.as_mut())
            {
                q.push(argv.iter().map(|a| a.to_vec()).collect());
            }
        });
        return Some(Reply::Simple("QUEUED".into()));
    }
    exec(server, client, db, argv, Caller::Client)
}

/// Runs a command for `caller` (no refusal: the caller's own were made):
/// its reply, or None when a client's module command blocked.
pub fn exec(server: usize, client: u64, db: i32, argv: &[&[u8]], caller: Caller) -> Option<Reply> {
    // A module's call runs inside the command of the client executing.
    if matches!(caller, Caller::Call { .. }) {
        return exec_as(server, client, db, argv, caller);
    }
    super::executing(server, client, || exec_as(server, client, db, argv, caller))
}

fn exec_as(server: usize, client: u64, db: i32, argv: &[&[u8]], caller: Caller) -> Option<Reply> {
    let name = String::from_utf8_lossy(argv.first().copied().unwrap_or_default()).to_lowercase();
    if builtin(&name).is_none() {
        // The module's command runs on the client's connection (the
        // master link's for a replica).
        with(|h| {
            if let Some(c) = h.servers[server].clients.get_mut(&client) {
                c.db = db;
            }
        });
        return run_module(server, client, argv, caller.ctx_flags());
    }
    with(|h| {
        if let Some(c) = h.servers[server].clients.get_mut(&client) {
            c.db = db;
        }
    });
    Some(run_builtin(server, client, db, &name, argv, caller))
}

fn int_arg(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// What a string key holds, or a type error.
enum Found {
    Missing,
    Str(Vec<u8>),
    Other,
}

fn find(server: usize, db: i32, key: &[u8]) -> Found {
    with(|h| match h.servers[server].dbs[db as usize].get(key) {
        None => Found::Missing,
        Some(Entry {
            value: Value::Str(s),
            ..
        }) => Found::Str(s.clone()),
        Some(_) => Found::Other,
    })
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Sets a string key (replacing whatever was there: a module value is
/// unlinked and freed first).
fn set_str(server: usize, db: i32, key: &[u8], v: Vec<u8>) {
    super::unlink_key(server, db, key, true);
    with(|h| {
        h.servers[server].dbs[db as usize].insert(
            key.to_vec(),
            Entry {
                value: Value::Str(v),
                expire_at: None,
            },
        )
    });
}

fn run_builtin(
    server: usize,
    client: u64,
    db: i32,
    name: &str,
    argv: &[&[u8]],
    caller: Caller,
) -> Reply {
    let arg = |i: usize| argv.get(i).copied().unwrap_or_default();
    let owned = || argv.iter().map(|a| a.to_vec()).collect::<Vec<_>>();
    let write = |argv: Vec<Vec<u8>>| {
        if caller.propagates() {
            propagate(server, db, argv);
        }
    };
    let (in_cluster, family) = with(|h| (h.servers[server].cluster, h.servers[server].family));
    match name {
        "del" | "unlink" => {
            let n = argv[1..]
                .iter()
                .filter(|k| match find(server, db, k) {
                    Found::Missing => false,
                    Found::Str(_) => {
                        super::unlink_key(server, db, k, true);
                        write(vec![b"DEL".to_vec(), k.to_vec()]);
                        true
                    }
                    Found::Other => keyspace::del(server, db, k),
                })
                .count();
            Reply::Int(n as i64)
        }
        "rename" => {
            if matches!(find(server, db, arg(1)), Found::Missing) {
                Reply::Err("ERR no such key".into())
            } else {
                keyspace::rename(server, db, arg(1), arg(2));
                Reply::Simple("OK".into())
            }
        }
        "move" => {
            if in_cluster {
                return Reply::Err("ERR MOVE is not allowed in cluster mode".into());
            }
            match int_arg(arg(2)) {
                Some(to) if (0..16).contains(&to) => {
                    Reply::Int(i64::from(keyspace::move_key(server, db, arg(1), to as i32)))
                }
                _ => Reply::Err("ERR DB index is out of range".into()),
            }
        }
        "swapdb" => {
            if in_cluster {
                return Reply::Err("ERR SWAPDB is not allowed in cluster mode".into());
            }
            match (int_arg(arg(1)), int_arg(arg(2))) {
                (Some(a), Some(b)) if (0..16).contains(&a) && (0..16).contains(&b) => {
                    if a != b {
                        keyspace::swapdb(server, a as i32, b as i32);
                    }
                    Reply::Simple("OK".into())
                }
                _ => Reply::Err("ERR invalid DB index".into()),
            }
        }
        "flushdb" => {
            keyspace::flushdb(server, db);
            Reply::Simple("OK".into())
        }
        "pexpireat" => match int_arg(arg(2)) {
            Some(at) => Reply::Int(i64::from(keyspace::expire(
                server,
                db,
                arg(1),
                Some(at.max(0) as u64),
            ))),
            None => Reply::Err("ERR value is not an integer or out of range".into()),
        },
        "persist" => Reply::Int(i64::from(keyspace::expire(server, db, arg(1), None))),
        "dump" => match rdb::dump(server, db, arg(1)) {
            Some(items) => Reply::Bulk(rdb::register_dump(items)),
            None => Reply::Null,
        },
        "restore" => {
            let replace = argv[4..].iter().any(|a| a.eq_ignore_ascii_case(b"replace"));
            if !replace && !matches!(find(server, db, arg(1)), Found::Missing) {
                return Reply::Err("BUSYKEY Target key name already exists.".into());
            }
            if rdb::restore(server, db, arg(1), arg(3)) {
                Reply::Simple("OK".into())
            } else {
                Reply::Err("ERR Bad data format".into())
            }
        }
        "copy" => copy(server, db, argv, caller, in_cluster),
        "set" => {
            set_str(server, db, arg(1), arg(2).to_vec());
            write(owned());
            Reply::Simple("OK".into())
        }
        "get" => match find(server, db, arg(1)) {
            Found::Missing => Reply::Null,
            Found::Str(s) => Reply::Bulk(s),
            Found::Other => Reply::Err(WRONGTYPE.into()),
        },
        "incr" => {
            let cur = match find(server, db, arg(1)) {
                Found::Missing => 0,
                Found::Str(s) => match int_arg(&s) {
                    Some(v) => v,
                    None => {
                        return Reply::Err("ERR value is not an integer or out of range".into())
                    }
                },
                Found::Other => return Reply::Err(WRONGTYPE.into()),
            };
            let Some(next) = cur.checked_add(1) else {
                return Reply::Err("ERR increment or decrement would overflow".into());
            };
            set_str(server, db, arg(1), next.to_string().into_bytes());
            write(owned());
            Reply::Int(next)
        }
        "append" => {
            let mut cur = match find(server, db, arg(1)) {
                Found::Missing => Vec::new(),
                Found::Str(s) => s,
                Found::Other => return Reply::Err(WRONGTYPE.into()),
            };
            cur.extend_from_slice(arg(2));
            let n = cur.len() as i64;
            set_str(server, db, arg(1), cur);
            write(owned());
            Reply::Int(n)
        }
        // No list is ever pushed to here: BLPOP blocks, and a caller that
        // may not block gets the time-out reply at once.
        "blpop" => match find(server, db, arg(1)) {
            Found::Missing => Reply::Null,
            _ => Reply::Err(WRONGTYPE.into()),
        },
        "xread" => xread(argv, caller, family),
        "multi" => {
            let nested = with(|h| {
                let c = h.servers[server].clients.get_mut(&client);
                match c {
                    Some(c) if c.multi.is_none() && caller == Caller::Client => {
                        c.multi = Some(Vec::new());
                        false
                    }
                    _ => true,
                }
            });
            if nested {
                Reply::Err("ERR MULTI calls can not be nested".into())
            } else {
                Reply::Simple("OK".into())
            }
        }
        "exec" => {
            let queued = with(|h| {
                h.servers[server]
                    .clients
                    .get_mut(&client)
                    .and_then(|c| c.multi.take())
            });
            let Some(queued) = queued else {
                return Reply::Err("ERR EXEC without MULTI".into());
            };
            let mut out = Vec::new();
            for a in queued {
                let refs: Vec<&[u8]> = a.iter().map(Vec::as_slice).collect();
                let db = with(|h| h.servers[server].clients.get(&client).map_or(db, |c| c.db));
                let r = exec(server, client, db, &refs, Caller::Multi);
                out.push(r.unwrap_or(Reply::Null));
            }
            Reply::Array(out)
        }
        "subscribe" => Reply::Array(vec![
            Reply::Bulk(b"subscribe".to_vec()),
            Reply::Bulk(arg(1).to_vec()),
            Reply::Int(1),
        ]),
        "echo" => Reply::Bulk(arg(1).to_vec()),
        "cluster" if arg(1).eq_ignore_ascii_case(b"nodes") => match cluster::nodes(server) {
            Some(text) => Reply::Bulk(text.into_bytes()),
            None => Reply::Err("ERR This instance has cluster support disabled".into()),
        },
        _ => Reply::Err(format!("ERR unknown subcommand for '{name}'")),
    }
}

/// COPY src dst [DB n] [REPLACE]: a string is copied; a value of the
/// module's type is refused (the type has neither `copy` nor `copy2`:
/// `moduleTypeDupOrReply`), changing nothing.
fn copy(server: usize, db: i32, argv: &[&[u8]], caller: Caller, in_cluster: bool) -> Reply {
    let arg = |i: usize| argv.get(i).copied().unwrap_or_default();
    let mut to_db = db;
    let mut replace = false;
    let mut i = 3;
    while i < argv.len() {
        if arg(i).eq_ignore_ascii_case(b"db") {
            match int_arg(arg(i + 1)) {
                Some(d) if (0..16).contains(&d) => to_db = d as i32,
                _ => return Reply::Err("ERR DB index is out of range".into()),
            }
            i += 2;
        } else if arg(i).eq_ignore_ascii_case(b"replace") {
            replace = true;
            i += 1;
        } else {
            return Reply::Err("ERR syntax error".into());
        }
    }
    if in_cluster && to_db != db {
        return Reply::Err("ERR Copying to another database is not allowed in cluster mode".into());
    }
    if to_db == db && arg(1) == arg(2) {
        return Reply::Err("ERR source and destination objects are the same".into());
    }
    let src = find(server, db, arg(1));
    if matches!(src, Found::Missing) {
        return Reply::Int(0);
    }
    if !replace && !matches!(find(server, to_db, arg(2)), Found::Missing) {
        return Reply::Int(0);
    }
    let Found::Str(v) = src else {
        return Reply::Err("ERR not supported for this module key".into());
    };
    set_str(server, to_db, arg(2), v);
    if caller.propagates() {
        propagate(server, db, argv.iter().map(|a| a.to_vec()).collect());
    }
    super::notify(
        server,
        raw::REDISMODULE_NOTIFY_GENERIC,
        "copy_to",
        to_db,
        arg(2),
    );
    Reply::Int(1)
}

/// XREAD [COUNT n] [BLOCK ms] STREAMS key id: no stream is ever written
/// here, so a read finds nothing and BLOCK would block. Redis 7.0 refuses
/// BLOCK from a script (`CLIENT_SCRIPT`) before anything else; a caller
/// that may not block (MULTI, a module's call, later servers' scripts)
/// gets the time-out reply (a null array) at once. (No client sends a
/// blocking form here: the simulation sends them only inside FENCED.)
fn xread(argv: &[&[u8]], caller: Caller, family: Family) -> Reply {
    let block = argv
        .iter()
        .take_while(|a| !a.eq_ignore_ascii_case(b"streams"))
        .any(|a| a.eq_ignore_ascii_case(b"block"));
    if block && caller == Caller::Script && family == Family::Redis70 {
        return Reply::Err(format!(
            "ERR {} command is not allowed with BLOCK option from scripts",
            String::from_utf8_lossy(argv.first().copied().unwrap_or_default())
        ));
    }
    Reply::Null
}

/// What `argv` answers when a script runs it on `server` in `db` now — the
/// oracle of FENCED (SPEC: what a script cannot run is refused, blocking
/// forms act as in a script) — run as a dry run: the string keys are put
/// back, nothing propagates, no event fires.
pub fn script_reply(server: usize, db: i32, argv: &[&[u8]]) -> Reply {
    let name = String::from_utf8_lossy(argv.first().copied().unwrap_or_default()).to_lowercase();
    let Some((flags, _, arity)) = lookup(server, &name) else {
        return Reply::Err("ERR Unknown Redis command called from script".into());
    };
    if !arity_ok(arity, argv.len()) {
        return Reply::Err("ERR Wrong number of args calling Redis command from script".into());
    }
    if has(&flags, "noscript") {
        return Reply::Err("ERR This Redis command is not allowed from script".into());
    }
    if with(|h| h.servers[server].oom) && deny_oom(&flags) {
        return Reply::Err("OOM command not allowed when used memory > 'maxmemory'.".into());
    }
    let saved: Vec<Vec<(Vec<u8>, Vec<u8>)>> = with(|h| {
        h.dry_run = true;
        h.servers[server]
            .dbs
            .iter()
            .map(|d| {
                d.iter()
                    .filter_map(|(k, e)| match &e.value {
                        Value::Str(s) => Some((k.clone(), s.clone())),
                        Value::Module(_) => None,
                    })
                    .collect()
            })
            .collect()
    });
    let r = run_builtin(server, 0, db, &name, argv, Caller::Script);
    with(|h| {
        h.dry_run = false;
        for (d, strings) in h.servers[server].dbs.iter_mut().zip(saved) {
            d.retain(|_, e| matches!(e.value, Value::Module(_)));
            for (k, v) in strings {
                d.insert(
                    k,
                    Entry {
                        value: Value::Str(v),
                        expire_at: None,
                    },
                );
            }
        }
    });
    r
}
