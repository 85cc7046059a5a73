//! Chaos: the chart's controllers as two processes each, under its RBAC, against a testkit
//! that fails 10% of their requests with 500, 5% with 429 and 5% of their writes with 409, cuts
//! their watch streams every few seconds and answers 20% of watch starts with 410 Gone; and a
//! leader is killed mid-run. Everything converges; no child is duplicated or orphaned; what users
//! added to children survives; no two processes of one controller write in overlapping turns
//! (the writer changes only when the Lease holder does).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kaos_api::agent::Agent;
use kaos_harness::processes::{ChartCluster, POLL, Scratch, apply_yaml};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const AGENTS: usize = 6;
/// How long each phase may take to converge: 5–15 s on a loaded 2-core machine, with room for a
/// slower CI runner and a few leader changes.
const CONVERGED_WITHIN: Duration = Duration::from_secs(120);

/// Every kind the controllers reconcile into a workload: each gets resources here.
const KINDS: [&str; 4] = ["Agent", "ModelAPI", "MCPServer", "MemoryStore"];
/// The kinds whose controller writes only their status (the authz controller): they get
/// resources too, and converge once their conditions are current and what they name resolves.
const STATUS_ONLY_KINDS: [&str; 2] = ["AccessGrant", "ThirdPartyService"];

fn kind_api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("kaos.tools", "v1alpha1", kind));
    Api::default_namespaced_with(client.clone(), &resource)
}

fn manifests() -> String {
    let mut yaml = String::from(
        "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: llm, namespace: default}\nspec: {mode: Proxy, proxyConfig: {models: ['*']}}\n\
         ---\napiVersion: kaos.tools/v1alpha1\nkind: MCPServer\nmetadata: {name: tools, namespace: default}\nspec: {runtime: python-string, params: 'x = 1'}\n\
         ---\napiVersion: kaos.tools/v1alpha1\nkind: MemoryStore\nmetadata: {name: memory, namespace: default}\nspec: {storage: {type: local}, models: {summarization: {modelAPI: llm, model: gpt-4o-mini}, embedding: {modelAPI: llm, model: text-embedding-3-small}}}\n\
         ---\napiVersion: kaos.tools/v1alpha1\nkind: AccessGrant\nmetadata: {name: grant, namespace: default}\nspec: {subjects: [{kind: Agent, name: agent-0}], resources: [{kind: ModelAPI, name: llm}, {kind: MCPServer, name: tools}, {kind: MemoryStore, name: memory}]}\n\
         ---\napiVersion: v1\nkind: Secret\nmetadata: {name: oauth, namespace: default}\nstringData: {client-secret: s3cret}\n\
         ---\napiVersion: kaos.tools/v1alpha1\nkind: ThirdPartyService\nmetadata: {name: service, namespace: default}\nspec: {clientID: kaos, clientSecretRef: {name: oauth, key: client-secret}, issuerURI: 'https://issuer.example', scopes: [{name: read}], protectedResources: ['https://api.example'], routeRef: {name: egress}, access: [{agent: agent-0, scopes: [read]}]}\n",
    );
    // The workflow controller's share: a workflow whose Ready condition follows its agent.
    yaml.push_str(
        "---\napiVersion: kaos.tools/v1alpha1\nkind: AgentWorkflow\nmetadata: {name: flow, namespace: default}\nspec: {steps: [{name: ask, agentRef: agent-0}]}\n",
    );
    for i in 0..AGENTS {
        yaml.push_str(&format!(
            "---\napiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {{name: agent-{i}, namespace: default}}\n\
             spec: {{modelAPI: llm, model: gpt-4o, mcpServers: [tools], agentNetwork: {{access: [agent-{}]}}}}\n",
            (i + 1) % AGENTS
        ));
    }
    yaml
}

/// Whether every custom resource is Ready at its current generation (the status-only kinds:
/// their conditions current and their references resolved).
async fn converged(client: &kube::Client) -> Result<(), String> {
    let mut waiting = Vec::new();
    for kind in KINDS {
        let objects = kind_api(client, kind)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        for o in objects {
            let v = serde_json::to_value(&o).unwrap_or_default();
            let ready = v.pointer("/status/ready") == Some(&Value::Bool(true));
            let current =
                v.pointer("/status/observedGeneration") == v.pointer("/metadata/generation");
            if !(ready && current) {
                waiting.push(format!(
                    "{kind} {} {}",
                    o.name_any(),
                    v.pointer("/status/message").unwrap_or(&Value::Null)
                ));
            }
        }
    }
    for kind in STATUS_ONLY_KINDS {
        let objects = kind_api(client, kind)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        for o in objects {
            let v = serde_json::to_value(&o).unwrap_or_default();
            let conditions = v
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let current = !conditions.is_empty()
                && conditions
                    .iter()
                    .all(|c| c.get("observedGeneration") == v.pointer("/metadata/generation"));
            let resolved = conditions
                .iter()
                .any(|c| c["type"] == "ResolvedRefs" && c["status"] == "True");
            if !(current && resolved) {
                waiting.push(format!("{kind} {} {conditions:?}", o.name_any()));
            }
        }
    }
    for o in kind_api(client, "AgentWorkflow")
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
    {
        let v = serde_json::to_value(&o).unwrap_or_default();
        let ready = v
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
        let current = v.pointer("/status/observedGeneration") == v.pointer("/metadata/generation");
        if !(ready && current) {
            waiting.push(format!(
                "AgentWorkflow {} {:?}",
                o.name_any(),
                v.pointer("/status")
            ));
        }
    }
    if waiting.is_empty() {
        Ok(())
    } else {
        Err(waiting.join("; "))
    }
}

/// Restarts the replicas that exited because they lost their Lease, as a kubelet would; fails
/// the test on any other exit (a crash: its exit status and the end of its log).
fn supervise(
    cluster: &mut ChartCluster,
    scratch: &Scratch,
    stopped: &[String],
    what: &str,
) -> usize {
    cluster
        .restart_exited(scratch, stopped)
        .unwrap_or_else(|crashes| panic!("{what}: {crashes}\nlogs in {}", scratch.0.display()))
}

/// Waits for convergence, restarting replicas that lose their Lease as a kubelet would, and
/// fails on a crash.
async fn until_converged(
    cluster: &mut ChartCluster,
    scratch: &Scratch,
    stopped: &[String],
    what: &str,
) {
    let client = cluster.admin.clone();
    let started = Instant::now();
    let mut restarts = 0;
    loop {
        restarts += supervise(cluster, scratch, stopped, what);
        match converged(&client).await {
            Ok(()) => {
                eprintln!(
                    "{what}: converged in {:.1?} ({restarts} restart(s) after a lost Lease)",
                    started.elapsed()
                );
                return;
            }
            Err(waiting) if started.elapsed() > CONVERGED_WITHIN => {
                panic!(
                    "{what}: not converged after {CONVERGED_WITHIN:?}: {waiting}\n{}\nlogs in {}",
                    log_summary(scratch),
                    scratch.0.display()
                )
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// What a failure report needs from the controllers' logs (CI keeps no files): each process's
/// leadership changes, warnings and errors, last ones first cut.
fn log_summary(scratch: &Scratch) -> String {
    let mut logs: Vec<_> = std::fs::read_dir(&scratch.0)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let mut summary = String::new();
    for path in logs {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let notable: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.contains("leader")
                    || l.contains("WARN")
                    || l.contains("ERROR")
                    || l.contains("synced")
            })
            .collect();
        let shown = &notable[notable.len().saturating_sub(25)..];
        summary.push_str(&format!(
            "--- {} ({} notable lines, last {}):\n{}\n",
            path.file_name().unwrap_or_default().to_string_lossy(),
            notable.len(),
            shown.len(),
            shown.join("\n")
        ));
    }
    summary
}

fn containers_of(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| p.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_converge_under_faults_and_a_leader_kill() {
    let scratch = Scratch::new("chaos");
    let faults = [
        "--fault-spare-admin",
        "--fault-seed=7",
        "--fault-error-rate=0.10",
        "--fault-throttle-rate=0.05",
        "--fault-conflict-rate=0.05",
        "--fault-watch-cut-ms=3000",
        "--fault-gone-rate=0.2",
    ];
    // Shorter than the defaults (15 s, 10 s, 2 s) so the killed leader's Lease expires soon, yet a
    // renewal window of several tries: at these fault rates a try (read and write) fails about one
    // time in three, and on a loaded 2-core machine each can take a second, so a 2 s window lost
    // the Lease every few seconds and the restarts left too little time to converge.
    let timings = [
        ("LEASE_DURATION", "8s"),
        ("RENEW_DEADLINE", "6s"),
        ("RETRY_PERIOD", "500ms"),
    ];
    let mut cluster = ChartCluster::start(&scratch, &faults, 2, &timings).await;
    let admin = cluster.admin.clone();
    apply_yaml(&admin, &manifests()).await;
    until_converged(&mut cluster, &scratch, &[], "first rollout").await;

    // Users add to the children: a label, an annotation, a sidecar (as another field manager).
    let deployments: Api<Deployment> = Api::default_namespaced(admin.clone());
    let services: Api<Service> = Api::default_namespaced(admin.clone());
    deployments
        .patch(
            "agent-agent-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "ml"}}})),
        )
        .await
        .expect("label");
    services
        .patch(
            "agent-agent-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"owner": "ml-team"}}})),
        )
        .await
        .expect("annotation");
    let sidecar = json!({"spec": {"template": {"spec": {"containers": [{"name": "log-shipper", "image": "fluent-bit:3"}]}}}});
    deployments
        .patch(
            "agent-agent-0",
            &PatchParams::default(),
            &Patch::Strategic(sidecar),
        )
        .await
        .expect("sidecar");

    // Kill the agent controller's leader, then change every agent and delete one.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(admin.clone(), "kaos-system");
    let holder = leases
        .get("kaos-agent-controller")
        .await
        .expect("lease")
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    let agent_replicas = &mut cluster
        .controllers
        .iter_mut()
        .find(|(b, _)| b == "agent-controller")
        .expect("agent controller")
        .1;
    let leader = agent_replicas
        .iter_mut()
        .find(|r| holder.starts_with(&format!("{}_", r.process.name)))
        .expect("a leading replica");
    // Killed on purpose: it stays down, and is no crash.
    leader.kill();
    let killed = vec![leader.process.name.clone()];
    let agents: Api<Agent> = Api::default_namespaced(admin.clone());
    for i in 0..AGENTS {
        let change = json!({"spec": {"config": {"instructions": format!("round two for {i}")}}});
        agents
            .patch(
                &format!("agent-{i}"),
                &PatchParams::default(),
                &Patch::Merge(change),
            )
            .await
            .expect("edit");
    }
    agents
        .delete(&format!("agent-{}", AGENTS - 1), &DeleteParams::default())
        .await
        .expect("delete");
    until_converged(
        &mut cluster,
        &scratch,
        &killed,
        "after the leader was killed",
    )
    .await;
    let started = Instant::now();
    while agents
        .get_opt(&format!("agent-{}", AGENTS - 1))
        .await
        .expect("get")
        .is_some()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the deleted agent's finalizer was never removed"
        );
        tokio::time::sleep(POLL).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    // No child duplicated or orphaned: exactly one Deployment per resource, all owned by one.
    let mut owners = BTreeSet::new();
    for kind in KINDS {
        let objects = kind_api(&admin, kind)
            .list(&ListParams::default())
            .await
            .expect("list");
        owners.extend(objects.iter().filter_map(|o| o.uid()));
    }
    let children = deployments
        .list(&ListParams::default())
        .await
        .expect("deployments")
        .items;
    let mut per_owner: BTreeMap<String, usize> = BTreeMap::new();
    for d in &children {
        let owner = d
            .owner_references()
            .iter()
            .find(|r| r.controller == Some(true))
            .map(|r| r.uid.clone())
            .unwrap_or_default();
        assert!(
            owners.contains(&owner),
            "orphaned Deployment {}",
            d.name_any()
        );
        *per_owner.entry(owner).or_default() += 1;
    }
    assert_eq!(
        per_owner.len(),
        owners.len(),
        "every resource has its Deployment"
    );
    assert!(
        per_owner.values().all(|n| *n == 1),
        "duplicated children: {per_owner:?}"
    );
    assert!(
        deployments
            .get_opt(&format!("agent-agent-{}", AGENTS - 1))
            .await
            .expect("get")
            .is_none()
    );

    // What users added survived the controller's re-applies.
    let edited = deployments.get("agent-agent-0").await.expect("deployment");
    assert_eq!(edited.labels().get("team").map(String::as_str), Some("ml"));
    assert_eq!(
        containers_of(&edited),
        ["log-shipper", "agent"],
        "the sidecar survives next to the agent container (first: a strategic merge naming only it puts it there)"
    );
    let instructions = edited
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.iter().find(|c| c.name == "agent"))
        .and_then(|agent| agent.env.clone())
        .unwrap_or_default();
    assert!(
        instructions
            .iter()
            .any(|e| e.value.as_deref() == Some("round two for 0")),
        "the controller's change landed too"
    );
    let service = services.get("agent-agent-0").await.expect("service");
    assert_eq!(
        service.annotations().get("owner").map(String::as_str),
        Some("ml-team")
    );

    // Faults happened, and no two replicas of one controller took turns writing at once: the
    // sequence of writers (outside the Lease) changes at most once per change of Lease holder.
    let audit = cluster.audit().await;
    let faulted = audit
        .iter()
        .filter(|r| matches!(r["code"].as_u64(), Some(500 | 429 | 409)))
        .count();
    assert!(
        faulted > 10,
        "the fault injection was active ({faulted} faulted answers)"
    );
    for (binary, replicas) in &cluster.controllers {
        let clients: BTreeSet<&str> = replicas.iter().map(|r| r.client.as_str()).collect();
        assert!(
            clients.len() == 2 && !clients.contains(""),
            "{binary}: each replica has its own credential"
        );
        let writes: Vec<&Value> = audit
            .iter()
            .filter(|r| clients.contains(r["client"].as_str().unwrap_or("")))
            .filter(|r| {
                matches!(
                    r["verb"].as_str(),
                    Some("create" | "update" | "patch" | "delete")
                )
            })
            .filter(|r| r["resource"] != "leases" && r["resource"] != "events")
            .filter(|r| r["code"].as_u64().is_some_and(|c| c < 300))
            .collect();
        let writers: Vec<&str> = writes
            .iter()
            .map(|r| r["client"].as_str().unwrap_or(""))
            .collect();
        let turn_points: Vec<String> = writes
            .windows(2)
            .filter(|w| w[0]["client"] != w[1]["client"])
            .map(|w| {
                format!(
                    "{} {} {} -> {} {} {}",
                    w[0]["client"],
                    w[0]["verb"],
                    w[0]["path"],
                    w[1]["client"],
                    w[1]["verb"],
                    w[1]["path"]
                )
            })
            .collect();
        assert!(
            !writers.is_empty(),
            "{binary}: its writes are in the audit log"
        );
        let turns = writers.windows(2).filter(|w| w[0] != w[1]).count();
        // Each change of Lease holder allows one change of writer. A leader is killed on purpose
        // (one change); on a loaded machine a renewal can also miss its deadline and hand over.
        let lease_writers: Vec<&str> = audit
            .iter()
            .filter(|r| clients.contains(r["client"].as_str().unwrap_or("")))
            .filter(|r| r["resource"] == "leases")
            .filter(|r| matches!(r["verb"].as_str(), Some("create" | "update" | "patch")))
            .filter(|r| r["code"].as_u64().is_some_and(|c| c < 300))
            .map(|r| r["client"].as_str().unwrap_or(""))
            .collect();
        let allowed = lease_writers.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(
            turns <= allowed,
            "{binary}: writers took {turns} turns, more than the {allowed} leadership change(s): {turn_points:#?}"
        );
    }

    // No replica crashed after the last convergence either.
    supervise(&mut cluster, &scratch, &killed, "at the end");
}
