//! Go-style durations (upstream `time.ParseDuration` / `time.Duration.String()` and the
//! `metav1.Duration` wire form). This module owns parsing strings such as `1m30s`, `1.5h`,
//! `300ms` or `0` into [`std::time::Duration`], formatting a duration back exactly like Go
//! prints it (`1m30s`, `2h45m0s`, `300ms`, `0s`), clap value parsing for duration flags, and
//! serde helpers (`#[serde(with = "node_common::duration::serde_go")]`) for YAML/JSON config fields.

use std::time::Duration;

/// Why a duration string could not be parsed (wording follows Go's `time: invalid duration`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Empty or malformed input.
    #[error("time: invalid duration {0:?}")]
    Invalid(String),
    /// A negative duration other than zero, which `std::time::Duration` cannot hold.
    #[error("time: invalid duration {0:?} (must not be negative)")]
    Negative(String),
    /// A number without a unit (Go only allows a bare `0`).
    #[error("time: missing unit in duration {0:?}")]
    MissingUnit(String),
    /// An unknown unit such as `1d`.
    #[error("time: unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole input.
        input: String,
    },
    /// The value does not fit (Go: > ~290 years).
    #[error("time: invalid duration {0:?} (overflow: too long)")]
    Overflow(String),
}

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 3600 * 1_000_000_000,
        _ => return None,
    })
}

/// Parse a Go duration string (`[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`). Negative durations are
/// rejected because `std::time::Duration` cannot hold them.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(input.to_string());
    let mut s = input;
    // Go accepts a sign; a negative zero ("-0", "-0s") is zero, anything else negative cannot be
    // represented.
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    } else if let Some(rest) = s.strip_prefix('-') {
        s = rest;
        negative = true;
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    // Go's maximum duration is i64::MAX nanoseconds.
    const MAX_NANOS: u128 = i64::MAX as u128;
    let mut total: u128 = 0;
    while !s.is_empty() {
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, rest) = s.split_at(int_len);
        let (frac_part, rest) = match rest.strip_prefix('.') {
            Some(r) => {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                r.split_at(n)
            }
            None => ("", rest),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        let (unit, rest) = rest.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(input.to_string()));
        }
        let scale = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit {
            unit: unit.to_string(),
            input: input.to_string(),
        })?;
        let overflow = || DurationError::Overflow(input.to_string());
        let int_val: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| overflow())?
        };
        let mut value = int_val.checked_mul(scale).ok_or_else(overflow)?;
        // Fraction: accumulate digits while they still matter at nanosecond precision.
        let mut frac_scale = scale;
        for d in frac_part.bytes() {
            frac_scale /= 10;
            if frac_scale == 0 {
                break;
            }
            value += u128::from(d - b'0') * frac_scale;
        }
        total = total.checked_add(value).ok_or_else(overflow)?;
        if total > MAX_NANOS {
            return Err(overflow());
        }
        s = rest;
    }
    if negative && total > 0 {
        return Err(DurationError::Negative(input.to_string()));
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| invalid())?;
    // Remainder of a division by 1e9 always fits in u32.
    let nanos = (total % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

/// Write `v` (an integer scaled by 10^prec) as `int[.frac]` with trailing zeros trimmed.
fn fmt_frac(out: &mut String, v: u128, prec: u32) {
    let pow = 10u128.pow(prec);
    let int = v / pow;
    let frac = v % pow;
    out.push_str(&int.to_string());
    if frac != 0 {
        let mut digits = format!("{frac:0width$}", width = prec as usize);
        while digits.ends_with('0') {
            digits.pop();
        }
        out.push('.');
        out.push_str(&digits);
    }
}

/// Format like Go's `time.Duration.String()`: `0s`, `300ms`, `1.5µs`, `20s`, `1m30s`, `2h45m0s`.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    let mut out = String::new();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        let (prec, unit) = if nanos < 1_000 {
            (0, "ns")
        } else if nanos < 1_000_000 {
            (3, "µs")
        } else {
            (6, "ms")
        };
        fmt_frac(&mut out, nanos, prec);
        out.push_str(unit);
        return out;
    }
    let hours = nanos / 3_600_000_000_000;
    let rem = nanos % 3_600_000_000_000;
    let minutes = rem / 60_000_000_000;
    let sec_nanos = rem % 60_000_000_000;
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    fmt_frac(&mut out, sec_nanos, 9);
    out.push('s');
    out
}

/// clap `value_parser` adapter for duration flags.
pub fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// serde helpers for a `Duration` field written as a Go duration string.
pub mod serde_go {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Serialize as Go's `Duration.String()`.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    /// Deserialize from a Go duration string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

/// serde helpers for an `Option<Duration>` field written as a Go duration string.
pub mod serde_go_opt {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Serialize `Some` as Go's `Duration.String()`, `None` as null.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&super::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    /// Deserialize an optional Go duration string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| super::parse_duration(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn parses_go_syntax() {
        let cases = [
            ("0", Duration::ZERO),
            ("-0", Duration::ZERO),
            ("1s", ms(1000)),
            ("20s", ms(20_000)),
            ("1m", ms(60_000)),
            ("1m30s", ms(90_000)),
            ("1.5h", ms(5_400_000)),
            ("300ms", ms(300)),
            ("2h45m", ms(9_900_000)),
            ("+5s", ms(5000)),
            (".5s", ms(500)),
            ("1.s", ms(1000)),
            ("10us", Duration::from_micros(10)),
            ("10µs", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            ("1h1m1s1ms", ms(3_661_001)),
            ("0.000000001s", Duration::from_nanos(1)),
        ];
        for (s, want) in cases {
            assert_eq!(parse_duration(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(parse_duration(""), Err(DurationError::Invalid(_))));
        assert!(matches!(
            parse_duration("1"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("-1s"),
            Err(DurationError::Negative(_))
        ));
        assert_eq!(parse_duration("-0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("-0"), Ok(Duration::ZERO));
        assert!(matches!(
            parse_duration("-"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("."),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("s"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("3d"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("3000000h"),
            Err(DurationError::Overflow(_))
        ));
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (ms(1000), "1s"),
            (ms(20_000), "20s"),
            (ms(60_000), "1m0s"),
            (ms(90_000), "1m30s"),
            (ms(5_400_000), "1h30m0s"),
            (ms(300), "300ms"),
            (ms(1500), "1.5s"),
            (ms(9_900_000), "2h45m0s"),
            (Duration::from_nanos(1500), "1.5µs"),
            (Duration::from_nanos(12), "12ns"),
            (Duration::from_micros(2500), "2.5ms"),
        ];
        for (d, want) in cases {
            assert_eq!(format_duration(d), want);
            assert_eq!(parse_duration(want), Ok(d), "round trip {want}");
        }
    }

    #[test]
    fn serde_round_trip() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct S {
            #[serde(with = "serde_go")]
            d: Duration,
        }
        let s: S = serde_json::from_str(r#"{"d":"1m30s"}"#).expect("parse");
        assert_eq!(s.d, ms(90_000));
        assert_eq!(serde_json::to_string(&s).expect("ser"), r#"{"d":"1m30s"}"#);
        assert!(serde_json::from_str::<S>(r#"{"d":"nope"}"#).is_err());
    }
}
