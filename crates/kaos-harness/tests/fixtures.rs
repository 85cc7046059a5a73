//! Every fixture is a manifest the API server accepts as it is (strict field validation, every
//! CEL rule), whatever its builders set: a test that applies one tests its controller, not a
//! typo in its input.

use kaos_api::access::{AccessGrant, ResourceKind, SubjectKind, ThirdPartyService};
use kaos_api::agent::{Agent, MemoryTools};
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::{MemoryStore, ReadScope};
use kaos_api::modelapi::ModelAPI;
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun, ConcurrencyPolicy};
use kaos_harness::Schemas;
use kaos_harness::fixtures::*;
use serde_json::Value;

fn manifest(object: impl serde::Serialize) -> Value {
    serde_json::to_value(object).expect("a fixture serializes")
}

#[test]
fn every_fixture_and_builder_makes_an_admitted_manifest() {
    let fixtures = [
        manifest(Agent::test("a")),
        manifest(
            Agent::test("b")
                .model_api("other")
                .model("anthropic/claude")
                .mcp_servers(["tools"])
                .peers(["a"])
                .instructions("be brief")
                .memory_store("mem")
                .memory_read_scope(ReadScope::User)
                .memory_tools(MemoryTools::Read)
                .autoscaling(Some(2), 5)
                .security_id("support")
                .wait_for_dependencies(false)
                .env_from_secret("TOKEN", "slack", "token"),
        ),
        manifest(Agent::test("c").replicas(2)),
        manifest(ModelAPI::test("llm")),
        manifest(
            ModelAPI::test("proxy")
                .proxy(["openai/*", "o3"])
                .provider("openai")
                .api_key_from_secret("creds", "api-key")
                .config_yaml("model_list: []"),
        ),
        manifest(
            ModelAPI::test("keyed")
                .api_key("sk-test")
                .config_yaml_from_secret("litellm", "config.yaml"),
        ),
        manifest(
            ModelAPI::test("local")
                .hosted("smollm2:135m")
                .telemetry(true),
        ),
        manifest(MCPServer::test("tools")),
        manifest(
            MCPServer::test("k8s")
                .runtime("kubernetes")
                .params("x = 1")
                .security_id("tools")
                .env_from_config_map("MODE", "settings", "mode"),
        ),
        manifest(MemoryStore::test("mem").persistent_volume("1Gi")),
        manifest(
            MemoryStore::test("pg")
                .summarization("llm", "gpt-4o-mini")
                .embedding("embedder", "text-embedding-3-small")
                .external("pg", "dsn")
                .replicas(2)
                .max_read_scope(ReadScope::Agent),
        ),
        manifest(
            AgentWorkflow::test("diamond")
                .input("go")
                .schedule("* * * * *")
                .concurrency_policy(ConcurrencyPolicy::Forbid)
                .history_limits(1, 0)
                .step(step("a", "planner").retries(2))
                .step(
                    step("b", "writer")
                        .after(["a"])
                        .input("{{ steps.a.output }}"),
                )
                .step(
                    step("c", "checker")
                        .after(["a"])
                        .when("steps.a.output != ''")
                        .max_iterations(3),
                ),
        ),
        manifest(AgentWorkflowRun::test("diamond-1", "diamond")),
        manifest(
            AccessGrant::test("researchers")
                .subject(SubjectKind::Group, "researchers")
                .resource(ResourceKind::MCPServer, "tools")
                .resources_labelled("team", "research"),
        ),
        manifest(ThirdPartyService::test("github").access("a", ["read"])),
    ];
    let schemas = Schemas::default();
    for fixture in fixtures {
        if let Err(errors) = schemas.admit(&fixture) {
            panic!("{fixture} is refused: {errors:?}");
        }
    }
}

#[test]
fn a_reported_status_is_where_its_controller_publishes_the_service() {
    let hosted = ModelAPI::test("llm").hosted("smollm2:135m").ready();
    let status = hosted.status.expect("a status");
    assert!(status.ready);
    assert_eq!(
        status.endpoint.as_deref(),
        Some("http://modelapi-llm.default.svc.cluster.local:11434")
    );
    let store = MemoryStore::test("mem").in_namespace("team").pending();
    let status = store.status.expect("a status");
    assert!(!status.ready);
    assert_eq!(
        status.endpoint.as_deref(),
        Some("http://memorystore-mem.team.svc.cluster.local:8080")
    );
}
