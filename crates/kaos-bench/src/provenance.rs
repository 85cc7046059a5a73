//! Where, when, on what and from what a run was made: the stamp each raw results file carries
//! (the commit and whether the tree was dirty, the measured binaries, rustc, the machine, the
//! date, the command line, the load average), so a figure in docs/benchmarks.md can be traced to
//! the run that measured it.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// What `program args` prints (trimmed), or None if it cannot run or fails.
fn output(program: &str, args: &[&str], dir: &Path) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Now, UTC, to the second (`2026-11-28T09:14:03Z`).
pub fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`).
pub fn load_average() -> Value {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let loads: Vec<f64> = text
        .split_whitespace()
        .take(3)
        .filter_map(|v| v.parse().ok())
        .collect();
    json!(loads)
}

/// The first `field` line of a `/proc` file of `key: value` lines.
fn proc_field(path: &str, field: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == field).then(|| value.trim().to_string())
    })
}

/// A word as a POSIX shell reads it back: quoted only when it needs to be.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The binaries a run starts (the chart's controllers and kaos-testkit) from `dir`: name →
/// SHA-256 and modification time, so the figures name the builds they measured.
fn binaries(dir: &Path, root: &Path) -> Value {
    let mut names: Vec<String> = kaos_harness::processes::documents("deploy/kaos.yaml")
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(kaos_harness::processes::binary_of)
        .collect();
    names.push("kaos-testkit".into());
    names.sort();
    names.dedup();
    let mut out = serde_json::Map::new();
    for name in names {
        let path = dir.join(&name);
        let sha256 = output("sha256sum", &[&path.to_string_lossy()], root)
            .and_then(|line| line.split_whitespace().next().map(str::to_string));
        let modified = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| Timestamp::try_from(t).ok())
            .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        out.insert(name, json!({"sha256": sha256, "modified": modified}));
    }
    Value::Object(out)
}

/// The paths of `git status --porcelain` lines (`XY PATH`, or `XY OLD -> NEW`). The status may
/// start with a space that the output's trimming took from the first line, so the path is what
/// follows the first space after the status letters, not a fixed column.
fn changed_paths(porcelain: &str) -> Vec<String> {
    porcelain
        .lines()
        .filter_map(|line| line.trim_start().split_once(' '))
        .map(|(_, path)| path.trim_start())
        .map(|path| {
            path.rsplit_once(" -> ")
                .map_or(path, |(_, new)| new)
                .to_string()
        })
        .collect()
}

/// The stamp at the start of an invocation: the repository's commit and the paths that differ
/// from it (tracked files only), the toolchain, the machine, the date, the command line and the
/// load average. `finished` and the load at the end are added by [`finish`].
pub fn start(bin_dir: &Path, note: Option<&str>) -> Value {
    let root: PathBuf = kaos_harness::repo_root();
    let git = |args: &[&str]| output("git", args, &root);
    let commit = git(&["rev-parse", "HEAD"]);
    let changed =
        changed_paths(&git(&["status", "--porcelain", "--untracked-files=no"]).unwrap_or_default());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory_kib = proc_field("/proc/meminfo", "MemTotal")
        .and_then(|m| m.trim_end_matches("kB").trim().parse::<u64>().ok());
    let command: Vec<String> = std::env::args().map(|a| shell_word(&a)).collect();
    json!({
        "commit": commit,
        "dirty": !changed.is_empty(),
        "dirty_paths": changed,
        "rustc": output("rustc", &["--version"], &root),
        "bin_dir": bin_dir.to_string_lossy(),
        "kaos_bin_dir_set": std::env::var_os("KAOS_BIN_DIR").is_some(),
        "binaries": binaries(bin_dir, &root),
        "machine": {
            "cpu": proc_field("/proc/cpuinfo", "model name"),
            "cores": cores,
            "memory_kib": memory_kib,
            "kernel": output("uname", &["-sr"], &root),
        },
        "started": now(),
        "command": command.join(" "),
        "load_average_start": load_average(),
        "shared_machine": "The machine may be shared with other work (builds, tests) while the \
            bench runs: the load averages (1, 5, 15 min) at the start and end of the invocation \
            and of each run say how busy it was.",
        "note": note,
    })
}

/// Adds the end of the invocation to a stamp: when it finished and the load average then.
pub fn finish(stamp: &mut Value) {
    stamp["finished"] = json!(now());
    stamp["load_average_end"] = load_average();
}

/// The short commit of a stamp (`unknown` outside a git checkout).
pub fn short_commit(stamp: &Value) -> String {
    stamp["commit"]
        .as_str()
        .map_or("unknown".to_string(), |c| c.chars().take(7).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_changed_path_is_whole_whatever_its_status() {
        // As `output` returns it: trimmed, so the first line lost its leading space.
        let porcelain = "M crates/a.rs\nM  docs/b.md\nMM c d.rs\nR  old.rs -> new.rs";
        assert_eq!(
            super::changed_paths(porcelain),
            ["crates/a.rs", "docs/b.md", "c d.rs", "new.rs"]
        );
    }

    use super::*;

    #[test]
    fn shell_words() {
        assert_eq!(shell_word("--agents"), "--agents");
        assert_eq!(
            shell_word("KAOS_BIN_DIR=/a/b"),
            "KAOS_BIN_DIR=/a/b".to_string()
        );
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
