//! The MemoryStore controller: reconciles `kaos.tools/v1alpha1` MemoryStores into the memory
//! service (KAOS's kaos-memory) once the ModelAPIs they name are ready. `build` is pure and also
//! serves `kaosctl render`.

pub mod build;
pub mod controller;
pub mod models;
pub mod reconcile;
pub mod settings;
pub mod status;

use kaos_runtime::ControllerId;

pub const ID: ControllerId = ControllerId {
    name: "memorystore",
    lease: "kaos-memorystore-controller",
    kinds: &[("MemoryStore", controller::PHASES)],
};
