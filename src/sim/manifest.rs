//! A scenario job's manifest as the simulator holds it: the JSON tree a scenario file gives, or
//! the same manifest as compact JSON text (a generated scenario of 100,000 jobs holds each in
//! well under a kilobyte instead of a tree of about 9 KB), read into a tree when the job is
//! submitted. In a file, and when written, it is the manifest object either way.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A job manifest: a tree, or compact text that reads back as the very same tree.
#[derive(Clone, Debug)]
pub struct Manifest(Repr);

#[derive(Clone, Debug)]
enum Repr {
    Tree(Value),
    /// Written by `serde_json` from a tree without floating-point numbers (so reading it back
    /// gives an equal tree).
    Text(Box<str>),
}

impl Manifest {
    /// The manifest held as compact text (as a tree when it has a floating-point number, whose
    /// text might not read back to the same bits).
    pub fn compact(v: &Value) -> Manifest {
        if has_float(v) {
            return Manifest(Repr::Tree(v.clone()));
        }
        match serde_json::to_string(v) {
            Ok(t) => Manifest(Repr::Text(t.into_boxed_str())),
            Err(_) => Manifest(Repr::Tree(v.clone())),
        }
    }

    /// The manifest as a tree (read from the text each time when held as text).
    pub fn value(&self) -> Cow<'_, Value> {
        match &self.0 {
            Repr::Tree(v) => Cow::Borrowed(v),
            // The text was written from a tree by serde_json: it reads back.
            Repr::Text(t) => Cow::Owned(serde_json::from_str(t).unwrap_or(Value::Null)),
        }
    }

    /// The manifest as a tree to change (held as a tree from then on).
    pub fn value_mut(&mut self) -> &mut Value {
        if let Repr::Text(_) = &self.0 {
            let v = self.value().into_owned();
            self.0 = Repr::Tree(v);
        }
        match &mut self.0 {
            Repr::Tree(v) => v,
            Repr::Text(_) => unreachable!("made a tree just above"),
        }
    }

    /// `kind`, `metadata.namespace` and `metadata.name` where they are strings, without
    /// reading the rest of a manifest held as text into a tree.
    pub fn identity(&self) -> (Option<String>, Option<String>, Option<String>) {
        #[derive(Deserialize)]
        struct Head {
            #[serde(default)]
            kind: Value,
            #[serde(default)]
            metadata: Value,
        }
        let of = |kind: &Value, meta: &Value| {
            let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
            (s(Some(kind)), s(meta.get("namespace")), s(meta.get("name")))
        };
        match &self.0 {
            Repr::Tree(v) => of(
                v.get("kind").unwrap_or(&Value::Null),
                v.get("metadata").unwrap_or(&Value::Null),
            ),
            Repr::Text(t) => match serde_json::from_str::<Head>(t) {
                Ok(h) => of(&h.kind, &h.metadata),
                Err(_) => (None, None, None),
            },
        }
    }
}

impl From<Value> for Manifest {
    fn from(v: Value) -> Manifest {
        Manifest(Repr::Tree(v))
    }
}

impl Serialize for Manifest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Manifest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Manifest, D::Error> {
        Value::deserialize(d).map(Manifest::from)
    }
}

fn has_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(a) => a.iter().any(has_float),
        Value::Object(m) => m.values().any(has_float),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compact_text_reads_back_the_same_tree() {
        let v = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"parallelism": 3, "template": {"spec": {"containers": [{"name": "m"}]}}}});
        let m = Manifest::compact(&v);
        assert!(matches!(m.0, Repr::Text(_)));
        assert_eq!(*m.value(), v);
        assert_eq!(
            m.identity(),
            (Some("Job".into()), Some("ns".into()), Some("a".into()))
        );
        assert_eq!(Manifest::from(v.clone()).identity(), m.identity());
        assert_eq!(serde_json::to_value(&m).ok(), Some(v));
    }

    #[test]
    fn floats_stay_a_tree_and_odd_identities_are_none() {
        let v = json!({"kind": 3, "metadata": {"name": 0.1}});
        let m = Manifest::compact(&v);
        assert!(matches!(m.0, Repr::Tree(_)));
        assert_eq!(m.identity(), (None, None, None));
        let t = Manifest::compact(&json!({"kind": 3, "metadata": "x"}));
        assert_eq!(t.identity(), (None, None, None));
        let mut t = Manifest::compact(&json!({"kind": "Job"}));
        t.value_mut()["kind"] = json!("JobSet");
        assert_eq!(t.identity().0.as_deref(), Some("JobSet"));
    }
}
