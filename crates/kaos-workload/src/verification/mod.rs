//! Protocol checks of workloads, once per rollout (`docs/readiness.md`): the MCPServer's MCP
//! handshake, the ModelAPI's model list. Each kind says what its check asks; this says when a
//! check is due ([`rollout`]), runs it off the reconcile with a cap on the checks in flight and
//! backoff after failures, and wakes the object's reconcile with the outcome ([`checks`]). Also
//! the settings both controllers take ([`settings`]) and where tests reach a Service whose name
//! does not resolve ([`overrides`]).

pub mod checks;
pub mod overrides;
pub mod rollout;
pub mod settings;
