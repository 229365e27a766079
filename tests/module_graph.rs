//! The shape of the code: no module imports a sibling that imports it back, directly or through
//! others, in any directory module of `src` (the controller's steps, the lifecycle core, the fault
//! simulation, ...). A circle means a step reaches into the state of a step that reaches back,
//! which is how the controller's `Brain` once grew fifty public fields and thirteen `impl`
//! blocks in thirteen files. Read from the source as written: `super::x` and
//! `crate::<dir>::x` name the sibling `x`; anything else `super::` names is the parent module's
//! own item, an edge to the parent. Tests (`#[cfg(test)] mod ...` and what follows) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A directory module's files and the siblings each one names.
type Graph = BTreeMap<String, BTreeSet<String>>;

const PARENT: &str = "(parent)";

/// Every directory of `src` that is a module with files of its own.
fn directories(src: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![src.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut has_files = false;
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                has_files = true;
            }
        }
        if has_files && d != src {
            out.push(d);
        }
    }
    out.sort();
    out
}

/// The source without its tests and its comment lines (a doc link names no dependency).
fn without_tests(text: &str) -> String {
    let mut cut = text.len();
    for (i, _) in text.match_indices("#[cfg(test)]") {
        let rest = text[i + "#[cfg(test)]".len()..].trim_start();
        let declared = rest
            .strip_prefix("pub ")
            .unwrap_or(rest)
            .strip_prefix("mod ");
        // An inline test module (`mod tests {`) ends the file's code; a declared one
        // (`mod tests;`, a file of its own) does not.
        if declared.is_some_and(|d| {
            d.find('{')
                .is_some_and(|b| d.find(';').is_none_or(|s| b < s))
        }) {
            cut = cut.min(i);
        }
    }
    text[..cut]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segment of each item in `super::{a, b::c, d as e}`.
fn group_items(group: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => out.push(std::mem::take(&mut item)),
            _ if depth == 0 => item.push(c),
            _ => {}
        }
    }
    out.push(item);
    out.iter()
        .filter_map(|i| {
            let first = i.trim().split("::").next()?.split_whitespace().next()?;
            (!first.is_empty()).then(|| first.to_string())
        })
        .collect()
}

/// The identifier at the start of `s`.
fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The siblings (or the parent) that the module `text` names.
fn names(text: &str, dir_name: &str, siblings: &BTreeSet<String>) -> BTreeSet<String> {
    let text = without_tests(text);
    let text = text.as_str();
    let mut out = BTreeSet::new();
    let mut add = |name: &str| {
        if siblings.contains(name) {
            out.insert(name.to_string());
        } else if name != "self" && name != "super" && !name.is_empty() {
            out.insert(PARENT.to_string());
        }
    };
    let crate_path = format!("crate::{dir_name}::");
    for prefix in ["super::", crate_path.as_str()] {
        for (i, _) in text.match_indices(prefix) {
            // `super::super::x` names the grandparent: not a sibling.
            if prefix == "super::" && text[..i].ends_with("super::") {
                continue;
            }
            let rest = &text[i + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find("};").or_else(|| group.find('}'));
                for item in group_items(&group[..end.unwrap_or(group.len())]) {
                    add(&item);
                }
            } else {
                add(ident(rest));
            }
        }
    }
    out
}

/// The graph of one directory module: each file's module and what it names; the parent
/// (`<dir>.rs` or `<dir>/mod.rs`) names the siblings it uses by `x::`.
fn graph(dir: &Path) -> Graph {
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "rs") {
            let name = p
                .file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            files.insert(name, std::fs::read_to_string(&p).unwrap_or_default());
        }
    }
    let parent_text = files
        .remove("mod")
        .or_else(|| std::fs::read_to_string(dir.with_extension("rs")).ok())
        .unwrap_or_default();
    let siblings: BTreeSet<String> = files.keys().cloned().collect();
    let mut g: Graph = files
        .iter()
        .map(|(m, text)| {
            let mut n = names(text, &dir_name, &siblings);
            n.remove(m);
            (m.clone(), n)
        })
        .collect();
    let parent_uses: BTreeSet<String> = siblings
        .iter()
        .filter(|s| {
            let text = without_tests(&parent_text);
            let text = text.as_str();
            text.match_indices(&format!("{s}::")).any(|(i, _)| {
                i == 0
                    || !text[..i]
                        .ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            })
        })
        .cloned()
        .collect();
    g.insert(PARENT.to_string(), parent_uses);
    g
}

/// The circles of `g`: its strongly connected components of more than one module (Tarjan).
fn circles(g: &Graph) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        let g = t.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !g.contains_key(w) {
                continue;
            }
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(lw));
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dirs = directories(&src);
    assert!(
        dirs.iter().any(|d| d.ends_with("controller")),
        "found no src/controller among {dirs:?}"
    );
    let mut found = Vec::new();
    for d in &dirs {
        let g = graph(d);
        // The parser must see the edges that are there: the controller's brain uses its steps.
        if d.ends_with("controller") {
            assert!(
                g.get("brain")
                    .is_some_and(|n| n.contains("ctx") && n.contains("execute")),
                "the controller's brain should name ctx and execute: {:?}",
                g.get("brain")
            );
        }
        // Between siblings nowhere; in the controller not through its parent either (its
        // parent is pure wiring: `run()`).
        let mut siblings = g.clone();
        if !d.ends_with("controller") {
            siblings.remove(PARENT);
        }
        for c in circles(&siblings) {
            found.push(format!("{}: {}", d.display(), c.join(" ↔ ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules in a circle:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_reader_sees_groups_paths_and_the_parent() {
    let siblings: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let text = "//! See [`super::d`].\nuse super::{a, b::X, Options as O};\nfn f() { super::c::g(); super::now_ms(); }\n#[cfg(test)]\nmod tests { use super::super::z; use super::b; }";
    let n = names(text, "controller", &siblings);
    let want: BTreeSet<String> = ["a", "b", "c", PARENT]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(n, want);
    // A test module declared in a file of its own does not end the code.
    let n = names("#[cfg(test)]\nmod x_tests;\nuse super::a;", "x", &siblings);
    assert!(n.contains("a"), "{n:?}");
    // Only tests name `d`: left out.
    let n = names("#[cfg(test)]\nmod tests { use super::d; }", "x", &siblings);
    assert!(n.is_empty(), "{n:?}");
}

#[test]
fn a_circle_is_found_and_a_chain_is_not() {
    let g = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert!(circles(&g(&[("a", "b"), ("b", "c")])).is_empty());
    assert_eq!(
        circles(&g(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
}
