//! Which Secret a MemberCluster may name, and its kubeconfig read out of it. Whoever can create
//! a MemberCluster must not make the controller read (and use, and report on) a Secret they
//! could not read themselves: by default `spec.kubeconfigSecretRef.namespace` may only be the
//! controller's own namespace; `--member-secret-namespaces` adds namespaces and
//! `--allow-any-secret-namespace` lifts the rule. A refused reference is never read; the
//! MemberCluster's `Ready` condition says why (reason [`REFUSED_REASON`]). Errors made from the
//! Secret's content name the key and the field, never the value (`kubeconfig::parse`). Owns that
//! decision and that reading; the connection itself is `membership`'s.

use k8s_openapi::api::core::v1::Secret;

use super::kubeconfig;

/// The field a refusal names; every refusal's message starts with it.
pub const FIELD: &str = "spec.kubeconfigSecretRef.namespace";
/// The flag that adds namespaces.
pub const NAMESPACES_FLAG: &str = "--member-secret-namespaces";
/// The flag that allows any namespace.
pub const ANY_FLAG: &str = "--allow-any-secret-namespace";
/// The `Ready` condition's reason for a refused reference.
pub const REFUSED_REASON: &str = "SecretNamespaceRefused";

/// Where member Secrets may be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SecretNamespaces {
    /// The controller's namespace and these (`--member-secret-namespaces`).
    #[default]
    Own,
    Listed(Vec<String>),
    /// Anywhere (`--allow-any-secret-namespace`).
    Any,
}

impl SecretNamespaces {
    /// From the two flags (`any` wins; clap makes them conflict anyway).
    pub fn from_flags(listed: &[String], any: bool) -> SecretNamespaces {
        let listed: Vec<String> = listed
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        match (any, listed.is_empty()) {
            (true, _) => SecretNamespaces::Any,
            (false, true) => SecretNamespaces::Own,
            (false, false) => SecretNamespaces::Listed(listed),
        }
    }
}

/// The namespace of the Secret a MemberCluster names (`asked`; none: the controller's `own`),
/// or why the controller will not read it: the message names [`FIELD`], the controller's
/// namespace and the flags.
pub fn secret_namespace(
    asked: Option<&str>,
    own: &str,
    allowed: &SecretNamespaces,
) -> Result<String, String> {
    let ns = match asked {
        None | Some("") => return Ok(own.to_string()),
        Some(ns) => ns,
    };
    let ok = ns == own
        || match allowed {
            SecretNamespaces::Own => false,
            SecretNamespaces::Listed(l) => l.iter().any(|n| n == ns),
            SecretNamespaces::Any => true,
        };
    if ok {
        return Ok(ns.to_string());
    }
    let also = match allowed {
        SecretNamespaces::Listed(l) => format!(" or in {}", l.join(", ")),
        _ => String::new(),
    };
    Err(format!(
        "{FIELD} {ns:?}: refused: the controller reads member Secrets only in its own namespace {own:?}{also}; \
         run it with {NAMESPACES_FLAG} {ns} (or {ANY_FLAG}) to allow this one; the Secret was not read"
    ))
}

/// The kubeconfig in key `key` of `secret` (`name`: `namespace/name`, for messages), checked
/// (`kubeconfig::check`; `allow`: `--allow-kubeconfig-files-and-exec`). Errors name the Secret,
/// the key and the field, never the content.
pub fn kubeconfig_in(
    secret: &Secret,
    name: &str,
    key: &str,
    allow: bool,
) -> Result<String, String> {
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .ok_or_else(|| format!("Secret {name} has no key {key:?}"))?;
    let text = String::from_utf8(data.0.clone())
        .map_err(|_| format!("Secret {name} key {key:?} is not UTF-8"))?;
    kubeconfig::check(&text, allow, name, key)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    const OWN: &str = "muster-system";

    #[test]
    fn the_own_namespace_is_the_default_and_always_allowed() {
        for allowed in [
            SecretNamespaces::Own,
            SecretNamespaces::Listed(vec!["members".into()]),
            SecretNamespaces::Any,
        ] {
            assert_eq!(secret_namespace(None, OWN, &allowed), Ok(OWN.into()));
            assert_eq!(secret_namespace(Some(""), OWN, &allowed), Ok(OWN.into()));
            assert_eq!(secret_namespace(Some(OWN), OWN, &allowed), Ok(OWN.into()));
        }
    }

    #[test]
    fn another_namespace_is_refused_naming_the_field_the_namespace_and_the_flags() {
        let e = secret_namespace(Some("team-a"), OWN, &SecretNamespaces::Own).expect_err("refused");
        assert!(
            e.starts_with("spec.kubeconfigSecretRef.namespace \"team-a\": refused"),
            "{e}"
        );
        assert!(e.contains("\"muster-system\""), "{e}");
        assert!(e.contains("--member-secret-namespaces team-a"), "{e}");
        assert!(e.contains("--allow-any-secret-namespace"), "{e}");
        let listed = SecretNamespaces::Listed(vec!["members".into()]);
        let e = secret_namespace(Some("kube-system"), OWN, &listed).expect_err("not listed");
        assert!(e.contains("or in members"), "{e}");
    }

    #[test]
    fn listed_namespaces_and_any_allow_more() {
        let listed = SecretNamespaces::from_flags(&["members".into(), " ".into()], false);
        assert_eq!(listed, SecretNamespaces::Listed(vec!["members".into()]));
        assert_eq!(
            secret_namespace(Some("members"), OWN, &listed),
            Ok("members".into())
        );
        let any = SecretNamespaces::from_flags(&[], true);
        assert_eq!(any, SecretNamespaces::Any);
        assert_eq!(secret_namespace(Some("x"), OWN, &any), Ok("x".into()));
        assert_eq!(
            SecretNamespaces::from_flags(&[], false),
            SecretNamespaces::Own
        );
    }

    fn secret(key: &str, value: &str) -> Secret {
        Secret {
            data: Some([(key.to_string(), ByteString(value.as_bytes().to_vec()))].into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_token_where_the_kubeconfig_belongs_is_not_repeated() {
        let token = "eyJhbGciOiJSUzI1NiJ9.SECRET-TOKEN-VALUE";
        for allow in [false, true] {
            let e = kubeconfig_in(
                &secret("kubeconfig", token),
                "muster-system/m",
                "kubeconfig",
                allow,
            )
            .expect_err("a token is no kubeconfig");
            assert!(!e.contains("SECRET-TOKEN-VALUE"), "{e}");
            assert!(
                e.starts_with("Secret muster-system/m key \"kubeconfig\": the kubeconfig does not parse: the top level: invalid type: string"),
                "{e}"
            );
        }
        let text = format!("users:\n- name: u\n  user:\n    token: {{value: {token}}}\n");
        let e = kubeconfig_in(&secret("config", &text), "ns/m", "config", false)
            .expect_err("a token is a string");
        assert!(!e.contains("SECRET-TOKEN-VALUE"), "{e}");
        assert!(e.contains("key \"config\""), "{e}");
        assert!(e.contains("users[0].user.token: invalid type: map"), "{e}");
    }

    #[test]
    fn a_missing_key_and_bytes_that_are_not_text_are_named() {
        let e =
            kubeconfig_in(&secret("other", "x"), "ns/m", "kubeconfig", false).expect_err("no key");
        assert_eq!(e, "Secret ns/m has no key \"kubeconfig\"");
        let s = Secret {
            data: Some([("kubeconfig".to_string(), ByteString(vec![0xff, 0xfe]))].into()),
            ..Default::default()
        };
        let e = kubeconfig_in(&s, "ns/m", "kubeconfig", false).expect_err("not UTF-8");
        assert_eq!(e, "Secret ns/m key \"kubeconfig\" is not UTF-8");
    }

    #[test]
    fn a_good_kubeconfig_is_returned_as_it_is() {
        let text = "clusters:\n- name: m\n  cluster: {server: 'https://m:6443'}\nusers:\n- name: u\n  user: {token: abc}\n";
        assert_eq!(
            kubeconfig_in(&secret("kubeconfig", text), "ns/m", "kubeconfig", false),
            Ok(text.to_string())
        );
    }
}
