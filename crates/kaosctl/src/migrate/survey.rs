//! What `kaosctl migrate` reads of the cluster before it changes anything: the kaos.tools
//! CRDs and who owns them, the KAOS operators, how many resources of each kind, the registry.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, ObjectMeta};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

use super::{
    GROUP, KINDS, MANAGED_BY, MANAGED_BY_HELM, Options, REGISTRY, RELEASE_NAME, RELEASE_NAMESPACE,
    api_failure,
};
use crate::failure::Failure;

/// Who owns an object, as Helm sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Owner {
    /// Not in the cluster.
    Missing,
    /// None of Helm's ownership keys: how KAOS installs its CRDs.
    Unowned,
    /// A Helm release (the label and both annotations).
    Release { name: String, namespace: String },
    /// Some of the keys, or other values: described.
    Other(String),
}

impl Owner {
    pub(super) fn of(meta: &ObjectMeta) -> Self {
        let label = meta.labels.as_ref().and_then(|l| l.get(MANAGED_BY));
        let annotations = meta.annotations.as_ref();
        let name = annotations.and_then(|a| a.get(RELEASE_NAME));
        let namespace = annotations.and_then(|a| a.get(RELEASE_NAMESPACE));
        match (label, name, namespace) {
            (None, None, None) => Owner::Unowned,
            (Some(helm), Some(name), Some(namespace)) if helm == MANAGED_BY_HELM => {
                Owner::Release {
                    name: name.clone(),
                    namespace: namespace.clone(),
                }
            }
            _ => {
                let mut parts = Vec::new();
                if let Some(label) = label {
                    parts.push(format!("{MANAGED_BY}={label}"));
                }
                if let Some(name) = name {
                    parts.push(format!("{RELEASE_NAME}={name}"));
                }
                if let Some(namespace) = namespace {
                    parts.push(format!("{RELEASE_NAMESPACE}={namespace}"));
                }
                Owner::Other(parts.join(", "))
            }
        }
    }

    pub(super) fn is(&self, release: &str, namespace: &str) -> bool {
        matches!(self, Owner::Release { name, namespace: ns } if name == release && ns == namespace)
    }

    /// Names another Helm release (which would refuse to let ours adopt it).
    pub(super) fn other_release(&self, release: &str, namespace: &str) -> bool {
        match self {
            Owner::Release { .. } => !self.is(release, namespace),
            Owner::Other(keys) => keys.contains("meta.helm.sh/"),
            _ => false,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Owner::Missing => "missing".into(),
            Owner::Unowned => "no Helm ownership metadata (as KAOS installs it)".into(),
            Owner::Release { name, namespace } => {
                format!("Helm release {name} in namespace {namespace}")
            }
            Owner::Other(keys) => format!("partial Helm metadata: {keys}"),
        }
    }
}

/// A CRD of kaos-rs and who owns it.
#[derive(Clone, Debug)]
pub struct Crd {
    pub name: String,
    pub owner: Owner,
}

/// A Deployment of the KAOS Go operator.
#[derive(Clone, Debug)]
pub struct Operator {
    pub namespace: String,
    pub name: String,
    /// spec.replicas
    pub replicas: i32,
    /// status.replicas: pods still there
    pub pods: i32,
    pub owner: Owner,
}

impl Operator {
    pub fn running(&self) -> bool {
        self.replicas > 0 || self.pods > 0
    }

    /// How to remove it: its Helm release, or the Deployment itself.
    pub(super) fn removal(&self) -> String {
        match &self.owner {
            Owner::Release { name, namespace } => format!("helm uninstall {name} -n {namespace}"),
            _ => format!(
                "kubectl delete deployment {} -n {}   # and its ServiceAccount, ClusterRole(s) and ClusterRoleBinding(s): kubectl get clusterrole,clusterrolebinding | grep kaos-operator",
                self.name, self.namespace
            ),
        }
    }
}

/// What the cluster holds for the migration.
#[derive(Clone, Debug)]
pub struct Survey {
    pub server: String,
    pub crds: Vec<Crd>,
    /// Other kaos.tools CRDs (of KAOS kinds kaos-rs does not serve): not in the chart, left alone.
    pub foreign_crds: Vec<String>,
    pub operators: Vec<Operator>,
    /// (kind, count) of the kinds whose CRD is there.
    pub counts: Vec<(&'static str, usize)>,
    /// The registry ConfigMap in the release namespace, which the chart creates.
    pub registry: Owner,
}

impl Survey {
    pub(super) fn blocking_registry(&self, options: &Options) -> bool {
        !matches!(self.registry, Owner::Missing)
            && !self.registry.is(&options.release, &options.namespace)
    }
}

fn is_kaos_operator(meta: &ObjectMeta) -> bool {
    let name = meta.name.as_deref().unwrap_or("");
    let label = |key: &str| {
        meta.labels
            .as_ref()
            .and_then(|l| l.get(key))
            .map(String::as_str)
    };
    name == "kaos-operator"
        || name.starts_with("kaos-operator-")
        || label("app.kubernetes.io/name") == Some("kaos-operator")
        || label("helm.sh/chart").is_some_and(|c| c.starts_with("kaos-operator-"))
}

pub(super) fn kind_api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1alpha1", kind));
    Api::all_with(client.clone(), &resource)
}

/// Reads what the migration needs: the CRDs, the KAOS operators, the resources, the registry.
pub async fn survey(
    client: &kube::Client,
    server: &str,
    options: &Options,
) -> Result<Survey, Failure> {
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let all = crd_api
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| api_failure(e, "list the CustomResourceDefinitions", server))?;
    let ours: Vec<String> = kaos_api::crd::all()
        .into_iter()
        .filter_map(|(_, crd)| crd.metadata.name)
        .collect();
    let mut crds = Vec::new();
    for name in &ours {
        let owner = all
            .items
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .map_or(Owner::Missing, |c| Owner::of(&c.metadata));
        crds.push(Crd {
            name: name.clone(),
            owner,
        });
    }
    let mut foreign_crds: Vec<String> = all
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .filter(|n| n.ends_with(&format!(".{GROUP}")) && !ours.contains(n))
        .collect();
    foreign_crds.sort();

    let deployments: Api<Deployment> = Api::all(client.clone());
    let mut operators = Vec::new();
    for deployment in deployments
        .list(&ListParams::default())
        .await
        .map_err(|e| api_failure(e, "list the Deployments of all namespaces", server))?
        .items
    {
        if !is_kaos_operator(&deployment.metadata) {
            continue;
        }
        operators.push(Operator {
            namespace: deployment.metadata.namespace.clone().unwrap_or_default(),
            name: deployment.metadata.name.clone().unwrap_or_default(),
            replicas: deployment
                .spec
                .as_ref()
                .and_then(|s| s.replicas)
                .unwrap_or(1),
            pods: deployment
                .status
                .as_ref()
                .and_then(|s| s.replicas)
                .unwrap_or(0),
            owner: Owner::of(&deployment.metadata),
        });
    }

    let mut counts = Vec::new();
    for (kind, plural, _, _) in KINDS {
        let crd = format!("{plural}.{GROUP}");
        if crds
            .iter()
            .any(|c| c.name == crd && c.owner != Owner::Missing)
        {
            let listed = kind_api(client, kind)
                .list_metadata(&ListParams::default())
                .await
                .map_err(|e| api_failure(e, &format!("list the {kind}s"), server))?;
            counts.push((*kind, listed.items.len()));
        }
    }

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &options.namespace);
    let registry = match config_maps.get_metadata_opt(REGISTRY).await {
        Ok(found) => found.map_or(Owner::Missing, |c| Owner::of(&c.metadata)),
        Err(e) => {
            return Err(api_failure(
                e,
                &format!("read ConfigMap {}/{REGISTRY}", options.namespace),
                server,
            ));
        }
    };
    Ok(Survey {
        server: server.to_string(),
        crds,
        foreign_crds,
        operators,
        counts,
        registry,
    })
}
