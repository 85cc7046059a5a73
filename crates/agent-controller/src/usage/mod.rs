//! The usage of budgeted agents (docs/budgets.md, "Usage in the status"): read from their
//! ModelAPIs' LiteLLM proxies by the [`collector::Collector`] in the leader, kept in its
//! [`book::Book`], shown in `Agent.status.usage` and the `BudgetExceeded` and `UsageReported`
//! conditions (written by the reconcile, from the book: the controller is the only writer of an
//! Agent's status) and exported as metrics.
//!
//! IO: `collector` (the rounds), `scrape` (HTTP). Pure: the rest, tested by calling it.

pub mod book;
pub mod collector;
pub mod counters;
pub mod endpoints;
pub mod exposition;
pub mod ledger;
pub mod merge;
pub mod metrics;
pub mod overrides;
pub mod publish;
pub mod scrape;
pub mod settings;
pub mod verdict;
pub mod window;

use std::sync::Arc;

use crate::usage::publish::Published;

/// What an agent's status is to show of its usage.
#[derive(Clone, Debug, PartialEq)]
pub enum Shown {
    /// No budget applies to it: no usage, no usage condition.
    Unbudgeted,
    /// Budgeted, and the collector has not decided yet (it has not read the proxy since this
    /// process leads): what the status shows stays.
    Carried,
    Published(Arc<Published>),
}

impl Shown {
    /// What the agent `uid`, budgeted or not, shows, from the collector's book.
    pub fn of(book: &book::Book, uid: Option<&str>, budgeted: bool) -> Self {
        if !budgeted {
            return Shown::Unbudgeted;
        }
        match uid.and_then(|uid| book.shown(uid)) {
            Some(published) => Shown::Published(published),
            None => Shown::Carried,
        }
    }
}
