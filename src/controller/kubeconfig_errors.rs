//! Parsing a kubeconfig read from a Secret without ever repeating its content in an error. A
//! serde error quotes the value it could not read (`invalid type: string "eyJhbGci…"`), and in
//! a kubeconfig that value is as likely as not a token; the error ends up in a MemberCluster's
//! status, an Event and the log. So a parse error is reported as the path of the offending
//! field (`users[0].user.token`), found by reading each part of the document on its own, and the
//! serde message with every quoted value replaced ([`redact`]). Owns that and nothing else.

use kube::config::NamedContext;
use kube::config::{AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_yaml::{Mapping, Value};

/// What stands where a value was.
const HIDDEN: &str = "(value not shown)";

/// Parses `text` as a kubeconfig (every document, merged, as kube reads it). The error names
/// the field and the kind of problem, never a value from `text`.
pub fn parse(text: &str) -> Result<Kubeconfig, String> {
    Kubeconfig::from_yaml(text)
        .map_err(|e| diagnose(text).unwrap_or_else(|| redact(&e.to_string())))
}

/// `message` with every quoted part (`"…"`, `` `…` ``) replaced by "(value not shown)", except
/// after ", expected" (what the type wants, from the code) and in "missing field `…`" /
/// "duplicate field `…`" (field names of the type).
pub fn redact(message: &str) -> String {
    let keep_quotes =
        message.starts_with("missing field") || message.starts_with("duplicate field");
    let (head, tail) = match message.find(", expected") {
        Some(at) => message.split_at(at),
        None => (message, ""),
    };
    if keep_quotes {
        return message.to_string();
    }
    let mut out = String::with_capacity(message.len());
    let mut chars = head.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                // A Debug-quoted string: skip to the unescaped closing quote.
                let mut escaped = false;
                for d in chars.by_ref() {
                    match (escaped, d) {
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        _ => escaped = false,
                    }
                }
                out.push_str(HIDDEN);
            }
            '`' => {
                for d in chars.by_ref() {
                    if d == '`' {
                        break;
                    }
                }
                out.push_str(HIDDEN);
            }
            '\'' => {
                for d in chars.by_ref() {
                    if d == '\'' {
                        break;
                    }
                }
                out.push_str(HIDDEN);
            }
            c => out.push(c),
        }
    }
    out.push_str(tail);
    out
}

/// Where and why `text` does not read as a kubeconfig, or `None` when no part is found wrong
/// on its own (e.g. documents that do not merge).
fn diagnose(text: &str) -> Option<String> {
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let prefix = if i == 0 {
            String::new()
        } else {
            format!("document {}: ", i + 1)
        };
        let value = match Value::deserialize(doc) {
            Ok(v) => v,
            Err(e) => return Some(format!("{prefix}not YAML: {}", redact(&e.to_string()))),
        };
        if value.is_null() {
            continue;
        }
        if fails::<Kubeconfig>(&value).is_none() {
            continue;
        }
        let (path, problem) =
            locate(&value).or_else(|| fails::<Kubeconfig>(&value).map(|e| (String::new(), e)))?;
        let path = if path.is_empty() {
            "the top level".to_string()
        } else {
            path
        };
        return Some(format!("{prefix}{path}: {}", redact(&problem)));
    }
    None
}

/// A YAML key as a path element: a plausible field name, else a placeholder (a key is content
/// too).
fn key_name(k: &Value) -> String {
    match k.as_str() {
        Some(s)
            if !s.is_empty()
                && s.len() <= 40
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
        {
            s.to_string()
        }
        _ => "(a key not shown)".to_string(),
    }
}

/// Why `v` does not read as a `T`, if it does not.
fn fails<T: DeserializeOwned>(v: &Value) -> Option<String> {
    serde_yaml::from_value::<T>(v.clone())
        .err()
        .map(|e| e.to_string())
}

/// Why the one field `k: v` does not read as a `T`, ignoring the fields it lacks.
fn fails_alone<T: DeserializeOwned>(k: &Value, v: &Value) -> Option<String> {
    let mut m = Mapping::new();
    m.insert(k.clone(), v.clone());
    fails::<T>(&Value::Mapping(m)).filter(|e| !e.starts_with("missing field"))
}

/// The path of the first part of a document that does not read on its own, and why.
fn locate(doc: &Value) -> Option<(String, String)> {
    let Value::Mapping(m) = doc else {
        return fails::<Kubeconfig>(doc).map(|e| (String::new(), e));
    };
    for (k, v) in m {
        let path = key_name(k);
        let found = match k.as_str() {
            Some("clusters") => list(&path, v, named::<NamedCluster, Cluster>, "cluster"),
            Some("users") => list(&path, v, named::<NamedAuthInfo, AuthInfo>, "user"),
            Some("contexts") => list(&path, v, named::<NamedContext, Context>, "context"),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
        if let Some(e) = fails_alone::<Kubeconfig>(k, v) {
            return Some((path, e));
        }
    }
    None
}

type Named = fn(&str, &Value, &str) -> Option<(String, String)>;

/// The first entry of the list `v` at `path` that does not read.
fn list(path: &str, v: &Value, each: Named, inner: &str) -> Option<(String, String)> {
    let Value::Sequence(items) = v else {
        return None;
    };
    items
        .iter()
        .enumerate()
        .find_map(|(i, item)| each(&format!("{path}[{i}]"), item, inner))
}

/// In a named entry (`{name, cluster: {...}}`) that does not read as an `N`: the field, or the
/// field of its `inner` part (a `T`), that does not read on its own.
fn named<N: DeserializeOwned, T: DeserializeOwned>(
    path: &str,
    item: &Value,
    inner: &str,
) -> Option<(String, String)> {
    let whole = fails::<N>(item)?;
    let Value::Mapping(m) = item else {
        return Some((path.to_string(), whole));
    };
    for (k, v) in m {
        let p = format!("{path}.{}", key_name(k));
        if k.as_str() == Some(inner) {
            let Some(e) = fails::<T>(v) else { continue };
            if let Value::Mapping(fields) = v {
                for (fk, fv) in fields {
                    if let Some(e) = fails_alone::<T>(fk, fv) {
                        return Some((format!("{p}.{}", key_name(fk)), e));
                    }
                }
            }
            return Some((p, e));
        }
        if let Some(e) = fails_alone::<N>(k, v) {
            return Some((p, e));
        }
    }
    Some((path.to_string(), whole))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.SECRET-TOKEN-VALUE";

    #[test]
    fn a_bare_token_is_not_repeated() {
        let e = parse(TOKEN).expect_err("a string is no kubeconfig");
        assert!(!e.contains("SECRET-TOKEN-VALUE"), "{e}");
        assert!(!e.contains("eyJhbGci"), "{e}");
        assert!(e.starts_with("the top level: invalid type: string"), "{e}");
        assert!(e.contains("expected struct Kubeconfig"), "{e}");
    }

    #[test]
    fn a_wrong_typed_field_is_named_by_its_path_and_its_value_is_not_shown() {
        let text = format!(
            "apiVersion: v1\nclusters:\n- name: m\n  cluster: {{server: 'https://m:6443'}}\nusers:\n- name: u\n  user:\n    username: admin\n    token: [{TOKEN}]\n"
        );
        let e = parse(&text).expect_err("a token is a string, not a list");
        assert!(!e.contains("SECRET-TOKEN-VALUE"), "{e}");
        assert!(
            e.starts_with("users[0].user.token: invalid type: sequence"),
            "{e}"
        );
        // A string where a boolean belongs: serde quotes it.
        let text = "clusters:\n- name: c\n  cluster: {insecure-skip-tls-verify: 'SECRET-X'}\n";
        let e = parse(text).expect_err("a string is not a boolean");
        assert!(!e.contains("SECRET-X"), "{e}");
        assert!(
            e.starts_with(
                "clusters[0].cluster.insecure-skip-tls-verify: invalid type: string (value not shown)"
            ),
            "{e}"
        );
        // A string where a map belongs, in a later document.
        let text = format!("users: []\n---\nclusters:\n- name: c\n  cluster: {TOKEN}\n");
        let e = parse(&text).expect_err("a cluster is a map");
        assert!(!e.contains("SECRET-TOKEN-VALUE"), "{e}");
        assert!(
            e.starts_with("document 2: clusters[0].cluster: invalid type"),
            "{e}"
        );
    }

    #[test]
    fn a_name_of_the_wrong_type_and_a_list_that_is_not_one_are_named() {
        let e = parse("contexts:\n- name: [x]\n  context: {cluster: c}\n").expect_err("name");
        assert!(
            e.starts_with("contexts[0].name: invalid type: sequence"),
            "{e}"
        );
        let e = parse(&format!("users: {TOKEN}\n")).expect_err("users is a list");
        assert!(e.starts_with("users: invalid type: string"), "{e}");
        assert!(!e.contains("SECRET"), "{e}");
    }

    #[test]
    fn syntax_errors_are_reported_without_the_text() {
        let e = parse(&format!("users:\n- name: \"{TOKEN}\n  user: [")).expect_err("syntax");
        assert!(e.starts_with("not YAML: "), "{e}");
        assert!(!e.contains("SECRET"), "{e}");
    }

    #[test]
    fn quoted_values_are_redacted_but_what_the_type_expects_is_kept() {
        assert_eq!(
            redact(r#"invalid type: string "a\"b`c", expected a sequence"#),
            "invalid type: string (value not shown), expected a sequence"
        );
        assert_eq!(
            redact("invalid value: integer `5`, expected one of `a`, `b`"),
            "invalid value: integer (value not shown), expected one of `a`, `b`"
        );
        assert_eq!(
            redact("unknown variant `tok`, expected `x`"),
            "unknown variant (value not shown), expected `x`"
        );
        assert_eq!(redact("missing field `name`"), "missing field `name`");
        assert_eq!(
            redact("duplicate entry with key \"token-abc\" at line 2"),
            "duplicate entry with key (value not shown) at line 2"
        );
    }

    #[test]
    fn a_long_key_is_not_repeated_either() {
        let text = format!("users:\n- name: u\n  user:\n    {TOKEN}x: 1\n    token: [1]\n");
        let e = parse(&text).expect_err("token is a string");
        assert!(!e.contains("SECRET"), "{e}");
        assert!(e.contains("users[0].user.token"), "{e}");
    }

    #[test]
    fn a_valid_kubeconfig_parses_as_kube_reads_it() {
        let text = "clusters:\n- name: m\n  cluster: {server: 'https://m:6443'}\nusers:\n- name: u\n  user: {token: abc}\n";
        let kc = parse(text).expect("parses");
        assert_eq!(kc.clusters.len(), 1);
        assert_eq!(kc.auth_infos.len(), 1);
    }
}
