//! Kubernetes' strategic merge patch, the subset kaos-rs supports, written once for its two
//! users: the operator merges a user's `spec.podSpec` over the pod spec it generates
//! (`kaos_workload::build::podspec`), and kaos-testkit applies `application/strategic-merge-patch+json`
//! to built-in kinds (`kaos_testkit::patch`). It works on JSON (`serde_json::Value`) and knows
//! the lists by their place in the object ([`MERGED_LISTS`]), not by Go struct tags.
//!
//! What a patch does, as apimachinery's `strategicpatch` does it:
//! - **Maps** merge field by field; a scalar (or a value of another type) overwrites; `null`
//!   removes the field.
//! - **Lists** follow their patch strategy ([`list_strategy`]): a list with a merge key merges
//!   item by item, an item matched by its key merging into the live one (a patch item without
//!   the key is an error); `metadata.finalizers` merges as a set; every other list is replaced.
//!   The keys are Kubernetes' own `x-kubernetes-patch-merge-key`s: in a PodSpec `containers`,
//!   `initContainers`, `ephemeralContainers`, `volumes`, `imagePullSecrets`,
//!   `schedulingGates`, `resourceClaims` by `name`, `hostAliases` by `ip`,
//!   `topologySpreadConstraints` by `topologyKey`; in a container `env` by `name`, `ports` by
//!   `containerPort`, `volumeMounts` by `mountPath`, `volumeDevices` by `devicePath`; and
//!   `ownerReferences` by `uid`, a Service's `ports` by `port`, `status.conditions` by `type`.
//! - **Directives**: `$patch: replace` in a map replaces it, `$patch: delete` empties it; in a
//!   keyed list an item `{<key>: …, $patch: delete}` removes the item and `{$patch: replace}`
//!   makes the patch's other items the list; `$retainKeys: [fields]` clears the fields of the
//!   map it does not name; `$deleteFromPrimitiveList/<list>: [values]` removes values from a
//!   list of scalars; `$setElementOrder/<list>: [items]` orders the merged list (below).
//! - Values the live object does not have are taken from the patch without their directives and
//!   `null` fields, as kube-apiserver stores them (a new field whose map carries `$patch` is not
//!   set at all).
//!
//! **Order.** A merged item keeps its place and a new one is appended in the patch's order,
//! unless the patch carries `$setElementOrder/<list>` (kubectl's client-side apply always
//! sends it with a list it changes), which is applied exactly as kube-apiserver applies it.
//! Without the directive kube-apiserver orders differently: the patch's items come in the
//! patch's order, interleaved with the live items it does not name, so a new container is
//! placed before the live ones. Keeping the live order is the podSpec contract (the generated
//! containers stay first) and what the testkit's users expect.
//!
//! Not modelled: map patch strategies (Kubernetes has one, `replace` for a
//! PodDisruptionBudget's `selector`), lists of lists, and the checks apimachinery makes of a
//! `$setElementOrder` list against the patch's list.

mod lists;
mod merge;
mod order;

pub use lists::{ListStrategy, MERGED_LISTS, list_strategy, merge_key_by_name};
pub use merge::{MergeError, merge};
