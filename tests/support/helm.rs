//! helm for tests: built from its Go module by `hack/helm/build.sh` (cached), never looked up
//! on PATH. A test that needs helm fails, never skips, when it cannot be built.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::fleet::repo_root;

/// The chart, relative to the repository root.
pub const CHART: &str = "charts/muster";
/// The release name and namespace the tests render with.
pub const RELEASE: &str = "muster";
pub const NAMESPACE: &str = "muster-system";

/// Path of the helm binary (builds it on first use; panics when that fails).
pub fn helm() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = BIN.get_or_init(|| {
        let out = Command::new("hack/helm/build.sh")
            .current_dir(repo_root())
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| format!("running hack/helm/build.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "hack/helm/build.sh failed ({}); its output is above",
                out.status
            ));
        }
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!("hack/helm/build.sh printed {path:?}, not a file"))
        }
    });
    match r {
        Ok(p) => p.clone(),
        Err(e) => panic!("helm is not available: {e}"),
    }
}

/// Runs helm with `args` in the repository root: Ok(stdout) or Err(stderr).
pub fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(helm())
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("running helm: {e}"));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `helm template muster charts/muster --namespace muster-system --include-crds --set ...`:
/// every rendered object, in helm's order, or helm's error.
pub fn try_render(set: &[&str]) -> Result<Vec<Value>, String> {
    let mut args = vec![
        "template",
        RELEASE,
        CHART,
        "--namespace",
        NAMESPACE,
        "--include-crds",
    ];
    for s in set {
        args.push("--set");
        args.push(s);
    }
    let text = run(&args)?;
    let mut docs = Vec::new();
    for d in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(d)
            .unwrap_or_else(|e| panic!("helm's output is not YAML: {e}\n{text}"));
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// `try_render` that panics on helm's error.
pub fn render(set: &[&str]) -> Vec<Value> {
    try_render(set).unwrap_or_else(|e| panic!("helm template {set:?} failed:\n{e}"))
}

/// The one rendered object of `kind` named `name` (panics when there is not exactly one).
pub fn one<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "{kind} {name}: {} rendered", found.len());
    found[0]
}

/// Every rendered object of `kind`.
pub fn all<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}
