//! What every family of a controller process is built with, whichever registry it joins:
//! histograms with fixed buckets, and label sets that exist from startup.

use std::hash::Hash;

use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::Histogram;

/// Makes a family's histograms with these buckets (seconds), for
/// `Family::new_with_constructor`.
#[derive(Clone, Copy, Debug)]
pub struct Buckets(pub &'static [f64]);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// `family` with each of `label_sets` created at 0, ready to register: a family exports only
/// the label sets it holds, and dashboards and alerts need every series from the first scrape.
pub fn starting_at_zero<S, M, C>(
    family: &Family<S, M, C>,
    label_sets: impl IntoIterator<Item = S>,
) -> Family<S, M, C>
where
    S: Clone + Hash + Eq,
    C: MetricConstructor<M> + Clone,
{
    for labels in label_sets {
        drop(family.get_or_create(&labels));
    }
    family.clone()
}
