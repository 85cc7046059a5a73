//! The merge, one row per merge key and per directive: the object the patch applies to, the
//! patch, and the whole result (or the error). The results were checked against apimachinery's
//! `strategicpatch.StrategicMergeMapPatch` (v0.37.2) on the same rows; they differ only where
//! the module documentation says (without `$setElementOrder` a new item is appended here, where
//! kube-apiserver puts the patch's items first).

use kaos_strategic_merge::{MergeError, merge};
use serde_json::{Value, json};

/// Where a row's object stands: a PodSpec of its own (the operator's merge), or a whole object
/// of a kind (the testkit's).
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    PodSpec,
    Deployment,
    Service,
}

impl Kind {
    pub fn at(self) -> &'static [&'static str] {
        match self {
            Kind::PodSpec => &["spec"],
            Kind::Deployment | Kind::Service => &[],
        }
    }
}

pub struct Row {
    pub name: &'static str,
    pub kind: Kind,
    pub live: Value,
    pub patch: Value,
    /// The merged object, or the error's `Display`.
    pub expected: Result<Value, &'static str>,
}

fn row(name: &'static str, live: Value, patch: Value, expected: Value) -> Row {
    Row {
        name,
        kind: Kind::PodSpec,
        live,
        patch,
        expected: Ok(expected),
    }
}

fn of(kind: Kind, name: &'static str, live: Value, patch: Value, expected: Value) -> Row {
    Row {
        kind,
        ..row(name, live, patch, expected)
    }
}

fn fails(name: &'static str, live: Value, patch: Value, error: &'static str) -> Row {
    Row {
        expected: Err(error),
        ..row(name, live, patch, Value::Null)
    }
}

/// A container named `name` with the lists a container merges.
fn container(name: &str) -> Value {
    json!({
        "name": name, "image": "app:1", "command": ["run"], "args": ["--a"],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        "envFrom": [{"configMapRef": {"name": "x"}}],
        "ports": [{"containerPort": 8000, "name": "http"}],
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}],
        "volumeDevices": [{"name": "disk", "devicePath": "/dev/a"}]
    })
}

/// `container(name)` with `field` set to `value`.
fn container_with(name: &str, field: &str, value: Value) -> Value {
    let mut c = container(name);
    c[field] = value;
    c
}

pub fn rows() -> Vec<Row> {
    let pod = |field: &str, value: Value| {
        let mut spec = json!({"containers": [container("agent")]});
        spec[field] = value;
        spec
    };
    let agent =
        |field: &str, value: Value| json!({"containers": [container_with("agent", field, value)]});
    let only = |field: &str, value: Value| json!({field: value});
    let deployment = |template: Value| json!({"metadata": {"name": "d"}, "spec": {"template": {"spec": template}}});
    vec![
        // Lists merged by a key: a matched item merges field by field, a new one is appended.
        row(
            "containers merge by name",
            pod("containers", json!([container("agent")])),
            only("containers", json!([{"name": "agent", "image": "app:2"}])),
            pod(
                "containers",
                json!([container_with("agent", "image", json!("app:2"))]),
            ),
        ),
        // apimachinery's order (tests/control_plane/test_differential.py compares it with
        // kube-apiserver's): the patch's items in its order, a live item it does not name only
        // before them where the live list had it before them.
        row(
            "a new container the patch names alone comes first",
            pod("containers", json!([container("agent")])),
            only("containers", json!([{"name": "side", "image": "s:1"}])),
            pod(
                "containers",
                json!([{"name": "side", "image": "s:1"}, container("agent")]),
            ),
        ),
        row(
            "a new container after a named live one comes after it",
            pod("containers", json!([container("agent")])),
            only(
                "containers",
                json!([{"name": "agent"}, {"name": "side", "image": "s:1"}]),
            ),
            pod(
                "containers",
                json!([container("agent"), {"name": "side", "image": "s:1"}]),
            ),
        ),
        row(
            "live items the patch does not name keep their place before the ones it names",
            pod(
                "volumes",
                json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]),
            ),
            only(
                "volumes",
                json!([{"name": "b", "emptyDir": {}}, {"name": "x"}]),
            ),
            pod(
                "volumes",
                json!([{"name": "a"}, {"name": "b", "emptyDir": {}}, {"name": "x"}, {"name": "c"}]),
            ),
        ),
        row(
            "initContainers merge by name",
            pod("initContainers", json!([{"name": "init", "image": "i:1"}])),
            only(
                "initContainers",
                json!([{"name": "init", "image": "i:2"}, {"name": "warm", "image": "w"}]),
            ),
            pod(
                "initContainers",
                json!([{"name": "init", "image": "i:2"}, {"name": "warm", "image": "w"}]),
            ),
        ),
        row(
            "ephemeralContainers merge by name",
            pod(
                "ephemeralContainers",
                json!([{"name": "debug", "image": "d:1", "tty": true}]),
            ),
            only(
                "ephemeralContainers",
                json!([{"name": "debug", "image": "d:2"}]),
            ),
            pod(
                "ephemeralContainers",
                json!([{"name": "debug", "image": "d:2", "tty": true}]),
            ),
        ),
        row(
            "volumes merge by name",
            pod(
                "volumes",
                json!([{"name": "cfg", "configMap": {"name": "cfg", "optional": true}}]),
            ),
            only(
                "volumes",
                json!([{"name": "cfg", "configMap": {"name": "other"}}, {"name": "data", "emptyDir": {}}]),
            ),
            pod(
                "volumes",
                json!([{"name": "cfg", "configMap": {"name": "other", "optional": true}}, {"name": "data", "emptyDir": {}}]),
            ),
        ),
        row(
            "imagePullSecrets merge by name",
            pod("imagePullSecrets", json!([{"name": "pull"}])),
            only(
                "imagePullSecrets",
                json!([{"name": "pull"}, {"name": "other"}]),
            ),
            pod(
                "imagePullSecrets",
                json!([{"name": "pull"}, {"name": "other"}]),
            ),
        ),
        row(
            "hostAliases merge by ip, their hostnames are replaced",
            pod(
                "hostAliases",
                json!([{"ip": "10.0.0.1", "hostnames": ["a"]}, {"ip": "10.0.0.2", "hostnames": ["b"]}]),
            ),
            only(
                "hostAliases",
                json!([{"ip": "10.0.0.1", "hostnames": ["c"]}]),
            ),
            pod(
                "hostAliases",
                json!([{"ip": "10.0.0.1", "hostnames": ["c"]}, {"ip": "10.0.0.2", "hostnames": ["b"]}]),
            ),
        ),
        row(
            "topologySpreadConstraints merge by topologyKey",
            pod(
                "topologySpreadConstraints",
                json!([{"topologyKey": "zone", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]),
            ),
            only(
                "topologySpreadConstraints",
                json!([{"topologyKey": "zone", "maxSkew": 2}]),
            ),
            pod(
                "topologySpreadConstraints",
                json!([{"topologyKey": "zone", "maxSkew": 2, "whenUnsatisfiable": "DoNotSchedule"}]),
            ),
        ),
        row(
            "schedulingGates merge by name",
            pod("schedulingGates", json!([{"name": "a"}])),
            only("schedulingGates", json!([{"name": "b"}])),
            pod("schedulingGates", json!([{"name": "b"}, {"name": "a"}])),
        ),
        row(
            "resourceClaims merge by name",
            pod(
                "resourceClaims",
                json!([{"name": "gpu", "resourceClaimName": "a"}]),
            ),
            only(
                "resourceClaims",
                json!([{"name": "gpu", "resourceClaimName": "b"}]),
            ),
            pod(
                "resourceClaims",
                json!([{"name": "gpu", "resourceClaimName": "b"}]),
            ),
        ),
        row(
            "env merges by name: replaced where it stands, new appended",
            agent("image", json!("app:1")),
            only(
                "containers",
                json!([{"name": "agent", "env": [{"name": "B", "value": "9"}, {"name": "C", "value": "3"}]}]),
            ),
            agent(
                "env",
                json!([{"name": "A", "value": "1"}, {"name": "B", "value": "9"}, {"name": "C", "value": "3"}]),
            ),
        ),
        row(
            "ports merge by containerPort",
            agent("image", json!("app:1")),
            only(
                "containers",
                json!([{"name": "agent", "ports": [{"containerPort": 8000, "name": "web"}, {"containerPort": 9090, "name": "metrics"}]}]),
            ),
            agent(
                "ports",
                json!([{"containerPort": 8000, "name": "web"}, {"containerPort": 9090, "name": "metrics"}]),
            ),
        ),
        row(
            "volumeMounts merge by mountPath",
            agent("image", json!("app:1")),
            only(
                "containers",
                json!([{"name": "agent", "volumeMounts": [{"name": "other", "mountPath": "/etc/cfg"}, {"name": "data", "mountPath": "/data"}]}]),
            ),
            agent(
                "volumeMounts",
                json!([{"name": "other", "mountPath": "/etc/cfg"}, {"name": "data", "mountPath": "/data"}]),
            ),
        ),
        row(
            "volumeDevices merge by devicePath",
            agent("image", json!("app:1")),
            only(
                "containers",
                json!([{"name": "agent", "volumeDevices": [{"name": "disk2", "devicePath": "/dev/a"}]}]),
            ),
            agent(
                "volumeDevices",
                json!([{"name": "disk2", "devicePath": "/dev/a"}]),
            ),
        ),
        row(
            "init and ephemeral containers merge their lists too",
            json!({"containers": [], "initContainers": [container("init")], "ephemeralContainers": [container("debug")]}),
            json!({
                "initContainers": [{"name": "init", "env": [{"name": "A", "value": "7"}]}],
                "ephemeralContainers": [{"name": "debug", "ports": [{"containerPort": 8000, "protocol": "UDP"}]}]
            }),
            json!({
                "containers": [],
                "initContainers": [container_with("init", "env", json!([{"name": "A", "value": "7"}, {"name": "B", "value": "2"}]))],
                "ephemeralContainers": [container_with("debug", "ports", json!([{"containerPort": 8000, "name": "http", "protocol": "UDP"}]))]
            }),
        ),
        // Every other list is replaced.
        row(
            "command, args and envFrom are replaced",
            agent("image", json!("app:1")),
            only(
                "containers",
                json!([{"name": "agent", "command": ["other"], "args": ["--b"], "envFrom": [{"secretRef": {"name": "s"}}]}]),
            ),
            json!({"containers": [{
                "name": "agent", "image": "app:1", "command": ["other"], "args": ["--b"],
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "envFrom": [{"secretRef": {"name": "s"}}],
                "ports": [{"containerPort": 8000, "name": "http"}],
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}],
                "volumeDevices": [{"name": "disk", "devicePath": "/dev/a"}]
            }]}),
        ),
        row(
            "tolerations and readinessGates are replaced",
            pod("tolerations", json!([{"key": "a", "operator": "Exists"}])),
            json!({"tolerations": [{"key": "b", "operator": "Exists"}], "readinessGates": [{"conditionType": "x"}]}),
            json!({"containers": [container("agent")], "tolerations": [{"key": "b", "operator": "Exists"}], "readinessGates": [{"conditionType": "x"}]}),
        ),
        row(
            "an empty list replaces a replaced list and changes no merged one",
            pod("tolerations", json!([{"key": "a", "operator": "Exists"}])),
            json!({"tolerations": [], "containers": []}),
            json!({"containers": [container("agent")], "tolerations": []}),
        ),
        // Maps and scalars.
        row(
            "maps merge key by key, null removes, scalars overwrite",
            pod(
                "nodeSelector",
                json!({"pool": "default", "zone": "a", "gpu": "no"}),
            ),
            json!({"nodeSelector": {"zone": "b", "gpu": null, "disk": "ssd"}, "serviceAccountName": "sa", "containers": null}),
            json!({"nodeSelector": {"pool": "default", "zone": "b", "disk": "ssd"}, "serviceAccountName": "sa"}),
        ),
        row(
            "a value of another type replaces, without its nulls and directives",
            pod("dnsConfig", json!("odd")),
            json!({"dnsConfig": {"nameservers": ["1.1.1.1"], "searches": null, "$retainKeys": ["nameservers"]}, "affinity": {"$patch": "replace", "nodeAffinity": {}}}),
            pod("dnsConfig", json!({"nameservers": ["1.1.1.1"]})),
        ),
        // Whole objects: where the testkit merges.
        of(
            Kind::Deployment,
            "a template's pod spec merges as a pod spec",
            deployment(json!({"containers": [container("agent")]})),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "env": [{"name": "A", "value": "0"}]}]}}}}),
            deployment(
                json!({"containers": [container_with("agent", "env", json!([{"name": "A", "value": "0"}, {"name": "B", "value": "2"}]))]}),
            ),
        ),
        of(
            Kind::Deployment,
            "ownerReferences merge by uid, finalizers as a set, status conditions by type",
            json!({
                "metadata": {"name": "d", "finalizers": ["a", "b"], "ownerReferences": [{"uid": "1", "name": "x", "kind": "Agent"}]},
                "status": {"conditions": [{"type": "Available", "status": "False"}, {"type": "Progressing", "status": "True"}]}
            }),
            json!({
                "metadata": {"finalizers": ["b", "c"], "ownerReferences": [{"uid": "1", "name": "y"}, {"uid": "2", "name": "z"}]},
                "status": {"conditions": [{"type": "Available", "status": "True"}]}
            }),
            json!({
                "metadata": {"name": "d", "finalizers": ["a", "b", "c"], "ownerReferences": [{"uid": "1", "name": "y", "kind": "Agent"}, {"uid": "2", "name": "z"}]},
                "status": {"conditions": [{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True"}]}
            }),
        ),
        of(
            Kind::Service,
            "a Service's ports merge by port",
            json!({"spec": {"ports": [{"port": 80, "targetPort": 8080, "name": "http"}], "selector": {"app": "a"}}}),
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 443, "name": "https"}]}}),
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090, "name": "http"}, {"port": 443, "name": "https"}], "selector": {"app": "a"}}}),
        ),
        // Directives.
        row(
            "$patch: replace replaces a map",
            pod("nodeSelector", json!({"pool": "default", "zone": "a"})),
            only("nodeSelector", json!({"$patch": "replace", "zone": "b"})),
            pod("nodeSelector", json!({"zone": "b"})),
        ),
        row(
            "$patch: delete empties a map",
            pod("securityContext", json!({"runAsNonRoot": true})),
            only("securityContext", json!({"$patch": "delete"})),
            pod("securityContext", json!({})),
        ),
        row(
            "$patch: delete removes an item by its key",
            pod(
                "containers",
                json!([container("agent"), {"name": "side", "image": "s:1"}]),
            ),
            only(
                "containers",
                json!([{"name": "side", "$patch": "delete"}, {"name": "gone", "$patch": "delete"}]),
            ),
            pod("containers", json!([container("agent")])),
        ),
        row(
            "$patch: replace in a list makes the other items the list",
            agent("image", json!("app:1")),
            only(
                "containers",
                json!([{"name": "agent", "env": [{"$patch": "replace"}, {"name": "Z", "value": "26"}]}]),
            ),
            agent("env", json!([{"name": "Z", "value": "26"}])),
        ),
        row(
            "$retainKeys clears the fields it does not name",
            pod(
                "volumes",
                json!([{"name": "cfg", "configMap": {"name": "cfg"}}]),
            ),
            only(
                "volumes",
                json!([{"name": "cfg", "$retainKeys": ["name", "secret"], "secret": {"secretName": "s"}}]),
            ),
            pod(
                "volumes",
                json!([{"name": "cfg", "secret": {"secretName": "s"}}]),
            ),
        ),
        of(
            Kind::Deployment,
            "$retainKeys switches a Deployment's strategy",
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
            json!({"spec": {"strategy": {"type": "Recreate"}}}),
        ),
        row(
            "$setElementOrder orders a keyed list, the others keep their live place",
            pod(
                "containers",
                json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]),
            ),
            json!({
                "$setElementOrder/containers": [{"name": "d"}, {"name": "c"}, {"name": "b"}],
                "containers": [{"name": "d", "image": "d:1"}, {"name": "b", "image": "b:2"}]
            }),
            pod(
                "containers",
                json!([{"name": "d", "image": "d:1"}, {"name": "a"}, {"name": "c"}, {"name": "b", "image": "b:2"}]),
            ),
        ),
        of(
            Kind::Deployment,
            "$setElementOrder and $deleteFromPrimitiveList on finalizers",
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {
                "$setElementOrder/finalizers": ["d", "a"],
                "$deleteFromPrimitiveList/finalizers": ["b"],
                "finalizers": ["d"]
            }}),
            json!({"metadata": {"finalizers": ["d", "a", "c"]}}),
        ),
        row(
            "new values are taken without their nulls and directives (a new field's with $patch not at all)",
            pod("containers", json!([container("agent")])),
            json!({
                "containers": [{"name": "side", "image": "s:1", "workingDir": null, "securityContext": {"$patch": "delete"}}],
                "affinity": {"podAffinity": {"$patch": "replace"}, "nodeAffinity": {"x": null}}
            }),
            json!({"containers": [{"name": "side", "image": "s:1", "securityContext": {}}, container("agent")], "affinity": {"nodeAffinity": {}}}),
        ),
        // What cannot be merged.
        fails(
            "an item without its merge key",
            pod("containers", json!([container("agent")])),
            only("containers", json!([{"image": "x"}])),
            "containers[0]: no merge key name",
        ),
        fails(
            "a nested item without its merge key",
            pod("containers", json!([container("agent")])),
            only(
                "containers",
                json!([{"name": "agent", "env": [{"name": "A"}, {"value": "v"}]}]),
            ),
            "containers[0].env[1]: no merge key name",
        ),
        fails(
            "a deletion without the merge key",
            pod("containers", json!([container("agent")])),
            only("containers", json!([{"$patch": "delete"}])),
            "containers[0]: no merge key name",
        ),
        fails(
            "an unknown $patch",
            pod("nodeSelector", json!({})),
            only("nodeSelector", json!({"$patch": "merge"})),
            "nodeSelector: unknown $patch \"merge\"",
        ),
        fails(
            "$patch: merge in a list",
            pod("containers", json!([container("agent")])),
            only("containers", json!([{"name": "agent", "$patch": "merge"}])),
            "containers[0]: $patch: merge is not supported in a list",
        ),
        fails(
            "$retainKeys that leaves out a field the patch sets",
            pod(
                "volumes",
                json!([{"name": "cfg", "configMap": {"name": "cfg"}}]),
            ),
            only(
                "volumes",
                json!([{"name": "cfg", "$retainKeys": ["name"], "secret": {"secretName": "s"}}]),
            ),
            "volumes[0]: invalid $retainKeys",
        ),
        fails(
            "$setElementOrder that is not a list",
            pod("containers", json!([container("agent")])),
            only("$setElementOrder/containers", json!({"name": "agent"})),
            "containers: $setElementOrder/containers is not a list",
        ),
    ]
}

#[test]
fn each_merge_key_and_directive() {
    for row in rows() {
        let mut merged = row.live.clone();
        let result = merge(&mut merged, &row.patch, row.kind.at())
            .map(|()| merged)
            .map_err(|e| e.to_string());
        match (&result, &row.expected) {
            (Ok(merged), Ok(expected)) => assert_eq!(merged, expected, "{}", row.name),
            (Err(error), Err(expected)) => assert_eq!(error, expected, "{}", row.name),
            _ => panic!("{}: got {result:?}", row.name),
        }
    }
}

#[test]
fn an_error_says_where_and_carries_the_item() {
    let mut live = json!({"containers": []});
    let err = merge(
        &mut live,
        &json!({"containers": [{"image": "x"}]}),
        &["spec"],
    )
    .expect_err("no name");
    assert_eq!(
        err,
        MergeError::MissingKey {
            path: "containers[0]".into(),
            key: "name",
            item: json!({"image": "x"}),
        }
    );
}
