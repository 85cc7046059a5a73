//! The `main` of every controller binary, written once: the flags (the process's, then the
//! controller's own), the chart's uninstall hook when the first argument asks for it
//! ([`crate::uninstall`]), else the controller's life ([`crate::run`]).
//!
//! ```ignore
//! Binary::new(ID, "Reconciles kaos.tools Agents ...")
//!     .releases_finalizer::<Agent>(FINALIZER)
//!     .run(controller::run)
//!     .await
//! ```

use std::fmt::Debug;
use std::future::Future;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::de::DeserializeOwned;

use crate::runner::{ControllerId, Runtime};
use crate::settings::RuntimeArgs;
use crate::uninstall;

/// The flags of a controller binary: every process's, then the controller's own `settings`.
#[derive(clap::Parser, Debug, Clone)]
#[command(version)]
pub struct Args<S: clap::Args> {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub settings: S,
}

/// The settings of a controller that takes no flags of its own.
#[derive(clap::Args, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoSettings {}

/// The uninstall hook's run, when the first argument asks for it.
type Release = Box<dyn FnOnce() -> LocalBoxFuture<'static, Option<ExitCode>>>;

/// A controller binary: which controller, what its `--help` says, and the finalizer it
/// releases on uninstall (none for kinds that carry no finalizer).
pub struct Binary {
    id: ControllerId,
    about: &'static str,
    release: Option<Release>,
}

impl Binary {
    pub fn new(id: ControllerId, about: &'static str) -> Self {
        Self {
            id,
            about,
            release: None,
        }
    }

    /// The binary's `release-finalizers` mode, the chart's pre-delete hook: stops the
    /// controller and removes `finalizer` from every `K` (`docs/install.md`).
    pub fn releases_finalizer<K>(mut self, finalizer: &'static str) -> Self
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Debug
            + 'static,
    {
        let id = self.id;
        self.release = Some(Box::new(move || {
            uninstall::main_if_asked::<K>(id, finalizer).boxed_local()
        }));
        self
    }

    /// The binary's name, e.g. `agent-controller`.
    pub fn name(&self) -> String {
        format!("{}-controller", self.id.name)
    }

    /// The command line `main` parses: its name, what it does, and its uninstall mode.
    pub fn command<S: clap::Args>(&self) -> clap::Command {
        let command = Args::<S>::command().name(self.name()).about(self.about);
        match self.release {
            Some(_) => command.after_help(format!(
                "`{} {}` stops the controller and removes its finalizer from every resource \
                 (the chart's uninstall hook; see its --help)",
                self.name(),
                uninstall::COMMAND
            )),
            None => command,
        }
    }

    /// Runs the uninstall mode if asked, else parses the flags and runs `controller` as this
    /// process's controller until shutdown; returns the process's exit code.
    pub async fn run<S, F, Fut>(self, controller: F) -> ExitCode
    where
        S: clap::Args,
        F: FnOnce(Runtime, S) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let command = self.command::<S>();
        if let Some(release) = self.release
            && let Some(code) = release().await
        {
            return code;
        }
        let Args { runtime, settings } = command
            .try_get_matches()
            .and_then(|matches| Args::<S>::from_arg_matches(&matches))
            .unwrap_or_else(|error| error.exit());
        crate::run(runtime, self.id, |runtime| controller(runtime, settings)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: ControllerId = ControllerId {
        name: "agent",
        lease: "kaos-agent-controller",
        kinds: &[("Agent", &["Pending", "Ready"])],
    };

    #[derive(clap::Args, Debug, Clone, PartialEq)]
    struct Settings {
        #[arg(long, env = "DEFAULT_AGENT_IMAGE")]
        default_agent_image: Option<String>,
    }

    #[derive(Clone, Debug, serde::Deserialize)]
    struct Anything {
        metadata: kube::api::ObjectMeta,
    }

    impl Resource for Anything {
        type DynamicType = ();
        type Scope = NamespaceResourceScope;
        fn kind(_: &()) -> std::borrow::Cow<'_, str> {
            "Agent".into()
        }
        fn group(_: &()) -> std::borrow::Cow<'_, str> {
            "kaos.tools".into()
        }
        fn version(_: &()) -> std::borrow::Cow<'_, str> {
            "v1alpha1".into()
        }
        fn plural(_: &()) -> std::borrow::Cow<'_, str> {
            "agents".into()
        }
        fn meta(&self) -> &kube::api::ObjectMeta {
            &self.metadata
        }
        fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
            &mut self.metadata
        }
    }

    #[test]
    fn the_command_is_named_for_the_controller_and_parses_both_halves_of_the_flags() {
        let binary = Binary::new(ID, "Reconciles Agents");
        let mut command = binary.command::<Settings>();
        let help = command.render_help().to_string();
        assert!(help.starts_with("Reconciles Agents"), "{help}");
        assert!(help.contains("Usage: agent-controller"), "{help}");
        assert!(
            !help.contains(uninstall::COMMAND),
            "no finalizer, no uninstall mode: {help}"
        );
        let matches = command
            .try_get_matches_from([
                "agent-controller",
                "--leader-elect=false",
                "--default-agent-image=agent:1",
            ])
            .expect("flags parse");
        let args = Args::<Settings>::from_arg_matches(&matches).expect("args");
        assert!(!args.runtime.leader_elect);
        assert_eq!(
            args.settings.default_agent_image.as_deref(),
            Some("agent:1")
        );
        let error = binary
            .command::<Settings>()
            .try_get_matches_from(["agent-controller", "--no-such-flag"])
            .expect_err("an unknown flag is refused");
        assert_eq!(error.kind(), clap::error::ErrorKind::UnknownArgument);
    }

    #[test]
    fn a_finalizer_gives_the_binary_its_uninstall_mode_in_the_help() {
        let binary = Binary::new(ID, "Reconciles Agents")
            .releases_finalizer::<Anything>("kaos.tools/agent-finalizer");
        let help = binary.command::<NoSettings>().render_help().to_string();
        assert!(
            help.contains("`agent-controller release-finalizers` stops the controller"),
            "{help}"
        );
    }
}
