//! docs/benchmarks.md's current figures and docs/benchmarks.svg are what scripts/bench-report.py
//! makes of the committed raw results (docs/benchmarks/results/*.json, written by kaos-bench):
//! a figure typed by hand, or left behind when a results file is added or retired, fails here.
//! Files only: no run of the benchmark.

use std::process::Command;

use kaos_harness::repo_root;

#[test]
fn the_benchmark_figures_are_generated_from_the_committed_results() {
    let out = Command::new("python3")
        .arg("scripts/bench-report.py")
        .arg("--check")
        .current_dir(repo_root())
        .output()
        .expect("python3 runs (the generator is Python, standard library only)");
    assert!(
        out.status.success(),
        "docs/benchmarks.md or docs/benchmarks.svg is not what the results files make: \
         run python3 scripts/bench-report.py and commit the result\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
