//! `docs/troubleshooting.md` has a heading for every reason the controllers put on a condition or
//! an event, and none for a reason they no longer have. The reasons are read from the code, so a
//! new one fails this test until it is documented.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kaos_harness::repo_root;
use regex::Regex;

const DOC: &str = "docs/troubleshooting.md";

/// A reason as Kubernetes conditions and events use it: an UpperCamelCase identifier.
const REASON: &str = r"[A-Z][A-Za-z0-9]*";

/// The crates whose code runs in the controller processes: the process, the workload skeleton,
/// the controllers and the API types (whose `conditions` module holds the workload kinds'
/// reasons). (kaos-testkit's reasons are kube-apiserver's, kaosctl only starts these
/// controllers.)
fn controller_crates() -> Vec<PathBuf> {
    let crates = repo_root().join("crates");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("crates/ is readable")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| {
                n == "kaos-api"
                    || n == "kaos-runtime"
                    || n == "kaos-workload"
                    || n.ends_with("-controller")
            })
        })
        .collect();
    dirs.sort();
    dirs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("source directory is readable") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A source file without its unit-test module (clippy's `items_after_test_module`, denied in
/// CI, keeps that module last), so reasons that only tests mention do not count.
fn without_test_module(text: &str) -> String {
    let test_module = Regex::new(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{").expect("valid regex");
    let end = test_module.find(text).map_or(text.len(), |m| m.start());
    text[..end].to_string()
}

/// Every source file of the controllers, test modules left out.
fn controller_sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for dir in controller_crates() {
        rust_files(&dir.join("src"), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("source is readable");
            (path, without_test_module(&text))
        })
        .collect()
}

/// The body of the block that opens at `open` (a `{`), braces counted.
fn block(text: &str, open: usize) -> &str {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open..open + i];
                }
            }
            _ => {}
        }
    }
    &text[open..]
}

/// The reasons the sources set, in every form the code gives one:
/// - a `reason: "X"` field (conditions, rollout summaries, build errors);
/// - the first argument of a constructor whose first parameter is `reason: &'static str`
///   (`Problem::failed("X", …)`, or a file's own `failed("X", …)`);
/// - a literal of a function named `…reason` returning `&'static str` (`Missing::reason`,
///   `Step::event_reason`);
/// - a `&str` constant whose doc comment calls it a reason (`CHILD_CONFLICT`);
/// - the reason argument of an event (`events.normal(object, "X", …)`).
fn reasons_in(sources: &[(PathBuf, String)]) -> BTreeSet<String> {
    let field = Regex::new(&format!(r#"\breason:\s*"({REASON})""#)).expect("valid regex");
    let constructor =
        Regex::new(r"fn\s+(\w+)\s*\(\s*reason:\s*&'static\s+str").expect("valid regex");
    let impl_type = Regex::new(r"impl\s+(\w+)\s*\{").expect("valid regex");
    let reason_fn =
        Regex::new(r"fn\s+\w*reason\s*\([^)]*\)\s*->\s*&'static\s+str\s*\{").expect("valid regex");
    let literal = Regex::new(&format!(r#""({REASON})""#)).expect("valid regex");
    let constant = Regex::new(&format!(
        r#"((?:[ \t]*///[^\n]*\n)+)[ \t]*(?:pub(?:\([\w:]+\))?\s+)?const\s+\w+:\s*&(?:'static\s+)?str\s*=\s*"({REASON})";"#
    ))
    .expect("valid regex");
    let event = Regex::new(&format!(
        r#"\.(?:normal|warning)\(\s*[^,()]+,\s*"({REASON})""#
    ))
    .expect("valid regex");

    // `Type::name` of every constructor taking a reason first, wherever it is defined.
    let mut constructors = Vec::new();
    for (_, text) in sources {
        for m in constructor.captures_iter(text) {
            let at = m.get(0).expect("whole match").start();
            match impl_type.captures_iter(&text[..at]).last() {
                Some(owner) => constructors.push(format!("{}::{}", &owner[1], &m[1])),
                // A free function of the file (a resolver's `failed("X", …)`).
                None => constructors.push(m[1].to_string()),
            }
        }
    }
    constructors.sort();
    constructors.dedup();
    let calls: Vec<Regex> = constructors
        .iter()
        .map(|c| {
            Regex::new(&format!(r#"\b{}\(\s*"({REASON})""#, regex::escape(c))).expect("valid regex")
        })
        .collect();

    let mut reasons = BTreeSet::new();
    for (_, text) in sources {
        let mut add = |re: &Regex| {
            reasons.extend(re.captures_iter(text).map(|c| c[1].to_string()));
        };
        add(&field);
        add(&event);
        calls.iter().for_each(&mut add);
        for m in reason_fn.find_iter(text) {
            let body = block(text, m.end() - 1);
            reasons.extend(literal.captures_iter(body).map(|c| c[1].to_string()));
        }
        for c in constant.captures_iter(text) {
            if c[1].to_lowercase().contains("reason") {
                reasons.insert(c[2].to_string());
            }
        }
    }
    reasons
}

/// The reasons the doc has a `##` or `###` heading for: each UpperCamelCase code span in one.
fn documented_reasons(doc: &str) -> BTreeSet<String> {
    let code_span = Regex::new(&format!(r"`({REASON})`")).expect("valid regex");
    doc.lines()
        .filter(|l| l.starts_with("## ") || l.starts_with("### "))
        .flat_map(|l| code_span.captures_iter(l).map(|c| c[1].to_string()))
        .collect()
}

#[test]
fn every_reason_the_controllers_set_is_documented() {
    let in_code = reasons_in(&controller_sources());
    let doc = std::fs::read_to_string(repo_root().join(DOC)).expect("the troubleshooting doc");
    let documented = documented_reasons(&doc);

    let undocumented: Vec<&String> = in_code.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "reasons the controllers set without a `### `Reason`` heading in {DOC} (what it means, \
         what to do): {undocumented:?}"
    );
    let stale: Vec<&String> = documented.difference(&in_code).collect();
    assert!(
        stale.is_empty(),
        "{DOC} documents reasons no controller sets any more (remove them, or if the code gives \
         them in a new form teach this test that form): {stale:?}"
    );
}

/// The scan above is only as good as its forms: each is found, in and across files, and a
/// reason only a test module mentions is not.
#[test]
fn the_scan_finds_a_reason_in_every_form_the_code_gives_one() {
    let source = r#"
pub struct BuildError { pub reason: &'static str, pub message: String }
impl BuildError {
    pub fn new(reason: &'static str, message: String) -> Self { Self { reason, message } }
}
fn build() -> Result<(), BuildError> {
    let update = ConditionUpdate { type_: "Ready", status: false, reason: "FieldForm", message: m };
    Err(BuildError::new(
        "ConstructorForm",
        "what to fix".into(),
    ))
}
impl Step {
    pub fn event_reason(self) -> &'static str {
        match self { Step::A => "ReasonFnForm", Step::B => "OtherArm" }
    }
}
/// The `Ready` reason of a parent whose child name is taken.
pub const CONFLICT: &str = "ConstForm";
/// A condition type.
pub const TYPE: &str = "NotAReason";
async fn publish() { events.normal(parent, "EventForm", changes).await; }
#[cfg(test)]
mod tests {
    fn t() { assert_eq!(BuildError::new("TestOnly", String::new()).reason, "TestOnly"); }
}
"#;
    let other = "fn elsewhere() -> BuildError { BuildError::new(\"OtherFile\", m) }".to_string();
    let found = reasons_in(&[
        (PathBuf::from("a.rs"), without_test_module(source)),
        (PathBuf::from("b.rs"), other),
    ]);
    let expected: BTreeSet<String> = [
        "FieldForm",
        "ConstructorForm",
        "ReasonFnForm",
        "OtherArm",
        "ConstForm",
        "EventForm",
        "OtherFile",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(found, expected);
}
