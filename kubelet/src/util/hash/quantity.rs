//! `resource.Quantity` as the Go apimachinery holds it (`k8s.io/apimachinery/pkg/api/resource`),
//! for the two places its representation shows: the canonical string `json.Marshal` writes
//! (a container's hash is taken over its JSON) and the unexported fields `DeepHashObject`
//! prints (a static pod's UID is taken over the printed pod).
//!
//! [`GoQuantity::parse`] follows upstream `ParseQuantity`: its fast path keeps the value as an
//! `int64Amount` (`value` × 10^`scale`) and caches the input string `s` when it is already
//! canonical; [`GoQuantity::round_up_milli`] is `RoundUp(-3)` (the v1 `SetDefaults_ResourceList`);
//! [`GoQuantity::canonical`] is `CanonicalizeBytes`. Values the fast path refuses (a binary
//! suffix with a fraction such as `1.5Gi`, more than 18 digits, a scale below nano) are held
//! by upstream as an `inf.Dec`; here they are [`Repr::Dec`], parsed exactly for the canonical
//! string while the printed form is a deterministic approximation (see [`super::spew`]).

use std::fmt::Write as _;

/// Upstream `resource.Format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `e3` style.
    DecimalExponent,
    /// `Ki`, `Mi`… style.
    BinarySI,
    /// `m`, `k`, `M`… style.
    DecimalSI,
}

impl Format {
    /// The Go constant's string value.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::DecimalExponent => "DecimalExponent",
            Format::BinarySI => "BinarySI",
            Format::DecimalSI => "DecimalSI",
        }
    }
}

/// How the amount is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repr {
    /// `int64Amount{value, scale}`: value × 10^scale.
    Int {
        /// Mantissa.
        value: i64,
        /// Decimal exponent.
        scale: i32,
    },
    /// `inf.Dec`: unscaled × 10^-scale (upstream's `inf.Dec` scale is negated).
    Dec {
        /// Unscaled value (may exceed 64 bits).
        unscaled: i128,
        /// inf.Dec scale (value = unscaled × 10^-scale).
        scale: i32,
    },
}

/// A parsed quantity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoQuantity {
    /// The amount.
    pub repr: Repr,
    /// Upstream's cached string (`s`): the input when it was canonical, else empty.
    pub s: String,
    /// The format the suffix chose.
    pub format: Format,
}

/// Why a quantity did not parse (upstream `ErrFormatWrong`, `ErrSuffix`, `ErrNumeric`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)]
pub struct QuantityError;

struct Parts<'a> {
    positive: bool,
    value: &'a str,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

/// Upstream `parseQuantityString`.
fn split(s: &str) -> Result<Parts<'_>, QuantityError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    if let Some(&c) = b.first() {
        if c == b'-' {
            positive = false;
            pos += 1;
        } else if c == b'+' {
            pos += 1;
        }
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok(Parts {
            positive,
            value: "0",
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        return Ok(Parts {
            positive,
            value: s,
            num: &s[start..],
            denom: "",
            suffix: "",
        });
    }
    let num = if pos == start { "0" } else { &s[start..pos] };
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let ds = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[ds..pos];
        if pos >= end {
            return Ok(Parts {
                positive,
                value: s,
                num,
                denom,
                suffix: "",
            });
        }
    }
    let value = &s[..pos];
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
        return Err(QuantityError);
    }
    Ok(Parts {
        positive,
        value,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// Upstream `suffixHandler.interpret`: (base, exponent, format).
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let dec = |e| Some((10, e, Format::DecimalSI));
    let bin = |e| Some((2, e, Format::BinarySI));
    match suffix {
        "n" => dec(-9),
        "u" => dec(-6),
        "m" => dec(-3),
        "" => dec(0),
        "k" => dec(3),
        "M" => dec(6),
        "G" => dec(9),
        "T" => dec(12),
        "P" => dec(15),
        "E" => dec(18),
        "Ki" => bin(10),
        "Mi" => bin(20),
        "Gi" => bin(30),
        "Ti" => bin(40),
        "Pi" => bin(50),
        "Ei" => bin(60),
        _ if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) => {
            let e: i64 = suffix[1..].parse().ok()?;
            Some((10, i32::try_from(e).ok()?, Format::DecimalExponent))
        }
        _ => None,
    }
}

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

impl GoQuantity {
    /// Upstream `ParseQuantity` (after `UnmarshalJSON` trimmed quotes and spaces).
    pub fn parse(str: &str) -> Result<GoQuantity, QuantityError> {
        if str.is_empty() {
            return Err(QuantityError);
        }
        if str == "0" {
            return Ok(GoQuantity {
                repr: Repr::Int { value: 0, scale: 0 },
                s: str.into(),
                format: Format::DecimalSI,
            });
        }
        let p = split(str)?;
        let (base, exponent, format) = interpret(p.suffix).ok_or(QuantityError)?;
        let mut scale: i32 = 0;
        let mut mantissa: i64 = 1;
        let precision: i32 = match format {
            Format::DecimalExponent | Format::DecimalSI => {
                scale = exponent;
                18 - (p.num.len() + p.denom.len()) as i32
            }
            Format::BinarySI => {
                if exponent >= 0 && p.denom.is_empty() {
                    mantissa <<= exponent;
                    15 - p.num.len() as i32 - ((exponent as f32) * 3.0 / 10.0) as i32 - 1
                } else {
                    -1
                }
            }
        };
        if precision >= 0 {
            scale -= p.denom.len() as i32;
            if scale >= -9 {
                let shifted = format!("{}{}", p.num, p.denom);
                let value: i64 = shifted.parse().map_err(|_| QuantityError)?;
                if let Some(mut result) = value.checked_mul(mantissa) {
                    if !p.positive {
                        result = -result;
                    }
                    let canonical = match format {
                        Format::BinarySI => exponent % 10 == 0 && (value & 0x07) != 0,
                        _ => {
                            scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0')
                        }
                    };
                    return Ok(GoQuantity {
                        repr: Repr::Int {
                            value: result,
                            scale,
                        },
                        s: if canonical { str.into() } else { String::new() },
                        format,
                    });
                }
            }
        }
        // The inf.Dec path.
        let (int_part, frac) = match p.value.trim_start_matches(['+', '-']).split_once('.') {
            Some((i, f)) => (i, f),
            None => (p.value.trim_start_matches(['+', '-']), ""),
        };
        let digits = format!("{int_part}{frac}");
        let mut unscaled: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| QuantityError)?
        };
        let mut dscale = frac.len() as i32;
        if base == 10 {
            dscale -= exponent;
        } else {
            unscaled = unscaled
                .checked_mul(1i128 << exponent)
                .ok_or(QuantityError)?;
        }
        // Round up to nano.
        if dscale > 9 && unscaled != 0 {
            let div = pow10((dscale - 9) as u32).ok_or(QuantityError)?;
            let q = unscaled / div;
            unscaled = if unscaled % div != 0 { q + 1 } else { q };
            dscale = 9;
        }
        let mut format = format;
        if format == Format::BinarySI && dec_lt_one(unscaled, dscale) && unscaled > 0 {
            format = Format::DecimalSI;
        }
        if !p.positive {
            unscaled = -unscaled;
        }
        Ok(GoQuantity {
            repr: Repr::Dec {
                unscaled,
                scale: dscale,
            },
            s: String::new(),
            format,
        })
    }

    /// Upstream `RoundUp(-3)` as `SetDefaults_ResourceList` applies it.
    pub fn round_up_milli(&mut self) {
        match &mut self.repr {
            Repr::Int { value, scale } => {
                if *scale >= -3 {
                    return;
                }
                self.s.clear();
                let div = pow10((-3 - *scale) as u32).unwrap_or(i128::MAX);
                let v = i128::from(*value);
                let mut q = v / div;
                if v % div != 0 {
                    q += v.signum();
                }
                *value = i64::try_from(q).unwrap_or(0);
                *scale = -3;
            }
            Repr::Dec { unscaled, scale } => {
                self.s.clear();
                if *scale > 3 {
                    let div = pow10((*scale - 3) as u32).unwrap_or(i128::MAX);
                    let mut q = *unscaled / div;
                    if *unscaled % div != 0 {
                        q += unscaled.signum();
                    }
                    *unscaled = q;
                    *scale = 3;
                }
            }
        }
    }

    /// True for zero.
    fn is_zero(&self) -> bool {
        match self.repr {
            Repr::Int { value, .. } => value == 0,
            Repr::Dec { unscaled, .. } => unscaled == 0,
        }
    }

    /// The value as (unscaled, decimal exponent) in 128 bits.
    fn as_i128(&self) -> (i128, i32) {
        match self.repr {
            Repr::Int { value, scale } => (i128::from(value), scale),
            Repr::Dec { unscaled, scale } => (unscaled, -scale),
        }
    }

    /// Upstream `String()` / `MarshalJSON`: the cached string, else `CanonicalizeBytes`.
    pub fn canonical(&self) -> String {
        if !self.s.is_empty() {
            return self.s.clone();
        }
        if self.is_zero() {
            return "0".into();
        }
        let (v, e) = self.as_i128();
        let mut format = self.format;
        if format == Format::BinarySI {
            // Between -1024 and 1024, or not a whole number: shown as DecimalSI.
            let whole = if e >= 0 {
                pow10(e as u32).and_then(|m| v.checked_mul(m))
            } else {
                pow10((-e) as u32).and_then(|d| (v % d == 0).then(|| v / d))
            };
            match whole {
                Some(w) if w > -1024 && w < 1024 => format = Format::DecimalSI,
                None => format = Format::DecimalSI,
                Some(mut w) => {
                    let neg = w < 0;
                    w = w.abs();
                    let mut times = 0;
                    while w >= 1024 && w % 1024 == 0 {
                        w /= 1024;
                        times += 1;
                    }
                    let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
                        .get(times)
                        .copied()
                        .unwrap_or("");
                    return format!("{}{w}{suffix}", if neg { "-" } else { "" });
                }
            }
        }
        // Decimal: move factors of ten into the exponent, then make it a multiple of 3.
        let neg = v < 0;
        let mut amount = v.abs();
        let mut exp = e;
        while amount >= 10 && amount % 10 == 0 {
            amount /= 10;
            exp += 1;
        }
        while exp.rem_euclid(3) != 0 {
            amount *= 10;
            exp -= 1;
        }
        let mut out = String::new();
        if neg {
            out.push('-');
        }
        let _ = write!(out, "{amount}");
        match format {
            Format::DecimalExponent => {
                if exp != 0 {
                    let _ = write!(out, "e{exp}");
                }
            }
            _ => out.push_str(match exp {
                -9 => "n",
                -6 => "u",
                -3 => "m",
                3 => "k",
                6 => "M",
                9 => "G",
                12 => "T",
                15 => "P",
                18 => "E",
                _ => "",
            }),
        }
        out
    }
}

fn dec_lt_one(unscaled: i128, scale: i32) -> bool {
    if scale <= 0 {
        return false;
    }
    pow10(scale as u32).is_some_and(|one| unscaled.abs() < one)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> GoQuantity {
        GoQuantity::parse(s).expect(s)
    }

    #[test]
    fn fast_path_and_cache_follow_parse_quantity() {
        assert_eq!(
            q("500m").repr,
            Repr::Int {
                value: 500,
                scale: -3
            }
        );
        assert_eq!(q("500m").s, "500m");
        assert_eq!(
            q("0.5").repr,
            Repr::Int {
                value: 5,
                scale: -1
            }
        );
        assert_eq!(q("0.5").s, "");
        assert_eq!(q("1000m").s, "");
        assert_eq!(
            q("1Gi").repr,
            Repr::Int {
                value: 1 << 30,
                scale: 0
            }
        );
        assert_eq!(q("1Gi").s, "1Gi");
        assert_eq!(q("8Gi").s, "");
        assert!(matches!(q("1.5Gi").repr, Repr::Dec { .. }));
        assert!(GoQuantity::parse("12x").is_err());
    }

    #[test]
    fn canonical_strings() {
        for (input, want) in [
            ("0.5", "500m"),
            ("1000m", "1"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("8Gi", "8Gi"),
            ("1.5Gi", "1536Mi"),
            ("100M", "100M"),
            ("1e3", "1e3"),
            ("1500", "1500"),
            ("2000", "2k"),
            ("512", "512"),
            ("0", "0"),
            ("0.1", "100m"),
            ("250m", "250m"),
        ] {
            assert_eq!(q(input).canonical(), want, "{input}");
        }
    }

    #[test]
    fn round_up_to_milli() {
        let mut x = q("0.0005");
        x.round_up_milli();
        assert_eq!(
            x.repr,
            Repr::Int {
                value: 1,
                scale: -3
            }
        );
        assert_eq!(x.canonical(), "1m");
    }
}
