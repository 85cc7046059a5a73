//! Whether a grant is enforced, in KAOS's order of reasons: gateway authorization off
//! (`AuthorizationDisabled`), no user issuer (`NoUserIdentityProvider`), no automated projection
//! (`PolicyProjectionInactive`), then what the last projection did (`ProjectionFailed`, or
//! `Enforced` once the policy ConfigMap holds the grant at its generation). Pure.

use kaos_workload::conditions::ConditionUpdate;

use crate::projection::projector::Verdict;
use crate::settings::Security;
use crate::status::{
    AUTHORIZATION_DISABLED, NO_USER_IDENTITY_PROVIDER, POLICY_PROJECTION_INACTIVE,
    PROJECTION_FAILED, enforced, not_enforced,
};

/// The `Enforced` condition to set (none: the projection has not run since the grant changed;
/// it reconciles the grant again when it has).
pub fn verdict(
    security: &Security,
    projection: impl FnOnce() -> Verdict,
) -> Option<ConditionUpdate<'static>> {
    if !security.authorization_on() {
        return Some(not_enforced(AUTHORIZATION_DISABLED, None));
    }
    if !security.user_plane() {
        return Some(not_enforced(NO_USER_IDENTITY_PROVIDER, None));
    }
    if !security.projects_data() {
        return Some(not_enforced(POLICY_PROJECTION_INACTIVE, None));
    }
    match projection() {
        Verdict::Enforced => Some(enforced()),
        Verdict::Failed(why) => Some(not_enforced(PROJECTION_FAILED, Some(&why))),
        Verdict::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::DataSource;

    fn on() -> Security {
        Security {
            ext_authz_url: "kaos-pdp.kaos-system.svc:9191".into(),
            policy_configmap_name: "kaos-authz-policy".into(),
            policy_configmap_namespace: "kaos-system".into(),
            user_issuer: "http://keycloak/realms/kaos".into(),
            ..Default::default()
        }
    }

    fn reason(security: &Security, projection: Verdict) -> Option<(bool, &'static str)> {
        verdict(security, || projection).map(|c| (c.status, c.reason))
    }

    #[test]
    fn reasons_come_in_kaos_order() {
        assert_eq!(
            reason(&Security::default(), Verdict::Enforced),
            Some((false, "AuthorizationDisabled"))
        );
        let no_users = Security {
            user_issuer: String::new(),
            ..on()
        };
        assert_eq!(
            reason(&no_users, Verdict::Enforced),
            Some((false, "NoUserIdentityProvider"))
        );
        let manual = Security {
            policy_data_source: DataSource::Manual,
            ..on()
        };
        assert_eq!(
            reason(&manual, Verdict::Enforced),
            Some((false, "PolicyProjectionInactive"))
        );
        let unnamed = Security {
            policy_configmap_name: String::new(),
            ..on()
        };
        assert_eq!(
            reason(&unnamed, Verdict::Enforced),
            Some((false, "PolicyProjectionInactive"))
        );
        assert_eq!(
            reason(&on(), Verdict::Failed("too big".into())),
            Some((false, "ProjectionFailed"))
        );
        assert_eq!(reason(&on(), Verdict::Enforced), Some((true, "Enforced")));
        assert_eq!(reason(&on(), Verdict::Pending), None);
    }
}
