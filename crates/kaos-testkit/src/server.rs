//! Serving the API over plain HTTP on loopback, with a kubeconfig for kubectl and kube-rs.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::auth::Identity;
use crate::http::ApiServer;

/// Options of a served test cluster.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    /// Settle Deployments' status this long after each change (None: no simulator).
    pub simulate_deployments: Option<Duration>,
    /// Require bearer tokens and enforce RBAC.
    pub rbac: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            simulate_deployments: Some(Duration::from_millis(200)),
            rbac: false,
        }
    }
}

/// A running, served test cluster. Dropping it stops serving.
pub struct TestServer {
    pub api: ApiServer,
    pub addr: SocketAddr,
    /// The token of the admin identity (`system:masters`), used in the admin kubeconfig.
    pub admin_token: String,
    tasks: Vec<JoinHandle<()>>,
}

impl TestServer {
    pub async fn start(api: ApiServer, options: &ServeOptions) -> std::io::Result<Self> {
        let listener = TcpListener::bind(options.listen).await?;
        let addr = listener.local_addr()?;
        let admin_token = api.auth.mint_token(Identity::admin());
        api.auth.set_enabled(options.rbac);
        let mut tasks = Vec::new();
        if let Some(delay) = options.simulate_deployments {
            tasks.push(tokio::spawn(crate::simulator::run(
                api.cluster.clone(),
                delay,
            )));
        }
        let router = api.clone().router();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!("kaos-testkit stopped serving: {e}");
            }
        }));
        Ok(Self {
            api,
            addr,
            admin_token,
            tasks,
        })
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for this server authenticating with `token` (the admin token if None).
    pub fn kubeconfig(&self, token: Option<&str>) -> String {
        let token = token.unwrap_or(&self.admin_token);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kaos-testkit\n  cluster:\n    server: {url}\n\
             users:\n- name: kaos-testkit\n  user:\n    token: {token}\n\
             contexts:\n- name: kaos-testkit\n  context:\n    cluster: kaos-testkit\n    user: kaos-testkit\n    namespace: default\n\
             current-context: kaos-testkit\n",
            url = self.url()
        )
    }

    pub fn write_kubeconfig(&self, path: &Path, token: Option<&str>) -> std::io::Result<()> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, self.kubeconfig(token))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
