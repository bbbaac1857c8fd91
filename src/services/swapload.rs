//! A replica's load into a temporary db (`repl-diskless-load swapdb`): the
//! master's payload is loaded beside the db that still serves, then the two
//! are swapped (the REPL_ASYNC_LOAD events: started, then aborted or
//! completed). The module declares `HANDLE_REPL_ASYNC_LOAD` (see `lib.rs`)
//! and keeps it true here:
//! - while the load runs, the serving db's locks, their index entries and
//!   timers stay as they are (the "loaded" events of the temporary db's keys
//!   find nothing new in the serving db: at most the same lock is filed
//!   again); storage notes the locks loaded into the temporary db;
//! - aborted: the temporary db is dropped with its locks, which were never
//!   filed; nothing else changes;
//! - completed: the old db leaves without a flush event, so its entries
//!   leave the index here, and the locks that came with the load are filed
//!   by their deadlines (timers armed as after any load). Later timers of
//!   the old entries find them gone and do nothing.
//!
//! The token counter only rises with a load (its aux data and each lock's
//! last token), so an aborted load leaves it at most higher, never lower.

use super::expiry_index;
use crate::ffi::callbacks::{subscribe_server_event, EventData, ServerEvent};
use crate::ffi::{Ctx, RString};
use crate::storage;
use redis_module::raw;

/// Subscribes to the REPL_ASYNC_LOAD events; false when the server refused.
pub fn subscribe(ctx: Ctx<'_>) -> bool {
    subscribe_server_event::<AsyncLoad>(ctx)
}

struct AsyncLoad;

impl ServerEvent for AsyncLoad {
    const ID: u64 = raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD;

    fn on(ctx: Ctx<'_>, sub: u64, _data: EventData<'_>) {
        match sub {
            raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_STARTED => {
                storage::temp_load(true);
            }
            raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_ABORTED => {
                storage::temp_load(false);
            }
            raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_COMPLETED => {
                swapped(ctx, storage::temp_load(false));
            }
            _ => {}
        }
    }
}

/// The loaded db is now the serving one: index what came with it.
fn swapped(ctx: Ctx<'_>, loaded: storage::Loaded) {
    drop(expiry_index::take_db(-1));
    for (db, key) in loaded {
        let Some(_db) = ctx.use_db(db) else {
            continue;
        };
        let Some(name) = RString::new(&key) else {
            continue;
        };
        // A statement (`;`): the guard goes before the name it borrows.
        if let Ok(Some(g)) = storage::read_untouched(ctx, name.as_rstr()) {
            expiry_index::refile(ctx, db, &key, g.get());
            expiry_index::note_arrived(ctx, db, &key, g.get());
        };
    }
}
