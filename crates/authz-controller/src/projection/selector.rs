//! Label selectors of AccessGrants, matched as Kubernetes matches them (`matchLabels` and
//! `matchExpressions`, ANDed; an empty selector matches everything). Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether the labels `label` looks up match `selector`; an operator Kubernetes does not know
/// matches nothing (the API server would refuse such a selector; a grant can still carry one,
/// and KAOS skips it).
pub fn matches<'a>(selector: &LabelSelector, label: impl Fn(&str) -> Option<&'a str>) -> bool {
    let by_label = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| label(key) == Some(value.as_str()));
    by_label
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = label(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
                "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use std::collections::BTreeMap;

    fn labelled(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
        matches(selector, |k| labels.get(k).map(String::as_str))
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn match_labels_and_expressions_are_anded() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("team", "research")])),
            match_expressions: Some(vec![
                expression("tier", "In", &["gold", "silver"]),
                expression("retired", "DoesNotExist", &[]),
            ]),
        };
        assert!(labelled(
            &selector,
            &labels(&[("team", "research"), ("tier", "gold")])
        ));
        assert!(!labelled(
            &selector,
            &labels(&[("team", "research"), ("tier", "bronze")])
        ));
        assert!(!labelled(
            &selector,
            &labels(&[("team", "research"), ("tier", "gold"), ("retired", "yes")])
        ));
        assert!(!labelled(&selector, &labels(&[("tier", "gold")])));
    }

    #[test]
    fn not_in_matches_a_missing_label_and_an_unknown_operator_nothing() {
        let not_in = LabelSelector {
            match_expressions: Some(vec![expression("env", "NotIn", &["prod"])]),
            ..Default::default()
        };
        assert!(labelled(&not_in, &labels(&[])));
        assert!(!labelled(&not_in, &labels(&[("env", "prod")])));
        let unknown = LabelSelector {
            match_expressions: Some(vec![expression("env", "Like", &["prod"])]),
            ..Default::default()
        };
        assert!(!labelled(&unknown, &labels(&[("env", "prod")])));
        assert!(labelled(
            &LabelSelector::default(),
            &labels(&[("any", "x")])
        ));
    }
}
