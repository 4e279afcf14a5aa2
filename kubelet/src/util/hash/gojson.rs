//! Go's `encoding/json` `Marshal` of a v1 API value, here given as v1 JSON (k8s-openapi's
//! serialization) walked along a [`Ty`] table, byte for byte: fields in Go declaration order
//! (not k8s-openapi's), `omitempty` per field (a field without it is written even when empty:
//! a container's `"name":""` and `"resources":{}`), embedded structs inlined, map keys
//! sorted, `resource.Quantity` in its canonical form (`MarshalJSON`: `0.5` → `"500m"`),
//! `intstr.IntOrString` as a number or a string, and strings escaped as Go escapes them
//! (`<`, `>`, `&` as `\u003c`, `\u003e`, `\u0026`; U+2028/U+2029; control characters).
//! Fields the 1.26 type does not have (newer API fields k8s-openapi knows) are left out, as
//! the Go kubelet 1.26 never decoded them.

use std::fmt::Write as _;

use serde_json::Value;

use super::quantity::GoQuantity;
use super::types::{Kind, Special, Ty};

/// Marshal `value` as type `id` of `table`.
pub fn marshal(table: &[Ty], id: u16, value: Option<&Value>) -> String {
    let mut out = String::new();
    encode(table, id, value.filter(|v| !v.is_null()), false, &mut out);
    out
}

fn is_empty(table: &[Ty], id: u16, value: Option<&Value>) -> bool {
    let Some(v) = value.filter(|v| !v.is_null()) else {
        // An absent struct is not empty to omitempty (a struct never is).
        return !matches!(
            table[usize::from(id)],
            Ty::Struct { .. } | Ty::Special { .. }
        );
    };
    match &table[usize::from(id)] {
        Ty::Scalar { kind, .. } => match kind {
            Kind::Str => v.as_str().is_none_or(str::is_empty),
            Kind::Int | Kind::Uint | Kind::Float => v.as_f64().is_none_or(|n| n == 0.0),
            Kind::Bool => !v.as_bool().unwrap_or(false),
            Kind::Opaque => true,
        },
        Ty::Ptr { .. } => false,
        Ty::Slice { .. } => v.as_array().is_none_or(Vec::is_empty),
        Ty::Map { .. } => v.as_object().is_none_or(serde_json::Map::is_empty),
        Ty::Struct { .. } | Ty::Special { .. } => false,
    }
}

/// `round`: quantities here are `RoundUp(-3)` first (v1 `SetDefaults_ResourceList` on a
/// container's limits and requests; a no-op on what an API server already defaulted).
fn encode(table: &[Ty], id: u16, value: Option<&Value>, round: bool, out: &mut String) {
    match &table[usize::from(id)] {
        Ty::Scalar { kind, .. } => match kind {
            Kind::Str => string(value.and_then(Value::as_str).unwrap_or(""), out),
            Kind::Int | Kind::Uint | Kind::Float => match value {
                Some(Value::Number(n)) => {
                    let _ = write!(out, "{n}");
                }
                _ => out.push('0'),
            },
            Kind::Bool => out.push_str(if value.and_then(Value::as_bool).unwrap_or(false) {
                "true"
            } else {
                "false"
            }),
            Kind::Opaque => out.push_str("null"),
        },
        Ty::Ptr { elem, .. } => match value {
            None => out.push_str("null"),
            Some(v) => encode(table, *elem, Some(v), round, out),
        },
        Ty::Slice { elem, .. } => match value.and_then(Value::as_array) {
            None => out.push_str("null"),
            Some(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    encode(
                        table,
                        *elem,
                        Some(item).filter(|v| !v.is_null()),
                        round,
                        out,
                    );
                }
                out.push(']');
            }
        },
        Ty::Map { val, .. } => match value.and_then(Value::as_object) {
            None => out.push_str("null"),
            Some(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    string(k, out);
                    out.push(':');
                    encode(table, *val, map.get(k).filter(|v| !v.is_null()), round, out);
                }
                out.push('}');
            }
        },
        Ty::Struct { .. } => {
            out.push('{');
            let mut first = true;
            fields(table, id, value, out, &mut first);
            out.push('}');
        }
        Ty::Special { kind, .. } => match kind {
            Special::Quantity => {
                let canonical = |text: &str| {
                    GoQuantity::parse(text.trim()).map(|mut q| {
                        if round {
                            q.round_up_milli();
                        }
                        q.canonical()
                    })
                };
                let text = match value {
                    Some(Value::String(s)) => canonical(s).unwrap_or_else(|_| s.clone()),
                    Some(Value::Number(n)) => {
                        canonical(&n.to_string()).unwrap_or_else(|_| n.to_string())
                    }
                    _ => "0".into(),
                };
                string(&text, out);
            }
            Special::IntOrString => match value {
                Some(Value::Number(n)) => {
                    let _ = write!(out, "{n}");
                }
                Some(Value::String(s)) => string(s, out),
                _ => out.push('0'),
            },
            Special::Time => match value.and_then(Value::as_str) {
                Some(s) => string(s, out),
                None => out.push_str("null"),
            },
            Special::Opaque => out.push_str("null"),
        },
    }
}

/// The fields of struct `id` (and, inlined, of its embedded structs).
fn fields(table: &[Ty], id: u16, value: Option<&Value>, out: &mut String, first: &mut bool) {
    let Ty::Struct { go, fields: list } = &table[usize::from(id)] else {
        return;
    };
    let round = *go == "v1.ResourceRequirements";
    let obj = value.and_then(Value::as_object);
    for f in list.iter() {
        if f.inline {
            fields(table, f.ty, value, out, first);
            continue;
        }
        if f.json == "?" || f.json.is_empty() {
            continue;
        }
        let fv = obj.and_then(|o| o.get(f.json)).filter(|v| !v.is_null());
        if f.omitempty && is_empty(table, f.ty, fv) {
            continue;
        }
        if !*first {
            out.push(',');
        }
        *first = false;
        string(f.json, out);
        out.push(':');
        encode(table, f.ty, fv, round, out);
    }
}

/// A JSON string as Go's encoder writes it (`HTMLEscape` on).
fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
