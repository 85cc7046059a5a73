//! The docs (README.md, CHANGELOG.md, docs/*.md) say what the code does, where a test can check
//! it cheaply: the repository paths they name exist, their links and anchors resolve, the
//! number of controllers and kinds they state is the code's, the CRD size they state is the
//! largest CRD's, the testkit version they state is the one `/version` answers, and the README's
//! layout lists every doc. Files only: no network, no cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use kaos_harness::{repo_root, yaml_documents};
use regex::Regex;

/// The docs these tests read, as (path from the repository root, text).
fn docs() -> Vec<(String, String)> {
    let root = repo_root();
    let mut names = vec!["README.md".to_string(), "CHANGELOG.md".to_string()];
    let mut in_docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .map(|e| {
            e.expect("readable entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    in_docs.sort();
    names.extend(in_docs);
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(root.join(&name))
                .unwrap_or_else(|e| panic!("{name} is readable: {e}"));
            (name, text)
        })
        .collect()
}

/// `text` without its fenced code blocks (their lines blanked, so line numbers stay).
fn prose(text: &str) -> String {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                ""
            } else if fenced {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The line of byte offset `at` in `text`, from 1.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// The top-level entries of the repository a doc can name as a path.
const REPO_DIRS: [&str; 10] = [
    "crates/",
    "charts/",
    "deploy/",
    "docs/",
    "tests/",
    "scripts/",
    "examples/",
    "tools/",
    ".ci/",
    ".github/",
];

/// A repository path named in inline code (`crates/kaos-api`, `scripts/control-plane up DIR`,
/// `Dockerfile.agent-ctrl`): the span's first word, without a `#anchor` or trailing punctuation.
/// None for anything else, and for patterns and placeholders (`crates/*-controller`,
/// `<controller>`, `{a,b}`, `$VAR`, `…`).
fn repo_path(span: &str) -> Option<&str> {
    let word = span.split_whitespace().next()?;
    let word = word
        .split('#')
        .next()?
        .trim_end_matches([',', '.', ';', ':', ')']);
    let is_path = REPO_DIRS.iter().any(|dir| word.starts_with(dir))
        || (word.starts_with("Dockerfile.") && !word.contains('/'));
    let pattern = word.contains(['*', '<', '>', '{', '}', '$', '…', '[', '?']);
    (is_path && !pattern).then_some(word)
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let root = repo_root();
    let code = Regex::new(r"`([^`]+)`").expect("valid regex");
    let mut missing = Vec::new();
    for (name, text) in docs() {
        let text = prose(&text);
        for span in code.captures_iter(&text) {
            let inner = span.get(1).expect("group");
            if let Some(path) = repo_path(inner.as_str())
                && !root.join(path).exists()
            {
                missing.push(format!("{name}:{}: {path}", line_of(&text, inner.start())));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the docs name paths the repository does not have:\n{}",
        missing.join("\n")
    );
}

/// GitHub's anchor of a heading: lower case, letters, digits, `-` and `_` kept, spaces made `-`,
/// everything else dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings, a repeated one numbered `-1`, `-2`, … as GitHub
/// does.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text).lines() {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let base = anchor(heading.trim_start_matches('#'));
        let count = seen.entry(base.clone()).or_default();
        out.insert(match *count {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        });
        *count += 1;
    }
    out
}

#[test]
fn every_link_between_files_and_to_a_heading_resolves() {
    let root = repo_root();
    let code = Regex::new(r"`[^`]*`").expect("valid regex");
    let link = Regex::new(r"\]\(([^)\s]+)\)").expect("valid regex");
    let mut broken = Vec::new();
    for (name, text) in docs() {
        let text = code.replace_all(&prose(&text), "").into_owned();
        for found in link.captures_iter(&text) {
            let target = found.get(1).expect("group");
            let target_text = target.as_str();
            if target_text.contains("://") || target_text.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = target_text
                .split_once('#')
                .map_or((target_text, None), |(f, a)| (f, Some(a)));
            let path: PathBuf = if file.is_empty() {
                root.join(&name)
            } else {
                let dir = Path::new(&name).parent().expect("a doc has a directory");
                root.join(dir).join(file)
            };
            let at = format!("{name}:{}: {target_text}", line_of(&text, target.start()));
            if !path.exists() {
                broken.push(format!("{at} (no such file)"));
                continue;
            }
            if let Some(fragment) = fragment
                && path.extension().is_some_and(|e| e == "md")
            {
                let target_doc = std::fs::read_to_string(&path).expect("linked doc is readable");
                if !anchors(&target_doc).contains(fragment) {
                    broken.push(format!("{at} (no such heading)"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links that lead nowhere:\n{}",
        broken.join("\n")
    );
}

/// The committed CRDs (`deploy/crds`, kept equal to what the code generates by `tests/crds.rs`),
/// as (file, size as compact JSON: what client-side `kubectl apply` stores in its annotation).
fn crds() -> Vec<(String, usize)> {
    let dir = repo_root().join("deploy/crds");
    let mut crds: Vec<(String, usize)> = std::fs::read_dir(&dir)
        .expect("deploy/crds is readable")
        .map(|e| e.expect("readable entry").path())
        .map(|path| {
            let [crd] = &yaml_documents(&path)[..] else {
                panic!("{} holds one CRD", path.display());
            };
            let json = serde_json::to_string(crd).expect("a CRD serializes");
            (
                path.file_name()
                    .expect("a file")
                    .to_string_lossy()
                    .into_owned(),
                json.len(),
            )
        })
        .collect();
    crds.sort();
    crds
}

/// The controller crates: `crates/<name>-controller`, one binary each.
fn controllers() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo_root().join("crates"))
        .expect("crates/ is readable")
        .map(|e| {
            e.expect("readable entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with("-controller"))
        .collect();
    names.sort();
    names
}

fn number(word: &str) -> Option<usize> {
    const WORDS: [&str; 12] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven",
    ];
    WORDS
        .iter()
        .position(|w| w.eq_ignore_ascii_case(word))
        .or_else(|| word.parse().ok())
}

/// Docs that describe the code as it is now. benchmarks.md and testing.md also tell of past runs
/// ("the three controllers of that measurement"), so their counts are history, not checked.
fn current_docs() -> Vec<(String, String)> {
    docs()
        .into_iter()
        .filter(|(name, _)| name != "docs/benchmarks.md" && name != "docs/testing.md")
        .collect()
}

/// Every "N controllers" and "N custom resources" the docs state, against the counts of
/// `what`: (the noun, its count).
fn stated_counts_mismatching(what: &[(&str, usize)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (noun, count) in what {
        let stated = Regex::new(&format!(r"(?i)\b([a-z]+|[0-9]+) {noun}\b")).expect("valid regex");
        for (name, text) in current_docs() {
            for found in stated.captures_iter(&text) {
                let word = found.get(1).expect("group");
                if let Some(n) = number(word.as_str())
                    && n != *count
                {
                    wrong.push(format!(
                        "{name}:{}: \"{}\", but there are {count}",
                        line_of(&text, word.start()),
                        found.get(0).expect("match").as_str()
                    ));
                }
            }
        }
    }
    wrong
}

#[test]
fn the_docs_count_the_controllers_and_kinds_there_are() {
    let controllers = controllers();
    let kinds = crds().len();
    assert_eq!(
        controllers.len(),
        6,
        "a controller was added: update the docs and this test"
    );
    let wrong = stated_counts_mismatching(&[
        ("controllers", controllers.len()),
        ("custom resources", kinds),
    ]);
    assert!(
        wrong.is_empty(),
        "counts the code contradicts:\n{}",
        wrong.join("\n")
    );

    // The places that list the controllers name each of them.
    let docs: BTreeMap<String, String> = docs().into_iter().collect();
    let mut unnamed = Vec::new();
    for controller in &controllers {
        for (doc, written) in [
            ("README.md", format!("`crates/{controller}`")),
            ("docs/install.md", format!("| {controller} |")),
            ("docs/architecture.md", format!("| {controller} |")),
        ] {
            if !docs[doc].contains(&written) {
                unnamed.push(format!("{doc} does not name {controller} ({written})"));
            }
        }
    }
    assert!(unnamed.is_empty(), "{}", unnamed.join("\n"));
}

#[test]
fn the_readme_layout_lists_every_doc() {
    let docs = docs();
    let readme = &docs
        .iter()
        .find(|(name, _)| name == "README.md")
        .expect("README.md")
        .1;
    let unlisted: Vec<&str> = docs
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| name.starts_with("docs/"))
        .filter(|name| !readme.contains(&format!("| `{name}` |")))
        .collect();
    assert!(
        unlisted.is_empty(),
        "README.md's Layout table lists no row for {unlisted:?}"
    );
}

/// The size the docs give for the CRDs ("the largest, the Agent CRD, is about 84 KiB as JSON")
/// is the largest CRD's, as `kubectl apply` stores it (compact JSON), within a tenth.
#[test]
fn the_crd_size_the_docs_state_is_the_largest_crds() {
    let (largest_file, largest) = crds()
        .into_iter()
        .max_by_key(|(_, size)| *size)
        .expect("there are CRDs");
    let kib = largest as f64 / 1024.0;
    let stated = Regex::new(r"about (\d+) KiB as JSON").expect("valid regex");
    let mut found = 0;
    let mut wrong = Vec::new();
    for (name, text) in docs() {
        for size in stated.captures_iter(&text) {
            found += 1;
            let group = size.get(1).expect("group");
            let n: f64 = group.as_str().parse().expect("digits");
            if (n - kib).abs() > kib / 10.0 {
                wrong.push(format!(
                    "{name}:{}: about {n} KiB",
                    line_of(&text, group.start())
                ));
            }
        }
    }
    assert!(
        found > 0,
        "no doc states the CRDs' size (\"about N KiB as JSON\")"
    );
    assert!(
        wrong.is_empty(),
        "the largest CRD, {largest_file}, is {kib:.1} KiB as JSON; the docs say otherwise:\n{}",
        wrong.join("\n")
    );
}

/// What kaos-testkit's `/version` answers: `KUBERNETES_VERSION` in its discovery module.
fn testkit_version() -> String {
    let source =
        std::fs::read_to_string(repo_root().join("crates/kaos-testkit/src/http/discovery.rs"))
            .expect("the testkit's discovery module is readable");
    let constant =
        Regex::new(r#"pub const KUBERNETES_VERSION: &str = "(v[0-9.]+)";"#).expect("valid regex");
    constant
        .captures(&source)
        .expect("discovery.rs declares KUBERNETES_VERSION")[1]
        .to_string()
}

#[test]
fn the_testkit_version_the_docs_state_is_the_one_it_reports() {
    let version = testkit_version();
    let answered = format!("{version}+kaos-testkit");
    let minor = version.split('.').nth(1).expect("vMAJOR.MINOR.PATCH");
    let any_answer = Regex::new(r"v[0-9]+\.[0-9]+\.[0-9]+\+kaos-testkit").expect("valid regex");
    let reports = Regex::new(r"reports itself as (v[0-9]+\.[0-9]+\.[0-9]+)").expect("valid regex");
    let mut wrong = Vec::new();
    for (name, text) in docs() {
        for found in any_answer.find_iter(&text) {
            if found.as_str() != answered {
                wrong.push(format!(
                    "{name}:{}: {}",
                    line_of(&text, found.start()),
                    found.as_str()
                ));
            }
        }
        for found in reports.captures_iter(&text) {
            let stated = found.get(1).expect("group");
            if stated.as_str() != version {
                wrong.push(format!(
                    "{name}:{}: {}",
                    line_of(&text, stated.start()),
                    stated.as_str()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the testkit answers {answered}; the docs say:\n{}",
        wrong.join("\n")
    );
    let testkit = std::fs::read_to_string(repo_root().join("docs/testkit.md")).expect("readable");
    assert!(
        testkit.contains(&answered) && testkit.contains(&format!("minor: \"{minor}\"")),
        "docs/testkit.md states the version /version answers ({answered}, minor {minor})"
    );
}

/// docs/install.md counts the uninstall hooks the chart renders by default: one per subchart
/// whose controller's kind carries a finalizer (it passes `"resource"` to kaos-lib.controller).
#[test]
fn the_uninstall_hooks_the_docs_count_are_the_charts() {
    let subcharts = repo_root().join("charts/kaos/charts");
    let hooked = controllers()
        .iter()
        .filter(|controller| {
            let template = subcharts.join(controller).join("templates/controller.yaml");
            std::fs::read_to_string(&template)
                .unwrap_or_else(|e| panic!("{} is readable: {e}", template.display()))
                .contains("\"resource\" \"")
        })
        .count();
    let install = std::fs::read_to_string(repo_root().join("docs/install.md")).expect("readable");
    let stated =
        Regex::new(r"(?i)\b([a-z]+) by default, one per controller whose kind carries a finalizer")
            .expect("valid regex");
    let word = stated
        .captures(&prose(&install).replace('\n', " "))
        .expect("docs/install.md counts the uninstall hooks")[1]
        .to_string();
    assert_eq!(
        number(&word),
        Some(hooked),
        "docs/install.md says {word} uninstall hooks; the chart renders {hooked}"
    );
}
