//! Where a run happens: kaos-testkit started for it (RBAC, the deployment simulator, an audit
//! log, the controllers under their chart ServiceAccounts), or an existing cluster from
//! `--kubeconfig` (the controllers run out of cluster with that kubeconfig, in a fresh
//! namespace deleted at the end; no audit log).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, stream};
use kaos_harness::processes::{
    ChartCluster, Process, Scratch, apply_yaml, chart_env, client, documents, start_controller,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::DynamicObject;
use serde_json::{Value, json};

use crate::workload::{CONTROLLERS, KINDS, kaos};

/// The controllers' log level: warnings only, so logging costs nothing measurable.
const LOG_LEVEL: (&str, &str) = ("CONTROLLER_LOG_LEVEL", "warn");

/// One controller process of a run.
pub struct Controller<'a> {
    pub binary: &'a str,
    pub process: &'a Process,
    /// Its credential as the testkit's audit log names it; None on an existing cluster.
    pub audit_client: Option<&'a str>,
}

/// An existing cluster: the controller binaries run out of cluster with its kubeconfig.
pub struct Existing {
    /// (binary, process)
    controllers: Vec<(String, Process)>,
}

enum Source {
    Testkit(Box<ChartCluster>),
    Existing(Existing),
}

pub struct Cluster {
    pub admin: kube::Client,
    /// Where the workload and the floor go.
    pub namespace: String,
    source: Source,
}

impl Cluster {
    /// kaos-testkit with RBAC and the deployment simulator, the chart's rendering applied, one
    /// replica of each controller under its chart ServiceAccount; the workload in `default`.
    pub async fn testkit(scratch: &Scratch) -> Self {
        Self::testkit_with(scratch, &[]).await
    }

    /// [`Cluster::testkit`] with more environment for every controller.
    pub async fn testkit_with(scratch: &Scratch, env: &[(&str, &str)]) -> Self {
        let mut env = env.to_vec();
        env.push(LOG_LEVEL);
        let cluster = ChartCluster::start(scratch, &["--watch-history", "200000"], 1, &env).await;
        Self {
            admin: cluster.admin.clone(),
            namespace: "default".into(),
            source: Source::Testkit(Box::new(cluster)),
        }
    }

    /// The cluster of `kubeconfig` (cluster-admin): installs the CRDs and the MCP runtime
    /// registry if missing, creates `namespace` (fresh: an old one of that name is deleted
    /// first) and starts one process of each controller binary with the environment the chart
    /// gives its pod, authenticated as the kubeconfig's user.
    pub async fn existing(
        scratch: &Scratch,
        kubeconfig: &Path,
        namespace: &str,
    ) -> anyhow::Result<Self> {
        let admin = client(kubeconfig).await;
        install_prerequisites(&admin).await?;
        delete_namespace(&admin, namespace).await?;
        apply_yaml(
            &admin,
            &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n"),
        )
        .await;
        let mut controllers = Vec::new();
        for deployment in documents("deploy/kaos.yaml")
            .iter()
            .filter(|o| o["kind"] == "Deployment")
        {
            let binary = kaos_harness::processes::binary_of(deployment);
            let env = chart_env(&deployment["spec"]["template"]["spec"], &[LOG_LEVEL]);
            let process = start_controller(scratch, &binary, &binary, kubeconfig, &env);
            controllers.push((binary, process));
        }
        Ok(Self {
            admin,
            namespace: namespace.into(),
            source: Source::Existing(Existing { controllers }),
        })
    }

    pub fn controllers(&self) -> Vec<Controller<'_>> {
        match &self.source {
            Source::Testkit(cluster) => cluster
                .controllers
                .iter()
                .map(|(binary, replicas)| Controller {
                    binary,
                    process: &replicas[0].process,
                    audit_client: Some(&replicas[0].client),
                })
                .collect(),
            Source::Existing(existing) => existing
                .controllers
                .iter()
                .map(|(binary, process)| Controller {
                    binary,
                    process,
                    audit_client: None,
                })
                .collect(),
        }
    }

    pub fn controller(&self, binary: &str) -> Controller<'_> {
        self.controllers()
            .into_iter()
            .find(|c| c.binary == binary)
            .expect("every controller runs")
    }

    /// The testkit's audit log; None on an existing cluster.
    pub async fn audit(&self) -> Option<Vec<Value>> {
        match &self.source {
            Source::Testkit(cluster) => Some(cluster.audit().await),
            Source::Existing(_) => None,
        }
    }

    /// Stops the controllers (SIGTERM, then kill after 10 s), so the floor runs on a quiet
    /// server whatever the controllers were still doing.
    pub async fn stop_controllers(&mut self) {
        let mut processes: Vec<&mut Process> = match &mut self.source {
            Source::Testkit(cluster) => cluster
                .controllers
                .iter_mut()
                .flat_map(|(_, replicas)| replicas.iter_mut().map(|r| &mut r.process))
                .collect(),
            Source::Existing(existing) => existing.controllers.iter_mut().map(|(_, p)| p).collect(),
        };
        // Only live ones: a reaped child's pid may belong to someone else by now.
        processes.retain_mut(|p| p.is_running());
        for process in &processes {
            process.sigterm();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for process in &mut processes {
            while process.is_running() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let _ = process.child.kill();
            let _ = process.child.wait();
        }
    }

    /// The floor's namespace, `<namespace>-floor`, created empty (an old one is deleted first).
    pub async fn floor_namespace(&self) -> anyhow::Result<String> {
        let namespace = format!("{}-floor", self.namespace);
        delete_namespace(&self.admin, &namespace).await?;
        apply_yaml(
            &self.admin,
            &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n"),
        )
        .await;
        Ok(namespace)
    }

    /// On an existing cluster, deletes the run's and the floor's namespaces and waits until they
    /// are gone (the controllers are stopped by then, so their finalizers are removed first).
    /// The testkit goes with its process.
    pub async fn clean_up(&self) -> anyhow::Result<()> {
        if let Source::Existing(_) = self.source {
            delete_namespace(&self.admin, &self.namespace).await?;
            delete_namespace(&self.admin, &format!("{}-floor", self.namespace)).await?;
        }
        Ok(())
    }
}

fn read(path: &str) -> anyhow::Result<String> {
    let path = kaos_harness::repo_root().join(path);
    std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
}

/// The CRDs of the controllers' kinds (`deploy/crds`) and the MCP runtime registry
/// (`kaos-system/kaos-mcp-runtimes`, as the chart installs it), each only if missing; waits until
/// the CRDs are served.
async fn install_prerequisites(admin: &kube::Client) -> anyhow::Result<()> {
    let crds: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
        )),
    );
    let kinds = || CONTROLLERS.iter().flat_map(|(_, kinds)| kinds.iter());
    for kind in kinds() {
        let name = format!("{}.kaos.tools", kaos(kind).plural);
        if crds.get_opt(&name).await?.is_none() {
            let file = format!("deploy/crds/kaos.tools_{}.yaml", kaos(kind).plural);
            eprintln!("kaos-bench: installing CRD {name} ({file})");
            apply_yaml(admin, &read(&file)?).await;
        }
    }
    let started = Instant::now();
    for kind in kinds() {
        let api: Api<DynamicObject> = Api::all_with(admin.clone(), &kaos(kind));
        while api.list(&ListParams::default().limit(1)).await.is_err() {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(60),
                "the {kind} CRD is not served after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let config_maps: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        "kaos-system",
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "",
            "v1",
            "ConfigMap",
        )),
    );
    if config_maps.get_opt("kaos-mcp-runtimes").await?.is_none() {
        eprintln!(
            "kaos-bench: installing the MCP runtime registry (kaos-system/kaos-mcp-runtimes)"
        );
        let chart = documents("deploy/kaos.yaml");
        let registry = chart
            .iter()
            .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "kaos-mcp-runtimes")
            .context("deploy/kaos.yaml has no kaos-mcp-runtimes ConfigMap")?;
        apply_yaml(admin, &read("deploy/namespace.yaml")?).await;
        // JSON is YAML: one document.
        apply_yaml(admin, &serde_json::to_string(registry)?).await;
    }
    Ok(())
}

/// Deletes a namespace and waits until it is gone; the kaos resources in it lose their
/// finalizers first (their controllers are not running, and nothing else would remove them).
async fn delete_namespace(admin: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    if namespaces.get_opt(namespace).await?.is_none() {
        return Ok(());
    }
    eprintln!("kaos-bench: deleting namespace {namespace} …");
    for kind in KINDS {
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), namespace, &kaos(kind));
        let names: Vec<String> = api
            .list_metadata(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .collect();
        let release = json!({"metadata": {"finalizers": null}});
        let results: Vec<Result<DynamicObject, kube::Error>> = stream::iter(names)
            .map(|name| {
                let api = api.clone();
                let release = release.clone();
                async move {
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&release))
                        .await
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        for result in results {
            match result {
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                other => drop(other?),
            }
        }
    }
    let _ = namespaces.delete(namespace, &DeleteParams::default()).await;
    let started = Instant::now();
    while namespaces.get_opt(namespace).await?.is_some() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(900),
            "namespace {namespace} still exists after 900 s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "kaos-bench: namespace {namespace} deleted in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
