//! The system clock as the module reads it, simulated: the module's code
//! that reads `clock_gettime` itself (std's `Instant` and `SystemTime`:
//! the expiry timer's 2 ms slices; the wall clock on Redis 7.0, which has
//! no `RedisModule_Microseconds`) gets the simulated time of the server it
//! runs in, so no outcome depends on how fast this machine runs it. The
//! simulator's own reads (its time budget) get the real clock.
//!
//! This binary defines `clock_gettime` and exports it (build.rs), so the
//! module's undefined `clock_gettime` binds to it when it is loaded.

use std::cell::Cell;
use std::ffi::c_int;

thread_local! {
    /// How deep the running code is inside module calls.
    static IN_MODULE: Cell<u32> = const { Cell::new(0) };
}

/// Module code runs from here until [`left`].
pub(super) fn entered() {
    IN_MODULE.with(|d| d.set(d.get() + 1));
}

pub(super) fn left() {
    IN_MODULE.with(|d| d.set(d.get().saturating_sub(1)));
}

/// `clock_gettime`: inside module code, the simulated clocks (the wall
/// clock of the running server; its monotonic time); elsewhere the real
/// ones, from the kernel.
///
/// # Safety
/// As `clock_gettime(2)`: `tp` is a valid place for a `timespec`.
#[no_mangle]
pub unsafe extern "C" fn clock_gettime(clk: libc::clockid_t, tp: *mut libc::timespec) -> c_int {
    let in_module = IN_MODULE.try_with(Cell::get).unwrap_or(0) > 0;
    let simulated = if in_module {
        match clk {
            libc::CLOCK_REALTIME | libc::CLOCK_REALTIME_COARSE => {
                super::HOST.try_with(|h| h.try_borrow().ok().map(|h| super::clock_of(&h, h.cur)))
            }
            libc::CLOCK_MONOTONIC
            | libc::CLOCK_MONOTONIC_RAW
            | libc::CLOCK_MONOTONIC_COARSE
            | libc::CLOCK_BOOTTIME => {
                super::HOST.try_with(|h| h.try_borrow().ok().map(|h| h.mono_ms * 1000))
            }
            _ => Ok(None),
        }
        .ok()
        .flatten()
    } else {
        None
    };
    match (simulated, unsafe { tp.as_mut() }) {
        (Some(us), Some(t)) => {
            t.tv_sec = (us / 1_000_000) as libc::time_t;
            t.tv_nsec = ((us % 1_000_000) * 1000) as libc::c_long;
            0
        }
        // SAFETY: the system call with the caller's arguments.
        _ => unsafe { libc::syscall(libc::SYS_clock_gettime, clk, tp) as c_int },
    }
}

/// Keeps [`clock_gettime`] in every binary linked with this crate (an
/// unreferenced object of an rlib would be left out).
pub(super) fn linked() -> usize {
    clock_gettime as *const () as usize
}
