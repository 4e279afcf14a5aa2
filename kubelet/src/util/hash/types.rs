//! The shape of a Go type as reflection sees it, for the tables in [`super::schema`]: struct
//! fields in declaration order with their Go type strings (what spew prints as `(type)`), the
//! json name of the field in the v1 API type (the data this kubelet holds is v1 JSON) and its
//! `omitempty`. Types refer to each other by index into their table.

/// A scalar's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string, or a named string type (`core.PodPhase`).
    Str,
    /// A signed integer.
    Int,
    /// An unsigned integer.
    Uint,
    /// A bool.
    Bool,
    /// A float.
    Float,
    /// Anything else (printed as its zero value).
    Opaque,
}

/// A type with its own encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// `resource.Quantity`.
    Quantity,
    /// `intstr.IntOrString`.
    IntOrString,
    /// `metav1.Time`.
    Time,
    /// Anything too exotic to print (`metav1.FieldsV1`).
    Opaque,
}

/// One Go type.
#[derive(Debug)]
pub enum Ty {
    /// A scalar.
    Scalar {
        /// Go type string.
        go: &'static str,
        /// Kind.
        kind: Kind,
    },
    /// A pointer.
    Ptr {
        /// Go type string (`*core.Probe`).
        go: &'static str,
        /// Pointee.
        elem: u16,
    },
    /// A slice.
    Slice {
        /// Go type string.
        go: &'static str,
        /// Element.
        elem: u16,
    },
    /// A map.
    Map {
        /// Go type string.
        go: &'static str,
        /// Key.
        key: u16,
        /// Value.
        val: u16,
    },
    /// A struct.
    Struct {
        /// Go type string.
        go: &'static str,
        /// Fields in declaration order.
        fields: &'static [Field],
    },
    /// A type with its own encoding.
    Special {
        /// Go type string.
        go: &'static str,
        /// Which.
        kind: Special,
    },
}

impl Ty {
    /// The Go type string.
    pub fn go(&self) -> &'static str {
        match self {
            Ty::Scalar { go, .. }
            | Ty::Ptr { go, .. }
            | Ty::Slice { go, .. }
            | Ty::Map { go, .. }
            | Ty::Struct { go, .. }
            | Ty::Special { go, .. } => go,
        }
    }
}

/// One struct field.
#[derive(Debug)]
pub struct Field {
    /// Go field name.
    pub name: &'static str,
    /// The v1 json name; empty for an embedded (inline) struct; `?` when v1 has no such field.
    pub json: &'static str,
    /// An embedded field.
    pub inline: bool,
    /// `omitempty` in the v1 json tag.
    pub omitempty: bool,
    /// Its type (index in the same table).
    pub ty: u16,
}
