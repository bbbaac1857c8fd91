//! `DLOCK.SCAN cursor [MATCH pattern] [COUNT n] [OWNER owner] [KIND kind]
//! [CONTENDED]`: the lock keys of the current db, with SCAN's contract.
//!
//! It is Redis' own `SCAN cursor [MATCH pattern] COUNT n TYPE dlocklock`,
//! run through `RedisModule_Call`, with the keys it returns filtered here
//! by OWNER, KIND and CONTENDED. So the cursor is Redis' cursor (a full
//! iteration returns every lock present from its start to its end at least
//! once, may return a key twice, and survives rehashing), `COUNT` is the
//! same hint of work, and nothing is kept per lock or per iteration.
//! (`RedisModule_Scan` keeps its cursor in a module object that cannot be
//! handed to a client and resumed by a later call, so it cannot serve a
//! client-driven iteration.) Filters apply after the scan, as SCAN's own
//! MATCH does: a call may return few or no keys while the cursor is not 0.

use super::{args, command, Outcome, Refused, Reply};
use crate::error;
use crate::ffi::call::CallReply;
use crate::ffi::{self, Args, Ctx, RString};
use crate::services::commit::as_of;
use crate::storage;
use dlock_core::Kind;

command!(scan_cmd => scan);

/// The module type's name, as `TYPE` shows it (registered in lib.rs).
const TYPE_NAME: &[u8] = b"dlocklock";
/// SCAN's default COUNT.
const DEFAULT_COUNT: u64 = 10;
/// Largest COUNT accepted.
const MAX_COUNT: u64 = i32::MAX as u64;

/// The options of one call.
struct Scan<'a> {
    cursor: &'a [u8],
    pattern: Option<&'a [u8]>,
    count: u64,
    owner: Option<&'a [u8]>,
    kind: Option<Kind>,
    contended: bool,
}

fn kind(b: &[u8]) -> Result<Kind, Refused> {
    [
        Kind::Mutex,
        Kind::Rw,
        Kind::Fair,
        Kind::Semaphore,
        Kind::Latch,
    ]
    .into_iter()
    .find(|k| b.eq_ignore_ascii_case(k.name().as_bytes()))
    .ok_or_else(|| error::SCAN_KIND.into())
}

/// A SCAN cursor: a decimal unsigned 64-bit integer.
fn cursor(b: &[u8]) -> Result<&[u8], Refused> {
    let ok = !b.is_empty()
        && b.len() <= 20
        && b.iter().all(u8::is_ascii_digit)
        && std::str::from_utf8(b).is_ok_and(|s| s.parse::<u64>().is_ok());
    if ok {
        Ok(b)
    } else {
        Err(error::SCAN_CURSOR.into())
    }
}

fn parse(a: Args<'_>) -> Result<Scan<'_>, Refused> {
    if a.len() < 2 {
        return Err(Refused::Arity);
    }
    let mut s = Scan {
        cursor: cursor(a.get(1))?,
        pattern: None,
        count: DEFAULT_COUNT,
        owner: None,
        kind: None,
        contended: false,
    };
    let mut seen_count = false;
    let mut i = 2;
    while i < a.len() {
        let opt = a.get(i);
        let is = |name: &[u8]| opt.eq_ignore_ascii_case(name);
        if is(b"CONTENDED") {
            if s.contended {
                return Err(error::SCAN_TWICE.into());
            }
            s.contended = true;
            i += 1;
            continue;
        }
        if !(is(b"MATCH") || is(b"COUNT") || is(b"OWNER") || is(b"KIND")) {
            return Err(error::SCAN_OPTION.into());
        }
        if i + 1 >= a.len() {
            return Err(error::SCAN_VALUE.into());
        }
        let v = a.get(i + 1);
        let twice = if is(b"MATCH") {
            s.pattern.replace(v).is_some()
        } else if is(b"COUNT") {
            s.count = args::millis(v, 1, error::SCAN_COUNT)?;
            if s.count > MAX_COUNT {
                return Err(error::SCAN_COUNT.into());
            }
            std::mem::replace(&mut seen_count, true)
        } else if is(b"OWNER") {
            s.owner.replace(args::owner(v)?).is_some()
        } else {
            s.kind.replace(kind(v)?).is_some()
        };
        if twice {
            return Err(error::SCAN_TWICE.into());
        }
        i += 2;
    }
    Ok(s)
}

fn scan(ctx: Ctx<'_>, a: Args<'_>) -> Outcome {
    let s = parse(a)?;
    let count = s.count.to_string();
    let mut words: Vec<&[u8]> = vec![s.cursor];
    if let Some(p) = s.pattern {
        words.extend_from_slice(&[b"MATCH", p]);
    }
    words.extend_from_slice(&[b"COUNT", count.as_bytes(), b"TYPE", TYPE_NAME]);
    let strings: Vec<RString> = words
        .iter()
        .map(|w| RString::new(w))
        .collect::<Option<_>>()
        .ok_or(error::SCAN_FAILED)?;
    let reply = CallReply::call(ctx, c"SCAN", &strings).ok_or(error::SCAN_FAILED)?;
    let (next, keys) = reply.cursor_and_keys().ok_or(error::SCAN_FAILED)?;
    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(keys.len());
    let (now, _) = ffi::now();
    for key in keys {
        let Some(name) = RString::new(&key) else {
            continue;
        };
        let Ok(Some(g)) = storage::read(ctx, name.as_rstr()) else {
            continue;
        };
        // As of now, as INFO answers: a lock whose holds are all over is
        // not listed; OWNER and CONTENDED look at what is live.
        let stored = g.get().lock();
        let lock = &*as_of(ctx, &key, &stored, now);
        if lock.is_empty() {
            continue;
        }
        if s.kind.is_some_and(|k| k != lock.kind()) {
            continue;
        }
        if s.contended && lock.waiters().is_empty() {
            continue;
        }
        if let Some(o) = s.owner {
            let holds = lock.holders().iter().any(|h| *h.owner == *o);
            let waits = lock.waiters().iter().any(|w| *w.owner == *o);
            if !holds && !waits {
                continue;
            }
        }
        kept.push(key);
    }
    ctx.reply_array(2);
    ctx.reply_bulk(&next);
    ctx.reply_array(kept.len());
    for k in &kept {
        ctx.reply_bulk(k);
    }
    Ok(Reply::Done)
}
