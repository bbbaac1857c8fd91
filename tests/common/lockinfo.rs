//! DLOCK.INFO helpers shared by the integration tests: the raw reply, the
//! reply with its time-dependent `ttl` fields stripped (for comparing two
//! servers or a server before and after a restart), and field accessors.
#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use redis::Value;

use super::{cmd_str, err_string};

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as u64
}

// ---------------------------------------------------------------------------
// DLOCK.INFO helpers
// ---------------------------------------------------------------------------

/// Whether `items` looks like a flat RESP2 map: even length, every key a bulk string.
pub fn is_flat_map(items: &[Value]) -> bool {
    items.len().is_multiple_of(2)
        && items
            .iter()
            .step_by(2)
            .all(|k| matches!(k, Value::BulkString(_)))
}

/// Whether an INFO field name is time-dependent: `ttl` (remaining ms),
/// `held_ms` and `waited_ms` (elapsed ms).
fn timed_field(k: &[u8]) -> bool {
    matches!(k, b"ttl" | b"held_ms" | b"waited_ms")
}

/// Removes every time-dependent field (`ttl`, `held_ms`, `waited_ms`) from
/// an INFO reply.
pub fn strip_ttl(v: Value) -> Value {
    match v {
        Value::Array(items) if !items.is_empty() && is_flat_map(&items) => {
            let mut out = Vec::with_capacity(items.len());
            let mut it = items.into_iter();
            while let (Some(k), Some(val)) = (it.next(), it.next()) {
                if matches!(&k, Value::BulkString(b) if timed_field(b)) {
                    continue;
                }
                out.push(k);
                out.push(strip_ttl(val));
            }
            Value::Array(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(strip_ttl).collect()),
        Value::Map(pairs) => Value::Map(
            pairs
                .into_iter()
                .filter(|(k, _)| !matches!(k, Value::BulkString(b) if timed_field(b)))
                .map(|(k, v)| (k, strip_ttl(v)))
                .collect(),
        ),
        other => other,
    }
}

/// The raw `DLOCK.INFO key` reply.
pub fn info_raw(con: &mut redis::Connection, key: &str) -> Value {
    cmd_str(con, &["DLOCK.INFO", key])
        .unwrap_or_else(|e| panic!("DLOCK.INFO {key}: {}", err_string(&e)))
}

/// `DLOCK.INFO key` with the `ttl` fields stripped, for comparisons.
pub fn info_norm(con: &mut redis::Connection, key: &str) -> Value {
    strip_ttl(info_raw(con, key))
}

/// Field `name` of a flat RESP2 map.
pub fn field<'a>(v: &'a Value, name: &str) -> &'a Value {
    let Value::Array(items) = v else {
        panic!("not a map: {v:?}")
    };
    items
        .chunks(2)
        .find(|kv| matches!(&kv[0], Value::BulkString(b) if b.as_slice() == name.as_bytes()))
        .map(|kv| &kv[1])
        .unwrap_or_else(|| panic!("no field {name} in {v:?}"))
}

pub fn as_int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("not an integer: {other:?}"),
    }
}

pub fn as_bytes(v: &Value) -> &[u8] {
    match v {
        Value::BulkString(b) => b,
        other => panic!("not a bulk string: {other:?}"),
    }
}

pub fn as_array(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) => a,
        other => panic!("not an array: {other:?}"),
    }
}

pub fn holders(info: &Value) -> &[Value] {
    as_array(field(info, "holders"))
}

pub fn waiters(info: &Value) -> &[Value] {
    as_array(field(info, "waiters"))
}
