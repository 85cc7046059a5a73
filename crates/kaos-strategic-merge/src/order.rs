//! `$setElementOrder/<list>`: the order kubectl asks for, applied as apimachinery's
//! `normalizeElementOrder` applies it. The items the directive names come in its order; the
//! others (only the live object has them) keep their live order and are interleaved with the
//! first where the live list had them before an item the directive names.

use serde_json::Value;

/// What identifies an item: its merge key's value, or the item itself in a list of scalars.
fn identity<'v>(item: &'v Value, key: Option<&str>) -> Option<&'v Value> {
    match key {
        Some(key) => item.get(key),
        None => Some(item),
    }
}

/// Where `item` stands in `list`, by identity.
fn position(list: &[Value], item: &Value, key: Option<&str>) -> Option<usize> {
    let id = identity(item, key)?;
    list.iter().position(|i| identity(i, key) == Some(id))
}

/// `merged` (the list after the merge) in the order `order` sets, `live` being the list before
/// the patch.
pub fn set_element_order(
    merged: Vec<Value>,
    order: &[Value],
    live: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let (mut named, mut server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|item| position(order, item, key).is_some());
    named.sort_by_key(|item| position(order, item, key));
    server_only.sort_by_key(|item| position(live, item, key).unwrap_or(usize::MAX));
    interleave(server_only, named, live, key)
}

/// apimachinery's `mergeSortedSlice`: both lists keep their order; an item of `left` goes first
/// when the live list had it before the next item of `right`.
fn interleave(
    left: Vec<Value>,
    right: Vec<Value>,
    live: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => return out,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => match (position(live, l, key), position(live, r, key)) {
                (Some(l), Some(r)) => l < r,
                _ => false,
            },
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(items: &[Value]) -> Vec<&str> {
        items.iter().filter_map(|i| i["name"].as_str()).collect()
    }

    #[test]
    fn named_items_follow_the_directive_and_the_others_keep_their_live_place() {
        let live: Vec<Value> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| json!({"name": n}))
            .collect();
        // The directive names d, b, a (c is the server's own): c stood before d, so it still does.
        let order = [
            json!({"name": "d"}),
            json!({"name": "b"}),
            json!({"name": "a"}),
        ];
        let ordered = set_element_order(live.clone(), &order, &live, Some("name"));
        assert_eq!(names(&ordered), ["c", "d", "b", "a"]);
        // A server-only item before every named one in the live list stays first.
        let order = [json!({"name": "d"}), json!({"name": "c"})];
        let ordered = set_element_order(live.clone(), &order, &live, Some("name"));
        assert_eq!(names(&ordered), ["a", "b", "d", "c"]);
    }

    #[test]
    fn scalars_are_their_own_identity() {
        let live = [json!("x"), json!("y")];
        let merged = vec![json!("x"), json!("y"), json!("z")];
        let order = [json!("z"), json!("x")];
        let ordered = set_element_order(merged, &order, &live, None);
        assert_eq!(ordered, [json!("z"), json!("x"), json!("y")]);
    }
}
