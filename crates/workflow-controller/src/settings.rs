//! The workflow-controller's flags and environment: the shared ones, where agents are reached,
//! and how long A2A calls and polls take.

use std::time::Duration;

use kaos_runtime::settings::parse_duration;

use crate::agents::endpoints::AddressOverrides;

/// The binary's flags: every controller process's, then [`Settings`].
pub type Args = kaos_runtime::binary::Args<Settings>;

/// How the controller reaches agents and how often it looks at their tasks.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct Settings {
    /// Addresses to send steps to instead of agents' Services, where their DNS names do not
    /// resolve (a local sandbox): `namespace/agent=host:port` entries separated by commas.
    #[arg(
        long,
        env = "AGENT_ADDRESS_OVERRIDES",
        value_parser = AddressOverrides::parse,
        default_value = ""
    )]
    pub agent_address_overrides: AddressOverrides,
    /// Deadline of one A2A call that is not a step's send (GetTask, ListTasks, CancelTask); a
    /// send is bounded by its step's `timeoutSeconds`.
    #[arg(long, env = "A2A_CALL_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub a2a_call_timeout: Duration,
    /// How often a run with steps in flight asks their agents how the tasks are doing.
    #[arg(long, env = "WORKFLOW_POLL_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub workflow_poll_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            agent_address_overrides: AddressOverrides::default(),
            a2a_call_timeout: Duration::from_secs(10),
            workflow_poll_interval: Duration::from_secs(2),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn defaults_and_flags() -> Result<(), clap::Error> {
        let args = Args::try_parse_from(["workflow-controller"])?;
        assert_eq!(args.settings, Settings::default());
        let args = Args::try_parse_from([
            "workflow-controller",
            "--agent-address-overrides=team/writer=127.0.0.1:9000",
            "--a2a-call-timeout=500ms",
            "--workflow-poll-interval=1m",
        ])?;
        assert_eq!(args.settings.a2a_call_timeout, Duration::from_millis(500));
        assert_eq!(
            args.settings.workflow_poll_interval,
            Duration::from_secs(60)
        );
        assert_eq!(
            args.settings
                .agent_address_overrides
                .get("team", "writer")
                .as_deref(),
            Some("http://127.0.0.1:9000")
        );
        Ok(())
    }

    #[test]
    fn an_invalid_override_is_a_startup_error_naming_the_entry() {
        let error = Args::try_parse_from([
            "workflow-controller",
            "--agent-address-overrides=team/a=h:1,writer=127.0.0.1:9000",
        ])
        .expect_err("refused");
        assert!(
            error.to_string().contains("\"writer=127.0.0.1:9000\""),
            "{error}"
        );
    }
}
