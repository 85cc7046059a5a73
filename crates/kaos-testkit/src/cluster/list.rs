//! Paginated lists: where a page starts (its continue token), which objects it holds and the
//! token that leads to the next page.

use serde_json::Value;

use super::ListOptions;
use super::state::{State, with_type};
use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceType;

/// One page of a list.
pub(super) struct Page {
    /// The matching objects, in name order, with their type.
    pub(super) items: Vec<Value>,
    /// How many more objects match after this page.
    pub(super) remaining: usize,
    /// The key of the last object served, where the next page starts after.
    pub(super) last: Option<(String, String)>,
}

impl State {
    /// The version a list reports and the key its page starts after, from its continue token.
    pub(super) fn list_start(
        &self,
        continue_token: Option<&str>,
    ) -> ApiResult<(u64, Option<(String, String)>)> {
        let continued = match continue_token {
            Some(token) if !token.is_empty() => Some(decode_continue(token)?),
            _ => None,
        };
        // Every page of one list reports the first page's version, as kube-apiserver's
        // snapshot does: a watch started from the last page then replays what changed while
        // the pages were read instead of missing it.
        let list_version = match &continued {
            Some((version, _)) if *version < self.compacted => {
                return Err(ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
            Some((version, _)) => *version,
            None => self.resource_version,
        };
        Ok((list_version, continued.map(|(_, after)| after)))
    }

    /// The objects of `rt` (`namespace` empty: all namespaces) after `start_after` that match
    /// the selectors, up to the limit.
    pub(super) fn page(
        &self,
        rt: &ResourceType,
        namespace: &str,
        options: &ListOptions,
        start_after: Option<&(String, String)>,
    ) -> Page {
        let mut items = Vec::new();
        let mut remaining = 0usize;
        let mut last = None;
        if let Some(objects) = self.objects.get(&rt.storage_key()) {
            for ((ns, name), stored) in objects {
                if !namespace.is_empty() && ns != namespace {
                    continue;
                }
                if start_after.is_some_and(|after| (ns, name) <= (&after.0, &after.1)) {
                    continue;
                }
                if !options.labels.matches(&stored.object)
                    || !options.fields.matches(&stored.object)
                {
                    continue;
                }
                if options
                    .limit
                    .is_some_and(|limit| limit > 0 && items.len() >= limit)
                {
                    remaining += 1;
                    continue;
                }
                items.push(with_type(rt, stored.object.clone()));
                last = Some((ns.clone(), name.clone()));
            }
        }
        Page {
            items,
            remaining,
            last,
        }
    }
}

/// A continue token: the list's version and the last key served.
pub(super) fn encode_continue(version: u64, namespace: &str, name: &str) -> String {
    format!("{version}/{namespace}/{name}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_continue(token: &str) -> ApiResult<(u64, (String, String))> {
    let invalid = || ApiError::bad_request("continue key is not valid");
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<_>>()
        .ok_or_else(invalid)?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let (version, key) = text.split_once('/').ok_or_else(invalid)?;
    let version = version.parse().map_err(|_| invalid())?;
    let (ns, name) = key.split_once('/').ok_or_else(invalid)?;
    Ok((version, (ns.to_string(), name.to_string())))
}
