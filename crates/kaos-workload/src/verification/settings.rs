//! The protocol checks' settings, the same in every controller that checks its workloads.

use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args};

/// Whether, and how hard, the controller checks its workloads' protocol once per rollout.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct ProtocolCheckArgs {
    /// Whether the controller checks each workload's protocol once per rollout
    /// (`docs/readiness.md`). Off where no pod can answer (kwok nodes, `kaosctl dev`): a check
    /// that cannot succeed is retried with backoff, so such a cluster would never be quiet.
    #[arg(
        long,
        env = "PROTOCOL_CHECKS",
        default_value = "true",
        value_parser = BoolishValueParser::new(),
        action = ArgAction::Set
    )]
    pub protocol_checks: bool,
    /// Per-request timeout of the checks, in seconds.
    #[arg(long, env = "PROTOCOL_CHECK_TIMEOUT_SECONDS", default_value_t = 5)]
    pub protocol_check_timeout_seconds: u64,
    /// Checks run at once at most, across every watched namespace.
    #[arg(long, env = "PROTOCOL_CHECKS_IN_FLIGHT", default_value_t = 8)]
    pub protocol_checks_in_flight: usize,
}

impl Default for ProtocolCheckArgs {
    /// The flags' defaults.
    fn default() -> Self {
        Self {
            protocol_checks: true,
            protocol_check_timeout_seconds: 5,
            protocol_checks_in_flight: 8,
        }
    }
}

impl ProtocolCheckArgs {
    /// The timeout of one request of a check.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.protocol_check_timeout_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        checks: ProtocolCheckArgs,
    }

    #[test]
    fn the_default_is_the_flags_default_and_false_turns_checks_off() {
        let parsed = Flags::try_parse_from(["x"]).expect("flags");
        assert_eq!(parsed.checks, ProtocolCheckArgs::default());
        let off = Flags::try_parse_from(["x", "--protocol-checks=false"]).expect("flags");
        assert!(!off.checks.protocol_checks);
    }
}
