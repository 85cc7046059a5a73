//! The table of child kinds: each row is a type converge can write (its [`ChildResource`] impl
//! says how it is cached and compared), the kind's name as users see it, and the field that
//! holds its cache in [`Children`] and says in [`ChildKinds`] whether a controller has it.
//! A new kind of child is its `ChildResource` impl and one row here.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::DynamicObject;

use super::{Applied, ChildResource, Parent};
use crate::cache::child_store::ChildStore;
use crate::converge::expectations::Expectations;
use crate::desired::{Child, ChildKind, ChildType, Sealed};
use kaos_runtime::error::ReconcileError;

/// A row of the table: where [`Children`] keeps the cache of this kind.
pub trait ChildRow: ChildResource {
    fn store(children: &Children) -> Option<&ChildStore<Self::Cached>>;
}

/// Opens the cache of one kind of child (the wiring's: a watch of it that triggers its owner).
pub trait OpenCache {
    fn open<C: ChildRow>(&mut self) -> ChildStore<C::Cached>;
}

macro_rules! child_kinds {
    ($($type:ty => $name:literal, $field:ident;)*) => {
        $(
            impl Sealed for $type {}

            impl ChildType for $type {
                const KIND: ChildKind =
                    ChildKind::new($name, <$type as ChildResource>::STATUS_IS_NOISE);
            }

            impl ChildRow for $type {
                fn store(children: &Children) -> Option<&ChildStore<Self::Cached>> {
                    children.$field.as_ref()
                }
            }
        )*

        /// The slim caches of a controller's children (None for a kind it has none of), and
        /// the memory of its own writes.
        #[derive(Clone, Default)]
        pub struct Children {
            $(pub $field: Option<ChildStore<<$type as ChildResource>::Cached>>,)*
            pub expectations: Arc<Expectations>,
        }

        /// Which kinds of child a controller has, so watches and caches.
        #[derive(Clone, Copy, Debug, Default)]
        pub struct ChildKinds {
            $(pub $field: bool,)*
        }

        impl Children {
            /// The caches of `kinds`, each opened by `caches`.
            pub fn open(
                kinds: ChildKinds,
                expectations: Arc<Expectations>,
                caches: &mut impl OpenCache,
            ) -> Self {
                Self {
                    $($field: kinds.$field.then(|| caches.open::<$type>()),)*
                    expectations,
                }
            }

            /// Applies `child` as its type's row says; an autoscaler's replicas are carried
            /// (see [`ChildResource::carry_live`]).
            pub(super) async fn apply_child(
                &self,
                parent: &Parent<'_>,
                child: Child,
                autoscaled: Option<i32>,
            ) -> Result<Applied, ReconcileError> {
                $(
                    let child = match child.take::<$type>() {
                        Ok(object) => {
                            return self
                                .apply_with(parent, object, |o, live| o.carry_live(live, autoscaled))
                                .await;
                        }
                        Err(child) => child,
                    };
                )*
                unreachable!("{} is sealed to this table's rows", child.kind().as_str())
            }

            /// Deletes the child `name` of `kind` if this parent controls it.
            pub(super) async fn delete_child(
                &self,
                parent: &Parent<'_>,
                kind: ChildKind,
                name: &str,
            ) -> Result<bool, ReconcileError> {
                $(
                    if kind == <$type as ChildType>::KIND {
                        return self.delete::<$type>(parent, name).await;
                    }
                )*
                unreachable!("{} is made by this table only", kind.as_str())
            }
        }
    };
}

child_kinds! {
    Deployment => "Deployment", deployments;
    Service => "Service", services;
    ConfigMap => "ConfigMap", config_maps;
    Secret => "Secret", secrets;
    DynamicObject => "HTTPRoute", routes;
    PersistentVolumeClaim => "PersistentVolumeClaim", claims;
    PodDisruptionBudget => "PodDisruptionBudget", disruption_budgets;
    HorizontalPodAutoscaler => "HorizontalPodAutoscaler", autoscalers;
    NetworkPolicy => "NetworkPolicy", network_policies;
}
