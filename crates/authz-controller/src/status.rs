//! The statuses of AccessGrants and ThirdPartyServices. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kaos_workload::conditions::{ConditionUpdate, set_condition};

/// The AccessGrant condition KAOS sets, and its reason once the grant is in the projected
/// policy (KAOS's words for each reason below).
pub const ENFORCED: &str = "Enforced";
pub const ENFORCED_MESSAGE: &str =
    "AccessGrant is included in the successfully projected authorization policy";
/// The `Enforced` reason when gateway authorization is off (no ext_authz backend).
pub const AUTHORIZATION_DISABLED: &str = "AuthorizationDisabled";
pub const AUTHORIZATION_DISABLED_MESSAGE: &str =
    "Gateway authorization is not enabled; this AccessGrant is not enforced";
/// The `Enforced` reason when no user issuer is configured.
pub const NO_USER_IDENTITY_PROVIDER: &str = "NoUserIdentityProvider";
pub const NO_USER_IDENTITY_PROVIDER_MESSAGE: &str =
    "A user identity provider must be configured for this AccessGrant to be enforced";
/// The `Enforced` reason when the policy data is not projected (manual, or no ConfigMap named).
pub const POLICY_PROJECTION_INACTIVE: &str = "PolicyProjectionInactive";
pub const POLICY_PROJECTION_INACTIVE_MESSAGE: &str =
    "Automated policy projection must be active for this AccessGrant to be enforced";
/// The `Enforced` reason when the last projection could not be written.
pub const PROJECTION_FAILED: &str = "ProjectionFailed";

/// The ThirdPartyService condition KAOS sets.
pub use kaos_api::conditions::READY;
/// The `Ready` reason KAOS gives when its token exchange is off, always the case here.
pub const FEATURE_DISABLED: &str = "FeatureDisabled";
pub const FEATURE_DISABLED_MESSAGE: &str = "Token exchange is disabled";

/// Whether what the resource names exists (kaos-rs's own condition; KAOS checks nothing).
pub const RESOLVED_REFS: &str = "ResolvedRefs";
/// The `ResolvedRefs` reason when every named object exists.
pub const REFERENCES_RESOLVED: &str = "ReferencesResolved";
/// The `ResolvedRefs` reason when a named Agent, MCPServer, ModelAPI or MemoryStore is missing.
pub const REFERENCE_NOT_FOUND: &str = "ReferenceNotFound";
/// The `ResolvedRefs` reason when `access` grants a scope `spec.scopes` does not declare.
pub const UNDECLARED_SCOPE: &str = "UndeclaredScope";
/// The `ResolvedRefs` reason when a grant's selector matches nothing in its namespace.
pub const SELECTOR_MATCHES_NOTHING: &str = "SelectorMatchesNothing";

/// What a resource's references came to: nothing wrong, or the first problem's reason and a
/// message naming every one.
pub type Problem = Option<(&'static str, String)>;

/// The problem of missing objects (`Agent a, MCPServer b`) in `namespace`, if any.
pub fn not_found(missing: &[String], namespace: &str) -> Problem {
    (!missing.is_empty()).then(|| {
        (
            REFERENCE_NOT_FOUND,
            format!(
                "{} not found in namespace {namespace}; create them or fix the names",
                missing.join(", ")
            ),
        )
    })
}

fn set_resolved(
    conditions: &mut Vec<Condition>,
    problem: &Problem,
    generation: Option<i64>,
    now: Time,
) {
    let update = match problem {
        None => ConditionUpdate {
            type_: RESOLVED_REFS,
            status: true,
            reason: REFERENCES_RESOLVED,
            message: "every object this resource names exists".into(),
        },
        Some((reason, message)) => ConditionUpdate {
            type_: RESOLVED_REFS,
            status: false,
            reason,
            message: message.clone(),
        },
    };
    set_condition(conditions, update, generation, now);
}

/// `Enforced=False` for `reason`, with KAOS's message (and, when the projection failed, why).
pub fn not_enforced(reason: &'static str, detail: Option<&str>) -> ConditionUpdate<'static> {
    let message = match reason {
        NO_USER_IDENTITY_PROVIDER => NO_USER_IDENTITY_PROVIDER_MESSAGE.to_string(),
        POLICY_PROJECTION_INACTIVE => POLICY_PROJECTION_INACTIVE_MESSAGE.to_string(),
        PROJECTION_FAILED => format!(
            "Policy projection failed; this AccessGrant is not currently enforced: {}",
            detail.unwrap_or("unknown error")
        ),
        _ => AUTHORIZATION_DISABLED_MESSAGE.to_string(),
    };
    ConditionUpdate {
        type_: ENFORCED,
        status: false,
        reason,
        message,
    }
}

/// `Enforced=True`: the grant is in the policy the PDP reads.
pub fn enforced() -> ConditionUpdate<'static> {
    ConditionUpdate {
        type_: ENFORCED,
        status: true,
        reason: ENFORCED,
        message: ENFORCED_MESSAGE.into(),
    }
}

/// KAOS's verdict on a third-party service: never ready here (no token exchange).
pub fn token_exchange_disabled() -> ConditionUpdate<'static> {
    ConditionUpdate {
        type_: READY,
        status: false,
        reason: FEATURE_DISABLED,
        message: FEATURE_DISABLED_MESSAGE.into(),
    }
}

/// The conditions: KAOS's `verdict` (none: the previous one stands until the projection has
/// run), and whether the references resolve.
pub fn conditions(
    previous: &[Condition],
    verdict: Option<ConditionUpdate<'_>>,
    problem: &Problem,
    generation: Option<i64>,
    now: Time,
) -> Vec<Condition> {
    let mut conditions = previous.to_vec();
    if let Some(verdict) = verdict {
        set_condition(&mut conditions, verdict, generation, now.clone());
    }
    set_resolved(&mut conditions, problem, generation, now);
    conditions
}

/// The reason of the condition `type_`, as a metrics phase (`Pending` before the first status).
pub fn phase_of(
    conditions: &[Condition],
    type_: &str,
    phases: &[&'static str],
) -> Option<&'static str> {
    let reason = &conditions.iter().find(|c| c.type_ == type_)?.reason;
    phases.iter().copied().find(|p| p == reason)
}
