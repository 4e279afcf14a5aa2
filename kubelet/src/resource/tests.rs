//! Unit tests of the quantity parser and scaling against upstream's values.

use super::*;

/// (input, Value, MilliValue, ScaledValue(Nano), ScaledValue(Kilo)) as upstream's
/// `resource.ParseQuantity` (apimachinery v0.26.15) computes them, except: where upstream
/// overflows (it answers a wrapped number) these saturate at `i64::MAX`/`i64::MIN`, and
/// `-8Ei`'s kilo value rounds away from zero (upstream's big-decimal path answers
/// -9223372036854774).
const UPSTREAM: &[(&str, i64, i64, i64, i64)] = &[
    ("700m", 1, 700, 700_000_000, 1),
    ("9m", 1, 9, 9_000_000, 1),
    ("36m", 1, 36, 36_000_000, 1),
    ("0.1", 1, 100, 100_000_000, 1),
    ("1e3", 1000, 1_000_000, 1_000_000_000_000, 1),
    (
        "1.5Gi",
        1_610_612_736,
        1_610_612_736_000,
        1_610_612_736_000_000_000,
        1_610_613,
    ),
    (
        "100Mi",
        104_857_600,
        104_857_600_000,
        104_857_600_000_000_000,
        104_858,
    ),
    (
        "129e6",
        129_000_000,
        129_000_000_000,
        129_000_000_000_000_000,
        129_000,
    ),
    (
        "123Mi",
        128_974_848,
        128_974_848_000,
        128_974_848_000_000_000,
        128_975,
    ),
    ("0.5", 1, 500, 500_000_000, 1),
    ("0.0000000001", 1, 1, 1, 1),
    ("1n", 1, 1, 1, 1),
    ("1.5n", 1, 1, 2, 1),
    ("12n", 1, 1, 12, 1),
    ("-1.5", -2, -1500, -1_500_000_000, -1),
    ("-1.5m", -1, -2, -1_500_000, -1),
    ("-0.5", -1, -500, -500_000_000, -1),
    (
        "1.G",
        1_000_000_000,
        1_000_000_000_000,
        1_000_000_000_000_000_000,
        1_000_000,
    ),
    ("+1", 1, 1000, 1_000_000_000, 1),
    ("1e+3", 1000, 1_000_000, 1_000_000_000_000, 1),
    ("1e-3", 1, 1, 1_000_000, 1),
    ("1E3", 1000, 1_000_000, 1_000_000_000_000, 1),
    ("1Ki", 1024, 1_024_000, 1_024_000_000_000, 2),
    ("1.5Ki", 1536, 1_536_000, 1_536_000_000_000, 2),
    ("0.1Ki", 103, 102_400, 102_400_000_000, 1),
    ("1u", 1, 1, 1000, 1),
    ("1.000001", 2, 1001, 1_000_001_000, 1),
    ("00001.50", 2, 1500, 1_500_000_000, 1),
    ("0", 0, 0, 0, 0),
    ("-0", 0, 0, 0, 0),
    ("+0", 0, 0, 0, 0),
    ("000", 0, 0, 0, 0),
    ("1e-10", 1, 1, 1, 1),
    ("1.1e-9", 1, 1, 2, 1),
    ("100m", 1, 100, 100_000_000, 1),
    ("12e-1", 2, 1200, 1_200_000_000, 1),
    (".5", 1, 500, 500_000_000, 1),
    ("5.", 5, 5000, 5_000_000_000, 1),
    ("-.5", -1, -500, -500_000_000, -1),
    ("5.e-30", 1, 1, 1, 1),
    ("5.5e-30", 1, 1, 1, 1),
    (".1234567890123456789", 1, 124, 123_456_790, 1),
    ("0.123456789012345678901234567890", 1, 124, 123_456_790, 1),
    ("1.0000000000000000000000001", 2, 1001, 1_000_000_001, 1),
    ("0.0000000000000000000001Ki", 1, 1, 1, 1),
    ("5.Ki", 5120, 5_120_000, 5_120_000_000_000, 6),
    ("0.5Mi", 524_288, 524_288_000, 524_288_000_000_000, 525),
    (
        "0.1Gi",
        107_374_183,
        107_374_182_400,
        107_374_182_400_000_000,
        107_375,
    ),
    (
        "3.3Gi",
        3_543_348_020,
        3_543_348_019_200,
        3_543_348_019_200_000_000,
        3_543_349,
    ),
    ("1.23456789Ki", 1265, 1_264_198, 1_264_197_519_360, 2),
    (
        "1e18",
        1_000_000_000_000_000_000,
        i64::MAX,
        i64::MAX,
        1_000_000_000_000_000,
    ),
    (
        "1E",
        1_000_000_000_000_000_000,
        i64::MAX,
        i64::MAX,
        1_000_000_000_000_000,
    ),
    (
        "1234567890123456789e0",
        1_234_567_890_123_456_789,
        i64::MAX,
        i64::MAX,
        1_234_567_890_123_457,
    ),
    ("8Ei", i64::MAX, i64::MAX, i64::MAX, 9_223_372_036_854_776),
    ("16Ei", i64::MAX, i64::MAX, i64::MAX, 9_223_372_036_854_776),
    (
        "-8Ei",
        -i64::MAX,
        i64::MIN,
        i64::MIN,
        -9_223_372_036_854_776,
    ),
    (
        "9.99999999999999999999999999999999Ei",
        i64::MAX,
        i64::MAX,
        i64::MAX,
        9_223_372_036_854_776,
    ),
    (
        "7.999Ei",
        9_222_219_115_350_168_962,
        i64::MAX,
        i64::MAX,
        9_222_219_115_350_169,
    ),
    (
        "1e20",
        i64::MAX,
        i64::MAX,
        i64::MAX,
        100_000_000_000_000_000,
    ),
    ("10E", i64::MAX, i64::MAX, i64::MAX, 10_000_000_000_000_000),
    // Upstream truncates the exponent to 32 bits.
    ("1e4294967296", 1, 1000, 1_000_000_000, 1),
    ("1e4294967299", 1000, 1_000_000, 1_000_000_000_000, 1),
    ("1e9223372036854775807", 1, 100, 100_000_000, 1),
    // No digits: zero where upstream's fast path parses them.
    ("m", 0, 0, 0, 0),
    (".", 0, 0, 0, 0),
    ("-", 0, 0, 0, 0),
    ("-.", 0, 0, 0, 0),
    ("Ki", 0, 0, 0, 0),
    ("Ti", 0, 0, 0, 0),
    ("e3", 0, 0, 0, 0),
    ("e-9", 0, 0, 0, 0),
    ("0Ei", 0, 0, 0, 0),
    ("0e-30", 0, 0, 0, 0),
    ("-0.e-30", 0, 0, 0, 0),
];

#[test]
fn upstream_values() {
    for (s, value, milli, nano, kilo) in UPSTREAM {
        let q = Quantity::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
        // Where upstream overflows (it answers a wrapped number) we saturate.
        assert_eq!(
            (
                q.value(),
                q.milli_value(),
                q.scaled_value(NANO),
                q.scaled_value(KILO)
            ),
            (*value, *milli, *nano, *kilo),
            "{s:?}"
        );
    }
}

#[test]
fn upstream_errors() {
    use QuantityError::*;
    for (s, e) in [
        ("", FormatWrong),
        ("1K", Suffix),
        ("1e", Suffix),
        ("+-1", Suffix),
        ("1ki", Suffix),
        ("1KI", FormatWrong),
        ("1i", Suffix),
        ("abc", FormatWrong),
        ("1.2.3", FormatWrong),
        ("--1", Suffix),
        ("1e3.5", FormatWrong),
        (" 1", FormatWrong),
        ("1 ", FormatWrong),
        ("0x10", FormatWrong),
        ("inf", FormatWrong),
        ("NaN", FormatWrong),
        ("1Mi1", Suffix),
        ("1e1e1", FormatWrong),
        ("1.5e3m", FormatWrong),
        ("2e-2k", FormatWrong),
        ("1n5", Suffix),
        ("1e9223372036854775808", Suffix),
        ("e-30", Numeric),
        ("e-10", Numeric),
        (".e-30", Numeric),
        ("-e-30", Numeric),
        ("Ei", Numeric),
        ("Pi", Numeric),
        ("-Ei", Numeric),
        ("１", FormatWrong),
    ] {
        assert_eq!(Quantity::parse(s), Err(e), "{s:?}");
    }
}

#[test]
fn huge_and_tiny_inputs_neither_hang_nor_panic() {
    // Upstream needs minutes for these (it builds 10^±2147483648 as a big decimal).
    for s in [
        "1e2147483647",
        "1e2147483648",
        "1e-2147483648",
        "1e-2147483649",
    ] {
        let q = Quantity::parse(s).expect(s);
        let _ = (q.value(), q.milli_value(), q.checked_scaled_value(EXA));
    }
    assert!(Quantity::parse("1e2147483647").unwrap().saturated);
    assert_eq!(Quantity::parse("1e-2147483648").unwrap().nanos(), 1);
    let long = format!("0.{}1", "0".repeat(100_000));
    assert_eq!(Quantity::parse(&long).unwrap().nanos(), 1);
    let long = format!("{}Ei", "9".repeat(10_000));
    assert_eq!(Quantity::parse(&long).unwrap().value(), i64::MAX);
    let long = "9".repeat(10_000);
    let q = Quantity::parse(&long).unwrap();
    assert_eq!((q.checked_scaled_value(EXA), q.value()), (None, i64::MAX));
    assert_eq!(Quantity::parse("-1e40").unwrap().value(), i64::MIN);
    assert_eq!(
        Quantity::parse("1e18").unwrap().checked_scaled_value(MILLI),
        None
    );
    assert_eq!(
        Quantity::parse("1").unwrap().checked_scaled_value(i32::MAX),
        Some(1)
    );
    assert_eq!(
        Quantity::parse("1").unwrap().checked_scaled_value(i32::MIN),
        None
    );
    assert_eq!(
        Quantity::parse("0").unwrap().checked_scaled_value(i32::MIN),
        Some(0)
    );
}

#[test]
fn comparison_is_exact() {
    let q = |s: &str| Quantity::parse(s).unwrap();
    assert_eq!(q("700m"), q("0.7"));
    assert_eq!(q("1Ki"), q("1024"));
    assert_eq!(q("129e6"), q("129M"));
    assert!(q("700m") < q("701m"));
    assert!(q("1n") < q("1m"));
    assert!(q("-1") < q("0"));
    assert!(q("1.5Gi") > q("1.5G"));
    assert_eq!(q("1").add(&q("500m")), q("1.5"));
    assert!(q("0").is_zero() && q("1n").sign() == 1 && q("-1n").sign() == -1);
}

#[test]
fn constructors_and_display() {
    assert_eq!(Quantity::from_milli(700), Quantity::parse("0.7").unwrap());
    assert_eq!(Quantity::from_value(3), Quantity::parse("3").unwrap());
    assert_eq!(
        Quantity::from_scaled(15, -10),
        Some(Quantity::parse("2n").unwrap())
    );
    assert_eq!(Quantity::from_scaled(1, 30), None);
    for (s, shown) in [
        ("700m", "700m"),
        ("1.5", "1500m"),
        ("129e6", "129M"),
        ("1Ki", "1024"),
        ("0", "0"),
        ("-1.5n", "-2n"),
    ] {
        assert_eq!(Quantity::parse(s).unwrap().to_string(), shown, "{s}");
    }
}
