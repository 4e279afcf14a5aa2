//! The CRI list filters as applied to Docker's listings (upstream `filterSandboxes` /
//! `ListContainers`' filter code): an id filter matches a full id or a prefix of it, a label
//! selector is equality on every pair, and a listed container's Docker labels are read with
//! [`summary_label`]. Pure functions; imports nothing of the crate.

use std::collections::HashMap;

use bollard::models::ContainerSummary;

/// The Docker label value `key` of a listed container.
pub fn summary_label<'a>(c: &'a ContainerSummary, key: &str) -> Option<&'a str> {
    c.labels.as_ref()?.get(key).map(String::as_str)
}

/// Does a listed container match a CRI id filter (the full id or a prefix of it)?
pub fn id_matches(c: &ContainerSummary, filter: &str) -> bool {
    filter.is_empty() || c.id.as_deref().is_some_and(|id| id.starts_with(filter))
}

/// Can a listed container match CRI label selector `selector`? Its CRI labels are a subset of
/// its Docker labels with the same values, so one whose Docker labels miss a pair cannot: the
/// list RPCs skip it before extracting its labels.
pub fn may_match_selector(c: &ContainerSummary, selector: &HashMap<String, String>) -> bool {
    selector.is_empty()
        || c.labels
            .as_ref()
            .is_some_and(|l| matches_selector(l, selector))
}

/// Does `labels` match every `key=value` of `selector` (CRI label selectors are equality only)?
pub fn matches_selector(
    labels: &HashMap<String, String>,
    selector: &HashMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_need_every_pair() {
        let labels: HashMap<String, String> =
            [("a".into(), "1".into()), ("b".into(), "2".into())].into();
        assert!(matches_selector(&labels, &HashMap::new()));
        assert!(matches_selector(
            &labels,
            &[("a".into(), "1".into())].into()
        ));
        assert!(!matches_selector(
            &labels,
            &[("a".into(), "2".into())].into()
        ));
        assert!(!matches_selector(
            &labels,
            &[("c".into(), "1".into())].into()
        ));
    }

    #[test]
    fn a_container_without_a_selector_pair_among_its_docker_labels_cannot_match() {
        let c = ContainerSummary {
            labels: Some([("k".to_string(), "v".to_string())].into()),
            ..Default::default()
        };
        assert!(may_match_selector(&c, &HashMap::new()));
        assert!(may_match_selector(&c, &[("k".into(), "v".into())].into()));
        assert!(!may_match_selector(&c, &[("k".into(), "w".into())].into()));
        let bare = ContainerSummary::default();
        assert!(may_match_selector(&bare, &HashMap::new()));
        assert!(!may_match_selector(
            &bare,
            &[("k".into(), "v".into())].into()
        ));
    }

    #[test]
    fn ids_match_in_full_or_by_prefix() {
        let c = ContainerSummary {
            id: Some("abcdef".into()),
            labels: Some([("k".to_string(), "v".to_string())].into()),
            ..Default::default()
        };
        assert!(id_matches(&c, ""));
        assert!(id_matches(&c, "abc"));
        assert!(id_matches(&c, "abcdef"));
        assert!(!id_matches(&c, "abd"));
        assert!(!id_matches(&ContainerSummary::default(), "a"));
        assert_eq!(summary_label(&c, "k"), Some("v"));
        assert_eq!(summary_label(&c, "x"), None);
    }
}
