//! The Agent controller on kaos-testkit with the deployment simulator, shared by the controller
//! test files. The statuses of the agents' dependencies (ModelAPIs, MCPServers, MemoryStores)
//! are written by the tests, as their controllers would.
#![allow(dead_code)]

use agent_controller::settings::Args;
use clap::Parser;
use kaos_api::modelapi::ModelAPI;
use kaos_harness::cluster::TestCluster;
use kaos_harness::controller::ControllerTest;
use kaos_harness::fixtures::ModelApiFixture;

pub fn start() -> ControllerTest {
    start_with(&[])
}

/// The controller with `flags` added to its defaults, on a fenced cluster: `h.caught_up()` waits
/// until it has handled every change made so far (kaos_harness::fence).
pub fn start_with(flags: &[&str]) -> ControllerTest {
    let mut argv = vec!["agent-controller", "--default-agent-image=kaos-agent:test"];
    argv.extend(flags);
    let args = Args::try_parse_from(argv).expect("flags");
    ControllerTest::start(
        TestCluster::start_fenced(),
        agent_controller::ID,
        args.runtime,
        |runtime| agent_controller::controller::run(runtime, args.settings),
    )
}

/// The ModelAPI the agents use: `llm`, a proxy of `openai/*` models.
pub fn llm() -> ModelAPI {
    ModelAPI::test("llm").proxy(["openai/*"])
}

/// What the controller does about `change` (a test's write): the reconciles it runs and every
/// write made from just before the change (the change's own included) until the controller has
/// caught up with it. Fenced first, so nothing earlier is counted.
pub async fn reaction_to(
    h: &ControllerTest,
    change: impl std::future::Future<Output = ()>,
) -> (f64, Vec<String>) {
    h.caught_up().await;
    let (reconciles, from) = (h.controller.reconciles(), std::time::SystemTime::now());
    change.await;
    h.caught_up().await;
    (h.controller.reconciles() - reconciles, h.writes_since(from))
}
