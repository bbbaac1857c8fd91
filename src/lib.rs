//! # dlock — native distributed locks for Redis
//!
//! A Redis module (`libdlock.so`) with reentrant mutexes, read-write locks and
//! fair locks as server-side commands, with FIFO waiting on the server,
//! fencing tokens, lease expiry noticed by the module's own timers, and
//! notifications. The contract is `docs/commands.md` (the command contract); the README has the
//! command reference.
//!
//! Layout, in layers (each uses only those below it; the README's Layout
//! section lists the few remaining cross-edges and why):
//! 1. entry points: [`commands`] (one file per command family, plus `commit`
//!    — persist, replicate effects, notify, wake —, the timer and job
//!    callbacks in `commands::jobs`, and registration) and [`events`]
//!    (keyspace and server events);
//! 2. state and services: [`datatype`] (the key type: RDB, AOF rewrite,
//!    DUMP/RESTORE, MEMORY USAGE, DIGEST, unlink; opening a key's lock),
//!    [`runtime`] (token counter, waiting connections, expiry index, job
//!    queue: state only), [`notify`], [`cluster`], [`stats`], [`config`],
//!    [`args`] and [`error`] (argument parsing, every error reply);
//! 3. [`ffi`]: a thin, panic-free wrapper over the raw module API;
//! 4. [`lock`]: the pure state machine and its binary codec (no FFI, time
//!    passed in), below all.

// Module code runs inside redis-server: a panic aborts the user's whole
// server. These lints make the rule enforced rather than remembered (tests
// may unwrap). Every unsafe operation sits in its own `unsafe` block with
// the reason it is sound, inside unsafe functions too.
#![deny(unsafe_op_in_unsafe_fn)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::undocumented_unsafe_blocks
    )
)]

mod args;
mod cluster;
mod commands;
mod config;
mod datatype;
mod error;
mod events;
mod ffi;

mod notify;
mod runtime;
mod stats;

#[cfg(not(test))]
use datatype::LOCK_TYPE;
use redis_module::{raw, Context, RedisString, Status};
use std::ffi::c_int;

/// Checks the module arguments (`name value` pairs, names with or without
/// the `dlock.` prefix) and applies them: [`config::parse_module_args`] is
/// their only parser (the `redis_module!` block below leaves them alone).
/// Unknown names, missing values and out-of-range numbers refuse the load,
/// with the reason in the log.
fn apply_module_args(args: &[RedisString]) -> Result<(), String> {
    let args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    config::apply_module_args(&args)
}

#[cfg_attr(test, allow(dead_code))]
fn init(ctx: &Context, args: &[RedisString]) -> Status {
    if let Err(e) = apply_module_args(args) {
        ctx.log_warning(&format!("dlock: {e}"));
        return Status::Err;
    }
    if let Err(missing) = ffi::check_api() {
        ctx.log_warning(&format!(
            "dlock: this Redis lacks {missing}; Redis 7.0 or newer is required"
        ));
        return Status::Err;
    }
    // SAFETY: ctx.ctx is the OnLoad context; these calls only register
    // module-wide settings and callbacks.
    unsafe {
        ffi::rm!(RedisModule_SetModuleOptions(ctx.ctx, raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS as c_int) else ());
        runtime::set_detached(
            ffi::rm!(RedisModule_GetDetachedThreadSafeContext(ctx.ctx) else std::ptr::null_mut()),
        );
        ffi::rm!(RedisModule_RegisterInfoFunc(ctx.ctx, Some(info_func)) else 1);
    }
    runtime::seed_waiter_ids();
    commands::jobs::install();
    notify::init_messages();
    if let Err(name) = commands::register(ctx.ctx) {
        ctx.log_warning(&format!(
            "dlock: could not register {}",
            name.to_string_lossy()
        ));
        return Status::Err;
    }
    if !events::subscribe(ctx.ctx) {
        ctx.log_warning("dlock: could not subscribe to keyspace or server events");
        return Status::Err;
    }
    Status::Ok
}

/// `INFO dlock`: counters, then gauges.
#[cfg_attr(test, allow(dead_code))]
unsafe extern "C" fn info_func(ictx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    // SAFETY: `ictx` is the info context Redis passed, live for the call.
    unsafe { ffi::rm!(RedisModule_InfoAddSection(ictx, std::ptr::null_mut()) else 1) };
    let mut fields = stats::counters();
    fields.push(("locks", stats::locks()));
    fields.push(("waiters", stats::waiters()));
    fields.push(("waiting_clients", runtime::waiting()));
    let (bound_connections, bound_keys) = runtime::bound_counts();
    fields.push(("bound_connections", bound_connections));
    fields.push(("bound_keys", bound_keys));
    for (name, value) in fields {
        if let Ok(n) = std::ffi::CString::new(name) {
            // SAFETY: as above; the field name is NUL-terminated and lives
            // through the call.
            unsafe { ffi::rm!(RedisModule_InfoAddFieldULongLong(ictx, n.as_ptr(), value) else 1) };
        }
    }
}

#[cfg(not(test))]
redis_module::redis_module! {
    name: "dlock",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [LOCK_TYPE],
    init: init,
    configurations: [
        i64: [
            ["default-lease-ms", &config::DEFAULT_LEASE_MS, config::DEFAULT_LEASE_MS_DEFAULT, 1, config::MAX_MS, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
            ["fair-queue-timeout-ms", &config::FAIR_QUEUE_TIMEOUT_MS, config::FAIR_QUEUE_TIMEOUT_MS_DEFAULT, 1, config::MAX_MS, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
            ["max-queue", &config::MAX_QUEUE, config::MAX_QUEUE_DEFAULT, 1, config::MAX_QUEUE_MAX, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [
            ["apply-from-clients", &config::APPLY_FROM_CLIENTS, false, redis_module::configuration::ConfigurationFlags::IMMUTABLE, None],
        ],
        enum: [],
        // Module arguments are parsed once, by `apply_module_args` in `init`
        // (after the server has applied the config file's values, so a
        // module argument wins as before). The macro's own reader would
        // take only unprefixed names, parse them again by other rules and
        // take any bool other than `yes` as `no`.
        module_args_as_configuration: false,
    ]
}

#[cfg(test)]
#[global_allocator]
static TEST_ALLOCATOR: std::alloc::System = std::alloc::System;
