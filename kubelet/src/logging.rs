//! The kubelet's log output (upstream component-base `logs`: `logging.format`,
//! `logging.verbosity` / `-v`). `text` is tracing's human format on stderr; `json` writes one
//! JSON object a line in the shape of upstream's JSON logger: `ts` (seconds since the epoch,
//! float), `caller`, `msg`, `v` (the verbosity of an info line) or `err` (for errors), then
//! the event's fields as keys. Every line is written at once (no buffering), which satisfies
//! any `flushFrequency`.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The default filter for klog verbosity `v`.
pub fn default_filter(v: i32) -> &'static str {
    match v {
        i32::MIN..=0 => "info",
        1..=3 => "kubelet=debug,dockershim=info,info",
        _ => "debug",
    }
}

/// Install the global subscriber: `format` is `text` or `json`.
pub fn init(format: &str, v: i32) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter(v)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(JsonFormat)
            .init();
    } else {
        builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
}

/// Upstream-shaped JSON lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonFormat;

#[derive(Default)]
struct JsonVisitor {
    msg: String,
    fields: serde_json::Map<String, serde_json::Value>,
}

impl Visit for JsonVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.msg = value.to_string();
        } else {
            self.fields
                .insert(field.name().to_string(), serde_json::Value::from(value));
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.fields
            .insert(field.name().to_string(), serde_json::Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.fields
            .insert(field.name().to_string(), serde_json::Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.fields
            .insert(field.name().to_string(), serde_json::Value::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.msg = text;
        } else {
            self.fields
                .insert(field.name().to_string(), serde_json::Value::from(text));
        }
    }
}

/// One JSON line for an event at `level` from `target`/`line` with `visitor`'s content.
fn json_line(level: &Level, caller: String, visitor: JsonVisitor) -> String {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    let mut obj = serde_json::Map::new();
    obj.insert("ts".into(), serde_json::Value::from(ts));
    obj.insert("caller".into(), serde_json::Value::from(caller));
    obj.insert("msg".into(), serde_json::Value::from(visitor.msg));
    let mut fields = visitor.fields;
    if *level == Level::ERROR {
        let err = fields
            .remove("error")
            .unwrap_or_else(|| serde_json::Value::from(""));
        obj.insert("err".into(), err);
    } else {
        let v = match *level {
            Level::DEBUG => 4,
            Level::TRACE => 5,
            _ => 0,
        };
        obj.insert("v".into(), serde_json::Value::from(v));
    }
    for (k, v) in fields {
        obj.entry(k).or_insert(v);
    }
    serde_json::Value::Object(obj).to_string()
}

impl<S, N> FormatEvent<S, N> for JsonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut visitor = JsonVisitor::default();
        event.record(&mut visitor);
        // The fields of the spans the event is in (pod, container, …), innermost last; the
        // event's own fields win.
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                let Some(fields) = ext.get::<tracing_subscriber::fmt::FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(serde_json::Value::Object(m)) =
                    serde_json::from_str::<serde_json::Value>(fields.as_str())
                {
                    for (k, v) in m {
                        visitor.fields.entry(k).or_insert(v);
                    }
                }
            }
        }
        let caller = format!(
            "{}:{}",
            meta.file().unwrap_or(meta.target()),
            meta.line().unwrap_or(0)
        );
        writeln!(writer, "{}", json_line(meta.level(), caller, visitor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_have_upstreams_keys() {
        let mut v = JsonVisitor {
            msg: "starting kubelet".into(),
            ..Default::default()
        };
        v.fields.insert("node".into(), "n1".into());
        let line = json_line(&Level::INFO, "src/main.rs:1".into(), v);
        let j: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert_eq!(j["msg"], "starting kubelet");
        assert_eq!(j["v"], 0);
        assert_eq!(j["node"], "n1");
        assert!(j["ts"].as_f64().is_some_and(|t| t > 1e9));
        let mut v = JsonVisitor {
            msg: "failed".into(),
            ..Default::default()
        };
        v.fields.insert("error".into(), "boom".into());
        let j: serde_json::Value =
            serde_json::from_str(&json_line(&Level::ERROR, "x:1".into(), v)).expect("json");
        assert_eq!(j["err"], "boom");
        assert!(j.get("v").is_none());
    }

    #[test]
    fn json_lines_carry_the_fields_of_their_spans() {
        use parking_lot::Mutex;
        use std::sync::Arc;
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(JsonFormat)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let pod = tracing::info_span!("sync_pod", pod = "default/web", pod_uid = "u1");
            let _p = pod.enter();
            let c = tracing::info_span!("start_container", container = "app");
            let _c = c.enter();
            tracing::info!(image = "busybox", "pulling image");
        });
        let text = String::from_utf8(buf.0.lock().clone()).expect("utf8");
        let j: serde_json::Value = serde_json::from_str(text.trim()).expect("one json line");
        assert_eq!(j["msg"], "pulling image");
        assert_eq!(j["pod"], "default/web");
        assert_eq!(j["pod_uid"], "u1");
        assert_eq!(j["container"], "app");
        assert_eq!(j["image"], "busybox");
    }
}
