//! The user's `spec.podSpec` merged over the generated pod spec with Kubernetes strategic-merge
//! semantics.
//!
//! The merge is `kaos_strategic_merge`'s, the one kaos-testkit applies to strategic merge
//! patches: Kubernetes' merge keys (`containers`, `initContainers`, `ephemeralContainers`,
//! `volumes`, `imagePullSecrets`, `schedulingGates`, `resourceClaims` and, in a container,
//! `env` by `name`; `ports` by `containerPort`, `volumeMounts` by `mountPath`,
//! `volumeDevices` by `devicePath`; `hostAliases` by `ip`; `topologySpreadConstraints` by
//! `topologyKey`), maps merged key by key, scalars overwritten, every other list (`tolerations`,
//! `command`, `args`, `envFrom`, …) replaced, a merged item kept in its place and a new one
//! appended (a new container is a sidecar after the generated one). Before merging, the user's
//! empty lists are dropped, as KAOS's Go types drop them (`omitempty`): an empty list changes
//! nothing (`docs/contract.md` §1, `docs/api.md`).

use k8s_openapi::api::core::v1::PodSpec;
use kaos_api::conditions::INVALID_POD_SPEC;
use serde_json::Value;

use crate::build::pod_security::{PodSecurity, secure_pod};
use crate::desired::Problem;

/// Why a pod spec could not be merged; reported to the user as a Failed status.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MergeError {
    /// `path` is the item's place in `spec.podSpec`, e.g. `containers[1]`.
    #[error("spec.podSpec.{path} has no {key}, which merging needs")]
    MissingKey { path: String, key: &'static str },
    #[error("spec.podSpec does not merge into a valid pod spec: {0}")]
    Invalid(String),
}

/// The pod a workload runs: `generated` locked down to `level` (`api_token`: whether it calls
/// the Kubernetes API with its ServiceAccount), with the user's `spec.podSpec` merged over it.
pub fn workload_pod(
    mut generated: PodSpec,
    level: PodSecurity,
    api_token: bool,
    user: Option<&PodSpec>,
) -> Result<PodSpec, Problem> {
    secure_pod(&mut generated, level, api_token);
    match user {
        Some(patch) => merge_pod_spec(&generated, patch)
            .map_err(|e| Problem::failed(INVALID_POD_SPEC, e.to_string())),
        None => Ok(generated),
    }
}

/// Merges `patch` over `base` and returns the merged pod spec.
pub fn merge_pod_spec(base: &PodSpec, patch: &PodSpec) -> Result<PodSpec, MergeError> {
    let mut merged = serde_json::to_value(base).map_err(|e| MergeError::Invalid(e.to_string()))?;
    let patch = serde_json::to_value(patch).map_err(|e| MergeError::Invalid(e.to_string()))?;
    merge_json(&mut merged, patch)?;
    serde_json::from_value(merged).map_err(|e| MergeError::Invalid(e.to_string()))
}

/// The merge on the pod specs' JSON.
fn merge_json(merged: &mut Value, mut patch: Value) -> Result<(), MergeError> {
    drop_empty_lists(&mut patch);
    kaos_strategic_merge::merge(merged, &patch, &["spec"]).map_err(|e| match e {
        kaos_strategic_merge::MergeError::MissingKey { path, key, .. } => {
            MergeError::MissingKey { path, key }
        }
        other => MergeError::Invalid(other.to_string()),
    })
}

/// Removes the empty lists of a user's pod spec, at every depth.
fn drop_empty_lists(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.as_array().is_some_and(Vec::is_empty));
            map.values_mut().for_each(drop_empty_lists);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_empty_lists),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: Value) -> PodSpec {
        serde_json::from_value(value).expect("valid pod spec")
    }

    fn base() -> PodSpec {
        spec(json!({
            "containers": [{
                "name": "agent", "image": "agent:1", "command": ["run"], "args": ["--a"],
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "ports": [{"containerPort": 8000, "name": "http"}],
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}],
                "volumeDevices": [{"name": "disk", "devicePath": "/dev/a"}],
                "envFrom": [{"configMapRef": {"name": "x"}}]
            }],
            "initContainers": [{"name": "init", "image": "init:1"}],
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}],
            "imagePullSecrets": [{"name": "pull"}],
            "nodeSelector": {"pool": "default", "zone": "a"},
            "tolerations": [{"key": "a", "operator": "Exists"}],
            "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}],
            "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}],
            "serviceAccountName": "default"
        }))
    }

    fn merged(patch: Value) -> Value {
        let merged = merge_pod_spec(&base(), &spec(patch)).expect("merges");
        serde_json::to_value(merged).expect("serializes")
    }

    /// One row per merge rule: the patch, a JSON pointer into the result, the expected value.
    #[test]
    fn merge_rules_table() {
        let cases: Vec<(&str, Value, &str, Value)> = vec![
            (
                "containers merge by name: fields of the base survive",
                json!({"containers": [{"name": "agent", "image": "agent:2"}]}),
                "/containers/0",
                json!({"name": "agent", "image": "agent:2", "command": ["run"], "args": ["--a"],
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "ports": [{"containerPort": 8000, "name": "http"}],
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}],
                "volumeDevices": [{"name": "disk", "devicePath": "/dev/a"}],
                "envFrom": [{"configMapRef": {"name": "x"}}]}),
            ),
            (
                "a new container the podSpec names alone comes first, as apimachinery (and so KAOS) orders it",
                json!({"containers": [{"name": "proxy", "image": "envoy"}]}),
                "/containers/0",
                json!({"name": "proxy", "image": "envoy"}),
            ),
            (
                "initContainers merge by name",
                json!({"initContainers": [{"name": "init", "image": "init:2"}, {"name": "warm", "image": "w"}]}),
                "/initContainers",
                json!([{"name": "init", "image": "init:2"}, {"name": "warm", "image": "w"}]),
            ),
            (
                "volumes merge by name",
                json!({"volumes": [{"name": "data", "emptyDir": {}}]}),
                "/volumes",
                json!([{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "cfg"}}]),
            ),
            (
                "imagePullSecrets merge by name",
                json!({"imagePullSecrets": [{"name": "other"}]}),
                "/imagePullSecrets",
                json!([{"name": "other"}, {"name": "pull"}]),
            ),
            (
                "env merges by name: replaced in place, new appended",
                json!({"containers": [{"name": "agent", "env": [{"name": "B", "value": "9"}, {"name": "C", "value": "3"}]}]}),
                "/containers/0/env",
                json!([{"name": "A", "value": "1"}, {"name": "B", "value": "9"}, {"name": "C", "value": "3"}]),
            ),
            (
                "ports merge by containerPort",
                json!({"containers": [{"name": "agent", "ports": [{"containerPort": 8000, "name": "web"}, {"containerPort": 9090, "name": "metrics"}]}]}),
                "/containers/0/ports",
                json!([{"containerPort": 8000, "name": "web"}, {"containerPort": 9090, "name": "metrics"}]),
            ),
            (
                "volumeMounts merge by mountPath",
                json!({"containers": [{"name": "agent", "volumeMounts": [{"name": "other", "mountPath": "/etc/cfg"}, {"name": "data", "mountPath": "/data"}]}]}),
                "/containers/0/volumeMounts",
                json!([{"name": "other", "mountPath": "/etc/cfg"}, {"name": "data", "mountPath": "/data"}]),
            ),
            (
                "hostAliases merge by ip",
                json!({"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}, {"ip": "10.0.0.2", "hostnames": ["c"]}]}),
                "/hostAliases",
                json!([{"ip": "10.0.0.1", "hostnames": ["b"]}, {"ip": "10.0.0.2", "hostnames": ["c"]}]),
            ),
            (
                "topologySpreadConstraints merge by topologyKey",
                json!({"topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 2, "whenUnsatisfiable": "DoNotSchedule"}]}),
                "/topologySpreadConstraints",
                json!([{"topologyKey": "zone", "maxSkew": 2, "whenUnsatisfiable": "DoNotSchedule"}]),
            ),
            (
                "volumeDevices merge by devicePath",
                json!({"containers": [{"name": "agent", "volumeDevices": [{"name": "disk2", "devicePath": "/dev/a"}]}]}),
                "/containers/0/volumeDevices",
                json!([{"name": "disk2", "devicePath": "/dev/a"}]),
            ),
            (
                "an empty list inside a sidecar is left out",
                json!({"containers": [{"name": "side", "image": "s", "args": [], "env": []}]}),
                "/containers/0",
                json!({"name": "side", "image": "s"}),
            ),
            (
                "maps merge key by key",
                json!({"nodeSelector": {"zone": "b", "gpu": "true"}}),
                "/nodeSelector",
                json!({"pool": "default", "zone": "b", "gpu": "true"}),
            ),
            (
                "scalars overwrite",
                json!({"serviceAccountName": "agent-sa"}),
                "/serviceAccountName",
                json!("agent-sa"),
            ),
            (
                "tolerations are replaced",
                json!({"tolerations": [{"key": "b", "operator": "Exists"}]}),
                "/tolerations",
                json!([{"key": "b", "operator": "Exists"}]),
            ),
            (
                "command is replaced",
                json!({"containers": [{"name": "agent", "command": ["other"]}]}),
                "/containers/0/command",
                json!(["other"]),
            ),
            (
                "args are replaced",
                json!({"containers": [{"name": "agent", "args": ["--b", "--c"]}]}),
                "/containers/0/args",
                json!(["--b", "--c"]),
            ),
            (
                "envFrom is replaced",
                json!({"containers": [{"name": "agent", "envFrom": [{"secretRef": {"name": "s"}}]}]}),
                "/containers/0/envFrom",
                json!([{"secretRef": {"name": "s"}}]),
            ),
            (
                "an empty patch list changes nothing",
                json!({"tolerations": [], "volumes": [], "containers": [{"name": "agent", "env": []}]}),
                "",
                serde_json::to_value(base()).expect("json"),
            ),
        ];
        for (rule, patch, pointer, expected) in cases {
            let result = merged(patch);
            assert_eq!(result.pointer(pointer), Some(&expected), "{rule}");
        }
    }

    #[test]
    fn an_unmergeable_patch_is_an_error_not_a_silent_drop() {
        let mut merged = serde_json::to_value(base()).expect("json");
        let unnamed = json!({"containers": [{"name": "agent", "env": [{"value": "v"}]}]});
        let err = merge_json(&mut merged, unnamed).expect_err("no key");
        assert_eq!(
            err.to_string(),
            "spec.podSpec.containers[0].env[0] has no name, which merging needs"
        );
        let unnamed = json!({"containers": [{"image": "x"}]});
        let err = merge_json(&mut merged, unnamed).expect_err("no key");
        assert_eq!(
            err.to_string(),
            "spec.podSpec.containers[0] has no name, which merging needs"
        );
    }
}
