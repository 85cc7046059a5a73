//! The usage collector's flags and environment (part of the agent-controller's settings).

use crate::usage::overrides::AddressOverrides;

/// How the usage of budgeted agents is read from their ModelAPIs' proxies and reported
/// (docs/budgets.md, "Usage in the status").
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct UsageSettings {
    /// Seconds between two reads of the proxies' `/metrics/` (only ModelAPIs with a budgeted
    /// agent are read; none: no request at all).
    #[arg(long, env = "USAGE_SCRAPE_INTERVAL_SECONDS", default_value_t = 60)]
    pub usage_scrape_interval_seconds: u64,
    /// The least seconds between two status writes of an agent's usage numbers (a change of its
    /// `BudgetExceeded` or `UsageReported` condition, or a new day window, is written at once).
    #[arg(long, env = "USAGE_STATUS_INTERVAL_SECONDS", default_value_t = 300)]
    pub usage_status_interval_seconds: u64,
    /// Seconds one read of a proxy pod's `/metrics/` may take, connection to last byte.
    #[arg(long, env = "USAGE_SCRAPE_TIMEOUT_SECONDS", default_value_t = 10)]
    pub usage_scrape_timeout_seconds: u64,
    /// Proxy pods read at once at most, across every watched namespace.
    #[arg(long, env = "USAGE_SCRAPES_IN_FLIGHT", default_value_t = 8)]
    pub usage_scrapes_in_flight: usize,
    /// Where this process reads a ModelAPI's proxy instead of its Service's endpoints (tests, a
    /// local sandbox): `namespace/modelapi=host:port` entries separated by commas.
    #[arg(
        long,
        env = "USAGE_ADDRESS_OVERRIDES",
        value_parser = AddressOverrides::parse,
        default_value = ""
    )]
    pub usage_address_overrides: AddressOverrides,
}
