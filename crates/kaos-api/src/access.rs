//! KAOS 0.8.4's authorization kinds: `AccessGrant` (who may call which resources through the
//! gateway) and `ThirdPartyService` (delegated access of agents to an outside API). With KAOS's
//! security plane configured, the authz controller projects AccessGrants into the policy KAOS's
//! PDP enforces; token exchange (ThirdPartyService) stays with the broker.

use k8s_openapi::api::core::v1::SecretKeySelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Conditions, DNS_LABEL, MAX_URL, condition_list_schema};

/// Who may call which resources through the gateway.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kaos.tools",
    version = "v1alpha1",
    kind = "AccessGrant",
    plural = "accessgrants",
    singular = "accessgrant",
    namespaced,
    doc = "Grants users, groups or agents access to KAOS resources through the gateway. Enforced by KAOS's policy decision point once the authz controller has projected it (condition Enforced).",
    status = "AccessGrantStatus",
    category = "kaos",
    printcolumn = r#"{"name":"Enforced","type":"string","jsonPath":".status.conditions[?(@.type==\"Enforced\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AccessGrantSpec {
    /// Who is granted access.
    #[schemars(length(min = 1, max = 256))]
    pub subjects: Vec<Subject>,
    /// What they may call.
    #[schemars(length(min = 1, max = 256))]
    pub resources: Vec<GrantedResource>,
}

/// A user, group or agent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.kind != 'Agent' || self.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.name) <= 63",
    "message": "an Agent subject is the name of an Agent of this namespace (lower case letters, digits and '-', at most 63)"
}]))]
pub struct Subject {
    /// `User` (the token's subject or email claim), `Group` (an entry of the groups claim) or
    /// `Agent` (an Agent of this namespace).
    pub kind: SubjectKind,
    /// The claim value, or the Agent's name.
    #[schemars(length(min = 1, max = 512))]
    pub name: String,
}

/// The kinds of subject.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SubjectKind {
    User,
    Group,
    Agent,
}

/// Resources by name, or by label selector: exactly one of the two forms.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.selector) != (has(self.kind) && has(self.name))",
    "message": "set kind and name together, or selector, not both"
}, {
    "rule": "has(self.kind) == has(self.name)",
    "message": "kind and name go together"
}]))]
pub struct GrantedResource {
    /// The kind of the named resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ResourceKind>,
    /// The resource's name (same namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(DNS_LABEL))]
    pub name: Option<String>,
    /// The resources whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// The kinds a grant can name.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ResourceKind {
    Agent,
    MCPServer,
    ModelAPI,
    MemoryStore,
}

/// The observed state of an AccessGrant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessGrantStatus {
    /// `Enforced`, with KAOS's reasons `Enforced` (in the projected policy),
    /// `NoUserIdentityProvider`, `PolicyProjectionInactive`, `ProjectionFailed` or
    /// `AuthorizationDisabled` (the security plane off, the default), and `ResolvedRefs`: whether
    /// the Agents and resources it names exist and its selectors match something.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = condition_list_schema)]
    pub conditions: Conditions,
}

/// An outside API agents may call on a user's behalf, with delegated tokens.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kaos.tools",
    version = "v1alpha1",
    kind = "ThirdPartyService",
    plural = "thirdpartyservices",
    singular = "thirdpartyservice",
    namespaced,
    doc = "An outside OAuth-protected API that agents call with tokens delegated by users. Not enforced by kaos-rs, which runs no token exchange.",
    status = "ThirdPartyServiceStatus",
    shortname = "tps",
    category = "kaos",
    printcolumn = r#"{"name":"Issuer","type":"string","jsonPath":".spec.issuerURI"}"#,
    printcolumn = r#"{"name":"Route","type":"string","jsonPath":".spec.routeRef.name"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ThirdPartyServiceSpec {
    /// The name shown to users when they consent. Unset: `metadata.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub display_name: Option<String>,
    /// The OAuth client id registered with the service.
    #[serde(rename = "clientID")]
    #[schemars(length(min = 1, max = 512))]
    pub client_id: String,
    /// The key of a Secret (same namespace) holding the client secret.
    pub client_secret_ref: SecretKeySelector,
    /// The OAuth issuer; its discovery document gives the endpoints when `endpoints` is unset.
    #[serde(rename = "issuerURI")]
    #[schemars(length(max = MAX_URL), pattern(r"^https?://"))]
    pub issuer_uri: String,
    /// The OAuth endpoints, when the issuer has no discovery document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Endpoints>,
    /// The scopes users can grant.
    #[schemars(length(min = 1, max = 128))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub scopes: Vec<Scope>,
    /// The resource indicators (RFC 8707) tokens are asked for.
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = MAX_URL)))]
    pub protected_resources: Vec<String>,
    /// The egress HTTPRoute that reaches the service (never one of KAOS's own routes).
    pub route_ref: RouteRef,
    /// Which agents may call it, with which scopes.
    #[schemars(length(min = 1, max = 256))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["agent"]))]
    pub access: Vec<Access>,
}

/// The OAuth endpoints of a service.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Endpoints {
    /// The token endpoint.
    #[schemars(length(max = MAX_URL), pattern(r"^https?://"))]
    pub token: String,
    /// The authorization endpoint.
    #[schemars(length(max = MAX_URL), pattern(r"^https?://"))]
    pub authorization: String,
}

/// A scope users can grant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scope {
    /// The scope as the service names it.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// What it allows, shown to users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub description: Option<String>,
}

/// The egress route of a service.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteRef {
    /// The HTTPRoute's name (same namespace).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// An agent's access to a service.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Access {
    /// An Agent of this namespace.
    #[schemars(length(min = 1, max = 63), pattern(DNS_LABEL))]
    pub agent: String,
    /// The scopes it may ask for.
    #[schemars(length(min = 1, max = 128), inner(length(min = 1, max = 256)))]
    pub scopes: Vec<String>,
}

/// The observed state of a ThirdPartyService.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThirdPartyServiceStatus {
    /// `Ready` (`False`, reason `FeatureDisabled`, on kaos-rs) and `ResolvedRefs`: whether its
    /// Agents, its client Secret and its scopes resolve.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = condition_list_schema)]
    pub conditions: Conditions,
}
