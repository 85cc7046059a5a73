//! The raw results file of an invocation (docs/benchmarks.md, "Making the figures").

use anyhow::Context;
use serde_json::{Value, json};

use crate::{Args, provenance};

/// The raw results file of an invocation: its stamp, its settings and every run's figures,
/// written again after each run (so an interrupted invocation keeps the runs it finished, with
/// `complete: false`).
pub struct Results {
    pub path: std::path::PathBuf,
    body: Value,
}

impl Results {
    pub fn new(args: &Args) -> anyhow::Result<Self> {
        let stamp = provenance::start(kaos_harness::processes::binaries(), args.note.as_deref());
        let label = args.label.clone().unwrap_or_else(|| {
            let counts = args.agents.iter().map(usize::to_string);
            let topologies = args.topologies.iter().map(|t| t.name().to_string());
            counts.chain(topologies).collect::<Vec<_>>().join("-")
        });
        anyhow::ensure!(
            !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "--label: letters, digits and '-' only"
        );
        let date = stamp["started"]
            .as_str()
            .unwrap_or("")
            .get(..10)
            .unwrap_or("");
        let base = format!("{date}-{}-{label}", provenance::short_commit(&stamp));
        std::fs::create_dir_all(&args.results)
            .with_context(|| format!("creating {}", args.results.display()))?;
        let path = (1..)
            .map(|n| match n {
                1 => args.results.join(format!("{base}.json")),
                n => args.results.join(format!("{base}-{n}.json")),
            })
            .find(|p| !p.exists())
            .expect("a free name");
        let cluster = match &args.kubeconfig {
            Some(path) => format!("kubeconfig {}", path.display()),
            None => "kaos-testkit".into(),
        };
        let body = json!({
            "format": 1,
            "label": label,
            "stamp": stamp,
            "settings": {
                "agents": args.agents,
                "topologies": args.topologies.iter().map(|t| t.name()).collect::<Vec<_>>(),
                "idle_seconds": args.idle,
                "timeout_seconds": args.timeout,
                "concurrency": args.concurrency,
                "cluster": cluster,
            },
            "complete": false,
            "runs": [],
        });
        let results = Self { path, body };
        results.write()?;
        eprintln!("kaos-bench: raw results go to {}", results.path.display());
        Ok(results)
    }

    fn write(&self) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(&self.body)? + "\n";
        std::fs::write(&self.path, text).with_context(|| format!("writing {}", self.path.display()))
    }

    pub fn push(&mut self, run: Value) -> anyhow::Result<()> {
        if let Some(runs) = self.body["runs"].as_array_mut() {
            runs.push(run);
        }
        self.write()
    }

    pub fn finish(&mut self) -> anyhow::Result<()> {
        provenance::finish(&mut self.body["stamp"]);
        self.body["complete"] = json!(true);
        self.write()
    }
}
