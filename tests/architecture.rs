//! The shape `docs/architecture.md` promises, checked on the sources so it stays true: the
//! process half (`kaos-runtime`) knows no kaos.tools kind, no controller depends on another, no
//! two modules of a crate import each other (directly or round a circle), no source file
//! grows past ~600 lines without saying why at its top, and API errors are classified by kube's
//! `Status` helpers, not raw codes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use kaos_harness::repo_root;
use regex::Regex;

/// Longer than this, a file says at its top why it is long (a line with "long" in its first
/// ten, e.g. "Long because the cases read best side by side").
const MAX_LINES: usize = 600;

fn crates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("crates"))
        .expect("crates/ is readable")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    dirs.sort();
    dirs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `[dependencies]` (not dev) of a crate's manifest, by name.
fn dependencies(crate_dir: &Path) -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).expect("manifest");
    let section = manifest
        .split("\n[dependencies]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap_or_default();
    section
        .lines()
        .filter_map(|line| line.split(['=', '.', ' ']).next())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .map(String::from)
        .collect()
}

#[test]
fn the_process_half_knows_no_kind_and_controllers_depend_on_no_controller() {
    let runtime = dependencies(&repo_root().join("crates/kaos-runtime"));
    assert!(
        !runtime.contains("kaos-api") && !runtime.contains("kaos-workload"),
        "kaos-runtime must stay the process half: {runtime:?}"
    );
    for dir in crates() {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        if !name.ends_with("-controller") {
            continue;
        }
        let others: Vec<String> = dependencies(&dir)
            .into_iter()
            .filter(|d| d.ends_with("-controller"))
            .collect();
        assert!(others.is_empty(), "{name} depends on {others:?}");
    }
}

/// A crate's top-level module of each source file (`crate` for lib.rs/main.rs), by file.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_string()
}

/// The code of a file that is compiled outside tests and is not a comment.
fn code(text: &str) -> String {
    let test_module = Regex::new(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*[;{]").expect("valid regex");
    let end = test_module.find(text).map_or(text.len(), |m| m.start());
    let comment = Regex::new(r"(?m)^\s*//.*$").expect("valid regex");
    comment.replace_all(&text[..end], "").into_owned()
}

/// The modules of this crate a file's code names (`crate::x`, `crate::{x, y}`).
fn used_modules(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let path = Regex::new(r"crate::(\w+)").expect("valid regex");
    let group = Regex::new(r"crate::\{([^}]*)\}").expect("valid regex");
    let word = Regex::new(r"(?:^|,)\s*(\w+)").expect("valid regex");
    let mut used: BTreeSet<String> = path.captures_iter(code).map(|c| c[1].to_string()).collect();
    for names in group.captures_iter(code) {
        used.extend(word.captures_iter(&names[1]).map(|c| c[1].to_string()));
    }
    used.retain(|m| modules.contains(m));
    used
}

/// A circle in `graph`, if any (the modules on it, in order).
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            return Some(path[at..].to_vec());
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    for dir in crates() {
        let src = dir.join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let modules: BTreeSet<String> = files
            .iter()
            .map(|f| module_of(&src, f))
            .filter(|m| !["lib", "main", "bin"].contains(&m.as_str()))
            .collect();
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in &files {
            let module = module_of(&src, file);
            if !modules.contains(&module) {
                continue;
            }
            let text = std::fs::read_to_string(file).expect("source is readable");
            let mut used = used_modules(&code(&text), &modules);
            used.remove(&module);
            graph.entry(module).or_default().extend(used);
        }
        assert_eq!(
            circle(&graph),
            None,
            "modules of {} import each other round this circle",
            dir.display()
        );
    }
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("build", vec!["resolve"]),
        ("resolve", vec!["naming"]),
        ("naming", vec!["build"]),
        ("status", vec!["build"]),
    ]
    .into_iter()
    .map(|(m, used)| (m.into(), used.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        circle(&graph),
        Some(vec!["build".into(), "resolve".into(), "naming".into()])
    );
    let mut acyclic = graph;
    acyclic.insert("naming".into(), BTreeSet::new());
    assert_eq!(circle(&acyclic), None);
}

#[test]
fn no_source_file_is_long_without_a_reason_at_its_top() {
    let mut files = Vec::new();
    for dir in crates() {
        rust_files(&dir.join("src"), &mut files);
        rust_files(&dir.join("tests"), &mut files);
    }
    rust_files(&repo_root().join("tests"), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let text = std::fs::read_to_string(file).expect("source is readable");
            let lines = text.lines().count();
            let says_why = text
                .lines()
                .take(10)
                .any(|line| line.starts_with("//") && line.to_lowercase().contains("long"));
            (lines > MAX_LINES && !says_why).then(|| format!("{} ({lines} lines)", file.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these by concern, or say at the top why they are long: {long:?}"
    );
}

#[test]
fn api_errors_are_classified_by_kubes_status_helpers() {
    // `status.code == 404` and the like: kube's `Status::is_not_found`, `is_conflict`,
    // `is_already_exists`, `is_forbidden` and `is_invalid` say what is meant, by the reason the
    // API server gives (a 409 is a Conflict or an AlreadyExists, which callers treat apart).
    // kaos-testkit is the API server: it sets codes, it does not classify them.
    let raw = Regex::new(r"\b(?:s|status|e|error)\.code\s*(?:==|!=)\s*\d{3}").expect("valid regex");
    let mut files = Vec::new();
    for dir in crates().iter().filter(|d| !d.ends_with("kaos-testkit")) {
        rust_files(&dir.join("src"), &mut files);
    }
    let found: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = code(&std::fs::read_to_string(file).expect("source is readable"));
            raw.find_iter(&text)
                .map(|m| format!("{}: {}", file.display(), m.as_str()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(found.is_empty(), "use kube's Status helpers: {found:?}");
}

#[test]
fn kaosctl_render_assembles_no_kind_of_its_own() {
    // It gathers each kind's inputs from the manifests and prints what that kind's `desired()`
    // returns: putting children together itself would let a rendered object and a reconciled
    // one differ.
    let mut files = Vec::new();
    rust_files(&repo_root().join("crates/kaosctl/src/render"), &mut files);
    assert!(!files.is_empty(), "kaosctl render's sources are found");
    let text: String = files
        .iter()
        .map(|f| code(&std::fs::read_to_string(f).expect("render's sources are readable")))
        .collect();
    let assembly = [
        "WorkloadChildren",
        ".scaled(",
        ".fenced(",
        "::build::build(",
        "::build::built(",
        "resolve::resolve(",
        "bind_memory(",
        "network::policy(",
        "models::resolve(",
    ];
    let found: Vec<&str> = assembly.into_iter().filter(|a| text.contains(a)).collect();
    assert!(
        found.is_empty(),
        "kaosctl render assembles children itself: {found:?}"
    );
}

/// The pure modules: what a reconcile computes from what it read, with no IO of its own, so it
/// is tested by calling it and `kaosctl render` can run it without a cluster. Paths under
/// `crates/`; a folder holds its files.
const PURE: &[&str] = &[
    "kaos-workload/src/build",
    "kaos-workload/src/desired",
    "kaos-workload/src/build/network_policy",
    "kaos-workload/src/hash.rs",
    "kaos-workload/src/conditions.rs",
    "kaos-workload/src/verification/rollout.rs",
    "agent-controller/src/build.rs",
    "agent-controller/src/conditions.rs",
    "agent-controller/src/desired.rs",
    "agent-controller/src/naming.rs",
    "agent-controller/src/network.rs",
    "agent-controller/src/resolve.rs",
    "agent-controller/src/status.rs",
    "modelapi-controller/src/build.rs",
    "modelapi-controller/src/litellm.rs",
    "modelapi-controller/src/models.rs",
    "modelapi-controller/src/status.rs",
    "mcpserver-controller/src/build.rs",
    "mcpserver-controller/src/status.rs",
    "memorystore-controller/src/build.rs",
    "memorystore-controller/src/models.rs",
    "memorystore-controller/src/status.rs",
    "workflow-controller/src/engine",
    "workflow-controller/src/schedule",
];

/// What a pure module must not name: the IO half of kaos-workload (the reconcile skeleton, the
/// writes, the triggers, the caches' stores; the caches' slim object types are data and allowed),
/// a kube client, or an await.
fn io_uses(code: &str) -> Vec<String> {
    let rules = [
        r"(?:crate|kaos_workload)::(?:converge|reconcile|trigger)\b",
        r"(?:crate|kaos_workload)::cache::(?:child_store|relist|\{|[a-z_]+\s*[;(<])",
        r"(?:crate|kaos_workload)::\{[^}]*\b(?:converge|reconcile|trigger|cache)\b",
        r"\bkube::(?:Api|Client)\b|\bkube::\{[^}]*\b(?:Api|Client)\b",
        r"\.await\b",
    ];
    rules
        .iter()
        .flat_map(|rule| {
            let rule = Regex::new(rule).expect("valid regex");
            rule.find_iter(code)
                .map(|m| m.as_str().to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn pure_modules_do_no_io() {
    let root = repo_root().join("crates");
    let mut found = Vec::new();
    for pure in PURE {
        let path = root.join(pure);
        assert!(path.exists(), "{pure} is listed pure but does not exist");
        let mut files = Vec::new();
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            files.push(path);
        }
        for file in files {
            let text = code(&std::fs::read_to_string(&file).expect("source is readable"));
            found.extend(
                io_uses(&text)
                    .into_iter()
                    .map(|u| format!("{}: {u}", file.display())),
            );
        }
    }
    assert!(found.is_empty(), "pure modules doing IO: {found:#?}");
}

#[test]
fn the_io_rule_sees_io() {
    for io in [
        "use crate::converge::ChildSet;",
        "use kaos_workload::reconcile::Core;",
        "use kaos_workload::{hash, trigger::Index};",
        "use crate::cache::child_store::ChildStore;",
        "let s = crate::cache::cache(api);",
        "use kube::{Api, ResourceExt};",
        "x.get(name).await?",
    ] {
        assert!(!io_uses(io).is_empty(), "{io} is IO");
    }
    for pure in [
        "use crate::cache::deployment_view::DeploymentView;",
        "use kube::ResourceExt;",
        "use crate::desired::Desired;",
    ] {
        assert!(io_uses(pure).is_empty(), "{pure} is no IO");
    }
}

/// A reason written as a literal where a status or problem is made (`Problem::failed("...")`,
/// `reason: "..."`): reasons are constants, defined once (`kaos_api::conditions` for those of
/// more than one kind), so the code, docs/troubleshooting.md and the tests name the same ones.
fn reason_literals(code: &str) -> Vec<String> {
    let rule = Regex::new(
        r#"\b(?:failed|waiting)\(\s*"[A-Z][^"]*"|\breason:\s*(?:Some\(\s*)?"[A-Z][A-Za-z]*"|\.reason\s*=\s*"[A-Z]"#,
    )
    .expect("valid regex");
    rule.find_iter(code)
        .map(|m| m.as_str().to_string())
        .collect()
}

#[test]
fn no_reason_literal_at_a_construction_site() {
    let mut files = Vec::new();
    for dir in crates()
        .iter()
        .filter(|d| !d.ends_with("kaos-testkit") && !d.ends_with("kaos-harness"))
    {
        rust_files(&dir.join("src"), &mut files);
    }
    let found: Vec<String> = files
        .iter()
        .filter(|file| !file.ends_with("tests.rs"))
        .flat_map(|file| {
            let text = code(&std::fs::read_to_string(file).expect("source is readable"));
            reason_literals(&text)
                .into_iter()
                .map(|l| format!("{}: {l}", file.display()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(found.is_empty(), "reasons written as literals: {found:#?}");
}

#[test]
fn the_reason_rule_sees_literals() {
    for literal in [
        "Problem::failed(\"NoImage\", m)",
        "Problem::waiting(\n    \"ModelAPINotReady\",\n m)",
        "Condition { reason: \"DeploymentReady\".into(), .. }",
        "reason: Some(\"Resolved\".into())",
    ] {
        assert!(
            !reason_literals(literal).is_empty(),
            "{literal} is a literal"
        );
    }
    for constant in [
        "Problem::failed(NO_IMAGE, m)",
        "reason: \"its condition is false\".into()",
    ] {
        assert!(reason_literals(constant).is_empty(), "{constant} is none");
    }
}
