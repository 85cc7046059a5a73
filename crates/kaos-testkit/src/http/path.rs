//! What a request path addresses.

use crate::cluster::Cluster;

/// A resource request: `/api/v1/...` or `/apis/<group>/<version>/...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub group: String,
    pub version: String,
    /// Set for namespaced paths (`.../namespaces/<ns>/<plural>...`).
    pub namespace: Option<String>,
    pub plural: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    Version,
    Health,
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/<group>`
    Group(String),
    /// `/api/v1`, `/apis/<group>/<version>`
    Resources(String, String),
    /// `/openapi/v3`
    OpenApiRoot,
    /// `/openapi/v3/<api/v1 | apis/group/version>`
    OpenApiGroup(String, String),
    Resource(Target),
    /// `/kaos-testkit/<action>`: test-control endpoints.
    Admin(String),
    NotFound,
}

pub fn route(cluster: &Cluster, path: &str) -> Route {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        ["version"] => Route::Version,
        ["kaos-testkit", action] => Route::Admin(action.to_string()),
        ["healthz" | "readyz" | "livez", ..] => Route::Health,
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", group] => Route::Group(group.to_string()),
        ["api", version] => Route::Resources(String::new(), version.to_string()),
        ["apis", group, version] => Route::Resources(group.to_string(), version.to_string()),
        ["openapi", "v3"] => Route::OpenApiRoot,
        ["openapi", "v3", "api", version] => {
            Route::OpenApiGroup(String::new(), version.to_string())
        }
        ["openapi", "v3", "apis", group, version] => {
            Route::OpenApiGroup(group.to_string(), version.to_string())
        }
        ["api", version, rest @ ..] => resource(cluster, "", version, rest),
        ["apis", group, version, rest @ ..] => resource(cluster, group, version, rest),
        _ => Route::NotFound,
    }
}

fn resource(cluster: &Cluster, group: &str, version: &str, rest: &[&str]) -> Route {
    let target = |namespace: Option<&str>, tail: &[&str]| {
        Route::Resource(Target {
            group: group.to_string(),
            version: version.to_string(),
            namespace: namespace.map(String::from),
            plural: tail[0].to_string(),
            name: tail.get(1).map(|s| s.to_string()),
            subresource: tail.get(2).map(|s| s.to_string()),
        })
    };
    match rest {
        ["namespaces", ns, plural, tail @ ..]
            if tail.len() <= 2
                && cluster
                    .resource(group, version, plural)
                    .is_some_and(|t| t.namespaced) =>
        {
            let mut all = vec![*plural];
            all.extend_from_slice(tail);
            target(Some(ns), &all)
        }
        [_, ..] if rest.len() <= 3 => target(None, rest),
        _ => Route::NotFound,
    }
}

/// Decoded query parameters.
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn parse(query: Option<&str>) -> Self {
        let pairs = query
            .map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Self(pairs)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some("true" | "1"))
    }

    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let cluster = Cluster::default();
        let t = |ns: Option<&str>,
                 plural: &str,
                 name: Option<&str>,
                 sub: Option<&str>,
                 group: &str,
                 version: &str| {
            Route::Resource(Target {
                group: group.into(),
                version: version.into(),
                namespace: ns.map(String::from),
                plural: plural.into(),
                name: name.map(String::from),
                subresource: sub.map(String::from),
            })
        };
        assert_eq!(
            route(&cluster, "/api/v1/namespaces"),
            t(None, "namespaces", None, None, "", "v1")
        );
        assert_eq!(
            route(&cluster, "/api/v1/namespaces/foo"),
            t(None, "namespaces", Some("foo"), None, "", "v1")
        );
        assert_eq!(
            route(&cluster, "/api/v1/namespaces/foo/status"),
            t(None, "namespaces", Some("foo"), Some("status"), "", "v1")
        );
        assert_eq!(
            route(&cluster, "/api/v1/namespaces/ns/configmaps/cm"),
            t(Some("ns"), "configmaps", Some("cm"), None, "", "v1")
        );
        assert_eq!(
            route(&cluster, "/apis/apps/v1/namespaces/ns/deployments/d/status"),
            t(
                Some("ns"),
                "deployments",
                Some("d"),
                Some("status"),
                "apps",
                "v1"
            )
        );
        assert_eq!(
            route(&cluster, "/apis/apps/v1/deployments"),
            t(None, "deployments", None, None, "apps", "v1")
        );
        assert_eq!(
            route(&cluster, "/apis/apps/v1"),
            Route::Resources("apps".into(), "v1".into())
        );
        assert_eq!(
            route(&cluster, "/openapi/v3/apis/apps/v1"),
            Route::OpenApiGroup("apps".into(), "v1".into())
        );
    }
}
