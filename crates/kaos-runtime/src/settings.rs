//! Command-line flags (each also read from an environment variable) every controller process
//! takes: the process settings of controller-runtime managers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};

use crate::metrics_tls::CertSource;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Process settings every controller binary takes.
#[derive(Args, Clone, Debug)]
pub struct RuntimeArgs {
    /// Where `/metrics` is served (`:8080` means every interface; `0` turns it off).
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = ":8080")]
    pub metrics_bind_address: String,
    /// Serve `/metrics` over HTTPS to callers whose bearer token the API server authenticates
    /// (TokenReview) and allows to `get` `/metrics` (SubjectAccessReview), as controller-runtime's
    /// `--metrics-secure`. Off by default, so local runs scrape plain HTTP; the Helm chart sets it.
    #[arg(
        long,
        env = "METRICS_SECURE",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = ArgAction::Set
    )]
    pub metrics_secure: bool,
    /// Directory of the metrics server's certificate and key (e.g. a mounted cert-manager
    /// Secret), re-read when they change; unset: a self-signed certificate made at start.
    #[arg(long, env = "METRICS_CERT_DIR")]
    pub metrics_cert_dir: Option<PathBuf>,
    /// Certificate file (PEM, the chain) in `--metrics-cert-dir`.
    #[arg(long, env = "METRICS_CERT_NAME", default_value = "tls.crt")]
    pub metrics_cert_name: String,
    /// Private key file (PEM) in `--metrics-cert-dir`.
    #[arg(long, env = "METRICS_CERT_KEY", default_value = "tls.key")]
    pub metrics_cert_key: String,
    /// Where `/healthz` and `/readyz` are served.
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081")]
    pub health_probe_bind_address: String,
    /// Elect a leader on a Lease so several replicas can run; only the leader reconciles.
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the Lease (default: this pod's namespace).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the Lease (default: `kaos-<kind>-controller`).
    #[arg(long, env = "LEADER_ELECTION_ID")]
    pub leader_election_id: Option<String>,
    /// How long a lease lasts without renewal, as seen by the standbys.
    #[arg(long, env = "LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up and exits.
    #[arg(long, env = "RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// Time between election attempts.
    #[arg(long, env = "RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
    /// Watch only these namespaces (repeat, or comma-separated); none means all namespaces.
    #[arg(
        long = "watch-namespace",
        env = "WATCH_NAMESPACES",
        value_delimiter = ','
    )]
    pub watch_namespaces: Vec<String>,
    /// Reconciles that may run at once.
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = 4)]
    pub max_concurrent_reconciles: u16,
    /// How long a reconcile request waits for more changes of the same object, so a burst
    /// (nine peers getting endpoints at once) is one reconcile. `0s` turns it off.
    #[arg(long, env = "RECONCILE_DEBOUNCE", default_value = "200ms", value_parser = parse_duration)]
    pub reconcile_debounce: Duration,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log filter, e.g. `info` or `kaos=debug,kube=info` (default: `RUST_LOG`, else `info`).
    #[arg(long, env = "CONTROLLER_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// This pod's name, the base of the election identity.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// This pod's namespace, the default Lease namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
}

impl RuntimeArgs {
    /// The certificate of secure metrics: the directory's files, else self-signed.
    pub fn metrics_cert_source(&self) -> CertSource {
        match &self.metrics_cert_dir {
            Some(dir) => CertSource::Dir {
                dir: dir.clone(),
                cert: self.metrics_cert_name.clone(),
                key: self.metrics_cert_key.clone(),
            },
            None => CertSource::SelfSigned,
        }
    }
}

/// `:8080` → `0.0.0.0:8080`; `0` or empty → None (turned off).
pub fn bind_address(text: &str) -> Result<Option<SocketAddr>, String> {
    match text.trim() {
        "" | "0" => Ok(None),
        t if t.starts_with(':') => format!("0.0.0.0{t}")
            .parse()
            .map(Some)
            .map_err(|e| format!("{t}: {e}")),
        t => t.parse().map(Some).map_err(|e| format!("{t}: {e}")),
    }
}

/// Durations as controller-runtime flags take them: `15s`, `500ms`, `2m`, `1h`, or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. 15s, 500ms, 2m"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("invalid duration {text:?}: unknown unit {other:?}")),
    };
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addresses_and_durations() {
        assert_eq!(
            bind_address(":8080"),
            Ok(Some("0.0.0.0:8080".parse().expect("addr")))
        );
        assert_eq!(
            bind_address("127.0.0.1:9"),
            Ok(Some("127.0.0.1:9".parse().expect("addr")))
        );
        assert_eq!(bind_address("0"), Ok(None));
        assert!(bind_address("nope").is_err());
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("5 parsecs").is_err());
    }

    #[test]
    fn defaults_match_controller_runtime() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            runtime: RuntimeArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["x"]).expect("defaults parse");
        let r = cli.runtime;
        assert_eq!(
            (
                r.metrics_bind_address.as_str(),
                r.health_probe_bind_address.as_str()
            ),
            (":8080", ":8081")
        );
        assert!(r.leader_elect);
        assert_eq!(
            (r.lease_duration, r.renew_deadline, r.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        assert!(r.watch_namespaces.is_empty());
        // Plain metrics unless asked (the chart asks).
        assert!(!r.metrics_secure);
        assert_eq!(r.metrics_cert_source(), CertSource::SelfSigned);
        for (flags, secure) in [
            (&["x", "--metrics-secure"][..], true),
            (&["x", "--metrics-secure=true"][..], true),
            (&["x", "--metrics-secure=false"][..], false),
        ] {
            let cli = <Cli as clap::Parser>::try_parse_from(flags).expect("flags parse");
            assert_eq!(cli.runtime.metrics_secure, secure, "{flags:?}");
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["x", "--metrics-cert-dir=/certs"])
            .expect("flags parse");
        assert_eq!(
            cli.runtime.metrics_cert_source(),
            CertSource::Dir {
                dir: "/certs".into(),
                cert: "tls.crt".into(),
                key: "tls.key".into()
            }
        );
        let cli = <Cli as clap::Parser>::try_parse_from([
            "x",
            "--watch-namespace",
            "a",
            "--watch-namespace=b,c",
            "--leader-elect=false",
        ])
        .expect("flags parse");
        assert_eq!(cli.runtime.watch_namespaces, ["a", "b", "c"]);
        assert!(!cli.runtime.leader_elect);
    }
}
