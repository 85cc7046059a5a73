//! The authz-controller's flags and environment: the shared ones, then KAOS's security plane
//! (the `SECURITY_*` and `AUTHZ_POLICY_*` settings of KAOS's operator, same names and meaning),
//! every one unset by default: then nothing is projected and grants report `AuthorizationDisabled`.

/// The binary's flags: every controller process's, then [`Security`].
pub type Args = kaos_runtime::binary::Args<Security>;

/// Who writes the policy data (`policyDataSource`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataSource {
    /// The controller projects `data.json` from the cluster (also what empty means).
    #[default]
    Automated,
    /// An administrator writes `data.json`; grants are not projected.
    Manual,
}

/// How agents get their tokens (`agentAuth.identity.provider`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdentityProvider {
    /// A projected ServiceAccount token of `kaos-agent-<name>` (the policy data maps each agent
    /// to its subject).
    #[default]
    #[value(name = "serviceaccount")]
    ServiceAccount,
    /// OIDC dynamic client registration (token subjects come from the broker; not mapped here).
    Oidc,
    /// The Agentic Identity Broker (as `oidc`).
    Aib,
}

/// KAOS's security plane, as this controller reads it.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct Security {
    /// The ext_authz backend (`host:port`); set, gateway authorization is on and grants can be
    /// enforced.
    #[arg(long, env = "SECURITY_AGENT_AUTH_EXT_AUTHZ_URL", default_value = "")]
    pub ext_authz_url: String,
    /// Whether the chart deploys the PDP (informational: the URL above decides).
    #[arg(long, env = "SECURITY_PDP_ENABLED", default_value_t = false)]
    pub pdp_enabled: bool,
    /// How agents get their tokens.
    #[arg(
        long,
        env = "SECURITY_AGENT_AUTH_IDENTITY_PROVIDER",
        value_enum,
        default_value = "serviceaccount"
    )]
    pub identity_provider: IdentityProvider,
    /// Who writes `data.json` (empty: automated).
    #[arg(long, env = "SECURITY_AUTHORIZATION_POLICY_DATA_SOURCE", value_parser = parse_data_source, default_value = "")]
    pub policy_data_source: DataSource,
    /// With manual data: the controller still writes `policy.rego`.
    #[arg(
        long,
        env = "SECURITY_AUTHORIZATION_POLICY_REGO_OVERRIDE",
        default_value_t = false
    )]
    pub policy_rego_override: bool,
    /// The policy ConfigMap's name (empty: no projection).
    #[arg(long, env = "AUTHZ_POLICY_CONFIGMAP_NAME", default_value = "")]
    pub policy_configmap_name: String,
    /// The policy ConfigMap's namespace (empty: no projection).
    #[arg(long, env = "AUTHZ_POLICY_CONFIGMAP_NAMESPACE", default_value = "")]
    pub policy_configmap_namespace: String,
    /// The issuer of users' tokens (empty: no user plane; grants report
    /// `NoUserIdentityProvider`).
    #[arg(long, env = "SECURITY_USER_AUTH_ISSUER", default_value = "")]
    pub user_issuer: String,
    /// The audience of users' tokens.
    #[arg(long, env = "SECURITY_USER_AUTH_AUDIENCE", default_value = "")]
    pub user_audience: String,
    /// Where the users' signing keys are read (empty: the issuer's
    /// `/protocol/openid-connect/certs`, Keycloak's path, as KAOS derives it).
    #[arg(long, env = "SECURITY_USER_AUTH_JWKS_URI", default_value = "")]
    pub user_jwks_uri: String,
}

fn parse_data_source(value: &str) -> Result<DataSource, String> {
    match value.trim() {
        "" | "automated" => Ok(DataSource::Automated),
        "manual" => Ok(DataSource::Manual),
        other => Err(format!("{other:?}: expected automated or manual")),
    }
}

impl Security {
    /// Gateway authorization is on (KAOS's `IsOperational`).
    pub fn authorization_on(&self) -> bool {
        !self.ext_authz_url.trim().is_empty()
    }

    /// Users' tokens can be verified (KAOS's `UserPlaneEnabled`).
    pub fn user_plane(&self) -> bool {
        !self.user_issuer.trim().is_empty()
    }

    /// The policy ConfigMap, when one is named.
    pub fn policy_configmap(&self) -> Option<(&str, &str)> {
        let (name, namespace) = (
            self.policy_configmap_name.trim(),
            self.policy_configmap_namespace.trim(),
        );
        (!name.is_empty() && !namespace.is_empty()).then_some((namespace, name))
    }

    /// The controller writes the ConfigMap: `policy.rego` always, `data.json` when automated.
    pub fn writes_policy(&self) -> bool {
        self.policy_configmap().is_some()
            && (self.policy_data_source == DataSource::Automated || self.policy_rego_override)
    }

    /// The controller writes `data.json` (KAOS's "automated policy projection").
    pub fn projects_data(&self) -> bool {
        self.policy_configmap().is_some() && self.policy_data_source == DataSource::Automated
    }

    /// Grants go into the data: authorization, the user plane and automated projection are on.
    pub fn projects_grants(&self) -> bool {
        self.authorization_on() && self.user_plane() && self.projects_data()
    }

    /// Where the users' keys are read.
    pub fn user_jwks_uri(&self) -> Option<String> {
        let explicit = self.user_jwks_uri.trim();
        if !explicit.is_empty() {
            return Some(explicit.to_string());
        }
        let issuer = self.user_issuer.trim().trim_end_matches('/');
        (!issuer.is_empty()).then(|| format!("{issuer}/protocol/openid-connect/certs"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn nothing_is_on_by_default() -> Result<(), clap::Error> {
        let args = Args::try_parse_from(["authz-controller"])?;
        assert_eq!(args.settings, Security::default());
        assert!(!args.settings.authorization_on());
        assert!(!args.settings.writes_policy());
        assert!(!args.settings.projects_grants());
        Ok(())
    }

    #[test]
    fn kaos_settings_turn_projection_on() -> Result<(), clap::Error> {
        let args = Args::try_parse_from([
            "authz-controller",
            "--ext-authz-url=kaos-pdp.kaos-system.svc:9191",
            "--policy-configmap-name=kaos-authz-policy",
            "--policy-configmap-namespace=kaos-system",
            "--user-issuer=http://keycloak/realms/kaos/",
            "--user-audience=kaos",
        ])?;
        let security = args.settings;
        assert!(security.projects_grants());
        assert_eq!(
            security.user_jwks_uri().as_deref(),
            Some("http://keycloak/realms/kaos/protocol/openid-connect/certs")
        );
        let manual = Args::try_parse_from([
            "authz-controller",
            "--policy-configmap-name=p",
            "--policy-configmap-namespace=n",
            "--policy-data-source=manual",
        ])?
        .settings;
        assert!(!manual.writes_policy() && !manual.projects_data());
        assert!(
            Args::try_parse_from(["authz-controller", "--policy-data-source=external"]).is_err()
        );
        Ok(())
    }
}
