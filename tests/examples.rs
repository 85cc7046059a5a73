//! Every manifest in `examples/` is accepted by the generated CRD schemas (strict field
//! validation, so a misspelt field fails) and reads into the Rust types. (`e2e.rs` applies them
//! all and waits until every resource, MemoryStores included, is Ready.)

use kaos_api::access::{AccessGrant, ThirdPartyService};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun};
use kaos_harness::{Schemas, example_files, repo_root, yaml_documents};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

#[test]
fn every_example_passes_schema_validation_and_reads_into_the_types() {
    let schemas = Schemas::default();
    let files = example_files();
    assert!(
        files.len() >= 3,
        "examples/ holds the quickstart, hosted and custom examples"
    );
    for path in files {
        for doc in yaml_documents(&path) {
            let name = format!("{} {}", path.display(), doc["metadata"]["name"]);
            assert_eq!(doc["apiVersion"], "kaos.tools/v1alpha1", "{name}");
            let stored = schemas
                .admit(&doc)
                .unwrap_or_else(|errors| panic!("{name} is rejected:\n{}", errors.join("\n")));
            let read = match doc["kind"].as_str() {
                Some("Agent") => serde_json::from_value::<Agent>(stored).map(drop),
                Some("ModelAPI") => serde_json::from_value::<ModelAPI>(stored).map(drop),
                Some("MCPServer") => serde_json::from_value::<MCPServer>(stored).map(drop),
                Some("MemoryStore") => serde_json::from_value::<MemoryStore>(stored).map(drop),
                Some("AccessGrant") => serde_json::from_value::<AccessGrant>(stored).map(drop),
                Some("ThirdPartyService") => {
                    serde_json::from_value::<ThirdPartyService>(stored).map(drop)
                }
                Some("AgentWorkflow") => serde_json::from_value::<AgentWorkflow>(stored).map(drop),
                Some("AgentWorkflowRun") => {
                    serde_json::from_value::<AgentWorkflowRun>(stored).map(drop)
                }
                other => panic!("{name}: unexpected kind {other:?}"),
            };
            read.unwrap_or_else(|e| panic!("{name} does not read into the Rust type: {e}"));
        }
    }
}

#[test]
fn quickstart_has_the_documented_resources() {
    let docs = yaml_documents(&repo_root().join("examples/quickstart.yaml"));
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("ModelAPI", "llm-proxy"),
            ("MCPServer", "echo-tools"),
            ("Agent", "worker"),
            ("Agent", "coordinator"),
        ]
    );
    let proxy = &docs[0];
    assert_eq!(proxy["spec"]["mode"], "Proxy");
    let mcp = &docs[1];
    assert_eq!(mcp["spec"]["runtime"], "python-string");
    let coordinator = &docs[3];
    assert_eq!(
        coordinator["spec"]["agentNetwork"]["access"],
        Value::from(vec!["worker"])
    );
}

/// The steps whose outputs a step input reads (`{{ steps.NAME.output }}`, spaces optional).
fn output_references(input: &str) -> BTreeSet<String> {
    input
        .split("{{")
        .skip(1)
        .filter_map(|rest| rest.split_once("}}"))
        .filter_map(|(expression, _)| {
            expression
                .trim()
                .strip_prefix("steps.")?
                .strip_suffix(".output")
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn the_workflow_example_is_the_documented_diamond() {
    let docs = yaml_documents(&repo_root().join("examples/workflow.yaml"));
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("Agent", "analyst"),
            ("Agent", "editor"),
            ("AgentWorkflow", "briefing"),
        ]
    );
    // The agents use the quickstart's ModelAPI, as the file says.
    let quickstart = yaml_documents(&repo_root().join("examples/quickstart.yaml"));
    assert!(
        quickstart
            .iter()
            .any(|d| d["kind"] == "ModelAPI" && d["metadata"]["name"] == "llm-proxy")
    );
    for agent in &docs[..2] {
        assert_eq!(agent["spec"]["modelAPI"], "llm-proxy");
    }

    let workflow: AgentWorkflow =
        serde_json::from_value(docs[2].clone()).expect("reads as an AgentWorkflow");
    let spec = &workflow.spec;
    // gather → (risks, opportunities) → brief.
    let depends: BTreeMap<&str, Vec<&str>> = spec
        .steps
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.depends_on.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        depends,
        BTreeMap::from([
            ("gather", vec![]),
            ("risks", vec!["gather"]),
            ("opportunities", vec!["gather"]),
            ("brief", vec!["risks", "opportunities"]),
        ])
    );
    // Every step names an agent of the file, and reads only outputs of steps it depends on,
    // directly or not (the controller refuses a workflow that reads any other).
    let agents = ["analyst", "editor"];
    let mut ancestors: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for step in &spec.steps {
        assert!(agents.contains(&step.agent_ref.as_str()), "{}", step.name);
        let mut all = BTreeSet::new();
        for dependency in &step.depends_on {
            all.insert(dependency.as_str());
            all.extend(ancestors[dependency.as_str()].iter().copied());
        }
        for reference in output_references(step.input.as_deref().unwrap_or("")) {
            assert!(
                all.contains(reference.as_str()),
                "step {} reads {reference}, which it does not depend on",
                step.name
            );
        }
        ancestors.insert(step.name.as_str(), all);
    }
    assert_eq!(
        output_references("{{ steps.a.output }} {{steps.b.output}} {{ input }}"),
        BTreeSet::from(["a".to_string(), "b".to_string()])
    );
    // What docs/workflows.md walks through: conditions, retries, budgets, the schedule.
    let step = |name: &str| {
        spec.steps
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no step {name}"))
    };
    assert!(step("risks").when.is_some() && step("opportunities").when.is_some());
    assert!(step("risks").budgets.is_some());
    assert_eq!(step("gather").retries, 2);
    assert_eq!(step("opportunities").effective_timeout_seconds(), 600);
    assert_eq!(spec.schedule.as_deref(), Some("0 8 * * 1-5"));
    assert_eq!(spec.time_zone.as_deref(), Some("Europe/Paris"));
}
