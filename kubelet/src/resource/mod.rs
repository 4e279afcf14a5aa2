//! Exact resource quantities (upstream `k8s.io/apimachinery/pkg/api/resource.Quantity`).
//!
//! A [`Quantity`] is parsed with upstream's grammar and parser rules
//! (`parseQuantityString`, `ParseQuantity`):
//!
//! ```text
//! <quantity>        ::= <signedNumber><suffix>
//! <signedNumber>    ::= <number> | <sign><number>       <sign> ::= "+" | "-"
//! <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
//! <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
//! <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
//! <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>   (an integer)
//! ```
//!
//! and kept exactly, as an integer count of nano-units (upstream rounds every parsed value up,
//! away from zero, to the nano: `1.5n` is `2n`, `-0.1n` is `-1n`). Binary-suffixed values are
//! capped at 2^63-1 units like upstream's. [`Quantity::scaled_value`] (`ScaledValue`),
//! [`Quantity::milli_value`] (`MilliValue`) and [`Quantity::value`] (`Value`) divide exactly and
//! round away from zero, as upstream's int64 amounts do: `700m` is 700 millicores and 1 core,
//! `129e6` is 129000000 bytes. Nothing here uses floating point, and no input panics: numbers
//! too large for the representation saturate, and the checked accessors say `None` where
//! upstream would silently overflow.
//!
//! Kept from upstream on purpose: a number without digits (`m`, `.`, `-`, `Ki`) is zero when
//! upstream's fast path parses it (`e-10`, `Pi`, `Ei` are errors, as there), and a decimal
//! exponent is truncated to 32 bits (`int32(parsed)`). Not kept: upstream's arbitrary-precision
//! fallback rounds negative values toward +∞ in `ScaledValue` (so `-0.1n` has `Value() == 1`);
//! here negative values always round away from zero.
//!
//! This file is a little over 800 lines on purpose: the parser, its exact integer arithmetic
//! and the tests pinning them to upstream's values (about 300 lines, mostly tables) are one
//! concept. The kubelet's admission fit check on top of quantities is in `fit.rs`.

mod fit;

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

pub use fit::{
    InsufficientResource, Resources, allocatable, fit_pod_count, fit_requests, parse_reservation,
    pod_requests,
};

/// Upstream `resource.Scale`: a power of ten.
pub type Scale = i32;
/// 10^-9.
pub const NANO: Scale = -9;
/// 10^-6.
pub const MICRO: Scale = -6;
/// 10^-3.
pub const MILLI: Scale = -3;
/// 10^0.
pub const ONE: Scale = 0;
/// 10^3.
pub const KILO: Scale = 3;
/// 10^6.
pub const MEGA: Scale = 6;
/// 10^9.
pub const GIGA: Scale = 9;
/// 10^12.
pub const TERA: Scale = 12;
/// 10^15.
pub const PETA: Scale = 15;
/// 10^18.
pub const EXA: Scale = 18;

/// Why a quantity did not parse (upstream `ErrFormatWrong`, `ErrSuffix`, `ErrNumeric`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Upstream `ErrFormatWrong`.
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    FormatWrong,
    /// Upstream `ErrSuffix`.
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// Upstream `ErrNumeric`.
    #[error("unable to parse numeric part of quantity")]
    Numeric,
}

/// An exact quantity: `nanos` × 10^-9 units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Quantity {
    nanos: i128,
    /// The value did not fit `nanos` (more than ~1.7e29 units): `nanos` is ±`i128::MAX` and
    /// every checked accessor answers `None`.
    saturated: bool,
}

/// 2^63-1 units in nanos: upstream's cap (`maxAllowed`) for binary-suffixed values.
const MAX_ALLOWED_NANOS: i128 = (i64::MAX as i128) * 1_000_000_000;

/// 10^e for 0 <= e <= 38.
fn pow10(e: u32) -> Option<i128> {
    10i128.checked_pow(e)
}

/// The suffix, interpreted (upstream `suffixHandler.interpret`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suffix {
    /// `10^exp`; `exponent` says it was written as `e<n>`/`E<n>`.
    Decimal { exp: i32 },
    /// `2^exp`.
    Binary { exp: u32 },
}

fn interpret_suffix(s: &str) -> Option<Suffix> {
    let dec = match s {
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "" => Some(0),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(exp) = dec {
        return Some(Suffix::Decimal { exp });
    }
    let bin = match s {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(exp) = bin {
        return Some(Suffix::Binary { exp });
    }
    let rest = s.strip_prefix(['e', 'E'])?;
    // Go's strconv.ParseInt(_, 10, 64): an optional sign and decimal digits.
    let parsed: i64 = rest.parse().ok()?;
    // Upstream keeps `int32(parsed)`: the exponent is truncated to 32 bits.
    Some(Suffix::Decimal { exp: parsed as i32 })
}

/// The parts of a quantity string (upstream `parseQuantityString`): sign, integer digits
/// (leading zeros stripped), fractional digits, whether the number has any digit, suffix.
struct Parts<'a> {
    negative: bool,
    has_digit: bool,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

fn split(s: &str) -> Result<Parts<'_>, QuantityError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut negative = false;
    match b.first() {
        Some(b'-') => {
            negative = true;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    let sign_end = pos;
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    let num_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = &s[num_start..pos];
    let mut denom = "";
    if pos < end && b[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[start..pos];
    }
    let has_digit = s[sign_end..pos].bytes().any(|c| c.is_ascii_digit());
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(QuantityError::FormatWrong);
    }
    Ok(Parts {
        negative,
        has_digit,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// Multiplies the decimal digits `d` (most significant first, values 0-9) by 2^exp (exp <= 60).
fn mul_pow2(d: &[u8], exp: u32) -> Vec<u8> {
    let m = 1u128 << exp;
    let mut out = Vec::with_capacity(d.len() + 20);
    let mut carry = 0u128;
    for &digit in d.iter().rev() {
        let v = u128::from(digit) * m + carry;
        out.push((v % 10) as u8);
        carry = v / 10;
    }
    while carry > 0 {
        out.push((carry % 10) as u8);
        carry /= 10;
    }
    out.reverse();
    out
}

/// `digits` (most significant first) as an integer, `None` past `i128`.
fn to_i128(digits: &[u8]) -> Option<i128> {
    digits.iter().try_fold(0i128, |acc, d| {
        acc.checked_mul(10)?.checked_add(i128::from(*d))
    })
}

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        saturated: false,
    };

    /// Upstream `ParseQuantity`.
    pub fn parse(s: &str) -> Result<Self, QuantityError> {
        if s.is_empty() {
            return Err(QuantityError::FormatWrong);
        }
        let p = split(s)?;
        let suffix = interpret_suffix(p.suffix).ok_or(QuantityError::Suffix)?;
        if p.num.is_empty() && p.denom.is_empty() {
            // Zero. Written without any digit (`m`, `.`), upstream's fast path makes it zero
            // while its arbitrary-precision path (a decimal exponent below -9, or a binary
            // suffix of more than 13 digits' precision: `Pi`, `Ei`) cannot parse it.
            let fast = match suffix {
                Suffix::Decimal { exp } => exp >= NANO,
                // Upstream's precision: 15 - len("0") - exp*3/10 - 1 >= 0.
                Suffix::Binary { exp } => 13 - (exp as i32) * 3 / 10 >= 0,
            };
            return if fast || p.has_digit {
                Ok(Self::ZERO)
            } else {
                Err(QuantityError::Numeric)
            };
        }
        // All digits, and the power of ten of the last one.
        let mut digits: Vec<u8> = p
            .num
            .bytes()
            .chain(p.denom.bytes())
            .map(|c| c - b'0')
            .collect();
        let (exp10, exp2) = match suffix {
            Suffix::Decimal { exp } => (i64::from(exp), 0),
            Suffix::Binary { exp } => (0, exp),
        };
        let last = exp10 - p.denom.len() as i64;
        if exp2 > 0 {
            digits = mul_pow2(&digits, exp2);
        }
        let first_nonzero = digits.iter().position(|d| *d != 0);
        let Some(first_nonzero) = first_nonzero else {
            return Ok(Self::ZERO);
        };
        let digits = &digits[first_nonzero..];
        // Nanos: digits × 10^(last + 9), rounded up away from zero.
        let shift = last + 9;
        let magnitude = if shift >= 0 {
            if digits.len() as i64 + shift > 39 {
                None
            } else {
                to_i128(digits).and_then(|v| v.checked_mul(pow10(shift as u32)?))
            }
        } else {
            let drop = (-shift) as u64;
            if drop >= digits.len() as u64 {
                Some(1)
            } else {
                let keep = digits.len() - drop as usize;
                let fraction = digits[keep..].iter().any(|d| *d != 0);
                to_i128(&digits[..keep]).and_then(|v| v.checked_add(i128::from(fraction)))
            }
        };
        let (mut nanos, saturated) = match magnitude {
            Some(v) => (v, false),
            None => (i128::MAX, true),
        };
        let mut saturated = saturated;
        if exp2 > 0 && nanos > MAX_ALLOWED_NANOS {
            nanos = MAX_ALLOWED_NANOS;
            saturated = false;
        }
        Ok(Quantity {
            nanos: if p.negative { -nanos } else { nanos },
            saturated,
        })
    }

    /// A quantity of `value` × 10^`scale` units (upstream `NewScaledQuantity`); `None` when it
    /// does not fit.
    pub fn from_scaled(value: i64, scale: Scale) -> Option<Self> {
        let shift = scale.checked_sub(NANO)?;
        let nanos = if shift >= 0 {
            i128::from(value).checked_mul(pow10(u32::try_from(shift).ok()?)?)?
        } else {
            // Below a nano: upstream rounds up away from zero.
            let d = pow10(u32::try_from(-shift).ok()?)?;
            let v = i128::from(value);
            let q = v / d;
            if v % d != 0 { q + v.signum() } else { q }
        };
        Some(Quantity {
            nanos,
            saturated: false,
        })
    }

    /// Upstream `NewMilliQuantity`.
    pub fn from_milli(milli: i64) -> Self {
        Quantity {
            nanos: i128::from(milli) * 1_000_000,
            saturated: false,
        }
    }

    /// Upstream `NewQuantity`.
    pub fn from_value(value: i64) -> Self {
        Quantity {
            nanos: i128::from(value) * 1_000_000_000,
            saturated: false,
        }
    }

    /// ⌈self / 10^scale⌉ away from zero (upstream `ScaledValue`), `None` when it does not fit
    /// an `i64` (upstream returns a wrapped value then).
    pub fn checked_scaled_value(&self, scale: Scale) -> Option<i64> {
        if self.saturated {
            return None;
        }
        if self.nanos == 0 {
            return Some(0);
        }
        let shift = i64::from(scale) - i64::from(NANO);
        let v = if shift >= 0 {
            match u32::try_from(shift).ok().and_then(pow10) {
                Some(d) => {
                    let q = self.nanos / d;
                    if self.nanos % d != 0 {
                        q + self.nanos.signum()
                    } else {
                        q
                    }
                }
                // |nanos| < 10^39 <= d: any non-zero value is less than one unit of the scale.
                None => self.nanos.signum(),
            }
        } else {
            let m = u32::try_from(-shift).ok().and_then(pow10)?;
            self.nanos.checked_mul(m)?
        };
        i64::try_from(v).ok()
    }

    /// [`Quantity::checked_scaled_value`], saturating at `i64::MIN`/`i64::MAX`.
    pub fn scaled_value(&self, scale: Scale) -> i64 {
        self.checked_scaled_value(scale)
            .unwrap_or(match self.nanos.signum() {
                -1 => i64::MIN,
                _ => i64::MAX,
            })
    }

    /// Upstream `Value`: whole units, rounded up away from zero (saturating).
    pub fn value(&self) -> i64 {
        self.scaled_value(ONE)
    }

    /// Upstream `MilliValue`: thousandths, rounded up away from zero (saturating).
    pub fn milli_value(&self) -> i64 {
        self.scaled_value(MILLI)
    }

    /// Upstream `IsZero`.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// Upstream `Sign`: -1, 0 or 1.
    pub fn sign(&self) -> i32 {
        self.nanos.signum() as i32
    }

    /// The exact value in nano-units (saturated values are ±`i128::MAX`).
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// Upstream `Add`, saturating.
    pub fn add(&self, other: &Quantity) -> Quantity {
        match self.nanos.checked_add(other.nanos) {
            Some(nanos) => Quantity {
                nanos,
                saturated: self.saturated || other.saturated,
            },
            None => Quantity {
                nanos: if self.nanos > 0 {
                    i128::MAX
                } else {
                    -i128::MAX
                },
                saturated: true,
            },
        }
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Upstream `Cmp`: exact.
impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

/// The value in the largest decimal unit that keeps it whole: `700m`, `1500m`, `2`, `129M`,
/// `1n` (not upstream's canonical string, which also picks binary suffixes).
impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        const UNITS: [(i128, &str); 10] = [
            (1_000_000_000_000_000_000_000_000_000, "E"),
            (1_000_000_000_000_000_000_000_000, "P"),
            (1_000_000_000_000_000_000_000, "T"),
            (1_000_000_000_000_000_000, "G"),
            (1_000_000_000_000_000, "M"),
            (1_000_000_000_000, "k"),
            (1_000_000_000, ""),
            (1_000_000, "m"),
            (1_000, "u"),
            (1, "n"),
        ];
        for (d, s) in UNITS {
            if self.nanos % d == 0 {
                return write!(f, "{}{s}", self.nanos / d);
            }
        }
        write!(f, "{}n", self.nanos)
    }
}

/// Parses a `k8s_openapi` quantity.
impl TryFrom<&k8s_openapi::apimachinery::pkg::api::resource::Quantity> for Quantity {
    type Error = QuantityError;
    fn try_from(
        q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    ) -> Result<Self, Self::Error> {
        Quantity::parse(&q.0)
    }
}

/// Parse a quantity into a value scaled by `scale` (1000 for milli-units, 1 for bytes),
/// exactly and rounded up away from zero like upstream's `Quantity.MilliValue`/`Value`
/// (see [`crate::resource::Quantity`]): `700m` at scale 1000 is 700, `0.1` is 100, `129e6` at
/// scale 1 is 129000000. A power-of-ten `scale` (10^-18 to 10^18) is `ScaledValue`; any other
/// is the exact value times `scale`, rounded up. Values past `i64` saturate. `None` when
/// malformed (surrounding white space is tolerated).
pub fn parse_quantity_scaled(q: &str, scale: f64) -> Option<i64> {
    let q = Quantity::parse(q.trim()).ok()?;
    Some(scale_quantity(&q, scale))
}

/// `q` × `scale`, rounded up away from zero (see [`parse_quantity_scaled`]).
pub fn scale_quantity(q: &Quantity, scale: f64) -> i64 {
    let power = (-18..=18).find(|e: &i32| 10f64.powi(*e) == scale);
    if let Some(e) = power {
        return q.scaled_value(-e);
    }
    // Not a power of ten (no caller uses one): exact when `scale` is a whole number.
    if scale.is_finite() && scale.fract() == 0.0 && scale.abs() < 9e15 {
        let s = scale as i128;
        let n = q.nanos().saturating_mul(s);
        let (d, r) = (n / 1_000_000_000, n % 1_000_000_000);
        let v = if r != 0 { d + n.signum() } else { d };
        return i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX });
    }
    let v = (q.nanos() as f64) * scale / 1e9;
    (if v < 0.0 { v.floor() } else { v.ceil() }) as i64
}

#[cfg(test)]
mod tests;
