//! What tests read of a kaos resource's status, the same way for every kind: its phase and
//! message, and its conditions.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kaos_api::access::{AccessGrant, ThirdPartyService};
use kaos_api::agent::{Agent, AgentPhase};
use kaos_api::common::Phase;
use kaos_api::mcpserver::MCPServer;
use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_api::workflow::{AgentWorkflow, AgentWorkflowRun, RunPhase};

/// A kind whose status has a phase and a message.
pub trait Phased {
    type Phase: Copy + PartialEq + Debug;

    /// The phase, None before its controller wrote one.
    fn phase(&self) -> Option<Self::Phase>;

    /// `status.message`, empty when there is none.
    fn message(&self) -> String;
}

/// A kind whose status has conditions.
pub trait Conditioned {
    fn conditions(&self) -> &[Condition];

    /// The condition of this type.
    fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions().iter().find(|c| c.type_ == type_)
    }

    /// A condition's status, reason and message.
    fn condition_state(&self, type_: &str) -> Option<(String, String, String)> {
        self.condition(type_)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    }

    /// The reason of the condition of this type, empty without one.
    fn reason(&self, type_: &str) -> String {
        self.condition(type_)
            .map(|c| c.reason.clone())
            .unwrap_or_default()
    }
}

/// Implements [`Conditioned`] for kinds whose status has conditions.
macro_rules! conditioned {
    ($($kind:ty),* $(,)?) => {$(
        impl Conditioned for $kind {
            fn conditions(&self) -> &[Condition] {
                self.status
                    .as_ref()
                    .map(|s| s.conditions.as_slice())
                    .unwrap_or_default()
            }
        }
    )*};
}

/// Implements [`Phased`] for kinds whose status has a phase and a message.
macro_rules! phased {
    ($($kind:ty => $phase:ty),* $(,)?) => {$(
        impl Phased for $kind {
            type Phase = $phase;

            fn phase(&self) -> Option<$phase> {
                self.status.as_ref().and_then(|s| s.phase)
            }

            fn message(&self) -> String {
                self.status
                    .as_ref()
                    .and_then(|s| s.message.clone())
                    .unwrap_or_default()
            }
        }
    )*};
}

phased! {
    Agent => AgentPhase,
    ModelAPI => Phase,
    MCPServer => Phase,
    MemoryStore => Phase,
    AgentWorkflowRun => RunPhase,
}

conditioned!(
    Agent,
    ModelAPI,
    MCPServer,
    MemoryStore,
    AgentWorkflowRun,
    AgentWorkflow,
    AccessGrant,
    ThirdPartyService,
);
