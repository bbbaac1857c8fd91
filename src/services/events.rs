//! Keyspace and server events that keep the expiry index in step with the
//! keyspace when keys change outside our commands.

use super::jobq::{self, Job};
use super::state::Map as HashMap;
use super::{bound, expiry_index, hint, notify, observe, state, waiters};
use crate::ffi::callbacks::{
    filters_know_the_client, register_command_filter, subscribe_keyspace_events,
    subscribe_server_event, CommandFilter, EventData, FilterCtx, KeyspaceEvent, ServerEvent,
};
use crate::ffi::{self, AnyCtx, Ctx, RString};
use crate::storage;
use dlock_core::Kind;
use redis_module::raw;
use std::cell::{Cell, RefCell};
use std::ffi::c_int;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Subscribes to the events below.
pub fn subscribe(ctx: Ctx<'_>) -> bool {
    if !subscribe_keyspace_events::<Keyspace>(ctx)
        || !subscribe_server_event::<Server<{ raw::REDISMODULE_EVENT_FLUSHDB }>>(ctx)
        || !subscribe_server_event::<Server<{ raw::REDISMODULE_EVENT_LOADING }>>(ctx)
        || !subscribe_server_event::<Server<{ raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED }>>(
            ctx,
        )
        || !subscribe_server_event::<Server<{ raw::REDISMODULE_EVENT_SWAPDB }>>(ctx)
        || !subscribe_server_event::<Server<{ raw::REDISMODULE_EVENT_CLIENT_CHANGE }>>(ctx)
    {
        return false;
    }
    // Servers whose filters can name the client (Redis 7.2+, Valkey):
    // note the caller's db before the commands that may fire events in
    // another db (see `caller_db`). Without it only MOVE is covered.
    if filters_know_the_client() {
        register_command_filter::<Filter>(ctx);
    }
    true
}

/// The keyspace events (generic and `loaded`): [`on_keyspace`].
struct Keyspace;

impl KeyspaceEvent for Keyspace {
    const TYPES: c_int =
        (raw::REDISMODULE_NOTIFY_GENERIC | raw::REDISMODULE_NOTIFY_LOADED) as c_int;
    fn on(ctx: Ctx<'_>, event: &[u8], key: &[u8]) {
        on_keyspace(ctx, event, key);
    }
}

/// The server event `ID`: [`on_server_event`].
struct Server<const ID: u64>;

impl<const ID: u64> ServerEvent for Server<ID> {
    const ID: u64 = ID;
    fn on(ctx: Ctx<'_>, sub: u64, data: EventData<'_>) {
        on_server_event(ctx, ID, sub, &data);
    }
}

/// The command filter: [`on_command`].
struct Filter;

impl CommandFilter for Filter {
    fn filter(f: FilterCtx<'_>) {
        on_command(f);
    }
}

// ---- the caller's db ------------------------------------------------------
//
// Valkey 8.1 runs keyspace-notification callbacks on the client whose
// command fired the event (valkey PR #1819) and selects the event's db on it
// without selecting back (fixed upstream by valkey PR #4024). For the events
// in another db than the caller's (MOVE's move_to, COPY ... DB's copy_to,
// DEBUG RELOAD's loaded) the caller would stay in that db, even though the
// callback does nothing to it. The callback therefore selects back the db
// the caller had, when it knows it: from the move_from event that MOVE fires
// just before move_to, from what the command filter below noted when the
// COPY or DEBUG command arrived, or, inside DLOCK.FENCED, the db FENCED runs
// in (`fenced_call`). The caller's db matters beyond the caller: the server
// propagates the command with the db its client has after it ran. On
// servers that run these callbacks on a
// temporary client, the ids match no connection (at most a temporary client,
// whose db matters to no one).

/// (client id, db) seen by the last move_from event; client 0: none.
static MOVE_FROM: (AtomicU64, AtomicI64) = (AtomicU64::new(0), AtomicI64::new(0));

thread_local! {
    /// While `DLOCK.FENCED` runs its command: the db it runs in. The
    /// command runs on a client of the module's (`RedisModule_Call`), which
    /// the command filter cannot name (no connection), so a `COPY … DB`
    /// there left it in the target db on Valkey 8.1, and the server then
    /// propagated the COPY with that db selected: the replica ran it in the
    /// target db, found no source there, and never got the copy (issue 44,
    /// item 5). Every key event during the call selects this db back.
    static FENCED_DB: Cell<Option<i32>> = const { Cell::new(None) };
}

/// Runs `call`, `DLOCK.FENCED`'s call of its command on `ctx`'s client
/// (whose db the called client has): key events fired meanwhile leave that
/// client in this db (see [`FENCED_DB`]).
pub fn fenced_call<R>(ctx: Ctx<'_>, call: impl FnOnce() -> R) -> R {
    let prev = FENCED_DB.replace(Some(ctx.db()));
    let out = call();
    FENCED_DB.set(prev);
    out
}

/// A COPY ... DB or DEBUG RELOAD sent (or queued in MULTI) by `client`: its
/// event in `to_db` at `key` (any db and key for DEBUG: None) must select
/// `back` again.
struct Pending {
    client: u64,
    target: Option<(i32, Box<[u8]>)>,
    back: i32,
}

#[derive(Default)]
struct Noted {
    pending: Vec<Pending>,
    /// Clients in MULTI: the db their queued commands will run in, as far
    /// as their queued SELECTs tell.
    queued_in: HashMap<u64, i32>,
}

/// Most entries kept: beyond, the oldest are dropped (a connection that
/// queued a COPY and vanished leaves one behind).
const MAX_NOTED: usize = 1024;

thread_local! {
    static NOTED: RefCell<Noted> = RefCell::new(Noted::default());
}

/// The db the client of a keyspace callback had before the server selected
/// the event's db on it, for the events that can differ from it.
fn caller_db(ctx: Ctx<'_>, ev: &[u8], key: &[u8]) -> Option<i32> {
    match ev {
        b"move_from" => {
            let (id, db) = (ctx.client_id(), ctx.db());
            MOVE_FROM.0.store(id, Relaxed);
            MOVE_FROM.1.store(i64::from(db), Relaxed);
            None
        }
        b"move_to" => {
            let id = MOVE_FROM.0.swap(0, Relaxed);
            (id != 0 && id == ctx.client_id())
                .then(|| i32::try_from(MOVE_FROM.1.load(Relaxed)).ok())
                .flatten()
        }
        b"copy_to" | b"loaded" => {
            let (id, db) = (ctx.client_id(), ctx.db());
            state::with(&NOTED, |n| {
                let i = n.pending.iter().position(|p| {
                    p.client == id
                        && match &p.target {
                            Some((d, k)) => ev == b"copy_to" && *d == db && **k == *key,
                            None => ev == b"loaded",
                        }
                })?;
                if ev == b"copy_to" {
                    Some(n.pending.remove(i).back)
                } else {
                    // DEBUG RELOAD fires `loaded` for every key.
                    n.pending.get(i).map(|p| p.back)
                }
            })
            .flatten()
        }
        _ => None,
    }
}

/// Command filter: for COPY ... DB and DEBUG RELOAD, notes the db the client
/// must be in after their events (for commands queued in MULTI: the db at
/// MULTI, changed by queued SELECTs). Costs every other command a few
/// length comparisons.
fn on_command(f: FilterCtx<'_>) {
    let arg = |i: c_int| f.arg(i);
    let name = arg(0);
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    let (multi, select, copy, debug) = (is(b"multi"), is(b"select"), is(b"copy"), is(b"debug"));
    if !(multi || select || copy || debug) {
        return;
    }
    let argc = f.args_count();
    let id = f.client_id();
    if id == 0 {
        return;
    }
    let Some((in_multi, db)) = ffi::client_multi_db(id) else {
        return;
    };
    let number = |b: &[u8]| {
        std::str::from_utf8(b)
            .ok()
            .and_then(|a| a.parse::<i32>().ok())
    };
    // What the command asks for, read before taking the lock.
    let (to_db, dst) = if copy {
        let mut to_db = None;
        let mut i = 3;
        while i < argc {
            if arg(i).eq_ignore_ascii_case(b"db") {
                to_db = number(arg(i.saturating_add(1)));
            }
            i = i.saturating_add(1);
        }
        (to_db, Box::<[u8]>::from(arg(2)))
    } else if select {
        (number(arg(1)), Box::default())
    } else {
        (None, Box::default())
    };
    let reload = debug
        && (arg(1).eq_ignore_ascii_case(b"reload") || arg(1).eq_ignore_ascii_case(b"loadaof"));

    state::with(&NOTED, |n| {
        if !in_multi {
            // Whatever this client noted before has had its chance.
            n.pending.retain(|p| p.client != id);
            n.queued_in.remove(&id);
        }
        let back = if in_multi {
            n.queued_in.get(&id).copied().unwrap_or(db)
        } else {
            db
        };
        if multi && !in_multi {
            if n.queued_in.len() >= MAX_NOTED {
                n.queued_in.clear();
            }
            n.queued_in.insert(id, db);
        } else if select && in_multi {
            if let (Some(d), Some(q)) = (to_db, n.queued_in.get_mut(&id)) {
                *q = d;
            }
        } else if copy || reload {
            let target = match to_db {
                Some(d) if d != back => Some((d, dst)),
                // COPY in the caller's own db: nothing to select back.
                _ if copy => return,
                _ => None,
            };
            if n.pending.len() >= MAX_NOTED {
                n.pending.remove(0);
            }
            n.pending.push(Pending {
                client: id,
                target,
                back,
            });
        }
    });
}

/// A key appeared under a new name or from a load: file it in the index.
/// (Notification callbacks must not write keys; this only reads the value
/// and updates module memory.)
fn on_keyspace(ctx: Ctx<'_>, ev: &[u8], key: &[u8]) {
    hint::changed();
    if ev.is_empty() {
        return;
    }
    {
        // Dropped last: the caller's db is selected back after the work below.
        let back = caller_db(ctx, ev, key).or_else(|| FENCED_DB.get());
        let _back = ctx.select_on_drop(back);
        if !matches!(ev, b"loaded" | b"restore" | b"rename_to" | b"move_to") {
            return;
        }
        // The "loaded" event passes a key object on the stack, which OpenKey
        // must not retain: open a copy.
        let Some(name) = RString::new(key) else {
            return;
        };
        // Read-only: a notification callback must not write keys; filing
        // the lock in the index is module bookkeeping (`Stored::set_entry`).
        // Untouched: the event is not an access (RESTORE ... IDLETIME keeps
        // the idle time it set).
        // A statement (`;`), not the tail: the guard goes before the name
        // it borrows.
        if let Ok(Some(g)) = storage::read_untouched(ctx, name.as_rstr()) {
            let stored = g.get();
            expiry_index::refile(ctx, ctx.db(), key, stored);
            expiry_index::note_arrived(ctx, ctx.db(), key, stored);
            let lock = &stored.lock();
            if !ctx.is_replica() && !ctx.is_loading() {
                refile_bound(ctx, ev, key, lock);
            }
            if matches!(ev, b"rename_to" | b"move_to") {
                observe::moved(lock, std::ptr::from_ref(stored) as usize);
            }
            if lock.has_blocked() && !ctx.is_replica() && !ctx.is_loading() {
                let job = if matches!(ev, b"rename_to" | b"move_to") {
                    // The waiting connections wait on the old key, where their
                    // places were given back (Job::Requeue): drop them here.
                    let ids = lock.blocked_waiters().iter().map(|w| w.id).collect();
                    Job::Forget(ctx.db(), key.into(), ids)
                } else {
                    // Waiters persisted with the lock may name gone connections.
                    Job::Prune(ctx.db(), key.into())
                };
                jobq::schedule(job);
            }
        };
    }
}

/// BIND across key events (SPEC: a bound hold follows its key through
/// RENAME and MOVE, and ends on a server that receives it by RESTORE,
/// MIGRATE or slot migration). A lock at a new name: its holds bound to
/// connections of this process are noted there (`bound::refile`). Holds
/// bound elsewhere (the flag came through a payload: RESTORE, a load that
/// is not a restart's) end by a prune job, published by this server.
fn refile_bound(ctx: Ctx<'_>, ev: &[u8], key: &[u8], lock: &dlock_core::Lock) {
    let bound = |h: &&dlock_core::Holder| h.is_live() && h.bound != 0;
    if !lock.holders().iter().any(|h| bound(&h)) {
        return;
    }
    if matches!(ev, b"rename_to" | b"move_to") {
        let clients = lock
            .holders()
            .iter()
            .filter(bound)
            .map(|h| h.bound)
            .filter(|c| *c != dlock_core::BOUND_ELSEWHERE);
        bound::refile(ctx.db(), key, clients);
    }
    if lock
        .holders()
        .iter()
        .any(|h| h.bound == dlock_core::BOUND_ELSEWHERE)
    {
        jobq::schedule(Job::Prune(ctx.db(), key.into()));
    }
}

fn on_server_event(ctx: Ctx<'_>, id: u64, sub: u64, data: &EventData<'_>) {
    hint::changed();
    {
        match id {
            raw::REDISMODULE_EVENT_FLUSHDB if sub == raw::REDISMODULE_SUBEVENT_FLUSHDB_START => {
                let db = data.flush_db().unwrap_or(-1);
                // Latches have no deadline, so the index does not list them:
                // answer their waiting connections here (a flushed latch is open).
                if !ctx.is_replica() {
                    waiters::answer_flushed(db);
                }
                // `deleted` is published for each flushed lock by the job
                // timer, a slice at a time (a million locks would otherwise
                // stall the server for the flush).
                let flushed = expiry_index::take_db(db);
                if !ctx.is_replica() {
                    jobq::schedule(Job::Flushed(flushed));
                }
                // Only the keys that connections wait on are opened (a flush
                // of a million locks must not open each): their waiters keep
                // their places in a lock made again after the flush.
                if !ctx.is_replica() {
                    for (d, key) in waiters::waited_keys(db) {
                        let requeue = storage::with_read(ctx, d, &key, |s| {
                            let lock = &s.lock();
                            (lock.kind() != Kind::Latch && lock.has_blocked())
                                .then(|| (lock.kind(), lock.blocked_waiters()))
                        });
                        if let Some(Some((kind, places))) = requeue {
                            jobq::schedule(Job::Requeue(d, key, kind, places));
                        }
                    }
                }
            }
            raw::REDISMODULE_EVENT_LOADING if sub == raw::REDISMODULE_SUBEVENT_LOADING_ENDED => {
                jobq::schedule(Job::PruneAll);
            }
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED
                if sub == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER =>
            {
                super::promotion::promoted();
                jobq::schedule(Job::PruneAll);
            }
            raw::REDISMODULE_EVENT_SWAPDB => {
                if let Some((first, second)) = data.swapped_dbs() {
                    expiry_index::swap_dbs(first, second);
                    bound::swap_dbs(first, second);
                    if !ctx.is_replica() {
                        requeue_swapped(ctx, first, second);
                    }
                }
            }
            // BIND: a connection with bound holds closed. Ending them writes
            // keys, which this callback must not do (and a client being freed
            // is no context to reply on): a 0 ms job ends them and serves the
            // next waiters. They are over from now on: the close is noted
            // (`bound::take_bound`), and every command and read that comes
            // before the job finds them ended (`commit::settle`, `as_of`).
            raw::REDISMODULE_EVENT_CLIENT_CHANGE
                if sub == raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED =>
            {
                let id = data.client_id().unwrap_or(0);
                if let Some(keys) = bound::take_bound(id, ffi::now().0) {
                    jobq::schedule(Job::Unbind(id, keys));
                }
            }
            _ => {}
        }
    }
}

/// SWAPDB `first` `second`: the server keeps each waiting connection
/// blocked on the key name in the db it blocked in, while its lock (and
/// its place in the lock's queue) went to the other db. As for a RENAME,
/// the places go back where their connections wait (`Job::Requeue`) and
/// leave the moved lock (`Job::Forget`); otherwise the moved lock would
/// keep places that no wait ends, ahead of every later waiter (found by
/// the simulator).
fn requeue_swapped(ctx: Ctx<'_>, first: i32, second: i32) {
    for db in [first, second] {
        let other = if db == first { second } else { first };
        for (d, key) in waiters::waited_keys(db) {
            let moved = storage::with_read(ctx, other, &key, |s| {
                let lock = &s.lock();
                let mine: Vec<dlock_core::Waiter> = lock
                    .blocked_waiters()
                    .into_iter()
                    .filter(|w| waiters::is_live_at(w.id, d, &key))
                    .collect();
                (lock.kind(), mine)
            });
            if let Some((kind, places)) = moved {
                if !places.is_empty() {
                    let ids = places.iter().map(|w| w.id).collect();
                    jobq::schedule(Job::Forget(other, key.clone(), ids));
                    jobq::schedule(Job::Requeue(d, key, kind, places));
                }
            }
        }
    }
}

/// A lock leaves the keyspace (DEL, UNLINK, RENAME/MOVE source, overwrite,
/// eviction). Its expiry entry goes; if someone held it, waiters may now
/// take the key: publish `deleted` and wake connections blocked on it.
///
/// The type's unlink hook (`storage::unlink2`): [`on_unlink`].
pub struct Unlink;

impl storage::Unlinked for Unlink {
    fn unlinked(db: i32, key: &[u8], stored: &storage::Stored) {
        on_unlink(db, key, stored);
    }
}

fn on_unlink(db: i32, key: &[u8], stored: &storage::Stored) {
    hint::changed();
    expiry_index::unindex(stored);
    if stored.is_empty() {
        return;
    }
    let lock = &stored.lock();
    let Some(ctx) = jobq::detached() else { return };
    // Recorded as `deleted` by a job, unless the value turns up at a new
    // name first (RENAME and MOVE unlink the source after adding the value
    // at the destination).
    if observe::holds_unlinked(ctx, key, lock, std::ptr::from_ref(stored) as usize) {
        jobq::schedule(Job::Unlinked);
    }
    // A latch that leaves its key is open: `deleted` tells whoever waits.
    let latch = lock.kind() == Kind::Latch;
    if ctx.is_replica() || (lock.holders().is_empty() && !lock.has_blocked() && !latch) {
        return;
    }
    let notify = !lock.holders().is_empty() || latch;
    let places = lock.blocked_waiters();
    if ctx.is_cluster() {
        // MIGRATE deletes the source copy too, but the lock lives on at the
        // target: decide once the job can see whether this node still serves
        // the slot.
        jobq::schedule(Job::Left(db, key.into(), lock.kind(), places, notify));
        return;
    }
    if notify {
        notify::publish(ctx, key, notify::DELETED);
    }
    if !places.is_empty() {
        jobq::schedule(Job::Requeue(db, key.into(), lock.kind(), places));
    }
}
