//! [`DeadlockError`]: the cycle a `DEADLOCK cycle: …` reply names.

use std::fmt;

use crate::error::Error;

/// One step of a deadlock cycle: `owner` waits on `key` for `waits_for`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlockStep {
    /// The owner that waits.
    pub owner: Vec<u8>,
    /// The owner it waits for (the next step's owner).
    pub waits_for: Vec<u8>,
    /// The lock key it waits on.
    pub key: Vec<u8>,
}

/// A `DEADLOCK` reply: the server refused a wait that would have closed a wait-for
/// cycle across locks (nothing was queued; the owner's other holds stay — release
/// them and retry), or, with an empty [`cycle`](DeadlockError::cycle), a second
/// reader asked to upgrade to WRITE while another reader already waits to upgrade.
///
/// ```
/// use dlock_client::DeadlockError;
/// let e = DeadlockError::parse(
///     "DEADLOCK cycle: \"B\" waits for \"A\" on \"orders\"; \"A\" waits for \"B\" on \"stock\" (nothing was queued for this request; release a lock it holds and retry)",
/// ).unwrap();
/// assert_eq!(e.cycle.len(), 2);
/// assert_eq!(e.cycle[0].owner, b"B");
/// assert_eq!(e.cycle[0].waits_for, b"A");
/// assert_eq!(e.cycle[0].key, b"orders");
/// assert_eq!(e.keys(), [&b"orders"[..], &b"stock"[..]]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlockError {
    /// The cycle, starting with the owner whose request was refused; each step's
    /// owner waits for the next step's owner (the last for the first's).
    pub cycle: Vec<DeadlockStep>,
    /// The server's whole error text.
    pub message: String,
}

impl DeadlockError {
    /// Parses a `DEADLOCK …` error text (with or without a leading `-`). None when it
    /// is not a DEADLOCK error; an empty cycle for the two-readers error.
    pub fn parse(text: &str) -> Option<DeadlockError> {
        let t = text.strip_prefix('-').unwrap_or(text);
        let rest = t.strip_prefix("DEADLOCK")?;
        let cycle = match rest.trim_start().strip_prefix("cycle:") {
            Some(steps) => parse_steps(steps),
            None => Vec::new(),
        };
        Some(DeadlockError {
            cycle,
            message: t.to_string(),
        })
    }

    /// The keys of the cycle, in order.
    pub fn keys(&self) -> Vec<&[u8]> {
        self.cycle.iter().map(|s| &s.key[..]).collect()
    }

    /// The owners of the cycle, in order.
    pub fn owners(&self) -> Vec<&[u8]> {
        self.cycle.iter().map(|s| &s.owner[..]).collect()
    }
}

impl fmt::Display for DeadlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeadlockError {}

impl Error {
    /// The [`DeadlockError`] of a `DEADLOCK` reply (with the cycle it names), None
    /// for any other error.
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert!(e.deadlock().is_none());
    /// ```
    pub fn deadlock(&self) -> Option<DeadlockError> {
        match self {
            Error::Redis(e) if e.code() == Some("DEADLOCK") => {
                let detail = e.detail().unwrap_or("");
                DeadlockError::parse(&format!("DEADLOCK {detail}"))
            }
            _ => None,
        }
    }
}

/// `"o" waits for "p" on "k"; …` → steps. Stops at the first text that is not a
/// step (the closing remark).
fn parse_steps(s: &str) -> Vec<DeadlockStep> {
    let mut out = Vec::new();
    let mut s = s.as_bytes();
    loop {
        while let Some(r) = s.strip_prefix(b" ") {
            s = r;
        }
        let Some(owner) = quoted(&mut s) else { break };
        if !literal(&mut s, b" waits for ") {
            break;
        }
        let Some(waits_for) = quoted(&mut s) else {
            break;
        };
        if !literal(&mut s, b" on ") {
            break;
        }
        let Some(key) = quoted(&mut s) else { break };
        out.push(DeadlockStep {
            owner,
            waits_for,
            key,
        });
        if !literal(&mut s, b";") {
            break;
        }
    }
    out
}

fn literal(s: &mut &[u8], l: &[u8]) -> bool {
    match s.strip_prefix(l) {
        Some(r) => {
            *s = r;
            true
        }
        None => false,
    }
}

/// A double-quoted string with `\\ \" \n \r \t \xHH` escapes, taken off the
/// front of `s`.
fn quoted(s: &mut &[u8]) -> Option<Vec<u8>> {
    let mut it = s.strip_prefix(b"\"")?.iter();
    let mut out = Vec::new();
    loop {
        match *it.next()? {
            b'"' => break,
            b'\\' => out.push(match *it.next()? {
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'x' => {
                    let h = [*it.next()?, *it.next()?];
                    u8::from_str_radix(std::str::from_utf8(&h).ok()?, 16).ok()?
                }
                other => other,
            }),
            b => out.push(b),
        }
    }
    *s = it.as_slice();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_round_trip() {
        let e = DeadlockError::parse(
            "DEADLOCK cycle: \"a\\\"b\" waits for \"c\\\\d\" on \"k\\x3a\\r\\n\\xff\"; \"c\\\\d\" waits for \"a\\\"b\" on \"k2\" (nothing was queued for this request; release a lock it holds and retry)",
        )
        .unwrap();
        assert_eq!(
            e.cycle,
            vec![
                DeadlockStep {
                    owner: b"a\"b".to_vec(),
                    waits_for: b"c\\d".to_vec(),
                    key: b"k:\r\n\xff".to_vec()
                },
                DeadlockStep {
                    owner: b"c\\d".to_vec(),
                    waits_for: b"a\"b".to_vec(),
                    key: b"k2".to_vec()
                },
            ]
        );
    }

    #[test]
    fn the_two_readers_error_has_no_cycle() {
        let e = DeadlockError::parse("DEADLOCK another reader already waits to upgrade to WRITE; waiting too would deadlock (release READ instead)").unwrap();
        assert!(e.cycle.is_empty());
        assert!(DeadlockError::parse("ERR nope").is_none());
    }
}
