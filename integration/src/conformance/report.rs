//! Output of a conformance run: a readable table (pass / fail / skip with the reason), JUnit XML
//! for CI systems, and JSON for tools. Cases not run because the runtime had died are one line
//! of the table (the case during which it died is the failure), a `skipped` entry in JUnit and
//! `not-run` in JSON.

use std::fmt::Write as _;

use super::{CaseReport, Outcome};

/// Counts of (passed, failed, skipped); cases not run are in [`not_run`].
pub fn counts(reports: &[CaseReport]) -> (usize, usize, usize) {
    reports
        .iter()
        .fold((0, 0, 0), |(p, f, s), r| match r.outcome {
            Outcome::Pass => (p + 1, f, s),
            Outcome::Fail(_) => (p, f + 1, s),
            Outcome::Skip(_) => (p, f, s + 1),
            Outcome::NotRun(_) => (p, f, s),
        })
}

/// How many cases were not run because the runtime had stopped answering.
pub fn not_run(reports: &[CaseReport]) -> usize {
    reports
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::NotRun(_)))
        .count()
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
    let mut unavailable: Option<&str> = None;
    for r in reports {
        let (res, reason) = match &r.outcome {
            Outcome::Pass => ("pass", String::new()),
            Outcome::Fail(why) => ("FAIL", why.clone()),
            Outcome::Skip(why) => ("skip", why.clone()),
            Outcome::NotRun(why) => {
                unavailable.get_or_insert(why);
                continue;
            }
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
    let n = not_run(reports);
    if let Some(why) = unavailable {
        let _ = writeln!(out, "{n} cases not run: {why}");
    }
    let (p, f, s) = counts(reports);
    if n > 0 {
        let _ = writeln!(out, "{p} passed, {f} failed, {s} skipped, {n} not run");
    } else {
        let _ = writeln!(out, "{p} passed, {f} failed, {s} skipped");
    }
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
    let s = s + not_run(reports);
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
            Outcome::NotRun(why) => {
                let _ = writeln!(
                    out,
                    "><skipped message=\"not run: {}\"/></testcase>",
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
        "not_run": not_run(reports),
        "cases": reports.iter().map(|r| {
            let (result, reason) = match &r.outcome {
                Outcome::Pass => ("pass", ""),
                Outcome::Fail(w) => ("fail", w.as_str()),
                Outcome::Skip(w) => ("skip", w.as_str()),
                Outcome::NotRun(w) => ("not-run", w.as_str()),
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
    fn cases_not_run_are_one_line() {
        let mut r = reports();
        for i in 0..5 {
            r.push(CaseReport {
                name: format!("[z] later {i}"),
                outcome: Outcome::NotRun("runtime unavailable: it died".into()),
                duration: Duration::ZERO,
            });
        }
        let t = table("unix:///x", &r);
        assert!(!t.contains("[z] later"), "{t}");
        assert_eq!(t.matches("runtime unavailable").count(), 1, "{t}");
        assert!(
            t.contains("5 cases not run: runtime unavailable: it died"),
            "{t}"
        );
        assert!(
            t.trim_end()
                .ends_with("1 passed, 1 failed, 1 skipped, 5 not run")
        );
        assert_eq!(counts(&r), (1, 1, 1));
        assert!(junit("e", &r).contains("skipped=\"6\""));
        assert_eq!(json("e", &r)["not_run"], 5);
    }

    #[test]
    fn json_lists_every_case() {
        let j = json("e", &reports());
        assert_eq!(j["failed"], 1);
        assert_eq!(j["cases"].as_array().map(Vec::len), Some(3));
    }
}
