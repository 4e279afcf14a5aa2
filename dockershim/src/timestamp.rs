//! CRI timestamps: nanoseconds since the epoch. [`now_ns`] stamps what the shim reports (stats,
//! statuses, events); [`docker_time_ns`] reads Docker's RFC 3339 times (upstream libdocker's
//! `ParseDockerTimestamp`), with Docker's zero time as 0. Pure functions; imports nothing of
//! the crate.

/// Nanoseconds since the epoch of a Docker timestamp; Docker's zero time (`0001-01-01...`) and
/// unparsable values give 0.
pub fn docker_time_ns(ts: Option<&str>) -> i64 {
    let Some(ts) = ts else { return 0 };
    if ts.starts_with("0001-") {
        return 0;
    }
    chrono::DateTime::parse_from_rfc3339(ts)
        .ok()
        .and_then(|t| t.timestamp_nanos_opt())
        .unwrap_or(0)
}

/// Now, in nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_times_become_nanoseconds() {
        assert_eq!(docker_time_ns(Some("0001-01-01T00:00:00Z")), 0);
        assert_eq!(docker_time_ns(None), 0);
        assert_eq!(
            docker_time_ns(Some("1970-01-01T00:00:01.000000002Z")),
            1_000_000_002
        );
        assert_eq!(docker_time_ns(Some("garbage")), 0);
    }

    #[test]
    fn now_is_after_2020() {
        assert!(now_ns() > 1_577_836_800_000_000_000);
    }
}
