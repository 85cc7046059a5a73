//! Wires the caches and the reconciler into kube-runtime Controllers (one per watched
//! namespace, or one for all). A ModelAPI is reconciled when its spec changes, it is deleted,
//! one of its children (Deployment, Service, LiteLLM ConfigMap, HTTPRoute) changes, or an
//! Agent using it gains, changes or loses a budget (its LiteLLM config has an entry per budget),
//! or when the model check of its rollout ends.

use std::time::Duration;

use kaos_runtime::Runtime;
use kaos_workload::trigger::debounce::debounced;
use kaos_workload::trigger::receive;
use kaos_workload::wiring::{ChildKinds, Workload, run_workload};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;

use crate::agent_budgets::{AgentOfModelApi, has_default_budget, model_apis_of_changed_agents};
use crate::build::CHILD_SELECTOR;
use crate::reconcile::{Context, FINALIZER, phase_of};
use crate::settings::Settings;
use crate::verification::Verifier;

/// How long the agents' budgets of a ModelAPI must be still before its config is rewritten.
const BUDGETS_QUIET: Duration = Duration::from_secs(2);
/// The longest a change of budgets waits while agents keep changing.
const BUDGETS_MAX_WAIT: Duration = Duration::from_secs(15);

pub const PHASES: &[&str] = &kaos_api::common::Phase::NAMES;

pub async fn run(runtime: Runtime, settings: Settings) -> anyhow::Result<()> {
    let verifier = Verifier::new(&settings.protocol, &settings.modelapi_address_overrides);
    let workload = Workload::new(CHILD_SELECTOR, phase_of)
        .children(ChildKinds {
            config_maps: true,
            secrets: true,
            ..ChildKinds::workload()
        })
        .finalizer(FINALIZER)
        .gateway(settings.gateway.gateway_api_enabled);
    run_workload(&runtime, workload, |ns| {
        let (agents, agent_events) = ns.watch::<AgentOfModelApi>();
        let model_apis = ns.store();
        let changed = model_apis_of_changed_agents(agent_events, move |namespace, name| {
            let key = ObjectRef::new(name).within(namespace);
            model_apis
                .get(&key)
                .is_some_and(|m| has_default_budget(&m.spec))
        });
        // Each change of the config rolls LiteLLM: a burst of budgeted agents is one.
        ns.reconcile_on(debounced(changed, BUDGETS_QUIET, BUDGETS_MAX_WAIT));
        let (wake, woken) = mpsc::unbounded_channel();
        ns.reconcile_on(receive(woken));
        Context {
            core: ns.core(),
            settings: settings.clone(),
            ids: ns.ids(),
            agents,
            verifier: verifier.clone(),
            wake,
        }
    })
    .await
}
