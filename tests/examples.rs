//! Every manifest in `examples/` is accepted by the generated CRD schemas (strict field
//! validation, so a misspelt field fails) and reads into the Rust types. (`e2e.rs` applies them
//! all and waits until every resource, MemoryStores included, is Ready.)

use kaos_api::access::{AccessGrant, ThirdPartyService};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_tests::{Schemas, example_files, repo_root, yaml_documents};
use serde_json::Value;

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
