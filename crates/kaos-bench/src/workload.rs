//! What a run creates: M ModelAPIs, M MCPServers and N Agents wired to each other in one of the
//! peer topologies, the ModelAPI change made after the idle window, and the floor's writes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, stream};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

/// The model every Agent asks for: served by the ModelAPIs both as a Proxy (`*`) and once
/// switched to Hosted (`hostedConfig.model`).
pub const MODEL: &str = "gpt-4o";

/// How the Agents list each other in `spec.agentNetwork.access`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Topology {
    /// No peers.
    None,
    /// Groups of 10: the first lists the 9 others.
    Star,
    /// Groups of 10: agent i lists agent i+1.
    Chain,
    /// Pairs that list each other.
    Pairs,
    /// Groups of 20: everyone lists everyone else.
    Mesh,
}

impl Topology {
    // No `self` (every agent listing itself): the CRD refuses it since issue 18.
    pub const ALL: [Topology; 5] = [
        Topology::None,
        Topology::Star,
        Topology::Chain,
        Topology::Pairs,
        Topology::Mesh,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Topology::None => "none",
            Topology::Star => "star",
            Topology::Chain => "chain",
            Topology::Pairs => "pairs",
            Topology::Mesh => "mesh",
        }
    }

    /// The indexes of the agents agent `i` (of `n`) lists.
    pub fn peers(self, i: usize, n: usize) -> Vec<usize> {
        let group = |size: usize| (i / size * size)..((i / size + 1) * size).min(n);
        match self {
            Topology::None => vec![],
            Topology::Star => {
                let members = group(10);
                if i == members.start {
                    members.skip(1).collect()
                } else {
                    vec![]
                }
            }
            Topology::Chain => (i + 1 < group(10).end)
                .then_some(i + 1)
                .into_iter()
                .collect(),
            Topology::Pairs => {
                let other = i ^ 1;
                (other < n).then_some(other).into_iter().collect()
            }
            Topology::Mesh => group(20).filter(|&j| j != i).collect(),
        }
    }
}

/// The kinds a run creates.
pub const KINDS: [&str; 3] = ["Agent", "ModelAPI", "MCPServer"];

pub fn kaos(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("kaos.tools", "v1alpha1", kind))
}

pub fn deployments() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
}

pub fn services() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Service"))
}

pub fn agent_name(i: usize) -> String {
    format!("agent-{i}")
}

/// The resources of one run and the wiring the controllers should end with.
pub struct Workload {
    pub agents: usize,
    /// M: ModelAPIs, and MCPServers.
    pub shared: usize,
    /// Agent name → the names it lists.
    pub peers: BTreeMap<String, BTreeSet<String>>,
    /// Agent name → its ModelAPI.
    pub model_api: BTreeMap<String, String>,
}

impl Workload {
    pub fn new(topology: Topology, agents: usize) -> Self {
        let shared = (agents / 100).max(1);
        let peers = (0..agents)
            .map(|i| {
                let listed = topology.peers(i, agents).into_iter().map(agent_name);
                (agent_name(i), listed.collect())
            })
            .collect();
        let model_api = (0..agents)
            .map(|i| (agent_name(i), format!("llm-{}", i % shared)))
            .collect();
        Self {
            agents,
            shared,
            peers,
            model_api,
        }
    }

    /// Agents + ModelAPIs + MCPServers.
    pub fn resources(&self) -> usize {
        self.agents + 2 * self.shared
    }

    /// How many resources of `kind` a run creates (none of any kind not in [`KINDS`]).
    pub fn count(&self, kind: &str) -> usize {
        match kind {
            "Agent" => self.agents,
            "ModelAPI" | "MCPServer" => self.shared,
            _ => 0,
        }
    }

    pub fn objects(&self) -> Vec<(ApiResource, Value)> {
        let mut out = Vec::new();
        for i in 0..self.shared {
            out.push((kaos("ModelAPI"), json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI", "metadata": {"name": format!("llm-{i}")},
                "spec": {"mode": "Proxy", "proxyConfig": {"models": ["*"]}}})));
            out.push((kaos("MCPServer"), json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "MCPServer", "metadata": {"name": format!("tools-{i}")},
                "spec": {"runtime": "python-string", "params": "x = 1"}})));
        }
        for i in 0..self.agents {
            let name = agent_name(i);
            let mut spec = json!({"modelAPI": self.model_api[&name], "model": MODEL,
                "mcpServers": [format!("tools-{}", i % self.shared)], "config": {"instructions": "benchmark"}});
            let peers = &self.peers[&name];
            if !peers.is_empty() {
                spec["agentNetwork"] = json!({"access": peers});
            }
            out.push((
                kaos("Agent"),
                json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent", "metadata": {"name": name}, "spec": spec}),
            ));
        }
        out
    }
}

/// Server-side applies `objects` in `namespace`, `concurrency` at a time; the uid of each by
/// `(kind, name)`.
pub async fn apply_all(
    client: &kube::Client,
    namespace: &str,
    objects: Vec<(ApiResource, Value)>,
    concurrency: usize,
) -> anyhow::Result<BTreeMap<(String, String), String>> {
    let results: Vec<anyhow::Result<((String, String), String)>> = stream::iter(objects)
        .map(|(resource, object)| {
            let client = client.clone();
            async move {
                let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
                let name = object["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let written = api
                    .patch(
                        &name,
                        &PatchParams::apply("kaos-bench").force(),
                        &Patch::Apply(&object),
                    )
                    .await?;
                Ok((
                    (resource.kind, name),
                    written.metadata.uid.unwrap_or_default(),
                ))
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The ModelAPI change: every ModelAPI from Proxy to Hosted (serving [`MODEL`]), which moves
/// their endpoint to another port and so every Agent's `MODEL_API_URL`.
pub async fn switch_to_hosted(
    client: &kube::Client,
    namespace: &str,
    shared: usize,
) -> anyhow::Result<()> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &kaos("ModelAPI"));
    let body =
        json!({"spec": {"mode": "Hosted", "hostedConfig": {"model": MODEL}, "proxyConfig": null}});
    for i in 0..shared {
        api.patch(
            &format!("llm-{i}"),
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await?;
    }
    Ok(())
}

/// What the run ended with, for the floor to write again: every primary (the loader's body)
/// with its final status, and every child the controllers wrote, as they left it.
pub struct FinalObjects {
    primaries: Vec<(ApiResource, Value)>,
    /// `(resource, name)` → the status the controllers wrote.
    statuses: BTreeMap<(String, String), Value>,
    children: Vec<(ApiResource, Value)>,
}

/// The kinds of child the controllers write in a run's workload (no HTTPRoutes: no gateway).
fn child_resources() -> [ApiResource; 3] {
    [
        deployments(),
        services(),
        ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
    ]
}

impl FinalObjects {
    /// Reads them from `namespace` once the run has converged.
    pub async fn read(
        client: &kube::Client,
        namespace: &str,
        workload: &Workload,
    ) -> anyhow::Result<Self> {
        let mut statuses = BTreeMap::new();
        for kind in KINDS {
            let resource = kaos(kind);
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            for object in api.list(&ListParams::default()).await?.items {
                if let (Some(name), Some(status)) =
                    (object.metadata.name, object.data.get("status"))
                {
                    statuses.insert((resource.plural.clone(), name), status.clone());
                }
            }
        }
        let mut children = Vec::new();
        for resource in child_resources() {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            for object in api.list(&ListParams::default()).await?.items {
                if let Some(body) = as_written(&resource, object) {
                    children.push((resource.clone(), body));
                }
            }
        }
        Ok(Self {
            primaries: workload.objects(),
            statuses,
            children,
        })
    }
}

/// A child of a kaos resource as a client would write it: without what the server fills in
/// (uid, versions, times, managed fields, status, a Service's cluster IPs, the Deployment
/// revision). Its owner references are kept as they are; the floor points them at its own
/// primaries' uids. None for objects no kaos resource controls.
fn as_written(resource: &ApiResource, object: DynamicObject) -> Option<Value> {
    let owners = object.metadata.owner_references.clone().unwrap_or_default();
    owners
        .iter()
        .find(|o| o.controller == Some(true) && o.api_version.starts_with("kaos.tools/"))?;
    let mut annotations = object.metadata.annotations.clone().unwrap_or_default();
    annotations.remove("deployment.kubernetes.io/revision");
    let mut body = object.data;
    if let Some(map) = body.as_object_mut() {
        map.remove("status");
    }
    if let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) {
        for server_filled in ["clusterIP", "clusterIPs"] {
            spec.remove(server_filled);
        }
    }
    body["apiVersion"] = json!(resource.api_version);
    body["kind"] = json!(resource.kind);
    body["metadata"] = json!({
        "name": object.metadata.name,
        "labels": object.metadata.labels,
        "annotations": annotations,
        "ownerReferences": owners,
    });
    Some(body)
}

/// How long a bare client takes to write the run's final objects, in phases.
pub struct Floor {
    /// The same primaries, children and statuses as the run ended with.
    pub total: Duration,
    /// The earlier, smaller floor (until 2026-11-24): a minimal Deployment and Service per
    /// resource and two Deployment status writes, no primaries; kept for comparison.
    pub minimal: Duration,
}

/// The floor, in `floor_namespace` (empty), with the controllers stopped: a bare client writes
/// the final objects of the run, `concurrency` at a time: the primaries as the loader wrote them
/// (the run's time includes those writes too), then the children as the controllers left them
/// (owned by the floor's primaries), then two status writes per primary (its final status, the
/// first time with phase Pending), as the controllers write a status when they start and when
/// the workload is ready. Then, in `run_namespace`, the earlier minimal floor.
pub async fn floor(
    client: &kube::Client,
    run_namespace: &str,
    floor_namespace: &str,
    objects: &FinalObjects,
    concurrency: usize,
) -> anyhow::Result<Floor> {
    let started = Instant::now();
    let uids = apply_all(
        client,
        floor_namespace,
        objects.primaries.clone(),
        concurrency,
    )
    .await
    .context("floor: the primaries")?;
    let children = objects
        .children
        .iter()
        .map(|(resource, body)| {
            let mut body = body.clone();
            if let Some(owners) = body["metadata"]["ownerReferences"].as_array_mut() {
                for owner in owners {
                    let key = (
                        owner["kind"].as_str().unwrap_or("").to_string(),
                        owner["name"].as_str().unwrap_or("").to_string(),
                    );
                    owner["uid"] = json!(uids.get(&key).cloned().unwrap_or_default());
                }
            }
            (resource.clone(), body)
        })
        .collect();
    apply_all(client, floor_namespace, children, concurrency)
        .await
        .context("floor: the children")?;
    // Round 1 (phase Pending) for every primary, then round 2 (the final status): the
    // controllers' order, and the final objects end as the run's did.
    for round in [Some("Pending"), None] {
        let mut writes = Vec::new();
        for (resource, body) in &objects.primaries {
            let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
            let Some(status) = objects
                .statuses
                .get(&(resource.plural.clone(), name.clone()))
            else {
                continue;
            };
            let mut status = status.clone();
            if let Some(phase) = round {
                status["phase"] = json!(phase);
            }
            writes.push((resource.clone(), name, status));
        }
        let results: Vec<Result<DynamicObject, kube::Error>> = stream::iter(writes)
            .map(|(resource, name, status)| {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), floor_namespace, &resource);
                async move {
                    api.patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"status": status})),
                    )
                    .await
                }
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        for r in results {
            r.context("floor: a status")?;
        }
    }
    let total = started.elapsed();
    let minimal =
        minimal_floor(client, run_namespace, objects.primaries.len(), concurrency).await?;
    Ok(Floor { total, minimal })
}

/// The earlier floor: a minimal Deployment and Service per resource, then two status writes
/// per Deployment (not ready, then ready), with the same concurrency.
async fn minimal_floor(
    client: &kube::Client,
    namespace: &str,
    resources: usize,
    concurrency: usize,
) -> anyhow::Result<Duration> {
    let deployments = deployments();
    let mut writes = Vec::new();
    for i in 0..resources {
        let name = format!("floor-{i}");
        writes.push((deployments.clone(), json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": "floor"}},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}]}}}})));
        writes.push((
            services(),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 8000}]}}),
        ));
    }
    let started = Instant::now();
    apply_all(client, namespace, writes, concurrency).await?;
    let statuses: Vec<(usize, u32)> = (0..resources).flat_map(|i| [(i, 0), (i, 1)]).collect();
    let results: Vec<Result<DynamicObject, kube::Error>> = stream::iter(statuses)
        .map(|(i, round)| {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &deployments);
            async move {
                // A valid status whatever the cluster's own deployment controller wrote
                // before (kube-apiserver checks ready, available, updated ≤ replicas).
                let body = json!({"status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                    "readyReplicas": round, "availableReplicas": round}});
                api.patch_status(
                    &format!("floor-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&body),
                )
                .await
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(started.elapsed())
}

pub const AGENT_CONTROLLER: &str = "agent-controller";

/// Each controller binary and the kinds it reconciles. A run creates no MemoryStores,
/// AccessGrants or ThirdPartyServices: the memorystore and authz controllers start, as the chart
/// runs them, and idle.
pub const CONTROLLERS: [(&str, &[&str]); 5] = [
    (AGENT_CONTROLLER, &["Agent"]),
    ("modelapi-controller", &["ModelAPI"]),
    ("mcpserver-controller", &["MCPServer"]),
    ("memorystore-controller", &["MemoryStore"]),
    ("authz-controller", &["AccessGrant", "ThirdPartyService"]),
];

/// The kinds a controller binary reconciles (none for a binary the bench does not know: the
/// chart may run one it has not been told about, which then only idles here).
pub fn kinds_of(binary: &str) -> &'static [&'static str] {
    CONTROLLERS
        .iter()
        .find(|(b, _)| *b == binary)
        .map_or(&[], |(_, kinds)| *kinds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(t: Topology, n: usize) -> Vec<Vec<usize>> {
        (0..n).map(|i| t.peers(i, n)).collect()
    }

    #[test]
    fn topologies() {
        assert!(all(Topology::None, 5).iter().all(Vec::is_empty));
        let star = all(Topology::Star, 12);
        assert_eq!(star[0], (1..10).collect::<Vec<_>>());
        assert_eq!(star[10], vec![11]);
        assert!(star[1].is_empty() && star[11].is_empty());
        let chain = all(Topology::Chain, 12);
        assert_eq!((chain[0].clone(), chain[8].clone()), (vec![1], vec![9]));
        assert!(chain[9].is_empty() && chain[11].is_empty());
        assert_eq!(chain[10], vec![11]);
        assert_eq!(
            all(Topology::Pairs, 5),
            vec![vec![1], vec![0], vec![3], vec![2], vec![]]
        );
        let mesh = all(Topology::Mesh, 40);
        assert_eq!(mesh[0].len(), 19);
        assert!(mesh[25].iter().all(|&j| (20..40).contains(&j) && j != 25));
    }
}
