//! How many pods an agent runs: `kubectl scale agent`, an owned autoscaler whose replicas the
//! controller never touches, and a disruption budget that follows the replicas.

mod support;

use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kaos_api::agent::AgentPhase;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

fn replicas_of(d: &k8s_openapi::api::apps::v1::Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.replicas)
}

async fn deployment_replicas(h: &Harness, wanted: i32) {
    kaos_harness::cluster::eventually(&format!("the Deployment asks for {wanted}"), || async {
        h.deployments
            .get("agent-a")
            .await
            .ok()
            .filter(|d| replicas_of(d) == Some(wanted))
    })
    .await;
}

#[tokio::test]
async fn kubectl_scale_agent_sets_its_replicas_and_the_budget_follows() {
    let h = start().await;
    model_api(&h, true).await;
    apply(
        &h,
        "Agent",
        "a",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o"}),
    );
    let agent = until(&h, "a", "Ready", |a| phase(a) == Some(AgentPhase::Ready)).await;
    let status = agent.status.expect("status");
    assert_eq!(status.selector.as_deref(), Some("agent=a,app=agent"));
    assert_eq!(status.desired_replicas, Some(1));
    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(h.cluster.client.clone());
    assert!(
        budgets.get_opt("agent-a").await.expect("get").is_none(),
        "one pod: no budget, so a drain is never blocked"
    );

    // No Scale to read while spec.replicas is unset (kube-apiserver answers 500)...
    let unset = h
        .agents
        .get_scale("a")
        .await
        .expect_err("no replicas to read");
    assert!(
        unset
            .to_string()
            .contains("\".spec.replicas\" does not exist"),
        "{unset}"
    );
    // ...but `kubectl scale agent a --replicas 3` (a patch of the scale subresource) works.
    h.agents
        .patch_scale(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale agent");
    deployment_replicas(&h, 3).await;
    let scale = h.agents.get_scale("a").await.expect("scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    assert_eq!(
        scale.status.as_ref().and_then(|s| s.selector.as_deref()),
        Some("agent=a,app=agent")
    );
    let budget = kaos_harness::cluster::eventually("a budget at three pods", || async {
        budgets.get_opt("agent-a").await.ok().flatten()
    })
    .await;
    let spec = serde_json::to_value(budget.spec).expect("json");
    assert_eq!(spec["maxUnavailable"], 1);
    assert_eq!(spec["selector"]["matchLabels"]["agent"], "a");
    until(&h, "a", "reporting three pods asked for", |a| {
        a.status.as_ref().and_then(|s| s.desired_replicas) == Some(3)
    })
    .await;

    // Back to one pod: the budget goes.
    h.agents
        .patch_scale(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("scale agent");
    deployment_replicas(&h, 1).await;
    kaos_harness::cluster::eventually("the budget is gone", || async {
        budgets
            .get_opt("agent-a")
            .await
            .ok()
            .and_then(|b| b.is_none().then_some(()))
    })
    .await;
}

#[tokio::test]
async fn an_autoscaled_agent_leaves_its_replicas_to_the_autoscaler() {
    let h = start().await;
    model_api(&h, true).await;
    apply(
        &h,
        "Agent",
        "a",
        json!({"modelAPI": "llm", "model": "openai/gpt-4o",
            "autoscaling": {"minReplicas": 2, "maxReplicas": 5}}),
    );
    until(&h, "a", "Ready", |a| phase(a) == Some(AgentPhase::Ready)).await;
    // Created at the minimum, with an autoscaler on CPU and memory and a budget.
    deployment_replicas(&h, 2).await;
    let autoscalers: Api<HorizontalPodAutoscaler> =
        Api::default_namespaced(h.cluster.client.clone());
    let hpa = autoscalers.get("agent-a").await.expect("autoscaler");
    let spec = serde_json::to_value(hpa.spec).expect("json");
    assert_eq!(
        spec["scaleTargetRef"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "agent-a"})
    );
    assert_eq!(
        (spec["minReplicas"].clone(), spec["maxReplicas"].clone()),
        (json!(2), json!(5))
    );
    let resources: Vec<&Value> = spec["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .map(|m| &m["resource"]["name"])
        .collect();
    assert_eq!(resources, [&json!("cpu"), &json!("memory")]);
    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(h.cluster.client.clone());
    assert!(budgets.get_opt("agent-a").await.expect("get").is_some());

    // The autoscaler scales the Deployment to 4 through its scale subresource.
    h.deployments
        .patch_scale(
            "agent-a",
            &PatchParams::apply("horizontal-pod-autoscaler"),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scale deployment");
    until(&h, "a", "reporting four pods asked for", |a| {
        a.status.as_ref().and_then(|s| s.desired_replicas) == Some(4)
    })
    .await;
    // Nothing is written back, and a change of the agent rolls its pods at 4.
    let (_, writes) = idle(&h, Duration::from_secs(2)).await;
    assert!(
        !writes.iter().any(|w| w.contains("deployments")),
        "the controller never writes the Deployment back: {writes:?}"
    );
    // The autoscaler's own status writes (every sync while metrics move) wake no reconcile.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = reconciles(&h);
    for current in [3, 4] {
        autoscalers
            .patch_status(
                "agent-a",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"currentReplicas": current, "desiredReplicas": 4}}),
                ),
            )
            .await
            .expect("autoscaler status");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        reconciles(&h),
        before,
        "an autoscaler's status is not the agent's business"
    );
    h.agents
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"instructions": "be brief"}}})),
        )
        .await
        .expect("edit");
    kaos_harness::cluster::eventually("the new pod spec", || async {
        h.deployments.get("agent-a").await.ok().filter(|d| {
            env_of(d)
                .iter()
                .any(|(k, v)| k == "AGENT_INSTRUCTIONS" && v == "be brief")
        })
    })
    .await;
    let deployment = h.deployments.get("agent-a").await.expect("deployment");
    assert_eq!(
        replicas_of(&deployment),
        Some(4),
        "the autoscaler's replicas stay"
    );

    // Autoscaling off: the autoscaler goes, fixed replicas are the controller's again.
    h.agents
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"autoscaling": null, "replicas": 1}})),
        )
        .await
        .expect("edit");
    deployment_replicas(&h, 1).await;
    kaos_harness::cluster::eventually("the autoscaler and budget are gone", || async {
        let hpa = autoscalers.get_opt("agent-a").await.ok()?;
        let budget = budgets.get_opt("agent-a").await.ok()?;
        (hpa.is_none() && budget.is_none()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn replicas_and_autoscaling_together_are_refused_with_the_field() {
    let h = start().await;
    let agent: kaos_api::agent::Agent = serde_json::from_value(json!({
        "apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
        "metadata": {"name": "both"},
        "spec": {"modelAPI": "llm", "model": "openai/gpt-4o", "replicas": 2,
            "autoscaling": {"maxReplicas": 3}}}))
    .expect("agent");
    let error = h
        .agents
        .create(&Default::default(), &agent)
        .await
        .expect_err("refused");
    let text = error.to_string();
    assert!(
        text.contains("spec.autoscaling") && text.contains("not both"),
        "{text}"
    );
    let agent: kaos_api::agent::Agent = serde_json::from_value(json!({
        "apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
        "metadata": {"name": "inverted"},
        "spec": {"modelAPI": "llm", "model": "openai/gpt-4o",
            "autoscaling": {"minReplicas": 4, "maxReplicas": 3}}}))
    .expect("agent");
    let text = h
        .agents
        .create(&Default::default(), &agent)
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        text.contains("minReplicas must not exceed maxReplicas"),
        "{text}"
    );
}
