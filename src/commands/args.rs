//! Argument parsing. Everything is validated before any key is opened, so an
//! error reply never leaves a trace.

use crate::error::{self, Msg};
use crate::ffi::Args;
use dlock_core::{Mode, MAX_MS, MAX_OWNER_LEN, MAX_TOKEN};

pub fn owner(b: &[u8]) -> Result<&[u8], Msg> {
    if b.is_empty() {
        Err(error::OWNER_EMPTY)
    } else if b.len() > MAX_OWNER_LEN {
        Err(error::OWNER_LONG)
    } else {
        Ok(b)
    }
}

/// A decimal integer in `min..=MAX_MS`.
pub fn millis(b: &[u8], min: u64, err: Msg) -> Result<u64, Msg> {
    if b.is_empty() || b.len() > 20 || !b.iter().all(u8::is_ascii_digit) {
        return Err(err);
    }
    let mut v: u64 = 0;
    for &d in b {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or(err)?;
    }
    if v < min || v > MAX_MS {
        return Err(err);
    }
    Ok(v)
}

/// `READ` or `WRITE`, any case.
pub fn mode(b: &[u8]) -> Result<Mode, Msg> {
    if b.eq_ignore_ascii_case(b"READ") {
        Ok(Mode::Read)
    } else if b.eq_ignore_ascii_case(b"WRITE") {
        Ok(Mode::Write)
    } else {
        Err(error::MODE_BAD)
    }
}

/// A fencing token: a decimal integer in `1..=MAX_TOKEN`.
pub fn token(b: &[u8]) -> Result<u64, Msg> {
    if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
        return Err(error::TOKEN_RANGE);
    }
    let mut v: u64 = 0;
    for &d in b {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or(error::TOKEN_RANGE)?;
    }
    if v == 0 || v > MAX_TOKEN {
        return Err(error::TOKEN_RANGE);
    }
    Ok(v)
}

/// `[PX ms] [WAIT ms] [BIND] [LOCKDELAY ms]` in any order, each at most once.
/// `allow_wait` false for RENEW (which takes only PX).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub px: Option<u64>,
    pub wait: Option<u64>,
    pub bind: bool,
    pub lock_delay: Option<u64>,
}

pub fn options(args: Args<'_>, from: usize, allow_wait: bool) -> Result<Options, Msg> {
    let mut o = Options::default();
    let mut i = from;
    let unknown = if allow_wait {
        error::ACQUIRE_OPTION
    } else {
        error::RENEW_OPTION
    };
    while i < args.len() {
        let name = args.get(i);
        let has_value = i + 1 < args.len();
        if allow_wait && name.eq_ignore_ascii_case(b"BIND") {
            if o.bind {
                return Err(error::BIND_TWICE);
            }
            o.bind = true;
            i += 1;
            continue;
        }
        if name.eq_ignore_ascii_case(b"PX") {
            if o.px.is_some() {
                return Err(error::PX_TWICE);
            }
            if !has_value {
                return Err(error::PX_VALUE);
            }
            o.px = Some(millis(args.get(i + 1), 1, error::PX_RANGE)?);
        } else if allow_wait && name.eq_ignore_ascii_case(b"LOCKDELAY") {
            if o.lock_delay.is_some() {
                return Err(error::LOCKDELAY_TWICE);
            }
            if !has_value {
                return Err(error::LOCKDELAY_VALUE);
            }
            o.lock_delay = Some(millis(args.get(i + 1), 0, error::LOCKDELAY_RANGE)?);
        } else if allow_wait && name.eq_ignore_ascii_case(b"WAIT") {
            if o.wait.is_some() {
                return Err(error::WAIT_TWICE);
            }
            if !has_value {
                return Err(error::WAIT_VALUE);
            }
            o.wait = Some(millis(args.get(i + 1), 0, error::WAIT_RANGE)?);
        } else {
            return Err(unknown);
        }
        i += 2;
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_cases() {
        let e = error::PX_RANGE;
        let cases: &[(&[u8], u64, Result<u64, Msg>)] = &[
            (b"1", 1, Ok(1)),
            (b"0", 1, Err(e)),
            (b"0", 0, Ok(0)),
            (b"1099511627776", 0, Ok(MAX_MS)),
            (b"1099511627777", 0, Err(e)),
            (b"-1", 0, Err(e)),
            (b"+1", 0, Err(e)),
            (b"1.5", 0, Err(e)),
            (b"", 0, Err(e)),
            (b" 1", 0, Err(e)),
            (b"99999999999999999999999", 0, Err(e)),
            (b"18446744073709551616", 0, Err(e)),
            (b"abc", 0, Err(e)),
        ];
        for (input, min, want) in cases {
            assert_eq!(millis(input, *min, e), *want, "{:?}", input);
        }
    }

    proptest::proptest! {
        /// Any bytes: a number in range exactly when they are its decimal
        /// digits, else the error. Never a panic.
        #[test]
        fn millis_accepts_exactly_decimal_numbers_in_range(
            b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
            v in proptest::prelude::any::<u64>(),
        ) {
            let e = error::WAIT_RANGE;
            let got = millis(&b, 0, e);
            let decimal = !b.is_empty() && b.len() <= 20 && b.iter().all(u8::is_ascii_digit);
            let want = std::str::from_utf8(&b)
                .ok()
                .filter(|_| decimal)
                .and_then(|t| t.parse::<u64>().ok())
                .filter(|n| *n <= MAX_MS);
            proptest::prop_assert_eq!(got.ok(), want);
            let text = v.to_string();
            proptest::prop_assert_eq!(millis(text.as_bytes(), 1, e).ok(), Some(v).filter(|n| (1..=MAX_MS).contains(n)));
        }

        /// Only READ and WRITE, in any case, are modes.
        #[test]
        fn mode_accepts_only_read_and_write(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8)) {
            let is_mode = b.eq_ignore_ascii_case(b"READ") || b.eq_ignore_ascii_case(b"WRITE");
            proptest::prop_assert_eq!(mode(&b).is_ok(), is_mode);
        }
    }

    #[test]
    fn token_cases() {
        let e = Err(error::TOKEN_RANGE);
        let cases: &[(&[u8], Result<u64, Msg>)] = &[
            (b"1", Ok(1)),
            (b"9223372036854775807", Ok(MAX_TOKEN)),
            (b"9223372036854775808", e),
            (b"18446744073709551616", e),
            (b"0", e),
            (b"-1", e),
            (b"+1", e),
            (b"", e),
            (b"1 ", e),
            (b"0x10", e),
        ];
        for (input, want) in cases {
            assert_eq!(token(input), *want, "{:?}", input);
        }
    }

    #[test]
    fn owner_and_mode() {
        assert_eq!(owner(b""), Err(error::OWNER_EMPTY));
        assert_eq!(owner(&[0u8; 513]), Err(error::OWNER_LONG));
        assert_eq!(owner(&[0u8; 512]).map(<[u8]>::len), Ok(512));
        assert_eq!(mode(b"read"), Ok(Mode::Read));
        assert_eq!(mode(b"WrItE"), Ok(Mode::Write));
        assert_eq!(mode(b"READX"), Err(error::MODE_BAD));
    }
}
