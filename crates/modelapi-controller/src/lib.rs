//! The ModelAPI controller: reconciles `kaos.tools/v1alpha1` ModelAPIs into LiteLLM proxies
//! (Proxy) and Ollama servers (Hosted). `build` is pure and also serves `kaosctl render`.

pub mod agent_budgets;
pub mod budget_entries;
pub mod build;
pub mod controller;
pub mod litellm;
pub mod models;
pub mod reconcile;
pub mod settings;
pub mod status;
pub mod verification;
pub mod verify;

use kaos_runtime::ControllerId;

pub const ID: ControllerId = ControllerId {
    name: "modelapi",
    lease: "kaos-modelapi-controller",
    kinds: &[("ModelAPI", controller::PHASES)],
};
