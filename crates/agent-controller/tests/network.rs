//! Graph-derived NetworkPolicies: an agent admits exactly the agents that list it and reaches
//! exactly what it lists, and both follow the graph as agents gain, lose and delete peers.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kaos_api::agent::{Agent, AgentPhase};
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_harness::fixtures::*;
use serde_json::{Value, json};
use support::{llm, start_with};

/// An agent network listing no peers.
const NO_PEERS: [&str; 0] = [];

/// The agents a policy admits (ingress) and reaches (egress), by their `agent` pod label.
fn agents_in(policy: &NetworkPolicy) -> (BTreeSet<String>, BTreeSet<String>) {
    let spec = serde_json::to_value(&policy.spec).unwrap_or_default();
    let names = |rules: &Value, side: &str| -> BTreeSet<String> {
        rules
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|rule| rule[side].as_array().cloned().unwrap_or_default())
            .filter_map(|peer| {
                peer.pointer("/podSelector/matchLabels/agent")
                    .and_then(Value::as_str)
                    .map(String::from)
            })
            .collect()
    };
    (
        names(&spec["ingress"], "from"),
        names(&spec["egress"], "to"),
    )
}

async fn policy_of(cluster: &TestCluster, agent: &str, admits: &[&str], reaches: &[&str]) {
    let wanted = (
        admits
            .iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<_>>(),
        reaches
            .iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<_>>(),
    );
    let what = format!("agent-{agent} admits {admits:?} and reaches {reaches:?}");
    eventually(&what, || async {
        let policy = cluster
            .get_opt::<NetworkPolicy>(&format!("agent-{agent}"))
            .await?;
        (agents_in(&policy) == wanted).then_some(())
    })
    .await;
}

#[tokio::test]
async fn policies_follow_the_graph_as_peers_are_gained_lost_and_deleted() {
    let h = start_with(&["--network-policy-enabled=true"]);
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("a").peers(["b"]));
    h.apply(&Agent::test("b").peers(NO_PEERS));
    h.apply(&Agent::test("c").peers(NO_PEERS));
    for name in ["a", "b", "c"] {
        h.until_phase::<Agent>(name, AgentPhase::Ready).await;
    }
    policy_of(&h, "a", &[], &["b"]).await;
    policy_of(&h, "b", &["a"], &[]).await;
    policy_of(&h, "c", &[], &[]).await;
    let a = h.get::<NetworkPolicy>("agent-a").await;
    let a = serde_json::to_value(a).expect("json");
    assert_eq!(a["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(a["spec"]["podSelector"]["matchLabels"]["agent"], "a");
    let egress = a["spec"]["egress"].to_string();
    assert!(
        egress.contains("\"modelapi\":\"llm\"") && egress.contains("8000"),
        "a reaches its ModelAPI on its port: {egress}"
    );

    // a switches from b to c: b stops admitting a, c starts.
    let edit = json!({"spec": {"agentNetwork": {"access": ["c"]}}});
    h.merge_patch::<Agent>("a", edit).await;
    policy_of(&h, "a", &[], &["c"]).await;
    policy_of(&h, "b", &[], &[]).await;
    policy_of(&h, "c", &["a"], &[]).await;

    // Settled: no reconcile and no write.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (reconciles, writes) = h.idle(Duration::from_secs(2)).await;
    assert_eq!(reconciles, 0.0, "settled, but reconciled: {writes:?}");
    assert!(writes.is_empty(), "settled, but wrote {writes:?}");

    // a goes: c admits nobody.
    h.delete::<Agent>("a").await;
    policy_of(&h, "c", &[], &[]).await;
}

#[tokio::test]
async fn no_policy_where_policies_are_off() {
    let h = start_with(&[
        "--network-policy-enabled=true",
        "--network-policy-namespaces=elsewhere",
    ]);
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("a").peers(NO_PEERS));
    h.until_phase::<Agent>("a", AgentPhase::Ready).await;
    assert!(h.get_opt::<NetworkPolicy>("agent-a").await.is_none());
}
