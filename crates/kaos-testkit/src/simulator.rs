//! The deployment simulator: stands in for the deployment controller and kubelets by setting a
//! Deployment's status as a healthy rollout would, after a delay.
//!
//! Per Deployment, the annotation `testkit.kaos.tools/rollout` changes the outcome:
//! `unready` (pods never become ready) or `failed` (the rollout exceeds its progress deadline).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::cluster::{Cluster, EventType, Subresource, WriteOptions};
use crate::meta;

/// The annotation that makes a Deployment's simulated rollout stay unready or fail.
pub const ROLLOUT_ANNOTATION: &str = "testkit.kaos.tools/rollout";

/// The status a Deployment gets once its simulated rollout settles.
pub fn settled_status(deployment: &Value) -> Value {
    let replicas = meta::int_at(deployment, "/spec/replicas").unwrap_or(1);
    let generation = meta::int_at(deployment, "/metadata/generation").unwrap_or(1);
    let outcome = deployment
        .pointer(&format!(
            "/metadata/annotations/{}",
            ROLLOUT_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        .unwrap_or("ready");
    let now = meta::now();
    let condition = |kind: &str, (status, reason, message): (bool, &str, &str)| {
        json!({"type": kind, "status": if status { "True" } else { "False" }, "reason": reason,
               "message": message, "lastUpdateTime": now, "lastTransitionTime": now})
    };
    let name = meta::name(deployment);
    let unavailable = (
        false,
        "MinimumReplicasUnavailable",
        "Deployment does not have minimum availability.",
    );
    // Per outcome: the ready pods, and the Available and Progressing conditions' status,
    // reason and message.
    let (ready, available, (progressing, reason, message)) = match outcome {
        "unready" => (
            0,
            unavailable,
            (
                true,
                "ReplicaSetUpdated",
                format!("ReplicaSet \"{name}\" is progressing."),
            ),
        ),
        "failed" => (
            0,
            unavailable,
            (
                false,
                "ProgressDeadlineExceeded",
                format!("ReplicaSet \"{name}\" has timed out progressing."),
            ),
        ),
        _ => (
            replicas,
            (
                true,
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
            ),
            (
                true,
                "NewReplicaSetAvailable",
                format!("ReplicaSet \"{name}\" has successfully progressed."),
            ),
        ),
    };
    let conditions = [
        condition("Available", available),
        condition("Progressing", (progressing, reason, &message)),
    ];
    let mut status = json!({
        "observedGeneration": generation,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "conditions": conditions,
    });
    if ready < replicas {
        status["unavailableReplicas"] = json!(replicas - ready);
    }
    status
}

/// Whether `current` already describes the settled state (ignoring condition timestamps).
fn is_settled(current: Option<&Value>, settled: &Value) -> bool {
    let strip = |status: &Value| {
        let mut status = status.clone();
        if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            for c in conditions {
                if let Some(c) = c.as_object_mut() {
                    c.remove("lastUpdateTime");
                    c.remove("lastTransitionTime");
                }
            }
        }
        status
    };
    current.is_some_and(|c| strip(c) == strip(settled))
}

/// Brings one Deployment to its settled status, writing only if it is not there yet.
fn settle(cluster: &Cluster, namespace: &str, name: &str) {
    let Some(rt) = cluster.resource("apps", "v1", "deployments") else {
        return;
    };
    let Ok(current) = cluster.get(&rt, namespace, name) else {
        return;
    };
    if meta::is_deleting(&current) {
        return;
    }
    let status = settled_status(&current);
    if is_settled(current.get("status"), &status) {
        return;
    }
    let mut updated = current.clone();
    updated["status"] = status;
    // A concurrent change is fine: it produces another event and another settle.
    let _ = cluster.update(
        &rt,
        namespace,
        name,
        updated,
        Subresource::Status,
        &WriteOptions::default(),
    );
}

/// Runs the simulator until the cluster is dropped: every added or changed Deployment settles
/// `delay` later.
pub async fn run(cluster: Cluster, delay: Duration) {
    let Some(rt) = cluster.resource("apps", "v1", "deployments") else {
        return;
    };
    loop {
        let Ok(start) = cluster.watch(&rt, "", 0) else {
            return;
        };
        let mut receiver = start.receiver;
        for event in start.backlog {
            schedule(&cluster, &event.object, delay);
        }
        loop {
            match receiver.recv().await {
                Ok(event)
                    if event.storage_key == rt.storage_key()
                        && event.event_type != EventType::Deleted =>
                {
                    schedule(&cluster, &event.object, delay)
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => break,
                Err(RecvError::Closed) => return,
            }
        }
    }
}

fn schedule(cluster: &Cluster, deployment: &Value, delay: Duration) {
    let status = settled_status(deployment);
    if is_settled(deployment.get("status"), &status) {
        return;
    }
    let cluster = cluster.clone();
    let namespace = meta::namespace(deployment).to_string();
    let name = meta::name(deployment).to_string();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        settle(&cluster, &namespace, &name);
    });
}
