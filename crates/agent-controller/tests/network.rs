//! Graph-derived NetworkPolicies: an agent admits exactly the agents that list it and reaches
//! exactly what it lists, and both follow the graph as agents gain, lose and delete peers.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kaos_api::agent::AgentPhase;
use kaos_harness::cluster::eventually;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

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

async fn policy_of(h: &Harness, agent: &str, admits: &[&str], reaches: &[&str]) {
    let policies: Api<NetworkPolicy> = Api::default_namespaced(h.cluster.client.clone());
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
        let policy = policies.get_opt(&format!("agent-{agent}")).await.ok()??;
        (agents_in(&policy) == wanted).then_some(())
    })
    .await;
}

fn access(peers: &[&str]) -> Value {
    json!({"modelAPI": "llm", "model": "openai/gpt-4o", "agentNetwork": {"access": peers}})
}

#[tokio::test]
async fn policies_follow_the_graph_as_peers_are_gained_lost_and_deleted() {
    let h = start_with(&["--network-policy-enabled=true"]).await;
    model_api(&h, true).await;
    apply(&h, "Agent", "a", access(&["b"]));
    apply(&h, "Agent", "b", access(&[]));
    apply(&h, "Agent", "c", access(&[]));
    for name in ["a", "b", "c"] {
        until(&h, name, "Ready", |a| phase(a) == Some(AgentPhase::Ready)).await;
    }
    policy_of(&h, "a", &[], &["b"]).await;
    policy_of(&h, "b", &["a"], &[]).await;
    policy_of(&h, "c", &[], &[]).await;
    let policies: Api<NetworkPolicy> = Api::default_namespaced(h.cluster.client.clone());
    let a = serde_json::to_value(policies.get("agent-a").await.expect("policy")).expect("json");
    assert_eq!(a["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(a["spec"]["podSelector"]["matchLabels"]["agent"], "a");
    let egress = a["spec"]["egress"].to_string();
    assert!(
        egress.contains("\"modelapi\":\"llm\"") && egress.contains("8000"),
        "a reaches its ModelAPI on its port: {egress}"
    );

    // a switches from b to c: b stops admitting a, c starts.
    h.agents
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"agentNetwork": {"access": ["c"]}}})),
        )
        .await
        .expect("edit");
    policy_of(&h, "a", &[], &["c"]).await;
    policy_of(&h, "b", &[], &[]).await;
    policy_of(&h, "c", &["a"], &[]).await;

    // Settled: no reconcile and no write.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (reconciles, writes) = idle(&h, Duration::from_secs(2)).await;
    assert_eq!(reconciles, 0.0, "settled, but reconciled: {writes:?}");
    assert!(writes.is_empty(), "settled, but wrote {writes:?}");

    // a goes: c admits nobody.
    h.agents
        .delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    policy_of(&h, "c", &[], &[]).await;
}

#[tokio::test]
async fn no_policy_where_policies_are_off() {
    let h = start_with(&[
        "--network-policy-enabled=true",
        "--network-policy-namespaces=elsewhere",
    ])
    .await;
    model_api(&h, true).await;
    apply(&h, "Agent", "a", access(&[]));
    until(&h, "a", "Ready", |a| phase(a) == Some(AgentPhase::Ready)).await;
    let policies: Api<NetworkPolicy> = Api::default_namespaced(h.cluster.client.clone());
    assert!(policies.get_opt("agent-a").await.expect("get").is_none());
}
