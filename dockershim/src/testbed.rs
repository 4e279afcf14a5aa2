//! Unit tests that need the real-runtime test bed (root, Docker, the CNI plugins) skip loudly
//! without it, unless `CRI_TESTBED_REQUIRED=1` says it must be there (`hack/test.sh` sets it as
//! root, as `integration::testbed` obeys it): then a missing prerequisite fails the test.

/// Skips `test` with a loud message saying `why`; fails it instead when the test bed is
/// required. The caller returns right after.
#[track_caller]
pub(crate) fn skip(test: &str, why: &str) {
    skip_when(
        std::env::var("CRI_TESTBED_REQUIRED").as_deref() == Ok("1"),
        test,
        why,
    );
}

#[track_caller]
fn skip_when(required: bool, test: &str, why: &str) {
    assert!(
        !required,
        "{test}: {why}, and the test bed is required (CRI_TESTBED_REQUIRED=1)"
    );
    eprintln!("SKIPPED {test}: {why}");
}

mod tests {
    #[test]
    #[should_panic(expected = "t: no docker, and the test bed is required")]
    fn a_required_test_bed_turns_a_skip_into_a_failure() {
        super::skip_when(true, "t", "no docker");
    }
}
