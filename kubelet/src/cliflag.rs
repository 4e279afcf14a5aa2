//! Flag values that are maps (upstream `k8s.io/component-base/cli/flag` `MapStringString`,
//! `MapStringBool`, `ColonSeparatedMultimapStringString`): `k1=v1,k2=v2` with a separator of
//! the flag's choosing. One parser for every such flag (`--feature-gates`, `--node-labels`,
//! `--eviction-*`, `--manifest-url-header`). Vocabulary layer: imports nothing of the crate.

/// The `key<sep>value` pairs of a comma-separated list, trimmed, empty items skipped, keys kept
/// in order; `Err` names the first item without `sep`. Values split at the first `sep`.
pub fn map_string_string(s: &str, sep: char) -> Result<Vec<(String, String)>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.split_once(sep)
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| p.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_split_at_the_first_separator() {
        assert_eq!(
            map_string_string(" a=1, b = x=y ,,", '='),
            Ok(vec![
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "x=y".to_string())
            ])
        );
        assert_eq!(
            map_string_string("memory.available<100Mi", '<'),
            Ok(vec![("memory.available".to_string(), "100Mi".to_string())])
        );
        assert_eq!(map_string_string("a=1,oops", '='), Err("oops".to_string()));
        assert_eq!(map_string_string("", '='), Ok(vec![]));
    }
}
