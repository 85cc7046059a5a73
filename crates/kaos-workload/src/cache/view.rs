//! Views: the types caches keep instead of a kind's full object (`DeploymentView`, `MetaView`,
//! the agent controller's `CachedAgent`). A view is listed and watched where its kind is served,
//! and its metadata is a [`SlimMeta`](crate::cache::packed::SlimMeta) in `self.metadata`.

/// Implements `kube::Resource` (served where `$kind` is) and
/// [`Labelled`](crate::cache::packed::Labelled) for a view whose `metadata` field is a `SlimMeta`:
/// `served_as!([generics] View, Kind)`.
#[macro_export]
macro_rules! served_as {
    ([$($generics:tt)*] $view:ty, $kind:ty) => {
        impl<$($generics)*> ::kube::Resource for $view {
            type DynamicType = ();
            type Scope = <$kind as ::kube::Resource>::Scope;

            fn kind(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::version(dt)
            }
            fn plural(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata.meta
            }
            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata.meta
            }
        }

        $crate::labelled_by_metadata!([$($generics)*] $view);
    };
}

/// Implements [`Labelled`](crate::cache::packed::Labelled) for a type whose `metadata` field does
/// (an `ObjectMeta` or a `SlimMeta`).
#[macro_export]
macro_rules! labelled_by_metadata {
    ([$($generics:tt)*] $type:ty) => {
        impl<$($generics)*> $crate::cache::packed::Labelled for $type {
            fn label(&self, key: &str) -> Option<&str> {
                $crate::cache::packed::Labelled::label(&self.metadata, key)
            }
            fn annotation(&self, key: &str) -> Option<&str> {
                $crate::cache::packed::Labelled::annotation(&self.metadata, key)
            }
        }
    };
}
