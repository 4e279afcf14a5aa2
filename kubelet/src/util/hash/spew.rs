//! go-spew's `%#v` (upstream `DeepHashObject`: `spew.ConfigState{Indent: " ", SortKeys: true,
//! DisableMethods: true, SpewKeys: true}`) of a Go value, here given as v1 JSON walked along a
//! [`Ty`] table. What the printer does (go-spew `format.go`):
//!
//! - every value is preceded by its type in parentheses — `(string)etcd`, `(*int64)30` —
//!   except slice elements, map keys and values, and the value behind a pointer, whose type
//!   the pointer already printed;
//! - strings are written raw (no quotes), numbers in decimal, bools as `true`/`false`;
//! - structs are `{Name:(type)value Name2:…}` with every field (unexported ones too), in
//!   declaration order; a nil pointer is `(*T)<nil>`, a nil slice or map `<nil>`, an empty
//!   one `[]` / `map[]`; maps are `map[k:v k2:v2]` sorted by key;
//! - no method is called (`DisableMethods`), so a `resource.Quantity` prints its unexported
//!   `int64Amount`, cached string and format, and an `intstr.IntOrString` its three fields.
//!
//! Values the v1 JSON cannot express exactly are printed deterministically but may differ from
//! upstream: a `metav1.Time` that is set (upstream holds it in the node's local zone and
//! prints the zone's tables), a quantity upstream holds as an `inf.Dec` (`1.5Gi`), and
//! `managedFields` contents. Static pod manifests carry none of these in practice
//! (`creationTimestamp: null` is the zero time, printed exactly).

use std::fmt::Write as _;

use serde_json::Value;

use super::quantity::{GoQuantity, Repr};
use super::types::{Field, Kind, Special, Ty};

/// The spew printer over one type table.
pub struct Spew<'t> {
    table: &'t [Ty],
    out: String,
    /// Whether quantities under the current field are `SetDefaults_ResourceList`-rounded.
    resource_list: bool,
    /// The enclosing pod spec's JSON, for the fields v1 keeps there and the internal type
    /// keeps in the pod security context (`hostNetwork`, `hostPID`, `hostIPC`,
    /// `shareProcessNamespace`).
    pod_spec: Option<Value>,
}

impl<'t> Spew<'t> {
    /// A printer over `table`.
    pub fn new(table: &'t [Ty]) -> Self {
        Spew {
            table,
            out: String::new(),
            resource_list: false,
            pod_spec: None,
        }
    }

    /// Print `value` as type `ty` at the top level (`%#v`: with its type) and return the text.
    pub fn print(mut self, ty: u16, value: Option<&Value>) -> String {
        self.format(ty, value, true);
        self.out
    }

    fn ty(&self, id: u16) -> &'t Ty {
        // The tables are generated whole: every id is in range.
        &self.table[usize::from(id)]
    }

    fn format(&mut self, id: u16, value: Option<&Value>, show_type: bool) {
        let value = value.filter(|v| !v.is_null());
        let ty = self.ty(id);
        if let Ty::Ptr { go, elem } = ty {
            match value {
                None if show_type => {
                    let _ = write!(self.out, "({go})<nil>");
                }
                None => self.out.push_str("<nil>"),
                Some(v) => {
                    if show_type {
                        let _ = write!(self.out, "({go})");
                    } else {
                        self.out.push_str("<*>");
                    }
                    self.format(*elem, Some(v), false);
                }
            }
            return;
        }
        if show_type {
            let _ = write!(self.out, "({})", ty.go());
        }
        match ty {
            Ty::Ptr { .. } => {}
            Ty::Scalar { kind, .. } => self.scalar(*kind, value),
            Ty::Slice { elem, .. } => match value.and_then(Value::as_array) {
                None => self.out.push_str("<nil>"),
                Some(items) => {
                    self.out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            self.out.push(' ');
                        }
                        self.format(*elem, Some(item), false);
                    }
                    self.out.push(']');
                }
            },
            Ty::Map { key, val, .. } => match value.and_then(Value::as_object) {
                None => self.out.push_str("<nil>"),
                Some(map) => {
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.sort();
                    self.out.push_str("map[");
                    for (i, k) in keys.into_iter().enumerate() {
                        if i > 0 {
                            self.out.push(' ');
                        }
                        self.format(*key, Some(&Value::String(k.clone())), false);
                        self.out.push(':');
                        self.format(*val, map.get(k), false);
                    }
                    self.out.push(']');
                }
            },
            // Decoding into the internal type clears its TypeMeta.
            Ty::Struct { go, fields } if *go == "v1.TypeMeta" => self.structure(go, fields, None),
            Ty::Struct { go, fields } => self.structure(go, fields, value),
            Ty::Special { kind, .. } => self.special(*kind, value),
        }
    }

    fn scalar(&mut self, kind: Kind, value: Option<&Value>) {
        match kind {
            Kind::Str => self
                .out
                .push_str(value.and_then(Value::as_str).unwrap_or("")),
            Kind::Int => {
                let n = value.and_then(Value::as_i64).unwrap_or(0);
                let _ = write!(self.out, "{n}");
            }
            Kind::Uint => {
                let n = value.and_then(Value::as_u64).unwrap_or(0);
                let _ = write!(self.out, "{n}");
            }
            Kind::Bool => {
                let b = value.and_then(Value::as_bool).unwrap_or(false);
                self.out.push_str(if b { "true" } else { "false" });
            }
            Kind::Float => {
                let f = value.and_then(Value::as_f64).unwrap_or(0.0);
                let _ = write!(self.out, "{f}");
            }
            Kind::Opaque => self.out.push_str("<nil>"),
        }
    }

    fn structure(&mut self, go: &str, fields: &[Field], value: Option<&Value>) {
        let obj = value.and_then(Value::as_object);
        let is_spec = go == "core.PodSpec";
        let saved_spec = if is_spec {
            Some(std::mem::replace(&mut self.pod_spec, value.cloned()))
        } else {
            None
        };
        let is_security = go == "core.PodSecurityContext";
        self.out.push('{');
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                self.out.push(' ');
            }
            let _ = write!(self.out, "{}:", f.name);
            let fv: Option<Value> = if f.inline {
                value.cloned()
            } else if is_security && f.json == "?" {
                let key = lower_first(f.name);
                self.pod_spec
                    .as_ref()
                    .and_then(|s| s.get(key.as_str()))
                    .cloned()
            } else {
                obj.and_then(|o| o.get(f.json)).cloned()
            };
            let saved = self.resource_list;
            if go == "core.ResourceRequirements" || (is_spec && f.name == "Overhead") {
                self.resource_list = true;
            }
            self.format(f.ty, fv.as_ref(), true);
            self.resource_list = saved;
        }
        self.out.push('}');
        if let Some(saved) = saved_spec {
            self.pod_spec = saved;
        }
    }

    fn special(&mut self, kind: Special, value: Option<&Value>) {
        match kind {
            Special::Quantity => {
                let parsed = match value {
                    Some(Value::String(s)) => GoQuantity::parse(s.trim()).ok(),
                    Some(Value::Number(n)) => GoQuantity::parse(&n.to_string()).ok(),
                    _ => None,
                };
                let mut q = parsed.unwrap_or(GoQuantity {
                    repr: Repr::Int { value: 0, scale: 0 },
                    s: String::new(),
                    format: super::quantity::Format::DecimalExponent,
                });
                if value.is_none() {
                    // The zero Quantity: Format "".
                    self.out.push_str("{i:(resource.int64Amount){value:(int64)0 scale:(resource.Scale)0} d:(resource.infDecAmount){Dec:(*inf.Dec)<nil>} s:(string) Format:(resource.Format)}");
                    return;
                }
                if self.resource_list {
                    q.round_up_milli();
                }
                match q.repr {
                    Repr::Int { value, scale } => {
                        let _ = write!(
                            self.out,
                            "{{i:(resource.int64Amount){{value:(int64){value} scale:(resource.Scale){scale}}} d:(resource.infDecAmount){{Dec:(*inf.Dec)<nil>}} s:(string){} Format:(resource.Format){}}}",
                            q.s,
                            q.format.as_str()
                        );
                    }
                    Repr::Dec { unscaled, scale } => {
                        // Approximation: big.Int's words on a 64-bit machine, little end first.
                        let abs = unscaled.unsigned_abs();
                        let words = if abs == 0 {
                            String::new()
                        } else if abs >> 64 == 0 {
                            format!("{abs}")
                        } else {
                            format!("{} {}", abs as u64, (abs >> 64) as u64)
                        };
                        let _ = write!(
                            self.out,
                            "{{i:(resource.int64Amount){{value:(int64)0 scale:(resource.Scale)0}} d:(resource.infDecAmount){{Dec:(*inf.Dec){{unscaled:(big.Int){{neg:(bool){} abs:(big.nat)[{words}]}} scale:(inf.Scale){scale}}}}} s:(string) Format:(resource.Format){}}}",
                            unscaled < 0,
                            q.format.as_str()
                        );
                    }
                }
            }
            Special::IntOrString => {
                let (t, i, s) = match value {
                    Some(Value::Number(n)) => (0, n.as_i64().unwrap_or(0), ""),
                    Some(Value::String(s)) => (1, 0, s.as_str()),
                    _ => (0, 0, ""),
                };
                let _ = write!(
                    self.out,
                    "{{Type:(intstr.Type){t} IntVal:(int32){i} StrVal:(string){s}}}"
                );
            }
            Special::Time => {
                // Only the zero time is exact (see the module docs); a set time prints its
                // seconds since year 1 as upstream's `ext` with a nil location.
                let ext = value
                    .and_then(Value::as_str)
                    .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                    .map(|t| t.timestamp() + 62_135_596_800)
                    .unwrap_or(0);
                let _ = write!(
                    self.out,
                    "{{Time:(time.Time){{wall:(uint64)0 ext:(int64){ext} loc:(*time.Location)<nil>}}}}"
                );
            }
            Special::Opaque => self.out.push_str("{Raw:([]uint8)<nil>}"),
        }
    }
}

/// `HostNetwork` -> `hostNetwork`, `HostPID` -> `hostPID`, `ShareProcessNamespace` -> ….
fn lower_first(name: &str) -> String {
    let mut c = name.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// spew's `%#v` of a `[]byte`: `([]uint8)[b0 b1 …]` (what `HashContainer` hashes).
pub fn bytes(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len() * 4 + 12);
    out.push_str("([]uint8)[");
    for (i, b) in data.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{b}");
    }
    out.push(']');
    out
}
