//! The access controller: KAOS 0.8.4's authorization kinds, AccessGrant and ThirdPartyService.
//! kaos-rs runs no policy decision point and no token exchange, so it enforces neither; this
//! controller says so on each (KAOS's `AuthorizationDisabled` and `FeatureDisabled`, as KAOS
//! reports them when its own gateway authorization is off) and checks what they reference.
//! One process for both: they are one concern, and neither has children.

pub mod controller;
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
