//! The access controller: KAOS 0.8.4's authorization kinds, AccessGrant and ThirdPartyService.
//! With KAOS's security plane configured (`settings`), it projects AccessGrants and the Agents'
//! data into the policy ConfigMap KAOS's PDP reads (`projection`) and says on each grant whether
//! it is enforced, in KAOS's reasons (`enforcement`); without it, as KAOS, `AuthorizationDisabled`.
//! Token exchange stays with the broker: ThirdPartyServices report `FeatureDisabled`. Both kinds
//! report whether what they reference exists. One process for both: they are one concern, and
//! neither has children.

pub mod controller;
pub mod enforcement;
pub mod projection;
pub mod references;
pub mod settings;
pub mod status;

use kaos_runtime::ControllerId;

pub const ID: ControllerId = ControllerId {
    name: "authz",
    lease: "kaos-authz-controller",
    kinds: &[
        ("AccessGrant", controller::GRANT_PHASES),
        ("ThirdPartyService", controller::SERVICE_PHASES),
    ],
};
