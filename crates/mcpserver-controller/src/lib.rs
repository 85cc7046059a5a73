//! The MCPServer controller: reconciles `kaos.tools/v1alpha1` MCPServers into MCP tool servers
//! started from the runtime registry. `build` is pure and also serves `kaosctl render`.

pub mod build;
pub mod controller;
pub mod reconcile;
pub mod registry;
pub mod settings;
pub mod status;
pub mod verification;
pub mod verify;

use kaos_runtime::ControllerId;

pub const ID: ControllerId = ControllerId {
    name: "mcpserver",
    lease: "kaos-mcpserver-controller",
    kinds: &[("MCPServer", controller::PHASES)],
};
