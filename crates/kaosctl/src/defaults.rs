//! The operator settings `kaosctl` uses for the sandbox and for `render`: the same defaults the
//! Helm chart installs (a test keeps them equal).

use clap::Parser;

pub const DEFAULT_AGENT_IMAGE: &str = "axsauze/kaos-agent:latest";
pub const DEFAULT_LITELLM_IMAGE: &str = "ghcr.io/berriai/litellm:main-stable";
pub const DEFAULT_OLLAMA_IMAGE: &str = "ollama/ollama:latest";
pub const DEFAULT_MEMORY_SERVICE_IMAGE: &str = "axsauze/kaos-memory-service:latest";
pub const SYSTEM_NAMESPACE: &str = "kaos-system";
/// Where `kaosctl dev` writes the sandbox's kubeconfig, and where `kaosctl workflow` looks for
/// it (the current directory).
pub const SANDBOX_KUBECONFIG: &str = "kaos-dev.kubeconfig";

/// The quickstart a `kaosctl dev` sandbox applies when no `--apply` is given.
pub const QUICKSTART: &str = include_str!("../../../examples/quickstart.yaml");

/// The Secret the quickstart's ModelAPI reads its provider key from, which a user creates with
/// their own key. The sandbox runs no containers, so a placeholder does.
pub const SANDBOX_CREDENTIALS: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: openai-credentials}\nstringData: {api-key: sandbox-placeholder}\n";

/// Each controller's settings as its binary would parse them from the chart's environment.
pub struct ControllerSettings {
    pub agent: agent_controller::settings::Settings,
    pub modelapi: modelapi_controller::settings::Settings,
    pub mcpserver: mcpserver_controller::settings::Settings,
    pub memorystore: memorystore_controller::settings::Settings,
}

pub fn controller_settings() -> anyhow::Result<ControllerSettings> {
    let agent = agent_controller::settings::Args::try_parse_from([
        "agent-controller",
        &format!("--default-agent-image={DEFAULT_AGENT_IMAGE}"),
    ])?;
    let modelapi = modelapi_controller::settings::Args::try_parse_from([
        "modelapi-controller",
        &format!("--default-litellm-image={DEFAULT_LITELLM_IMAGE}"),
        &format!("--default-ollama-image={DEFAULT_OLLAMA_IMAGE}"),
        // The sandbox runs no pods: no LiteLLM or Ollama could answer a model check.
        "--protocol-checks=false",
    ])?;
    let mcpserver = mcpserver_controller::settings::Args::try_parse_from([
        "mcpserver-controller",
        &format!("--system-namespace={SYSTEM_NAMESPACE}"),
        // The sandbox runs no pods: no MCP server could answer a protocol check.
        "--protocol-checks=false",
    ])?;
    let memorystore = memorystore_controller::settings::Args::try_parse_from([
        "memorystore-controller",
        &format!("--default-memory-service-image={DEFAULT_MEMORY_SERVICE_IMAGE}"),
    ])?;
    Ok(ControllerSettings {
        agent: agent.settings,
        modelapi: modelapi.settings,
        mcpserver: mcpserver.settings,
        memorystore: memorystore.settings,
    })
}

/// The workflow controller's settings, as its binary would parse them from the chart's
/// environment with `AGENT_ADDRESS_OVERRIDES` set to `overrides` (`namespace/agent=host:port`
/// entries separated by commas).
pub fn workflow_settings(
    overrides: &str,
) -> anyhow::Result<workflow_controller::settings::Settings> {
    let args = workflow_controller::settings::Args::try_parse_from([
        "workflow-controller".to_string(),
        format!("--agent-address-overrides={overrides}"),
    ])?;
    Ok(args.settings)
}
