//! Output of a conformance run: a readable table (pass / fail / skip with the reason), JUnit XML
//! for CI systems, and JSON for tools.

use std::fmt::Write as _;

use super::{CaseReport, Outcome};

/// Counts of (passed, failed, skipped).
pub fn counts(reports: &[CaseReport]) -> (usize, usize, usize) {
    reports
        .iter()
        .fold((0, 0, 0), |(p, f, s), r| match r.outcome {
            Outcome::Pass => (p + 1, f, s),
            Outcome::Fail(_) => (p, f + 1, s),
            Outcome::Skip(_) => (p, f, s + 1),
        })
}

/// The readable table, ending with the plain `N passed, N failed, N skipped` line.
pub fn table(endpoint: &str, reports: &[CaseReport]) -> String {
    let mut out = String::new();
    let width = reports
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(out, "CRI conformance against {endpoint}");
    let _ = writeln!(
        out,
        "{:<width$}  {:<6}  {:>8}  reason",
        "case", "result", "time"
    );
    for r in reports {
        let (res, reason) = match &r.outcome {
            Outcome::Pass => ("pass", String::new()),
            Outcome::Fail(why) => ("FAIL", why.clone()),
            Outcome::Skip(why) => ("skip", why.clone()),
        };
        let _ = writeln!(
            out,
            "{:<width$}  {:<6}  {:>7.2}s  {}",
            r.name,
            res,
            r.duration.as_secs_f64(),
            reason
        );
    }
    let (p, f, s) = counts(reports);
    let _ = writeln!(out, "{p} passed, {f} failed, {s} skipped");
    out
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// JUnit XML, one testsuite.
pub fn junit(endpoint: &str, reports: &[CaseReport]) -> String {
    let (_, f, s) = counts(reports);
    let total: f64 = reports.iter().map(|r| r.duration.as_secs_f64()).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuite name=\"cri-conformance\" hostname=\"{}\" tests=\"{}\" failures=\"{f}\" skipped=\"{s}\" time=\"{total:.3}\">",
        xml_escape(endpoint),
        reports.len()
    );
    for r in reports {
        let _ = write!(
            out,
            "  <testcase name=\"{}\" time=\"{:.3}\"",
            xml_escape(&r.name),
            r.duration.as_secs_f64()
        );
        match &r.outcome {
            Outcome::Pass => out.push_str("/>\n"),
            Outcome::Fail(why) => {
                let _ = writeln!(
                    out,
                    "><failure message=\"{}\"/></testcase>",
                    xml_escape(why)
                );
            }
            Outcome::Skip(why) => {
                let _ = writeln!(
                    out,
                    "><skipped message=\"{}\"/></testcase>",
                    xml_escape(why)
                );
            }
        }
    }
    out.push_str("</testsuite>\n");
    out
}

/// JSON: `{"endpoint", "passed", "failed", "skipped", "cases": [{name, result, reason, seconds}]}`.
pub fn json(endpoint: &str, reports: &[CaseReport]) -> serde_json::Value {
    let (p, f, s) = counts(reports);
    serde_json::json!({
        "endpoint": endpoint,
        "passed": p,
        "failed": f,
        "skipped": s,
        "cases": reports.iter().map(|r| {
            let (result, reason) = match &r.outcome {
                Outcome::Pass => ("pass", ""),
                Outcome::Fail(w) => ("fail", w.as_str()),
                Outcome::Skip(w) => ("skip", w.as_str()),
            };
            serde_json::json!({"name": r.name, "result": result, "reason": reason, "seconds": r.duration.as_secs_f64()})
        }).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn reports() -> Vec<CaseReport> {
        vec![
            CaseReport {
                name: "[a] ok".into(),
                outcome: Outcome::Pass,
                duration: Duration::from_millis(10),
            },
            CaseReport {
                name: "[a] bad <x>".into(),
                outcome: Outcome::Fail("label \"a\" missing".into()),
                duration: Duration::from_millis(20),
            },
            CaseReport {
                name: "[b] opt".into(),
                outcome: Outcome::Skip("Unimplemented".into()),
                duration: Duration::ZERO,
            },
        ]
    }

    #[test]
    fn table_ends_with_the_counts() {
        let t = table("unix:///x", &reports());
        assert!(t.contains("FAIL"));
        assert!(t.contains("label \"a\" missing"));
        assert!(t.trim_end().ends_with("1 passed, 1 failed, 1 skipped"));
    }

    #[test]
    fn junit_escapes_and_counts() {
        let x = junit("unix:///x", &reports());
        assert!(x.contains("tests=\"3\" failures=\"1\" skipped=\"1\""));
        assert!(x.contains("[a] bad &lt;x&gt;"));
        assert!(x.contains("<failure message=\"label &quot;a&quot; missing\"/>"));
    }

    #[test]
    fn json_lists_every_case() {
        let j = json("e", &reports());
        assert_eq!(j["failed"], 1);
        assert_eq!(j["cases"].as_array().map(Vec::len), Some(3));
    }
}
