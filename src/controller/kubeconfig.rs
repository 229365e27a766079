//! Member kubeconfigs read from Secrets, checked before a client is built from them. Whoever can
//! write such a Secret must not be able to run a program in the controller or make it read one of
//! its own files (its ServiceAccount token is a file, and the kubeconfig also names the server
//! the credentials are sent to). So by default only inline credentials are accepted, and every
//! field that runs a program or reads a file is refused with its path; the controller flag
//! `--allow-kubeconfig-files-and-exec` lifts the check. A kubeconfig that does not parse is
//! reported by the path of the offending field and the kind of problem, never with its value
//! (serde quotes the value it could not read, and that value may be a token): every error made
//! from a Secret's content goes through [`parse`]. Owns that check and that parsing.

use kube::config::Kubeconfig;

pub use super::kubeconfig_errors::{parse, redact};

/// The fields accepted without the flag, as the refusal names them.
const INLINE: &str = "token, username/password, client-certificate-data, client-key-data, \
                      certificate-authority-data";

/// The flag that lifts the check.
pub const ALLOW_FLAG: &str = "--allow-kubeconfig-files-and-exec";

/// Every field of `kc` that makes the client run a program or read a file, as
/// `<path>: <why>` (`users[0].user.exec: runs a program`), in document order. Covers every
/// cluster and user, not only the current context's.
pub fn refused_fields(kc: &Kubeconfig) -> Vec<String> {
    const RUNS: &str = "runs a program in the controller";
    const READS: &str = "reads a file in the controller";
    let mut out = Vec::new();
    for (i, c) in kc.clusters.iter().enumerate() {
        let Some(cluster) = &c.cluster else { continue };
        if cluster.certificate_authority.is_some() {
            out.push(format!(
                "clusters[{i}].cluster.certificate-authority: {READS}"
            ));
        }
    }
    for (i, u) in kc.auth_infos.iter().enumerate() {
        let Some(user) = &u.auth_info else { continue };
        let fields = [
            ("exec", user.exec.is_some(), RUNS),
            (
                "auth-provider",
                user.auth_provider.is_some(),
                "can run a program in the controller (gcp cmd-path)",
            ),
            ("tokenFile", user.token_file.is_some(), READS),
            (
                "client-certificate",
                user.client_certificate.is_some(),
                READS,
            ),
            ("client-key", user.client_key.is_some(), READS),
        ];
        for (field, present, why) in fields {
            if present {
                out.push(format!("users[{i}].user.{field}: {why}"));
            }
        }
    }
    out
}

/// The clusters of `kc` whose serving certificate is not verified (`insecure-skip-tls-verify`).
/// Accepted (nothing is run or read), but the controller warns when it connects.
pub fn unverified_clusters(kc: &Kubeconfig) -> Vec<String> {
    kc.clusters
        .iter()
        .filter(|c| {
            c.cluster
                .as_ref()
                .is_some_and(|c| c.insecure_skip_tls_verify == Some(true))
        })
        .map(|c| c.name.clone())
        .collect()
}

/// Checks the kubeconfig `text` read from key `key` of Secret `secret` (`namespace/name`).
/// `allow`: the controller runs with `--allow-kubeconfig-files-and-exec` (it must still parse;
/// no field is refused).
/// The error names the Secret, the key and every refused field; it goes into the
/// MemberCluster's `Ready` condition like any other connection error.
pub fn check(text: &str, allow: bool, secret: &str, key: &str) -> Result<(), String> {
    let kc = parse(text)
        .map_err(|e| format!("Secret {secret} key {key:?}: the kubeconfig does not parse: {e}"))?;
    if allow {
        return Ok(());
    }
    let refused = refused_fields(&kc);
    if refused.is_empty() {
        return Ok(());
    }
    Err(format!(
        "Secret {secret} key {key:?}: refused: {}; only inline credentials are accepted ({INLINE}) unless the controller runs with {ALLOW_FLAG}",
        refused.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==";

    /// A kubeconfig with one cluster and one user, with the given extra lines.
    fn kubeconfig(cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: m\n  cluster:\n    server: https://m.example.com:6443\n{cluster}users:\n- name: u\n  user:\n{user}contexts:\n- name: m\n  context: {{cluster: m, user: u}}\ncurrent-context: m\n"
        )
    }

    fn ca_data() -> String {
        format!("    certificate-authority-data: {CA}\n")
    }

    #[test]
    fn inline_credentials_are_accepted() {
        for user in [
            "    token: abc.def\n".to_string(),
            format!("    client-certificate-data: {CA}\n    client-key-data: {CA}\n"),
            "    username: admin\n    password: secret\n".to_string(),
        ] {
            let text = kubeconfig(&ca_data(), &user);
            assert_eq!(check(&text, false, "ns/s", "kubeconfig"), Ok(()), "{user}");
        }
        // No CA at all (the system roots) reads nothing either.
        let text = kubeconfig("", "    token: abc\n");
        assert_eq!(check(&text, false, "ns/s", "kubeconfig"), Ok(()));
    }

    #[test]
    fn every_field_that_runs_or_reads_is_refused_with_its_path() {
        let exec = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, 'curl evil']\n";
        let provider = "    auth-provider:\n      name: gcp\n      config: {cmd-path: /bin/sh}\n";
        for (cluster, user, path, why) in [
            (
                ca_data(),
                exec.to_string(),
                "users[0].user.exec",
                "runs a program",
            ),
            (
                ca_data(),
                provider.to_string(),
                "users[0].user.auth-provider",
                "can run a program",
            ),
            (
                ca_data(),
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n".into(),
                "users[0].user.tokenFile",
                "reads a file",
            ),
            (
                ca_data(),
                format!("    client-certificate: /etc/c.crt\n    client-key-data: {CA}\n"),
                "users[0].user.client-certificate",
                "reads a file",
            ),
            (
                ca_data(),
                format!("    client-certificate-data: {CA}\n    client-key: /etc/c.key\n"),
                "users[0].user.client-key",
                "reads a file",
            ),
            (
                "    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt\n"
                    .into(),
                "    token: abc\n".into(),
                "clusters[0].cluster.certificate-authority",
                "reads a file",
            ),
        ] {
            let text = kubeconfig(&cluster, &user);
            let e = check(&text, false, "muster-system/member-a", "kubeconfig").expect_err(path);
            assert!(
                e.starts_with("Secret muster-system/member-a key \"kubeconfig\": refused: "),
                "{e}"
            );
            assert!(e.contains(&format!("{path}: {why}")), "{e}");
            assert!(e.contains(ALLOW_FLAG), "{e}");
            // The flag allows it.
            assert_eq!(
                check(&text, true, "muster-system/member-a", "kubeconfig"),
                Ok(())
            );
        }
    }

    #[test]
    fn every_refused_field_is_listed_across_entries_and_documents() {
        let text = format!(
            "{}---\nusers:\n- name: other\n  user:\n    tokenFile: /t\n",
            kubeconfig(
                "    certificate-authority: /ca\n",
                "    exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}\n"
            )
        );
        let e = check(&text, false, "ns/s", "k").expect_err("refused");
        for path in [
            "clusters[0].cluster.certificate-authority",
            "users[0].user.exec",
            "users[1].user.tokenFile",
        ] {
            assert!(e.contains(path), "{path}: {e}");
        }
    }

    #[test]
    fn the_documented_example_is_accepted() {
        use serde::Deserialize;
        let text = include_str!("../../examples/membercluster.yaml");
        let secret = serde_yaml::Deserializer::from_str(text)
            .filter_map(|d| serde_yaml::Value::deserialize(d).ok())
            .find(|d| d["kind"] == "Secret")
            .expect("the example has a Secret");
        let kubeconfig = secret["stringData"]["kubeconfig"]
            .as_str()
            .expect("stringData.kubeconfig");
        assert_eq!(
            check(
                kubeconfig,
                false,
                "muster-system/member-c-kubeconfig",
                "kubeconfig"
            ),
            Ok(())
        );
    }

    #[test]
    fn an_unparsable_kubeconfig_names_the_secret() {
        let e = check("clusters: [", false, "ns/s", "kubeconfig").expect_err("does not parse");
        assert!(
            e.starts_with("Secret ns/s key \"kubeconfig\": the kubeconfig does not parse"),
            "{e}"
        );
    }

    #[test]
    fn skipping_tls_verification_is_accepted_and_reported() {
        let text = kubeconfig("    insecure-skip-tls-verify: true\n", "    token: abc\n");
        assert_eq!(check(&text, false, "ns/s", "kubeconfig"), Ok(()));
        let kc = Kubeconfig::from_yaml(&text).expect("parses");
        assert_eq!(unverified_clusters(&kc), vec!["m".to_string()]);
        let kc =
            Kubeconfig::from_yaml(&kubeconfig(&ca_data(), "    token: abc\n")).expect("parses");
        assert!(unverified_clusters(&kc).is_empty());
    }
}
