//! The commands: parse, ask the state machine, reply. One file per command
//! family; this file holds the reply harness every handler goes through
//! (registration is in `registry`).
//!
//! A handler is a plain function `fn(Ctx, Args) -> Outcome`: it parses
//! everything before it opens a key (an error leaves no trace), reaches a
//! stored lock only through `storage`'s guards, commits through
//! `services::commit`, and returns what to reply; [`harness`] turns that
//! into the reply, and an error into an error reply. [`command!`] makes the
//! `extern "C"` entry point Redis calls.

pub mod acquire;
pub mod apply;
pub mod args;
pub mod cancel;
pub mod fence;
pub mod info;
pub mod latch;
pub mod release;
pub mod scan;
pub mod semaphore;
pub mod stats;

use crate::error::{self, Msg};
use crate::ffi::{self, Ctx, RStr};
use crate::storage::{self, Guard, Opened};
use dlock_core::Kind;
use std::ffi::{c_int, CString};

/// What a handler answers.
pub enum Reply {
    Int(i64),
    Null,
    Ok,
    /// The handler replied itself (a map, a relayed reply) or blocked the
    /// connection (its callbacks reply).
    Done,
}

/// Why a command was refused: the error reply.
pub enum Refused {
    /// Wrong number of arguments (Redis' own message).
    Arity,
    /// One of the module's static messages (`crate::error`).
    Msg(Msg),
    /// A message with figures in it.
    Text(CString),
}

impl From<Msg> for Refused {
    fn from(m: Msg) -> Refused {
        Refused::Msg(m)
    }
}

impl From<CString> for Refused {
    fn from(t: CString) -> Refused {
        Refused::Text(t)
    }
}

/// A handler's result.
pub type Outcome = Result<Reply, Refused>;

/// Opens the lock at `name` for writing: its guard, `Ok(None)` for an
/// empty key, or the error for a key of another type, or (with `kind`) a
/// lock of another kind.
pub fn open_lock<'n>(
    ctx: Ctx<'n>,
    name: RStr<'n>,
    kind: Option<Kind>,
) -> Result<Option<Guard<'n>>, Refused> {
    match storage::open(ctx, name) {
        Opened::Other => Err(error::WRONGTYPE.into()),
        Opened::Vacant(_) => Ok(None),
        Opened::Lock(g) => match kind {
            Some(k) if g.lock().kind() != k => Err(error::wrong_kind(g.lock().kind()).into()),
            _ => Ok(Some(g)),
        },
    }
}

/// The one place a handler's outcome becomes its reply.
pub fn harness(ctx: Ctx<'_>, out: Outcome) -> c_int {
    match out {
        Ok(Reply::Int(v)) => ctx.reply_int(v),
        Ok(Reply::Null) => ctx.reply_null(),
        Ok(Reply::Ok) => ctx.reply_ok(),
        Ok(Reply::Done) => ffi::OK,
        Err(Refused::Arity) => ctx.wrong_arity(),
        Err(Refused::Msg(m)) => ctx.reply_error(m),
        Err(Refused::Text(t)) => ctx.reply_error(&t),
    }
}

/// `command!(name_cmd => handler)`: the entry point `name_cmd` that Redis
/// calls (the FFI's command trampoline, `ffi::callbacks::handler`), running
/// `handler(ctx, args)` through [`harness`].
macro_rules! command {
    ($name:ident => $handler:path) => {
        /// The entry point Redis calls for this command.
        #[allow(non_upper_case_globals)]
        pub const $name: $crate::ffi::callbacks::Handler = {
            struct Entry;
            impl $crate::ffi::callbacks::Command for Entry {
                fn run(ctx: $crate::ffi::Ctx<'_>, args: $crate::ffi::Args<'_>) -> std::ffi::c_int {
                    $crate::services::waiters::replying_first(|| {
                        $crate::commands::harness(ctx, $handler(ctx, args))
                    })
                }
            }
            $crate::ffi::callbacks::handler::<Entry>()
        };
    };
}
pub(crate) use command;

// ---- registration -----------------------------------------------------------

mod registry;
pub use registry::register;
