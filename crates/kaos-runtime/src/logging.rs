//! Logging with tracing: text or JSON, filtered by `--log-level` or `RUST_LOG`.

use tracing_subscriber::EnvFilter;

use crate::settings::LogFormat;

/// Installs the global subscriber; a second call (as in tests) is a no-op.
pub fn init(format: LogFormat, level: Option<&str>) {
    let filter = match level {
        Some(level) => EnvFilter::new(level),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
