//! # dlock — native distributed locks for Redis
//!
//! A Redis module (`libdlock.so`) with reentrant mutexes, read-write locks,
//! fair locks, semaphores and latches as server-side commands, with FIFO
//! waiting on the server, fencing tokens, lease expiry noticed by the
//! module's own timers, and notifications. The contract is
//! `docs/commands.md`; `docs/architecture.md` maps this code.
//!
//! Layers, each using only those below it (checked by `tests/layers.rs`):
//! 1. [`commands`]: one file per command family, each handler a plain
//!    function returning what to reply, through one reply harness;
//! 2. [`services`]: commit, the one blocking service, expiry, jobs, events,
//!    notifications;
//! 3. [`storage`]: the module type and the guards that reach a stored lock;
//! 4. [`ffi`]: a thin, panic-free, typed wrapper over the module API.
//!
//! Below all: the pure state machine, crate `dlock_core`; and the leaves
//! [`config`], [`error`] and [`stats`] (no FFI). This file only registers.

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

mod commands;
mod config;
mod error;
mod ffi;
mod services;
mod stats;
mod storage;

use redis_module::{raw, Context, RedisString, Status};
use services::{blocking, bound, events, jobs, notify};
use std::ffi::c_int;

/// The module type: one lock per key. Its callbacks are storage's (RDB,
/// AOF, memory, digest, free, the token counter as aux data, left out of
/// the RDB where the server allows and the clock carries it) and the
/// unlink hook of `services::events` (a lock leaving the keyspace).
static LOCK_TYPE: redis_module::native_types::RedisType =
    redis_module::native_types::RedisType::new(
        "dlocklock",
        storage::ENCVER,
        raw::RedisModuleTypeMethods {
            version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
            rdb_load: Some(storage::rdb_load),
            rdb_save: Some(storage::rdb_save),
            aof_rewrite: Some(storage::aof_rewrite),
            mem_usage: Some(storage::mem_usage),
            digest: Some(storage::digest),
            free: Some(storage::free),
            aux_load: Some(storage::tokens::aux_load),
            aux_save: Some(storage::tokens::aux_save),
            // Servers with `aux_save2` (Redis 7.2+, Valkey; type methods
            // version 5) use it instead of `aux_save`; Redis 7.0 ignores it.
            aux_save2: Some(storage::tokens::aux_save2),
            aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
            free_effort: None,
            unlink: None,
            copy: None,
            defrag: None,
            mem_usage2: None,
            free_effort2: None,
            unlink2: Some(storage::unlink2::<events::Unlink>),
            copy2: None,
        },
    );

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
    // The test-only clock offset is immutable: read once, here.
    ffi::set_clock_offset_ms(config::test_clock_offset_ms());
    if let Err(missing) = ffi::check_api() {
        ctx.log_warning(&format!(
            "dlock: this Redis lacks {missing}; Redis 7.0 or newer is required"
        ));
        return Status::Err;
    }
    ffi::callbacks::on_load(ctx, |octx| load(ctx, octx))
}

/// The load, on the OnLoad context `octx` (`ctx` for logging).
#[cfg_attr(test, allow(dead_code))]
fn load(ctx: &Context, octx: ffi::Ctx<'_>) -> Status {
    let server = ffi::server_kind(octx);
    octx.set_module_options(module_options(server));
    commands::fence::note_server(server);
    octx.register_info_func::<Info>();
    match octx.new_detached() {
        Some(d) => jobs::set_detached(d),
        None => {
            ctx.log_warning("dlock: no detached context");
            return Status::Err;
        }
    }
    storage::set_type(&LOCK_TYPE);
    blocking::seed_ids();
    notify::init_messages();
    if let Err(name) = commands::register(octx) {
        ctx.log_warning(&format!(
            "dlock: could not register {}",
            name.to_string_lossy()
        ));
        return Status::Err;
    }
    if !events::subscribe(octx)
        || !services::swapload::subscribe(octx)
        || !services::migration::subscribe(octx, server)
    {
        ctx.log_warning("dlock: could not subscribe to keyspace or server events");
        return Status::Err;
    }
    // Load-time configs (`config::LoadTime`) are fixed from here on.
    config::loaded();
    Status::Ok
}

/// The module's options:
/// - `HANDLE_IO_ERRORS`: the type's loads check every read (diskless loads);
/// - `HANDLE_REPL_ASYNC_LOAD`: a replica may load a payload into a
///   temporary db while the old one serves (`repl-diskless-load swapdb`);
///   `services::swapload` files the loaded locks at the swap. Without it the
///   server loads through a file instead, and logs a warning on every read
///   of the payload.
/// - on Valkey 8.1 and later, `SKIP_COMMAND_VALIDATION`: `Replicate` and
///   `EmitAOF` do not look up the command name (always `DLOCK.APPLY` or a
///   server command, which exist): the largest part of a replicated
///   change's cost there (bench/skip-validation.md). Redis gives that bit
///   another meaning, so it is set only where the server says it is Valkey.
/// - on Valkey 9 and later, `HANDLE_ATOMIC_SLOT_MIGRATION`
///   (`services::migration`).
fn module_options((valkey, version): (bool, (u32, u32))) -> c_int {
    let mut options =
        raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS | raw::REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD;
    if valkey && version >= (8, 1) {
        options |= VALKEY_OPTIONS_SKIP_COMMAND_VALIDATION;
    }
    options |= services::migration::options(valkey, version);
    options as c_int
}

/// `VALKEYMODULE_OPTIONS_SKIP_COMMAND_VALIDATION` of Valkey's
/// `valkeymodule.h` (8.1 and later).
const VALKEY_OPTIONS_SKIP_COMMAND_VALIDATION: u32 = 1 << 4;

/// `INFO dlock`: counters, then gauges.
struct Info;

impl ffi::callbacks::InfoFunc for Info {
    fn info(info: ffi::callbacks::InfoCtx<'_>) {
        info_fields(info);
    }
}

fn info_fields(info: ffi::callbacks::InfoCtx<'_>) {
    info.add_section();
    let mut fields = stats::counters();
    fields.push(("locks", stats::locks()));
    fields.push(("waiters", stats::waiters()));
    fields.push(("waiting_clients", blocking::waiting()));
    let (bound_connections, bound_keys) = bound::bound_counts();
    fields.push(("bound_connections", bound_connections));
    fields.push(("bound_keys", bound_keys));
    for (name, value) in fields {
        info.add_u64(name, value);
    }
    // The latest deadlock (services::deadlock quotes keys and owners).
    for (name, value) in services::deadlock::last_fields().into_iter().flatten() {
        info.add_str(name, &value);
    }
    // Wait and hold percentiles, in latencystats' format.
    for (name, value) in services::observe::percentile_fields() {
        info.add_str(&name, &value);
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
            ["deadlock-max-depth", &config::DEADLOCK_MAX_DEPTH, config::DEADLOCK_MAX_DEPTH_DEFAULT, 1, config::DEADLOCK_MAX_DEPTH_MAX, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
            ["slowlog-wait-ms", &config::SLOWLOG_WAIT_MS, config::SLOWLOG_WAIT_MS_DEFAULT, -1, config::MAX_MS, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
            ["slowlog-hold-ms", &config::SLOWLOG_HOLD_MS, config::SLOWLOG_HOLD_MS_DEFAULT, -1, config::MAX_MS, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
            ["slowlog-max-len", &config::SLOWLOG_MAX_LEN, config::SLOWLOG_MAX_LEN_DEFAULT, 0, config::SLOWLOG_MAX_LEN_MAX, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
            ["promotion-gap-ms", &config::PROMOTION_GAP_MS, config::PROMOTION_GAP_MS_DEFAULT, 0, config::MAX_MS, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
            ["test-clock-offset-ms", &config::TEST_CLOCK_OFFSET_MS, 0, -config::MAX_MS, config::MAX_MS, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [
            ["apply-from-clients", &config::APPLY_FROM_CLIENTS, false, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
            ["deadlock-detect", &config::DEADLOCK_DETECT, true, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
            ["stats", &config::STATS, true, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
        ],
        enum: [],
        // Module arguments are parsed once, by `apply_module_args` in `init`
        // (after the server has applied the config file's values, so a
        // module argument wins as before). apply-from-clients and
        // test-clock-offset-ms are load-time configs: registered mutable,
        // their setter refuses a change once loaded (`config::LoadTime`),
        // so `CONFIG GET *` then `CONFIG SET` of each value back works. The macro's own reader would
        // take only unprefixed names, parse them again by other rules and
        // take any bool other than `yes` as `no`.
        module_args_as_configuration: false,
    ]
}

#[cfg(test)]
#[global_allocator]
static TEST_ALLOCATOR: std::alloc::System = std::alloc::System;
