//! A served test cluster that enforces RBAC from the start, for tests of callers that
//! authenticate with tokens the test mints (`api.auth.mint_token`).

use crate::{ApiServer, Cluster, ServeOptions, TestServer};

impl TestServer {
    /// Serves an empty cluster that requires bearer tokens and enforces RBAC, holding the Roles
    /// and bindings of the YAML stream `rbac`. No Deployment simulator: nothing here runs pods.
    pub async fn start_with_rbac(rbac: &str) -> anyhow::Result<Self> {
        let options = ServeOptions {
            rbac: true,
            simulate_deployments: None,
            ..ServeOptions::default()
        };
        let server = Self::start(ApiServer::new(Cluster::default()), &options).await?;
        crate::manifests::apply_yaml(&server.api.cluster, rbac)?;
        Ok(server)
    }
}
