//! The resource types the server serves: a fixed catalogue of built-in kinds, plus one type per
//! established CustomResourceDefinition.

use std::sync::Arc;

use kaos_schema::CrdSchema;
use serde_json::Value;

use crate::meta::strings;

/// One served resource (a group/version/plural).
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Has a `/status` subresource: main writes ignore `status`, status writes change only it.
    pub has_status: bool,
    /// `metadata.generation` is maintained (bumped on changes outside metadata and status).
    pub tracks_generation: bool,
    /// Has a `/scale` subresource (an `autoscaling/v1` Scale): where its numbers live.
    pub scale: Option<ScalePaths>,
    /// A review (TokenReview, SubjectAccessReview): only `create`, answered from the tokens and
    /// RBAC (http/review.rs), never stored.
    pub review: bool,
    /// Admission schema of a custom resource.
    pub schema: Option<Arc<CrdSchema>>,
    /// `additionalPrinterColumns` of a custom resource.
    pub printer_columns: Vec<Value>,
    /// Name of the CRD that defines it (none for built-ins).
    pub crd: Option<String>,
}

/// Where a `/scale` subresource reads and writes its object, as JSON pointers (a CRD's
/// `subresources.scale` paths are `.a.b`; `/a/b` here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    /// A string selector in the object (a CRD's `labelSelectorPath`); None for Deployments,
    /// whose selector is `spec.selector.matchLabels`.
    pub label_selector: Option<String>,
    /// A custom resource's: while its spec replicas are unset its Scale cannot be read
    /// (kube-apiserver answers 500) but can be written, and its count is checked with the
    /// resource (its schema and scale paths), not as a Scale.
    pub custom_resource: bool,
}

impl ScalePaths {
    fn deployment() -> Self {
        ScalePaths {
            spec_replicas: "/spec/replicas".into(),
            status_replicas: "/status/replicas".into(),
            label_selector: None,
            custom_resource: false,
        }
    }

    fn of_crd(scale: &Value) -> Result<Self, String> {
        let path = |key: &str| -> Result<Option<String>, String> {
            match scale.get(key).and_then(Value::as_str) {
                None => Ok(None),
                Some(p) if p.starts_with('.') => Ok(Some(p.replace('.', "/"))),
                Some(p) => Err(format!(
                    "subresources.scale.{key} {p:?} must start with '.'"
                )),
            }
        };
        Ok(ScalePaths {
            spec_replicas: path("specReplicasPath")?
                .ok_or("subresources.scale.specReplicasPath is required")?,
            status_replicas: path("statusReplicasPath")?
                .ok_or("subresources.scale.statusReplicasPath is required")?,
            label_selector: path("labelSelectorPath")?,
            custom_resource: true,
        })
    }
}

impl ResourceType {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The key objects of this type are stored under (`<group>/<plural>`): every served
    /// version of a group shares the objects, as with kube-apiserver's storage.
    pub fn storage_key(&self) -> String {
        storage_key(&self.group, &self.plural)
    }

    pub fn verbs(&self) -> Vec<&'static str> {
        if self.review {
            return vec!["create"];
        }
        let all = [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        // Namespaces are deleted one by one (kube-apiserver serves no deletecollection).
        let is_namespace = self.group.is_empty() && self.plural == "namespaces";
        all.into_iter()
            .filter(|v| !(is_namespace && *v == "deletecollection"))
            .collect()
    }
}

/// The built-in kinds: group, version, kind, plural, namespaced, short names, whether it has a
/// `/status` subresource, whether it tracks `metadata.generation`.
type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    bool,
    bool,
);

// One line per kind, as a table reads.
#[rustfmt::skip]
const BUILTINS: &[Builtin] = &[
    ("", "v1", "Namespace", "namespaces", false, &["ns"], true, false),
    ("", "v1", "ConfigMap", "configmaps", true, &["cm"], false, false),
    ("", "v1", "Secret", "secrets", true, &[], false, false),
    ("", "v1", "Service", "services", true, &["svc"], true, false),
    ("", "v1", "ServiceAccount", "serviceaccounts", true, &["sa"], false, false),
    ("", "v1", "Event", "events", true, &["ev"], false, false),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true, &["pvc"], true, false),
    ("", "v1", "Pod", "pods", true, &["po"], true, false),
    ("apps", "v1", "Deployment", "deployments", true, &["deploy"], true, true),
    ("coordination.k8s.io", "v1", "Lease", "leases", true, &[], false, false),
    ("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", true, &["hpa"], true, false),
    ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", true, &["pdb"], true, true),
    ("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", true, &["netpol"], false, true),
    ("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", true, &[], false, true),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", true, &[], false, false),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", true, &[], false, false),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false, &[], false, false),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", false, &[], false, false),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", false, &["crd", "crds"], true, true),
    // Reviews: kube-apiserver's delegated authentication and authorization.
    ("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", false, &[], false, false),
    ("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", false, &[], false, false),
    ("events.k8s.io", "v1", "Event", "events", true, &["ev"], false, false),
];

/// The built-in kinds kube-apiserver lists in the `all` category (`kubectl get all`).
const IN_ALL_CATEGORY: &[&str] = &[
    "pods",
    "services",
    "deployments",
    "horizontalpodautoscalers",
];

/// The built-in resource types.
pub fn builtins() -> Vec<ResourceType> {
    BUILTINS
        .iter()
        .map(
            |&(
                group,
                version,
                kind,
                plural,
                namespaced,
                short_names,
                has_status,
                tracks_generation,
            )| ResourceType {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                plural: plural.into(),
                singular: kind.to_lowercase(),
                namespaced,
                short_names: short_names.iter().map(|s| s.to_string()).collect(),
                categories: match plural {
                    p if IN_ALL_CATEGORY.contains(&p) => vec!["all".into()],
                    "customresourcedefinitions" => vec!["api-extensions".into()],
                    _ => vec![],
                },
                has_status,
                tracks_generation,
                scale: (plural == "deployments").then(ScalePaths::deployment),
                review: plural.ends_with("reviews"),
                schema: None,
                printer_columns: vec![],
                crd: None,
            },
        )
        .collect()
}

/// The resource types a CRD serves (one per served version), or why it cannot serve any.
pub fn from_crd(crd: &Value) -> Result<Vec<ResourceType>, String> {
    let spec = crd.get("spec").ok_or("spec is required")?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .ok_or("spec.group is required")?;
    let names = spec.get("names").ok_or("spec.names is required")?;
    let plural = names
        .get("plural")
        .and_then(Value::as_str)
        .ok_or("spec.names.plural is required")?;
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .ok_or("spec.names.kind is required")?;
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map_or_else(|| kind.to_lowercase(), String::from);
    let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(format!(
            "metadata.name must be spec.names.plural+\".\"+spec.group: \"{plural}.{group}\""
        ));
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("spec.versions is required")?;
    let mut types = Vec::new();
    for version in versions {
        if version.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let version_name = version
            .get("name")
            .and_then(Value::as_str)
            .ok_or("spec.versions[].name is required")?;
        let schema = version
            .pointer("/schema/openAPIV3Schema")
            .map(|s| Arc::new(CrdSchema::new(s.clone())));
        types.push(ResourceType {
            group: group.into(),
            version: version_name.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: singular.clone(),
            namespaced,
            short_names: strings(names.get("shortNames")),
            categories: strings(names.get("categories")),
            has_status: version.pointer("/subresources/status").is_some(),
            tracks_generation: true,
            scale: version
                .pointer("/subresources/scale")
                .map(ScalePaths::of_crd)
                .transpose()?,
            review: false,
            schema,
            printer_columns: version
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            crd: Some(name.into()),
        });
    }
    Ok(types)
}

/// The key objects of `group`'s `plural` are stored under.
pub fn storage_key(group: &str, plural: &str) -> String {
    format!("{group}/{plural}")
}
