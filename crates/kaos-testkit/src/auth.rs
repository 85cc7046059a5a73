//! Bearer-token authentication and RBAC authorization from the Roles, ClusterRoles and bindings
//! stored in the cluster. Off by default (everyone is a cluster admin). When on, every request
//! allowed through a rule is recorded, so tests can show the rules a chart grants are all used.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use http::{HeaderMap, header};
use serde_json::Value;

use crate::cluster::{Cluster, ListOptions};
use crate::error::{ApiError, ApiResult};
use crate::meta::{self, strings};
use crate::resources::ResourceType;

/// The audience of tokens that name none: the API server's own, as kube-apiserver's default.
pub(crate) const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
    /// Which credential authenticated the request (one per minted token), so the audit log can
    /// tell apart two processes running as the same ServiceAccount.
    pub client: String,
}

impl Identity {
    pub fn admin() -> Self {
        Self {
            user: "kaos-testkit-admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            client: "admin".into(),
        }
    }

    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            user: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
            client: String::new(),
        }
    }

    /// Whether this is the cluster admin (`system:masters`).
    pub fn is_admin(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }
}

/// One allowed resource request: what a granted rule was used for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub user: String,
    pub verb: String,
    pub group: String,
    /// `plural` or `plural/subresource`.
    pub resource: String,
    /// Empty for cluster-scoped and all-namespace requests.
    pub namespace: String,
}

/// Whose rules, where: the identity's user and groups, and the namespace (None: cluster-wide).
type RulesKey = (String, Vec<String>, Option<String>);

#[derive(Default)]
struct State {
    enabled: bool,
    /// Requests without any credential are the admin (see `set_anonymous_admin`).
    anonymous_admin: bool,
    tokens: HashMap<String, Identity>,
    used: BTreeSet<Grant>,
    next_token: u64,
    /// The rules bound to each identity in each namespace asked about, as of `rules_version`
    /// (the last change of a Role, ClusterRole or binding): every request is authorized, and
    /// reading the bindings and roles each time cost the testkit a quarter of its CPU.
    rules: HashMap<RulesKey, Arc<Vec<BoundRule>>>,
    rules_version: u64,
}

/// Authentication and authorization switchboard.
#[derive(Clone, Default)]
pub struct Auth {
    state: Arc<Mutex<State>>,
}

impl Auth {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Turns token authentication and RBAC on or off.
    pub fn set_enabled(&self, enabled: bool) {
        self.lock().enabled = enabled;
    }

    pub fn enabled(&self) -> bool {
        self.lock().enabled
    }

    /// With RBAC on, treats requests that carry no `Authorization` header as the admin, as
    /// kube-apiserver's old insecure port did. client-go (kubectl, helm) never sends credentials
    /// over plain HTTP, so this is how they drive a served testkit whose other clients (kube-rs
    /// controllers with ServiceAccount tokens) are held to RBAC. A wrong token is still a 401.
    pub fn set_anonymous_admin(&self, anonymous_admin: bool) {
        self.lock().anonymous_admin = anonymous_admin;
    }

    /// A bearer token that authenticates as `identity`.
    pub fn mint_token(&self, mut identity: Identity) -> String {
        let mut state = self.lock();
        state.next_token += 1;
        let token = format!(
            "kaos-testkit-token-{}-{}",
            state.next_token,
            identity.user.len()
        );
        // Each credential is its own client in the audit log.
        identity.client = format!("token-{}", state.next_token);
        state.tokens.insert(token.clone(), identity);
        token
    }

    /// Every (user, verb, resource, namespace) a rule allowed so far.
    pub fn used_grants(&self) -> Vec<Grant> {
        self.lock().used.iter().cloned().collect()
    }

    /// The identity a token authenticates as.
    pub fn authenticate_token(&self, token: &str) -> Option<Identity> {
        self.lock().tokens.get(token).cloned()
    }

    pub fn authenticate(&self, headers: &HeaderMap) -> ApiResult<Identity> {
        let state = self.lock();
        let authorization = headers.get(header::AUTHORIZATION);
        let token = authorization
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match token.and_then(|t| state.tokens.get(t)) {
            Some(identity) => Ok(identity.clone()),
            None if !state.enabled => Ok(Identity::admin()),
            None if state.anonymous_admin && authorization.is_none() => Ok(Identity::admin()),
            None => Err(ApiError::unauthorized()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn authorize(
        &self,
        cluster: &Cluster,
        identity: &Identity,
        verb: &str,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: Option<&str>,
        subresource: Option<&str>,
    ) -> ApiResult<()> {
        if !self.enabled() || identity.is_admin() {
            return Ok(());
        }
        let resource = match subresource {
            Some(sub) => format!("{}/{sub}", rt.plural),
            None => rt.plural.clone(),
        };
        // Namespace objects themselves are addressed by name; their rules are cluster-wide.
        let namespace = if rt.namespaced { namespace } else { None };
        let allowed = self
            .bound_rules(cluster, identity, namespace)
            .iter()
            .any(|bound| rule_allows(&bound.rule, verb, &rt.group, &resource, name));
        if !allowed {
            return Err(ApiError::forbidden(
                &identity.user,
                verb,
                &resource,
                &rt.group,
                namespace,
            ));
        }
        self.lock().used.insert(Grant {
            user: identity.user.clone(),
            verb: verb.to_string(),
            group: rt.group.clone(),
            resource,
            namespace: namespace.unwrap_or("").to_string(),
        });
        Ok(())
    }
}

/// What a SubjectAccessReview asks about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// A request on a resource (`spec.resourceAttributes`); `resource` may be `plural/sub`.
    Resource {
        namespace: Option<String>,
        verb: String,
        group: String,
        resource: String,
        name: Option<String>,
    },
    /// A request on a URL that is no resource, such as `/metrics` (`spec.nonResourceAttributes`).
    NonResource { path: String, verb: String },
}

impl Auth {
    /// Whether RBAC lets `identity` do `access`, as kube-apiserver's authorizers answer a
    /// SubjectAccessReview: `Some(reason)` when allowed (the RBAC reason names the binding, role
    /// and subject), `None` when no rule allows it. Records no grant: nobody made the request.
    pub fn review_access(
        &self,
        cluster: &Cluster,
        identity: &Identity,
        access: &Access,
    ) -> Option<String> {
        if !self.enabled() || identity.is_admin() {
            return Some(String::new());
        }
        let namespace = match access {
            Access::Resource { namespace, .. } => namespace.as_deref(),
            // Only ClusterRoles bound cluster-wide grant non-resource URLs.
            Access::NonResource { .. } => None,
        };
        self.bound_rules(cluster, identity, namespace)
            .iter()
            .find(|bound| match access {
                Access::Resource {
                    verb,
                    group,
                    resource,
                    name,
                    ..
                } => rule_allows(&bound.rule, verb, group, resource, name.as_deref()),
                Access::NonResource { path, verb } => url_rule_allows(&bound.rule, verb, path),
            })
            .map(|bound| format!("RBAC: allowed by {}", bound.because))
    }

    /// [`rules_for`], kept until a Role, ClusterRole or binding changes.
    fn bound_rules(
        &self,
        cluster: &Cluster,
        identity: &Identity,
        namespace: Option<&str>,
    ) -> Arc<Vec<BoundRule>> {
        // Taken before the rules are read: a change while they are read makes them stale at once.
        let version = cluster.last_change(RBAC_GROUP, &RBAC_PLURALS);
        let key = (
            identity.user.clone(),
            identity.groups.clone(),
            namespace.map(str::to_string),
        );
        {
            let mut state = self.lock();
            if state.rules_version != version {
                state.rules.clear();
                state.rules_version = version;
            }
            if let Some(rules) = state.rules.get(&key) {
                return rules.clone();
            }
        }
        let rules = Arc::new(rules_for(cluster, identity, namespace));
        let mut state = self.lock();
        if state.rules_version == version {
            state.rules.insert(key, rules.clone());
        }
        rules
    }
}

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const RBAC_PLURALS: [&str; 4] = [
    "clusterrolebindings",
    "rolebindings",
    "clusterroles",
    "roles",
];

fn subject_matches(subject: &Value, identity: &Identity) -> bool {
    let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = subject.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "User" => identity.user == name,
        "Group" => identity.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let ns = subject
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            identity.user == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// How kube's RBAC authorizer names a subject in its reasons (`ServiceAccount "sa/ns"`).
fn describe_subject(subject: &Value) -> String {
    let field = |f: &str| subject.get(f).and_then(Value::as_str).unwrap_or("");
    match field("kind") {
        "ServiceAccount" => format!(
            "ServiceAccount \"{}/{}\"",
            field("name"),
            field("namespace")
        ),
        kind => format!("{kind} \"{}\"", field("name")),
    }
}

/// A rule that applies to an identity, and why: `ClusterRoleBinding "b" of ClusterRole "r" to
/// ServiceAccount "sa/ns"`, as kube-apiserver words it in SubjectAccessReview reasons.
struct BoundRule {
    rule: Value,
    because: String,
}

/// The rules bound to `identity`: every ClusterRoleBinding, plus RoleBindings in `namespace`.
fn rules_for(cluster: &Cluster, identity: &Identity, namespace: Option<&str>) -> Vec<BoundRule> {
    let rbac_type = |plural: &str| cluster.resource(RBAC_GROUP, "v1", plural);
    let list = |plural: &str, ns: &str| -> Vec<Value> {
        rbac_type(plural)
            .and_then(|rt| cluster.list(&rt, ns, &ListOptions::default()).ok())
            .and_then(|l| l.get("items").and_then(Value::as_array).cloned())
            .unwrap_or_default()
    };
    let role_rules = |kind: &str, name: &str, ns: &str| -> Vec<Value> {
        let (plural, ns) = if kind == "ClusterRole" {
            ("clusterroles", "")
        } else {
            ("roles", ns)
        };
        rbac_type(plural)
            .and_then(|rt| cluster.get(&rt, ns, name).ok())
            .and_then(|role| role.get("rules").and_then(Value::as_array).cloned())
            .unwrap_or_default()
    };
    let mut rules = Vec::new();
    let mut bindings: Vec<(Value, &str)> = list("clusterrolebindings", "")
        .into_iter()
        .map(|b| (b, ""))
        .collect();
    if let Some(ns) = namespace {
        bindings.extend(list("rolebindings", ns).into_iter().map(|b| (b, ns)));
    }
    for (binding, ns) in bindings {
        let subjects = binding
            .get("subjects")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let Some(subject) = subjects.iter().find(|s| subject_matches(s, identity)) else {
            continue;
        };
        let kind = meta::str_at(&binding, "/roleRef/kind");
        let name = meta::str_at(&binding, "/roleRef/name");
        let binding_name = meta::name(&binding);
        let because = if ns.is_empty() {
            format!("ClusterRoleBinding \"{binding_name}\"")
        } else {
            format!("RoleBinding \"{binding_name}/{ns}\"")
        };
        let because = format!(
            "{because} of {kind} \"{name}\" to {}",
            describe_subject(subject)
        );
        rules.extend(
            role_rules(kind, name, ns)
                .into_iter()
                .map(|rule| BoundRule {
                    rule,
                    because: because.clone(),
                }),
        );
    }
    rules
}

/// A rule's `nonResourceURLs` as kube matches them: exact, `*`, or a prefix ending in `*`.
fn url_rule_allows(rule: &Value, verb: &str, path: &str) -> bool {
    let verbs = strings(rule.get("verbs"));
    let urls = strings(rule.get("nonResourceURLs"));
    verbs.iter().any(|v| v == "*" || v == verb)
        && urls.iter().any(|url| match url.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => url == path,
        })
}

fn rule_allows(rule: &Value, verb: &str, group: &str, resource: &str, name: Option<&str>) -> bool {
    let has = |field: &str, wanted: &str| {
        strings(rule.get(field))
            .iter()
            .any(|v| v == "*" || v == wanted)
    };
    let names = strings(rule.get("resourceNames"));
    has("verbs", verb)
        && has("apiGroups", group)
        && has("resources", resource)
        && (names.is_empty() || name.is_some_and(|n| names.iter().any(|x| x == n)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rules() {
        let rule =
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]});
        assert!(rule_allows(&rule, "get", "apps", "deployments", Some("d")));
        assert!(!rule_allows(
            &rule,
            "delete",
            "apps",
            "deployments",
            Some("d")
        ));
        assert!(!rule_allows(&rule, "get", "", "deployments", Some("d")));
        assert!(!rule_allows(
            &rule,
            "get",
            "apps",
            "deployments/status",
            Some("d")
        ));
        let named = json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                           "verbs": ["get", "update"], "resourceNames": ["kaos-agent-controller"]});
        assert!(rule_allows(
            &named,
            "update",
            "coordination.k8s.io",
            "leases",
            Some("kaos-agent-controller")
        ));
        assert!(!rule_allows(
            &named,
            "update",
            "coordination.k8s.io",
            "leases",
            Some("other")
        ));
        assert!(!rule_allows(
            &named,
            "list",
            "coordination.k8s.io",
            "leases",
            None
        ));
        let star = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
        assert!(rule_allows(&star, "watch", "kaos.tools", "agents", None));
        let metrics = json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]});
        assert!(url_rule_allows(&metrics, "get", "/metrics"));
        assert!(!url_rule_allows(&metrics, "post", "/metrics"));
        assert!(!url_rule_allows(&metrics, "get", "/metrics/x"));
        assert!(!rule_allows(&metrics, "get", "", "metrics", None));
        let prefix = json!({"nonResourceURLs": ["/debug/*"], "verbs": ["*"]});
        assert!(url_rule_allows(&prefix, "get", "/debug/pprof"));
        assert!(!url_rule_allows(&prefix, "get", "/metrics"));
        assert!(!url_rule_allows(&rule, "get", "/metrics"));
    }
}
