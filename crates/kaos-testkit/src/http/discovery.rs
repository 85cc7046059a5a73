//! Discovery (`/version`, `/api`, `/apis`, resource lists) and the OpenAPI v3 documents kubectl
//! reads: enough for it to find every kind and to send `fieldValidation` on apply.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::resources::ResourceType;

/// The Kubernetes version the server reports.
pub const KUBERNETES_VERSION: &str = "v1.33.0";

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": format!("{KUBERNETES_VERSION}+kaos-testkit"),
        "gitCommit": "kaos-testkit",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

/// group → versions, in the order types were registered.
fn group_versions(cluster: &Cluster) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rt in cluster.resource_types() {
        if rt.group.is_empty() {
            continue;
        }
        let versions = groups.entry(rt.group.clone()).or_default();
        if !versions.contains(&rt.version) {
            versions.push(rt.version.clone());
        }
    }
    groups
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": entries,
        "preferredVersion": entries.first().cloned().unwrap_or(Value::Null),
    })
}

pub fn groups(cluster: &Cluster) -> Value {
    let groups: Vec<Value> = group_versions(cluster)
        .iter()
        .map(|(name, versions)| group_json(name, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(cluster: &Cluster, name: &str) -> Option<Value> {
    let groups = group_versions(cluster);
    let versions = groups.get(name)?;
    let mut group = group_json(name, versions);
    group["kind"] = json!("APIGroup");
    group["apiVersion"] = json!("v1");
    Some(group)
}

/// The resource types served in `group`/`version`; none when it serves none (a 404).
fn served_in(cluster: &Cluster, group: &str, version: &str) -> Option<Vec<Arc<ResourceType>>> {
    let types: Vec<_> = cluster
        .resource_types()
        .into_iter()
        .filter(|t| t.group == group && t.version == version)
        .collect();
    (!types.is_empty()).then_some(types)
}

pub fn resources(cluster: &Cluster, group: &str, version: &str) -> Option<Value> {
    let types = served_in(cluster, group, version)?;
    let mut resources = Vec::new();
    for rt in &types {
        let mut entry = json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": rt.verbs(),
        });
        if !rt.short_names.is_empty() {
            entry["shortNames"] = json!(rt.short_names);
        }
        if !rt.categories.is_empty() {
            entry["categories"] = json!(rt.categories);
        }
        resources.push(entry);
        if rt.group.is_empty() && rt.plural == "serviceaccounts" {
            // The TokenRequest subresource (http/token.rs), as kube-apiserver lists it.
            resources.push(json!({
                "name": "serviceaccounts/token",
                "singularName": "",
                "namespaced": true,
                "group": "authentication.k8s.io",
                "version": "v1",
                "kind": "TokenRequest",
                "verbs": ["create"],
            }));
        }
        if rt.scale.is_some() {
            resources.push(json!({
                "name": format!("{}/scale", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if rt.has_status {
            resources.push(json!({
                "name": format!("{}/status", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

fn doc_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

pub fn openapi_root(cluster: &Cluster) -> Value {
    let hash = cluster.resource_version();
    let mut paths = serde_json::Map::new();
    let mut seen = Vec::new();
    for rt in cluster.resource_types() {
        let path = doc_path(&rt.group, &rt.version);
        if !seen.contains(&path) {
            paths.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash:016X}")}),
            );
            seen.push(path);
        }
    }
    json!({"paths": paths})
}

/// A per-group-version OpenAPI v3 document: every operation declares the query parameters
/// kube-apiserver accepts (`fieldValidation` among them) and the kind it acts on; component
/// schemas are the CRD schemas for custom resources and open objects for built-ins.
pub fn openapi_group(cluster: &Cluster, group: &str, version: &str) -> Option<Value> {
    let types = served_in(cluster, group, version)?;
    let prefix = format!("/{}", doc_path(group, version));
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for rt in &types {
        let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
        let schema_name = format!("{}.{}.{}", reverse_domain(&rt.group), rt.version, rt.kind);
        let reference = json!({"$ref": format!("#/components/schemas/{schema_name}")});
        let mut schema = rt.schema.as_ref().map(|s| s.raw().clone()).unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        schemas.insert(schema_name, schema);
        let operation = |action: &str, params: &[&str]| {
            let parameters: Vec<Value> = params
                .iter()
                .map(|p| json!({"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": true}}))
                .collect();
            json!({
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": parameters,
                "responses": {"200": {"content": {"application/json": {"schema": reference}}}},
            })
        };
        let write_params = ["dryRun", "fieldManager", "fieldValidation"];
        let mut patch_params = write_params.to_vec();
        patch_params.push("force");
        let base = if rt.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", rt.plural)
        } else {
            format!("{prefix}/{}", rt.plural)
        };
        if rt.review {
            // Reviews are only created, as in kube-apiserver's documents.
            paths.insert(base, json!({"post": operation("post", &write_params)}));
            continue;
        }
        paths.insert(
            base.clone(),
            json!({
                "get": operation("list", &["labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch"]),
                "post": operation("post", &write_params),
                "delete": operation("deletecollection", &["labelSelector", "fieldSelector"]),
            }),
        );
        let mut item = json!({
            "get": operation("get", &[]),
            "put": operation("put", &write_params),
            "patch": operation("patch", &patch_params),
            "delete": operation("delete", &["dryRun", "propagationPolicy"]),
        });
        item["patch"]["requestBody"] = json!({"content": {
            "application/apply-patch+yaml": {"schema": reference},
            "application/json-patch+json": {"schema": {"type": "object"}},
            "application/merge-patch+json": {"schema": reference},
            "application/strategic-merge-patch+json": {"schema": reference},
        }});
        paths.insert(format!("{base}/{{name}}"), item);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// `kaos.tools` → `tools.kaos`, as Kubernetes names schema components; core is `io.k8s.api.core`.
fn reverse_domain(group: &str) -> String {
    if group.is_empty() {
        return "io.k8s.api.core".into();
    }
    group.split('.').rev().collect::<Vec<_>>().join(".")
}
