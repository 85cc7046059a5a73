//! Which lists merge, and by which key: Kubernetes' own patch strategy and
//! `x-kubernetes-patch-merge-key` for each list we support, taken from the Kubernetes OpenAPI
//! (`api/openapi-spec/swagger.json` of v1.37.2, the same tags as the Go types' `patchStrategy`
//! and `patchMergeKey`). A list that is not here is replaced by the patch's list: that is also
//! Kubernetes' rule for every list without a patch strategy (`tolerations`, `command`, `args`,
//! `envFrom`, `readinessGates`, NetworkPolicy `ports`, …).

use serde_json::Value;

/// How a list is patched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListStrategy {
    /// The patch's list replaces the live one (no patch strategy, or `atomic`).
    Replace,
    /// Items are matched by this field (the merge key): a matched item merges, a new one is
    /// added, `$patch: delete` removes one.
    MergeByKey(&'static str),
    /// A list of scalars merged as a set (patch strategy `merge` without a key): the patch's
    /// values are added, `$deleteFromPrimitiveList/<list>` removes values.
    MergeValues,
}

use ListStrategy::{MergeByKey, MergeValues};

/// A PodSpec stands under a field named `spec`: a Pod's `spec`, a template's `spec`.
const POD_SPEC: &[&str] = &["spec"];
/// Container, init container (a `Container`) and `EphemeralContainer` share these lists.
const CONTAINER: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

/// Every list that merges: the name of the field it stands in (any of them), its own name, and
/// its strategy. A list is found by its name and the nearest field above it (items of lists
/// add no name): `spec.template.spec.containers[0].env` is `env` under `containers`.
pub const MERGED_LISTS: &[(&[&str], &str, ListStrategy)] = &[
    // PodSpec
    (POD_SPEC, "containers", MergeByKey("name")),
    (POD_SPEC, "initContainers", MergeByKey("name")),
    (POD_SPEC, "ephemeralContainers", MergeByKey("name")),
    (POD_SPEC, "volumes", MergeByKey("name")),
    (POD_SPEC, "imagePullSecrets", MergeByKey("name")),
    (POD_SPEC, "hostAliases", MergeByKey("ip")),
    (
        POD_SPEC,
        "topologySpreadConstraints",
        MergeByKey("topologyKey"),
    ),
    (POD_SPEC, "schedulingGates", MergeByKey("name")),
    (POD_SPEC, "resourceClaims", MergeByKey("name")),
    (POD_SPEC, "evictionResponders", MergeByKey("name")),
    // Container, EphemeralContainer
    (CONTAINER, "env", MergeByKey("name")),
    (CONTAINER, "ports", MergeByKey("containerPort")),
    (CONTAINER, "volumeMounts", MergeByKey("mountPath")),
    (CONTAINER, "volumeDevices", MergeByKey("devicePath")),
    // ObjectMeta
    (&["metadata"], "ownerReferences", MergeByKey("uid")),
    (&["metadata"], "finalizers", MergeValues),
    // ServiceSpec (a PodSpec has no `ports`)
    (&["spec"], "ports", MergeByKey("port")),
    // The status of Pods, Deployments, ReplicaSets, Jobs, Services, PDBs, HPAs, …
    (&["status"], "conditions", MergeByKey("type")),
];

/// The strategy of the list at `path`, the field names from the object's root to the list.
pub fn list_strategy(path: &[&str]) -> ListStrategy {
    let Some((name, above)) = path.split_last() else {
        return ListStrategy::Replace;
    };
    let parent = above.last().copied().unwrap_or_default();
    MERGED_LISTS
        .iter()
        .find(|(parents, list, _)| list == name && parents.contains(&parent))
        .map_or(ListStrategy::Replace, |(_, _, strategy)| *strategy)
}

/// The merge key of a list known by its name only (kaos-testkit's server-side apply walks by
/// field name): the key of the lists of that name; where lists of one name have different keys
/// (`ports`: `containerPort` in containers, `port` in Services), the one `items` carry.
pub fn merge_key_by_name(name: &str, items: &[Value]) -> Option<&'static str> {
    let mut keys = MERGED_LISTS
        .iter()
        .filter_map(|(_, list, strategy)| match strategy {
            MergeByKey(key) if *list == name => Some(*key),
            _ => None,
        });
    let first = keys.next()?;
    let carried = |key: &str| items.iter().any(|item| item.get(key).is_some());
    if carried(first) {
        return Some(first);
    }
    Some(keys.find(|key| carried(key)).unwrap_or(first))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_list_is_found_by_its_name_and_the_field_above_it() {
        let cases: &[(&[&str], ListStrategy)] = &[
            (&["spec", "containers"], MergeByKey("name")),
            (
                &["spec", "template", "spec", "containers", "env"],
                MergeByKey("name"),
            ),
            (
                &["spec", "initContainers", "ports"],
                MergeByKey("containerPort"),
            ),
            (&["spec", "ports"], MergeByKey("port")),
            (&["spec", "ingress", "ports"], ListStrategy::Replace),
            (&["spec", "tolerations"], ListStrategy::Replace),
            (&["imagePullSecrets"], ListStrategy::Replace),
            (&["metadata", "finalizers"], MergeValues),
            (&["status", "conditions"], MergeByKey("type")),
            (&[], ListStrategy::Replace),
        ];
        for (path, strategy) in cases {
            assert_eq!(list_strategy(path), *strategy, "{path:?}");
        }
    }

    #[test]
    fn a_name_alone_picks_the_key_its_items_carry() {
        let container = [json!({"containerPort": 80})];
        let service = [json!({"port": 80})];
        assert_eq!(
            merge_key_by_name("ports", &container),
            Some("containerPort")
        );
        assert_eq!(merge_key_by_name("ports", &service), Some("port"));
        assert_eq!(merge_key_by_name("env", &[]), Some("name"));
        assert_eq!(merge_key_by_name("finalizers", &[]), None);
        assert_eq!(merge_key_by_name("tolerations", &[]), None);
    }
}
