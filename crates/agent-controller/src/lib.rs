//! The Agent controller: reconciles `kaos.tools/v1alpha1` Agents into agent runtimes wired to
//! their ModelAPI, MCPServers and peer agents. `desired` (with `resolve`, `build` and `network`)
//! is pure and also serves `kaosctl render`.

pub mod build;
pub mod cached;
pub mod conditions;
pub mod controller;
pub mod desired;
pub mod naming;
pub mod network;
pub mod pins;
pub mod reconcile;
pub mod relations;
pub mod resolve;
pub mod settings;
pub mod status;
pub mod suspension;
pub mod usage;

use kaos_runtime::ControllerId;

pub const ID: ControllerId = ControllerId {
    name: "agent",
    lease: "kaos-agent-controller",
    kinds: &[("Agent", controller::PHASES)],
};
