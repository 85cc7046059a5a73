//! The deployment simulator, standing in for the deployment controller and kubelets.

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::client;

#[tokio::test]
async fn deployment_simulator_turns_a_deployment_ready_or_keeps_it_unready() {
    let (api, client) = client();
    tokio::spawn(kaos_testkit::simulator::run(
        api.cluster.clone(),
        std::time::Duration::from_millis(10),
    ));
    let deployments: Api<Deployment> = Api::default_namespaced(client);
    let deployment = |name: &str, annotations: serde_json::Value| -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .expect("deployment")
    };
    deployments
        .create(&PostParams::default(), &deployment("ok", json!({})))
        .await
        .expect("create");
    deployments
        .create(
            &PostParams::default(),
            &deployment(
                "stuck",
                json!({(kaos_testkit::simulator::ROLLOUT_ANNOTATION): "unready"}),
            ),
        )
        .await
        .expect("create");
    let ready = |d: &Deployment| {
        d.status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0)
    };
    let mut settled = None;
    for _ in 0..100 {
        let d = deployments.get("ok").await.expect("get");
        if ready(&d) == 2 {
            settled = Some(d);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let d = settled.expect("the simulator made the Deployment ready");
    let status = d.status.expect("status");
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(
        (
            status.replicas,
            status.updated_replicas,
            status.available_replicas
        ),
        (Some(2), Some(2), Some(2))
    );
    let stuck = deployments.get("stuck").await.expect("get");
    let stuck_status = stuck.status.expect("the simulator reported the rollout");
    assert_eq!(stuck_status.ready_replicas, Some(0));
    assert_eq!(stuck_status.updated_replicas, Some(2));
}
