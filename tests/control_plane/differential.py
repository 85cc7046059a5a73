"""What the differential suite (test_differential.py) needs: a plain HTTP client for a
kubeconfig (client certificate for the real plane, bearer token for kaos-testkit), the
kaos-testkit process, and the one function that says what legitimately differs between the two
servers' answers.
"""

import copy
import json
import urllib.parse
from collections import namedtuple
from pathlib import Path

import requests
import yaml

from plane import TestkitProcess

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "deploy" / "crds"
REQUEST_TIMEOUT = 30

# An answer: HTTP code, parsed JSON body (text if not JSON), and its Warning headers.
Reply = namedtuple("Reply", "code body warnings")


class Server:
    """One API server, addressed with plain HTTP requests as its kubeconfig's first user."""

    def __init__(self, name, kubeconfig):
        self.name = name
        config = yaml.safe_load(Path(kubeconfig).read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        self.base = cluster["server"].rstrip("/")
        self.session = requests.Session()
        # Only the kubeconfig counts: no CA bundle or proxy from the environment.
        self.session.trust_env = False
        self.session.verify = cluster.get("certificate-authority", True)
        if "client-certificate" in user:
            self.session.cert = (user["client-certificate"], user["client-key"])
        if "token" in user:
            self.session.headers["Authorization"] = f"Bearer {user['token']}"

    def call(self, method, path, body=None, content_type="application/json",
             accept="application/json", **query):
        """One request; the body is sent as JSON (or as is when it is a str)."""
        data = body if body is None or isinstance(body, str) else json.dumps(body)
        headers = {"Accept": accept}
        if data is not None:
            headers["Content-Type"] = content_type
        response = self.session.request(method, self.url(path, query), data=data,
                                        headers=headers, timeout=REQUEST_TIMEOUT)
        try:
            parsed = response.json()
        except ValueError:
            parsed = response.text
        return Reply(response.status_code, parsed, response.headers.get("Warning", ""))

    def url(self, path, query):
        query = {k: v for k, v in query.items() if v is not None}
        return self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")

    def watch(self, path, resource_version, seconds=1, **query):
        """The events of a watch from resource_version, read until the server ends the stream
        after `seconds` (timeoutSeconds): (HTTP code, [event, ...])."""
        query.update(watch="true", resourceVersion=resource_version, timeoutSeconds=seconds)
        with self.session.get(self.url(path, query), stream=True,
                              timeout=seconds + REQUEST_TIMEOUT) as response:
            if response.status_code != 200:
                return response.status_code, [response.json()]
            events = [json.loads(line) for line in response.iter_lines() if line]
        return 200, events


def served_testkit(directory):
    """`kaos-testkit serve` on a free loopback port, with the CRDs of deploy/crds applied."""
    return TestkitProcess(directory, "--apply", str(CRD_DIR))


# What kube-apiserver's defaulting adds to the built-in kinds we use and kaos-testkit, as
# docs/testkit.md says, does not ("only a few defaults are set"): paths below the object, `*` for
# every item of a list.
BUILTIN_DEFAULTS = {
    "Deployment": [
        "spec.strategy", "spec.revisionHistoryLimit", "spec.progressDeadlineSeconds",
        "spec.template.metadata.creationTimestamp",
        "spec.template.spec.restartPolicy", "spec.template.spec.dnsPolicy",
        "spec.template.spec.schedulerName", "spec.template.spec.securityContext",
        "spec.template.spec.terminationGracePeriodSeconds",
        "spec.template.spec.containers.*.terminationMessagePath",
        "spec.template.spec.containers.*.terminationMessagePolicy",
        "spec.template.spec.containers.*.imagePullPolicy",
        "spec.template.spec.containers.*.resources",
        "spec.template.spec.containers.*.ports.*.protocol",
    ],
}

# Metadata every server fills with values of its own.
VOLATILE_METADATA = ["uid", "resourceVersion", "creationTimestamp", "selfLink"]


def comparable(value):
    """An answer with what legitimately differs between kube-apiserver and kaos-testkit taken
    out, so that the rest can be compared for equality. This is the only place that ignores
    anything:

    - metadata each server fills its own way: uid, resourceVersion, creationTimestamp; a
      deletionTimestamp becomes "<set>", an ownerReference's uid "<uid>", a Status' details.uid
      "<uid>";
    - managedFields: the testkit lists apply managers only, with simplified list keys
      (docs/testkit.md); test_server_side_apply compares the managers themselves;
    - the defaults kube-apiserver sets on built-in kinds (BUILTIN_DEFAULTS);
    - a Status' `message` wording, except where a test compares it on purpose.
    """
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        _strip(value)
    return value


def _strip(value):
    metadata = value.get("metadata")
    if isinstance(metadata, dict):
        for key in VOLATILE_METADATA + ["managedFields"]:
            metadata.pop(key, None)
        if "deletionTimestamp" in metadata:
            metadata["deletionTimestamp"] = "<set>"
        for ref in metadata.get("ownerReferences", []):
            ref["uid"] = "<uid>"
    for path in BUILTIN_DEFAULTS.get(value.get("kind"), []):
        _remove(value, path.split("."))
    if value.get("kind") == "Status":
        value.pop("message", None)
        if "uid" in value.get("details", {}):
            value["details"]["uid"] = "<uid>"
    items = value.get("items")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            _strip(item)


def _remove(value, parts):
    """Removes the dotted path (parts) from value; `*` walks every item of a list."""
    head, rest = parts[0], parts[1:]
    if head == "*" and isinstance(value, list):
        children = value
    elif isinstance(value, dict) and not rest:
        value.pop(head, None)
        return
    elif isinstance(value, dict):
        children = [value.get(head)]
    else:
        return
    for child in children:
        if isinstance(child, (dict, list)):
            _remove(child, rest)


def status_of(reply):
    """(code, reason) of an answer: the Status' reason for errors, None for success."""
    reason = reply.body.get("reason") if isinstance(reply.body, dict) and \
        reply.body.get("kind") == "Status" else None
    return reply.code, reason


def causes(reply):
    """The (reason, field) of each cause of a Status error, sorted."""
    details = reply.body.get("details") or {} if isinstance(reply.body, dict) else {}
    return sorted((c.get("reason"), c.get("field")) for c in details.get("causes", []))


def managers(obj):
    """{manager: operation} of an object's managedFields."""
    return {m["manager"]: m["operation"] for m in obj["metadata"].get("managedFields", [])}


def pick(obj, *paths):
    """{path: value} of the dotted paths (None when absent)."""
    picked = {}
    for path in paths:
        value = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        picked[path] = value
    return picked


class Pair:
    """The real kube-apiserver and kaos-testkit, sent the same requests."""

    def __init__(self, kube, testkit):
        self.kube = kube
        self.testkit = testkit
        self.servers = (kube, testkit)

    def call(self, method, path, body=None, **options):
        """The same request to both: (kube-apiserver's reply, kaos-testkit's reply)."""
        return tuple(s.call(method, path, body, **options) for s in self.servers)

    def apply(self, path, body, manager, **options):
        """A server-side apply as `manager` to both."""
        return self.call("PATCH", path, body, content_type="application/apply-patch+yaml",
                         fieldManager=manager, **options)

    def merge(self, path, body, **options):
        """A JSON merge patch to both."""
        return self.call("PATCH", path, body, content_type="application/merge-patch+json",
                         **options)

    def resource_versions(self, list_path):
        """The current resourceVersion of a list on each server: where a watch starts."""
        return tuple(s.call("GET", list_path).body["metadata"]["resourceVersion"]
                     for s in self.servers)


def same(what, kube, testkit):
    """Asserts kube-apiserver's and kaos-testkit's values are equal, showing both if not."""
    assert kube == testkit, (
        f"{what} differs:\n  kube-apiserver: {json.dumps(kube, sort_keys=True)}\n"
        f"  kaos-testkit:   {json.dumps(testkit, sort_keys=True)}")
