//! How many pods an agent runs: `kubectl scale agent`, an owned autoscaler whose replicas the
//! controller never touches, and a disruption budget that follows the replicas.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kaos_api::agent::{Agent, AgentPhase};
use kaos_harness::cluster::{TestCluster, eventually};
use kaos_harness::deployments::{env_of, replicas_of};
use kaos_harness::fixtures::*;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{llm, reaction_to, start};

async fn deployment_replicas(cluster: &TestCluster, wanted: i32) {
    let what = format!("asking for {wanted} pods");
    cluster
        .until("agent-a", &what, |d: &Deployment| {
            replicas_of(d) == Some(wanted)
        })
        .await;
}

#[tokio::test]
async fn kubectl_scale_agent_sets_its_replicas_and_the_budget_follows() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("a"));
    let agent = h.until_phase::<Agent>("a", AgentPhase::Ready).await;
    let status = agent.status.expect("status");
    assert_eq!(status.scale.selector.as_deref(), Some("agent=a,app=agent"));
    assert_eq!(status.scale.desired_replicas, Some(1));
    assert!(
        h.get_opt::<PodDisruptionBudget>("agent-a").await.is_none(),
        "one pod: no budget, so a drain is never blocked"
    );

    // No Scale to read while spec.replicas is unset (kube-apiserver answers 500)...
    let agents = h.api::<Agent>();
    let unset = agents
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
    agents
        .patch_scale(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale agent");
    deployment_replicas(&h, 3).await;
    let scale = agents.get_scale("a").await.expect("scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    assert_eq!(
        scale.status.as_ref().and_then(|s| s.selector.as_deref()),
        Some("agent=a,app=agent")
    );
    let budget = eventually("a budget at three pods", || async {
        h.get_opt::<PodDisruptionBudget>("agent-a").await
    })
    .await;
    let spec = serde_json::to_value(budget.spec).expect("json");
    assert_eq!(spec["maxUnavailable"], 1);
    assert_eq!(spec["selector"]["matchLabels"]["agent"], "a");
    h.until("a", "reporting three pods asked for", |a: &Agent| {
        a.status.as_ref().and_then(|s| s.scale.desired_replicas) == Some(3)
    })
    .await;

    // Back to one pod: the budget goes.
    agents
        .patch_scale(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("scale agent");
    deployment_replicas(&h, 1).await;
    h.until_gone::<PodDisruptionBudget>("agent-a").await;
}

#[tokio::test]
async fn an_autoscaled_agent_leaves_its_replicas_to_the_autoscaler() {
    let h = start();
    h.apply_with_status(&llm().ready()).await;
    h.apply(&Agent::test("a").autoscaling(Some(2), 5));
    h.until_phase::<Agent>("a", AgentPhase::Ready).await;
    // Created at the minimum, with an autoscaler on CPU and memory and a budget.
    deployment_replicas(&h, 2).await;
    let hpa = h.get::<HorizontalPodAutoscaler>("agent-a").await;
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
    assert!(h.get_opt::<PodDisruptionBudget>("agent-a").await.is_some());

    // The autoscaler scales the Deployment to 4 through its scale subresource.
    let scale = async {
        h.api::<Deployment>()
            .patch_scale(
                "agent-a",
                &PatchParams::apply("horizontal-pod-autoscaler"),
                &Patch::Merge(json!({"spec": {"replicas": 4}})),
            )
            .await
            .expect("scale deployment");
    };
    // Fenced: the controller handled the new replicas and all that followed.
    let (_, writes) = reaction_to(&h, scale).await;
    let agent = h.get::<Agent>("a").await;
    assert_eq!(
        agent.status.and_then(|s| s.scale.desired_replicas),
        Some(4),
        "reporting four pods asked for"
    );
    // Nothing is written back, and a change of the agent rolls its pods at 4.
    let deployment_writes: Vec<&String> = writes
        .iter()
        .filter(|w| w.contains("deployments"))
        .collect();
    assert_eq!(
        deployment_writes,
        ["patch /apis/apps/v1/namespaces/default/deployments/agent-a/scale"],
        "the controller never writes the Deployment back: {writes:?}"
    );
    // The autoscaler's own status writes (every sync while metrics move) wake no reconcile.
    let statuses = async {
        for current in [3, 4] {
            h.api::<HorizontalPodAutoscaler>()
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
    };
    let autoscaler =
        "patch /apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers/agent-a/status";
    assert_eq!(
        reaction_to(&h, statuses).await,
        (0.0, vec![autoscaler.to_string(), autoscaler.to_string()]),
        "an autoscaler's status is not the agent's business"
    );
    let edit = json!({"spec": {"config": {"instructions": "be brief"}}});
    h.merge_patch::<Agent>("a", edit).await;
    h.until(
        "agent-a",
        "rolled with the new pod spec",
        |d: &Deployment| {
            env_of(d)
                .iter()
                .any(|(k, v)| k == "AGENT_INSTRUCTIONS" && v == "be brief")
        },
    )
    .await;
    let deployment = h.get::<Deployment>("agent-a").await;
    assert_eq!(
        replicas_of(&deployment),
        Some(4),
        "the autoscaler's replicas stay"
    );

    // Autoscaling off: the autoscaler goes, fixed replicas are the controller's again.
    let edit = json!({"spec": {"autoscaling": null, "replicas": 1}});
    h.merge_patch::<Agent>("a", edit).await;
    deployment_replicas(&h, 1).await;
    h.until_gone::<HorizontalPodAutoscaler>("agent-a").await;
    h.until_gone::<PodDisruptionBudget>("agent-a").await;
}

#[tokio::test]
async fn replicas_and_autoscaling_together_are_refused_with_the_field() {
    let h = start();
    let agents = h.api::<Agent>();
    let both = Agent::test("both").replicas(2).autoscaling(None, 3);
    let error = agents
        .create(&PostParams::default(), &both)
        .await
        .expect_err("refused");
    let text = error.to_string();
    assert!(
        text.contains("spec.autoscaling") && text.contains("not both"),
        "{text}"
    );
    let inverted = Agent::test("inverted").autoscaling(Some(4), 3);
    let text = agents
        .create(&PostParams::default(), &inverted)
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        text.contains("minReplicas must not exceed maxReplicas"),
        "{text}"
    );
}
