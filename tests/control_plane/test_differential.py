"""Differential fidelity: the same request sequences go to the real kube-apiserver (the session
plane) and to kaos-testkit (`kaos-testkit serve`, started here with the CRDs of deploy/crds),
and their answers are compared: status codes, Status reasons and causes, the body fields that
matter, and watch event sequences. What legitimately differs is taken out by one function,
differential.comparable. A difference docs/testkit.md lists as known is asserted as documented,
so the test fails if either side changes.

Runs only with KAOS_CONTROL_PLANE=1 and needs target/debug/kaos-testkit (`cargo build -p
kaos-testkit`). See docs/testing.md.
"""

import pytest

from differential import (CRD_DIR, Pair, Server, causes, comparable, managers, pick, same,
                          served_testkit, status_of)
from plane import CRDS, TESTKIT, requires_plane, wait_until

pytestmark = requires_plane

NS = "kaos-diff"
CORE = f"/api/v1/namespaces/{NS}"
APPS = f"/apis/apps/v1/namespaces/{NS}"
KAOS = f"/apis/kaos.tools/v1alpha1/namespaces/{NS}"
HOLD = "kaos.tools/diff-hold"
GC_TIMEOUT = 30
# A CRD of our own for the CRD-deletion difference, so the kaos.tools CRDs stay untouched.
WIDGETS = "widgets.diff.kaos.tools"


@pytest.fixture(scope="module")
def servers(plane, tmp_path_factory):
    """kube-apiserver (cluster-admin) and a fresh kaos-testkit, both with the kaos.tools CRDs
    and the namespace NS. Leaves the plane as found: no namespace, no CRD."""
    assert TESTKIT.exists(), f"{TESTKIT} is missing: cargo build -p kaos-testkit"
    testkit = served_testkit(tmp_path_factory.mktemp("testkit"))
    plane.kubectl("apply", "--server-side", "-f", str(CRD_DIR))
    plane.kubectl("wait", "--for=condition=Established", "crd", *CRDS, "--timeout=60s")
    pair = Pair(Server("kube-apiserver", plane.kubeconfig),
                Server("kaos-testkit", testkit.kubeconfig))
    for reply in pair.call("POST", "/api/v1/namespaces", {"metadata": {"name": NS}}):
        assert reply.code == 201, reply
    yield pair
    release_held(pair.kube)
    plane.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")
    plane.delete_crds(WIDGETS)
    testkit.stop()


def release_held(server):
    """Drops this suite's finalizer from whatever still carries it, so deletions complete."""
    for path in [f"{CORE}/configmaps", f"{KAOS}/agents"]:
        for item in server.call("GET", path).body.get("items", []):
            if HOLD in item["metadata"].get("finalizers", []):
                server.call("PATCH", f"{path}/{item['metadata']['name']}",
                            {"metadata": {"finalizers": None}},
                            content_type="application/merge-patch+json")


def configmap(name, owner=None, block=True, finalizers=(), **data):
    metadata = {"name": name}
    if owner:
        metadata["ownerReferences"] = [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "blockOwnerDeletion": block}]
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
    if data:  # kube-apiserver drops an empty map of a built-in kind; the testkit keeps it
        body["data"] = data
    return body


def deployment(name, env, ports, labels, image=None):
    container = {"name": "app", "env": [{"name": k, "value": v} for k, v in env],
                 "ports": [{"containerPort": p} for p in ports]}
    if image:
        container["image"] = image
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [container]}}}}


def agent(name, **spec):
    return {"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent", "metadata": {"name": name},
            "spec": {"modelAPI": "llm", "model": "openai/gpt-4o", **spec}}


def modelapi(name, **spec):
    return {"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI",
            "metadata": {"name": name}, "spec": spec}


def mcpserver(name, **spec):
    return {"apiVersion": "kaos.tools/v1alpha1", "kind": "MCPServer",
            "metadata": {"name": name}, "spec": spec}


def memorystore(name, **spec):
    models = {"summarization": {"modelAPI": "llm", "model": "s"},
              "embedding": {"modelAPI": "llm", "model": "e"}}
    return {"apiVersion": "kaos.tools/v1alpha1", "kind": "MemoryStore", "metadata": {"name": name},
            "spec": {"storage": {"type": "local"}, "models": models, **spec}}


def access_grant(name, resources):
    return {"apiVersion": "kaos.tools/v1alpha1", "kind": "AccessGrant", "metadata": {"name": name},
            "spec": {"subjects": [{"kind": "Group", "name": "g"}], "resources": resources}}


def same_status(what, replies):
    """Both answers have the same code, Status reason and causes (reason, field)."""
    kube, testkit = replies
    same(f"{what}: code and reason", status_of(kube), status_of(testkit))
    same(f"{what}: causes", causes(kube), causes(testkit))


def same_object(what, replies, *paths):
    """Same code and reason, and the same comparable object (or the same picked paths)."""
    kube, testkit = replies
    same(f"{what}: code and reason", status_of(kube), status_of(testkit))
    view = (lambda r: pick(comparable(r.body), *paths)) if paths else \
        (lambda r: comparable(r.body))
    same(what, view(kube), view(testkit))


def events(server, path, since, **query):
    """(type, name, deleting, finalizers, data, labels) of each event of a watch from since."""
    code, seen = server.watch(path, since, **query)
    assert code == 200, seen
    return [(e["type"], e["object"]["metadata"].get("name"),
             "deletionTimestamp" in e["object"]["metadata"],
             e["object"]["metadata"].get("finalizers"), e["object"].get("data"),
             e["object"]["metadata"].get("labels")) for e in seen]


def same_events(what, pair, path, since, by_object=False, **query):
    """Both watches from the same point show the same events. by_object compares each object's
    own sequence, for changes the real collectors make in no fixed order across objects."""
    seen = [events(server, path, rv, **query) for server, rv in zip(pair.servers, since)]
    if by_object:
        seen = [{name: [e for e in s if e[1] == name] for name in sorted({e[1] for e in s})}
                for s in seen]
    same(what, *seen)


# Server-side apply


def test_server_side_apply_ownership_conflicts_force_and_removal(servers):
    path = f"{APPS}/deployments/ssa"
    spec = lambda r: pick(comparable(r.body), "metadata.labels",  # noqa: E731
                          "spec.template.spec.containers")

    one = deployment("ssa", [("A", "1"), ("B", "1")], [80, 81], {"x": "1", "y": "1"}, "app:1")
    created = servers.apply(path, one, "one")
    assert [r.code for r in created] == [201, 201], created
    same("apply creates", *map(spec, created))
    same("managers after the first apply", *(managers(r.body) for r in created))

    # Another manager setting a field "one" owns to another value is a conflict naming it.
    conflict = servers.apply(path, deployment("ssa", [], [], {}, "app:2"), "two")
    same_status("conflicting apply", conflict)
    same("the conflicting field", causes(conflict[0]),
         [("FieldManagerConflict", '.spec.template.spec.containers[name="app"].image')])

    # New list items (env by name, ports by containerPort) and labels merge, in kube's order.
    merged = servers.apply(path, deployment("ssa", [("C", "2")], [82], {"z": "1"}), "two")
    same("apply of other list items", *map(spec, merged))

    # force=true takes the field over: "one" can no longer set it without a conflict.
    forced = servers.apply(path, deployment("ssa", [], [], {}, "app:2"), "two", force="true")
    same("forced apply", *map(spec, forced))
    same_status("the old owner re-applying the taken field",
                servers.apply(path, one, "one"))

    # Re-applying without a field removes it, unless another manager still owns it.
    fewer = deployment("ssa", [("A", "1")], [80], {"x": "1"})
    removed = servers.apply(path, fewer, "one")
    same("apply without B, port 81 and label y", *map(spec, removed))
    apply_managers = [{m: op for m, op in managers(r.body).items() if op == "Apply"}
                      for r in removed]
    same("apply managers", *apply_managers)
    # Documented: the testkit lists apply managers only (kube also lists Update managers), and
    # keys container ports by containerPort alone (kube: containerPort and protocol).
    assert set(managers(removed[1].body).values()) == {"Apply"}
    port_keys = [str(r.body["metadata"]["managedFields"]) for r in removed]
    assert '"protocol":"TCP"' in port_keys[0] and '"protocol"' not in port_keys[1]


# Status subresource and generation


def test_status_subresource_of_a_deployment(servers):
    path = f"{APPS}/deployments/status-deploy"
    created = servers.call("POST", f"{APPS}/deployments",
                           deployment("status-deploy", [], [80], {}, "app:1"))
    same_object("create", created, "metadata.generation", "spec.replicas")

    # A status write changes only status. The real deployment controller writes status too,
    # so only the condition this test sets is compared.
    at = "2026-01-01T00:00:00Z"
    mine = {"type": "KaosDiff", "status": "True", "reason": "Test", "message": "diff",
            "lastUpdateTime": at, "lastTransitionTime": at}
    status = servers.merge(f"{path}/status",
                           {"spec": {"replicas": 5}, "status": {"conditions": [mine]}})
    same_object("status write", status, "metadata.generation", "spec.replicas",
                "status.conditions")

    # A spec write bumps the generation and ignores status; a label does not bump it.
    spec = servers.merge(path, {"spec": {"replicas": 2},
                                "status": {"conditions": [dict(mine, type="Ignored")]}})
    same_object("spec write", spec, "metadata.generation", "spec.replicas")
    same("status ignored by a main write",
         *(["Ignored" in [c["type"] for c in r.body["status"].get("conditions", [])]
            for r in spec]))
    label = servers.merge(path, {"metadata": {"labels": {"l": "1"}}})
    same_object("label write", label, "metadata.generation", "metadata.labels")


def test_status_subresource_of_an_agent(servers):
    path = f"{KAOS}/agents/status-agent"
    same_object("create", servers.call("POST", f"{KAOS}/agents", agent("status-agent")))
    status = servers.merge(f"{path}/status", {"spec": {"model": "ignored"},
                                              "status": {"phase": "Ready", "ready": True}})
    same_object("status write", status)
    same("status write keeps the generation", status[0].body["metadata"]["generation"], 1)
    same_object("spec write", servers.merge(path, {"spec": {"model": "openai/gpt-4o-mini"},
                                                   "status": {"phase": "Failed"}}))
    same_object("label write", servers.merge(path, {"metadata": {"labels": {"l": "1"}}}))
    same_object("status PUT",
                servers.call("PUT", f"{path}/status", dict(
                    agent("status-agent", model="not-applied"),
                    status={"phase": "Pending", "ready": False})))


# Finalizers, deletion and resourceVersion conflicts


def test_finalizers_hold_a_deleted_object(servers):
    path = f"{CORE}/configmaps/held"
    since = servers.resource_versions(f"{CORE}/configmaps")
    same_object("create", servers.call("POST", f"{CORE}/configmaps",
                                       configmap("held", finalizers=[HOLD], k="v")))
    deleted = servers.call("DELETE", path)
    same_object("DELETE of an object with finalizers answers the object", deleted)
    same("deletionTimestamp set", "deletionTimestamp" in deleted[0].body["metadata"], True)
    same_object("still there", servers.call("GET", path))
    same_object("DELETE again", servers.call("DELETE", path))
    same_status("no new finalizer while deleting",
                servers.merge(path, {"metadata": {"finalizers": [HOLD, "kaos.tools/more"]}}))
    same_object("finalizers removed", servers.merge(path, {"metadata": {"finalizers": None}}))
    same_status("gone", servers.call("GET", path))
    same_events("watch", servers, f"{CORE}/configmaps", since, fieldSelector="metadata.name=held")


def test_delete_answers(servers):
    servers.call("POST", f"{CORE}/configmaps", configmap("plain"))
    same_object("DELETE of a built-in answers a Success Status",
                servers.call("DELETE", f"{CORE}/configmaps/plain"))
    servers.call("POST", f"{KAOS}/agents", agent("plain"))
    same_object("DELETE of a custom resource answers the object",
                servers.call("DELETE", f"{KAOS}/agents/plain"))
    same_status("DELETE of a missing object", servers.call("DELETE", f"{KAOS}/agents/plain"))


def test_stale_resource_version_is_a_conflict(servers):
    path = f"{CORE}/configmaps/versioned"
    created = servers.call("POST", f"{CORE}/configmaps", configmap("versioned", k="1"))
    servers.merge(path, {"data": {"k": "2"}})
    stale = [dict(configmap("versioned", k="3"), metadata=dict(
        name="versioned", resourceVersion=r.body["metadata"]["resourceVersion"]))
        for r in created]
    replies = tuple(s.call("PUT", path, body) for s, body in zip(servers.servers, stale))
    same_object("PUT with a stale resourceVersion", replies)
    same("its reason", status_of(replies[0]), (409, "Conflict"))
    patches = tuple(s.call("PATCH", path, {"metadata": body["metadata"], "data": {"k": "4"}},
                           content_type="application/merge-patch+json")
                    for s, body in zip(servers.servers, stale))
    same_object("merge patch with a stale resourceVersion", patches)


# Garbage collection


def gc_state(server, names):
    """Each object: None when gone, else (deleting, finalizers, owner count)."""
    state = {}
    for name in names:
        reply = server.call("GET", f"{CORE}/configmaps/{name}")
        metadata = reply.body.get("metadata", {}) if reply.code == 200 else None
        state[name] = None if metadata is None else (
            "deletionTimestamp" in metadata, metadata.get("finalizers"),
            len(metadata.get("ownerReferences", [])))
    return state


def same_gc_state(what, servers, names):
    """The testkit collects at once; the real collector is polled until it agrees."""
    expected = gc_state(servers.testkit, names)
    wait_until(f"{what}: kube-apiserver's state to be the testkit's {expected}",
               lambda: gc_state(servers.kube, names) == expected or
               (False, gc_state(servers.kube, names)), timeout=GC_TIMEOUT, interval=0.2)


@pytest.mark.parametrize("policy", ["Background", "Foreground", "Orphan"])
def test_garbage_collection(servers, policy):
    prefix = f"gc-{policy.lower()}"
    owner, held, blocking, free = (f"{prefix}-{n}" for n in ["owner", "held", "blocking", "free"])
    names = [owner, held, blocking, free]
    since = servers.resource_versions(f"{CORE}/configmaps")
    owners = [s.call("POST", f"{CORE}/configmaps", configmap(owner)).body
              for s in servers.servers]
    for server, owned_by in zip(servers.servers, owners):
        server.call("POST", f"{CORE}/configmaps", configmap(held, owned_by, finalizers=[HOLD]))
        server.call("POST", f"{CORE}/configmaps", configmap(blocking, owned_by))
        server.call("POST", f"{CORE}/configmaps", configmap(free, owned_by, block=False))

    deleted = servers.call("DELETE", f"{CORE}/configmaps/{owner}",
                           {"kind": "DeleteOptions", "apiVersion": "v1",
                            "propagationPolicy": policy})
    same_object(f"DELETE {policy}", deleted)
    same_gc_state(f"{policy} deletion", servers, names)
    servers.merge(f"{CORE}/configmaps/{held}", {"metadata": {"finalizers": None}})
    same_gc_state(f"{policy} deletion, held dependent released", servers, names)
    same_events(f"{policy} watch", servers, f"{CORE}/configmaps", since, by_object=True)
    for server in servers.servers:  # orphans outlive their owner
        for name in names:
            server.call("DELETE", f"{CORE}/configmaps/{name}")


# Watches


def test_watch_event_sequences(servers):
    base = f"{CORE}/configmaps"
    since = servers.resource_versions(base)
    for server in servers.servers:
        server.call("POST", base, dict(configmap("watched", a="1"),
                                       metadata={"name": "watched", "labels": {"w": "in"}}))
        server.call("PATCH", f"{base}/watched", {"data": {"a": "2"}},
                    content_type="application/merge-patch+json")
        server.call("PATCH", f"{base}/watched", {"data": {"a": "2"}},  # no change: no event
                    content_type="application/merge-patch+json")
        server.call("PATCH", f"{base}/watched", {"metadata": {"labels": {"w": "out"}}},
                    content_type="application/merge-patch+json")
        server.call("DELETE", f"{base}/watched")
    same_events("a watch of every change", servers, base, since,
                fieldSelector="metadata.name=watched")
    # Leaving the selector is a DELETED of the object as it was while it matched.
    same_events("a watch with a label selector", servers, base, since, labelSelector="w=in")


def test_watch_from_a_too_old_resource_version(servers):
    """Documented difference: kube-apiserver serves watches from its watch cache, whose window
    covers everything since it started (on a fresh plane even resourceVersion 1 replays), and
    only etcd compaction under load makes it answer 410; the testkit keeps --watch-history
    changes and POST /kaos-testkit/compact forgets them. Both send 410 as an ERROR event with an
    `Expired` Status (its kube-apiserver form is fixed by its source: `too old resource version:
    N (M)`)."""
    code, kube_events = servers.kube.watch(f"{CORE}/configmaps", "1")
    assert code == 200 and not [e for e in kube_events if e["type"] == "ERROR"], kube_events

    assert servers.testkit.call("POST", "/kaos-testkit/compact").code == 200
    code, testkit_events = servers.testkit.watch(f"{CORE}/configmaps", "1")
    assert code == 200 and len(testkit_events) == 1, testkit_events
    error = testkit_events[0]
    assert error["type"] == "ERROR"
    assert pick(error["object"], "kind", "code", "reason") == {
        "kind": "Status", "code": 410, "reason": "Expired"}
    assert error["object"]["message"].startswith("too old resource version: 1 (")


# Validation


def test_strict_and_warn_field_validation(servers):
    strict = servers.call("POST", f"{KAOS}/agents", agent("strict", bogus=1),
                          fieldValidation="Strict")
    same_status("Strict with an unknown field", strict)
    same("its message", *(r.body["message"] for r in strict))
    assert 'unknown field "spec.bogus"' in strict[0].body["message"]

    warned = servers.call("POST", f"{KAOS}/agents", agent("warned", bogus=1),
                          fieldValidation="Warn")
    same_object("Warn with an unknown field: created, the field dropped", warned)
    # Documented: the testkit sends no Warning header.
    assert "unknown field" in warned[0].warnings and "spec.bogus" in warned[0].warnings
    assert warned[1].warnings == ""

    # Documented: built-in kinds are not validated by the testkit, unknown fields included.
    cm = dict(configmap("strict-cm"), bogus=1)
    builtin = servers.call("POST", f"{CORE}/configmaps", cm, fieldValidation="Strict")
    assert status_of(builtin[0]) == (400, "BadRequest")
    assert 'unknown field "bogus"' in builtin[0].body["message"]
    assert builtin[1].code == 201 and builtin[1].body["bogus"] == 1


CEL_CASES = [
    ("a rule on an object (no value printed)", "modelapis", modelapi("proxy", mode="Proxy")),
    ("a rule on a string and a bound on an integer",
     "agents", agent("timeout", replicas=-1, gatewayRoute={"timeout": "soon"})),
    ("a rule inside a list's parent",
     "modelapis", modelapi("key", mode="Proxy", proxyConfig={
         "models": ["*"], "apiKey": {"value": "k", "valueFrom": {
             "secretKeyRef": {"name": "s", "key": "k"}}}})),
    ("a blocking error: rules not checked", "modelapis",
     modelapi("mode", mode="Local", proxyConfig={"models": ["*"], "apiKey": {}})),
    ("a rule on the whole object (metadata.name)", "agents", agent("a" * 58)),
    # A dotted name is a valid custom resource name but not a Service name: every workload kind
    # refuses it (issue: a Service agent-team.alpha is refused by kube-apiserver).
    ("a dotted Agent name", "agents", agent("team.alpha")),
    ("a dotted ModelAPI name", "modelapis", modelapi("team.llm", mode="Hosted", hostedConfig={"model": "x"})),
    ("a dotted MCPServer name", "mcpservers", mcpserver("team.tools", runtime="kubernetes")),
    ("a dotted MemoryStore name", "memorystores", memorystore("team.memory")),
    ("a rule with a fieldPath and a rule on a list",
     "agents", agent("self", agentNetwork={"access": ["b", "b", "self"]})),
    ("a string over maxLength (value not printed; rules not checked)",
     "agents", agent("long", config={"instructions": "i" * 65_537})),
    ("a list over maxItems", "agents",
     agent("many", agentNetwork={"access": [f"p{i}" for i in range(129)]})),
    ("minLength is reported before pattern", "agents", agent("empty", modelAPI="")),
    ("a pattern", "agents", agent("env", container={"env": [{"name": "MY-VAR", "value": "1"}]})),
    ("a quantity", "agents", agent("quantity", container={"resources": {"limits": {"memory": "1 GB"}}})),
    ("KAOS 0.8.4's memory rules", "agents",
     agent("memory", config={"memory": {"type": "local", "memoryStore": "m", "tools": "read"}})),
    ("a rule with a fieldPath on an integer (value printed)", "memorystores",
     memorystore("replicas", replicas=2)),
    ("a long rule with ternaries (the compaction marks)", "memorystores",
     memorystore("marks", shortTerm={"tokenBudget": 64}, mediumTerm={"compactionTrigger": 100})),
    ("a budget with no limit (a rule on an object)", "agents",
     agent("budget-none", budget={"onExceeded": "Reject"})),
    ("a budget's reset time with tokensPerDay (a rule with a fieldPath)", "agents",
     agent("budget-reset", budget={"tokensPerDay": 10, "dailyResetTime": "06:00"})),
    ("a budget that suspends", "agents",
     agent("budget-suspend", budget={"tokensPerDay": 10, "onExceeded": "Suspend"})),
    ("a cost limit of zero (double() of a string)", "agents",
     agent("budget-zero", budget={"cost": {"limit": "0"}})),
    ("a cost limit that is no amount (the rule guarded by matches())", "agents",
     agent("budget-minus", budget={"cost": {"limit": "-1"}})),
    ("a model priced twice", "modelapis",
     modelapi("prices", mode="Proxy", proxyConfig={"models": ["*"], "prices": [
         {"model": "m", "inputPerMillionTokens": "1", "outputPerMillionTokens": "2"},
         {"model": "m", "inputPerMillionTokens": "1", "outputPerMillionTokens": "2"}]})),
    ("a rule inside a list item", "accessgrants",
     access_grant("both", [{"kind": "Agent", "name": "a", "selector": {"matchLabels": {"x": "y"}}}])),
]


@pytest.mark.parametrize("case, plural, body", CEL_CASES, ids=[c[0] for c in CEL_CASES])
def test_cel_validation_messages(servers, case, plural, body):
    replies = servers.call("POST", f"{KAOS}/{plural}", body)
    same_status(case, replies)
    same(f"{case}: code", replies[0].code, 422)
    same(f"{case}: message", *(r.body["message"] for r in replies))
    same(f"{case}: cause messages",
         *([c["message"] for c in r.body["details"]["causes"]] for r in replies))


# Discovery and Tables


# Subresources of the testkit's kinds it does not serve (docs/testkit.md: no scale of built-in
# kinds but Deployments', log, exec, proxy, eviction, ...).
UNSERVED_SUBRESOURCES = {
    "v1": {"namespaces/finalize", "pods/attach", "pods/binding", "pods/ephemeralcontainers",
           "pods/eviction", "pods/exec", "pods/log", "pods/portforward", "pods/proxy",
           "pods/resize", "services/proxy"},
}


def resources(server, group_version):
    body = server.call("GET", group_version).body
    return {r["name"]: dict(pick(r, "namespaced", "kind", "shortNames", "categories",
                                 "singularName", "group", "version"),
                            verbs=sorted(r["verbs"]))
            for r in body["resources"]}


def test_discovery(servers):
    same("/api versions", *(r.body["versions"] for r in servers.call("GET", "/api")))
    groups = [{g["name"]: g["preferredVersion"]["groupVersion"] for g in r.body["groups"]}
              for r in servers.call("GET", "/apis")]
    testkit_groups = groups[1]
    same("the testkit's groups and preferred versions",
         {name: groups[0].get(name) for name in testkit_groups}, testkit_groups)
    for group_version in ["/api/v1"] + [f"/apis/{v}" for v in testkit_groups.values()]:
        kube, testkit = (resources(s, group_version) for s in servers.servers)
        kinds = {name.split("/")[0] for name in testkit}
        unserved = {name for name in kube if name.split("/")[0] in kinds} - set(testkit)
        same(f"{group_version}: subresources the testkit does not serve",
             sorted(unserved), sorted(UNSERVED_SUBRESOURCES.get(group_version[5:], set())))
        same(f"{group_version}: resources", {name: kube.get(name) for name in testkit}, testkit)


def test_table_of_a_kaos_kind(servers):
    servers.call("POST", f"{KAOS}/agents", agent("tabled"))
    # With a budget's usage and condition: the Tokens and Budget columns (a JSONPath filter).
    budget_exceeded = {"type": "BudgetExceeded", "status": "True", "reason": "TokensPerDay",
                       "message": "m", "lastTransitionTime": "2026-11-29T00:00:00Z"}
    servers.merge(f"{KAOS}/agents/tabled/status", {"status": {
        "phase": "Ready", "ready": True, "usage": {"totalTokens": 450},
        "conditions": [budget_exceeded]}})
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    for path in [f"{KAOS}/agents", f"{KAOS}/agents/tabled"]:
        replies = servers.call("GET", path, accept=accept)
        same(f"{path}: columns", *([pick(c, "name", "type", "format", "priority")
                                    for c in r.body["columnDefinitions"]] for r in replies))
        rows = [{row["cells"][0]: row["cells"][:-1] for row in r.body["rows"]} for r in replies]
        same(f"{path}: row of tabled (without Age)", *(r["tabled"] for r in rows))
        same(f"{path}: embedded object kind",
             *(r.body["rows"][0]["object"]["kind"] for r in replies))


def test_deployment_scale_subresource(servers):
    path = f"{APPS}/deployments/scaled"
    servers.call("POST", f"{APPS}/deployments", deployment("scaled", [], [80], {}, "app:1"))
    scale = lambda replies: tuple(  # noqa: E731
        (r.code, pick(comparable(r.body), "kind", "apiVersion", "metadata", "spec",
                      "status.selector")) for r in replies)
    same("GET scale", *scale(servers.call("GET", f"{path}/scale")))
    same("PATCH scale", *scale(servers.merge(f"{path}/scale", {"spec": {"replicas": 3}})))
    same_object("the Deployment after scaling", servers.call("GET", path),
                "metadata.generation", "spec.replicas")
    same_status("a negative scale", servers.merge(f"{path}/scale", {"spec": {"replicas": -1}}))
    same_status("scale of a missing Deployment",
                servers.merge(f"{APPS}/deployments/missing/scale", {"spec": {"replicas": 1}}))


@pytest.mark.parametrize("patch_containers", [
    [{"name": "sidecar", "image": "side:1"}],
    [{"name": "sidecar", "image": "side:1"}, {"name": "app", "env": [{"name": "B", "value": "2"}]}],
    [{"name": "app", "env": [{"name": "B", "value": "2"}]}, {"name": "sidecar", "image": "side:1"}],
], ids=["new-only", "new-first", "new-last"])
def test_strategic_merge_places_a_new_container_as_apimachinery_does(servers, patch_containers):
    """Where a container of a new name lands in a strategic merge: kaos-testkit's PATCH and every
    `spec.podSpec` merge run the same code (kaos-strategic-merge), and KAOS merges podSpec with
    apimachinery's, so the order of a pod's containers (the first is what `kubectl exec` and
    logs pick by default) is the same as under KAOS (docs/contract.md §1)."""
    name = "smp-" + str(len(patch_containers)) + patch_containers[0]["name"][0]
    servers.call("POST", f"{APPS}/deployments",
                 deployment(name, [("A", "1")], [8000], {}, "app:1"))
    patch = {"spec": {"template": {"spec": {"containers": patch_containers}}}}
    replies = servers.call("PATCH", f"{APPS}/deployments/{name}", patch,
                           content_type="application/strategic-merge-patch+json")
    same_object("the containers after a strategic merge", replies,
                "spec.template.spec.containers")


# Differences docs/testkit.md lists: asserted as documented.


def test_documented_differences_in_what_is_served(servers):
    kube, testkit = servers.call("GET", "/openapi/v2")
    assert (kube.code, testkit.code) == (200, 404), "no /openapi/v2 in the testkit"

    protobuf = servers.call("POST", f"{CORE}/configmaps", "\x6b\x38\x73\x00",
                            content_type="application/vnd.kubernetes.protobuf")
    assert protobuf[0].code != 415 and protobuf[1].code == 415, "JSON only in the testkit"

    unknown = servers.call("GET", "/apis/nothing.example/v1/things")
    assert [r.code for r in unknown] == [404, 404]
    assert unknown[0].body == "404 page not found\n" and unknown[1].body["kind"] == "Status"

    empty = servers.call("POST", f"{CORE}/configmaps", {"metadata": {"name": "empty"}, "data": {}})
    assert "data" not in empty[0].body and empty[1].body["data"] == {}, "built-ins kept as sent"

    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    columns = [{c["name"] for c in r.body["columnDefinitions"]}
               for r in servers.call("GET", f"{APPS}/deployments", accept=accept)]
    assert columns[0] - columns[1] == {"Containers", "Images", "Selector"}
    assert columns[1] <= columns[0], "the testkit's built-in Tables have some of kube's columns"

    service = {"metadata": {"name": "proxied"},
               "spec": {"selector": {"app": "none"}, "ports": [{"port": 80}]}}
    servers.call("POST", f"{CORE}/services", service)
    proxied = servers.call("GET", f"{CORE}/services/proxied/proxy/")
    assert proxied[0].code == 503 and proxied[1].code == 404, "no services/proxy in the testkit"


def test_a_deleted_crd_waits_for_its_held_resources(servers):
    """Both keep a deleted CRD (Terminating, finalizer customresourcecleanup) until its
    resources' finalizers are gone, marking them deleted and refusing new ones meanwhile; then
    both delete it. (What `helm uninstall` plus `kubectl delete crd` runs into.)"""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": WIDGETS},
           "spec": {"group": "diff.kaos.tools", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                        "openAPIV3Schema": {"type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True}}}]}}
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    widgets = f"/apis/diff.kaos.tools/v1/namespaces/{NS}/widgets"
    created = servers.call("POST", crds, crd)
    for reply in created:
        assert reply.code == 201, reply
    wait_until("the widget kind to be served",
               lambda: servers.kube.call("GET", widgets).code == 200, timeout=30, interval=0.2)
    widget = {"apiVersion": "diff.kaos.tools/v1", "kind": "Widget",
              "metadata": {"name": "w", "finalizers": [HOLD]}}
    same_status("create a held widget", servers.call("POST", widgets, widget))
    same_status("delete the CRD", servers.call("DELETE", f"{crds}/{WIDGETS}"))

    def widget_deleting(server):
        reply = server.call("GET", f"{widgets}/w")
        return reply.code == 200 and "deletionTimestamp" in reply.body["metadata"]
    for server in servers.servers:
        wait_until("the widget to be marked deleted", lambda: widget_deleting(server),
                   timeout=30, interval=0.2)
    terminating = servers.call("GET", f"{crds}/{WIDGETS}")
    for crd_now in terminating:
        assert crd_now.code == 200 and "deletionTimestamp" in crd_now.body["metadata"], crd_now
    same("the terminating CRD's finalizers",
         *[r.body["metadata"].get("finalizers") for r in terminating])
    refused = servers.call("POST", widgets, {**widget, "metadata": {"name": "w2"}})
    same_object("create a widget while the CRD is terminating", refused, "message")
    same("the Terminating condition", *[
        [pick(c, "type", "status", "reason", "message")
         for c in r.body["status"]["conditions"] if c["type"] == "Terminating"]
        for r in servers.call("GET", f"{crds}/{WIDGETS}")])

    servers.call("PATCH", f"{widgets}/w", {"metadata": {"finalizers": None}},
                 content_type="application/merge-patch+json")
    for server in servers.servers:
        wait_until("the CRD to go", lambda: server.call(
            "GET", f"{crds}/{WIDGETS}").code == 404, timeout=60, interval=0.5)


def test_create_in_a_terminating_namespace(servers):
    namespace = "kaos-diff-terminating"
    same_object("create a namespace",
                servers.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}))
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    servers.call("POST", base, configmap("held", finalizers=[HOLD]))
    same_object("delete the namespace", servers.call("DELETE", f"/api/v1/namespaces/{namespace}"),
                "metadata.deletionTimestamp", "status.phase")
    wait_until("the real namespace to be Terminating", lambda: servers.kube.call(
        "GET", f"/api/v1/namespaces/{namespace}").body["status"]["phase"] == "Terminating",
        timeout=30, interval=0.2)
    same_status("create in it", servers.call("POST", base, configmap("late")))
    servers.merge(f"{base}/held", {"metadata": {"finalizers": None}})


def test_custom_resource_scale_subresource(servers):
    """An Agent's scale subresource (`kubectl scale agent`, KEDA): unreadable with no replicas
    set, written, and a negative count refused at the CRD's specReplicasPath."""
    path = f"{KAOS}/agents/scalable"
    servers.call("POST", f"{KAOS}/agents", agent("scalable"))
    servers.merge(f"{path}/status", {"status": {"replicas": 1, "selector": "agent=scalable"}})
    scale = lambda replies: tuple(  # noqa: E731
        (r.code, pick(comparable(r.body), "kind", "apiVersion", "metadata", "spec", "status"))
        for r in replies)
    # kube-apiserver cannot read a Scale while spec.replicas is unset (500), yet writes one.
    replies = servers.call("GET", f"{path}/scale")
    same_status("GET scale with no replicas set", replies)
    same("its message", *(r.body["message"] for r in replies))
    same("PATCH scale", *scale(servers.merge(f"{path}/scale", {"spec": {"replicas": 3}})))
    same("GET scale", *scale(servers.call("GET", f"{path}/scale")))
    same_object("the Agent after scaling", servers.call("GET", path),
                "metadata.generation", "spec.replicas")
    same_status("a negative scale", servers.merge(f"{path}/scale", {"spec": {"replicas": -1}}))
    same_status("replicas and autoscaling together",
                servers.merge(path, {"spec": {"autoscaling": {"maxReplicas": 2}}}))
