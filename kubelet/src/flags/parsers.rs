//! Parsers of the flag values that are small languages of their own: `--manifest-url-header`
//! (upstream `ColonSeparatedMultimapStringString`), `--feature-gates`, `--node-labels` and
//! `--register-with-taints` (upstream `ParseTaints`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;

use crate::cliflag::map_string_string;
use crate::kubeletconfig::{ConfigError, features};

/// Parse `--manifest-url-header` values like upstream `ColonSeparatedMultimapStringString`:
/// each value is a comma-separated list of `key:value` pairs; values split at the first ':'.
pub fn parse_header_pairs(values: &[String]) -> Result<BTreeMap<String, Vec<String>>, ConfigError> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for v in values {
        let pairs = map_string_string(v, ':').map_err(|pair| ConfigError::Flag {
            flag: "manifest-url-header",
            reason: format!("malformed pair {pair:?}, expect string:string"),
        })?;
        for (k, val) in pairs {
            if k.is_empty() {
                return Err(ConfigError::Flag {
                    flag: "manifest-url-header",
                    reason: format!("empty key in {:?}", format!(":{val}")),
                });
            }
            out.entry(k).or_default().push(val);
        }
    }
    Ok(out)
}

/// Parse `--feature-gates`: comma-separated `Name=bool` pairs, each name one a 1.26 kubelet
/// recognizes (upstream: "unrecognized feature gate: Foo").
pub fn parse_feature_gates(s: &str) -> Result<BTreeMap<String, bool>, ConfigError> {
    let bad = |pair: &str| ConfigError::Flag {
        flag: "feature-gates",
        reason: format!("malformed pair {pair:?}, expect Name=true|false"),
    };
    map_string_string(s, '=')
        .map_err(|p| bad(&p))?
        .into_iter()
        .map(|(k, v)| {
            if !features::is_known(&k) {
                return Err(ConfigError::Flag {
                    flag: "feature-gates",
                    reason: features::unrecognized(&k),
                });
            }
            match v.parse::<bool>() {
                Ok(b) => Ok((k, b)),
                Err(_) => Err(bad(&format!("{k}={v}"))),
            }
        })
        .collect()
}

/// Parse `--node-labels`: comma-separated `key=value` pairs.
pub fn parse_node_labels(s: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    map_string_string(s, '=')
        .map(|v| v.into_iter().collect())
        .map_err(|pair| ConfigError::Flag {
            flag: "node-labels",
            reason: format!("malformed pair {pair:?}, expect key=value"),
        })
}

const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

pub(super) fn taint(key: &str, value: Option<&str>, effect: &str) -> Result<Taint, String> {
    if key.is_empty() {
        return Err("empty taint key".into());
    }
    if !TAINT_EFFECTS.contains(&effect) {
        return Err(format!(
            "invalid taint effect {effect:?}, must be one of {}",
            TAINT_EFFECTS.join(", ")
        ));
    }
    Ok(Taint {
        key: key.to_string(),
        value: value.filter(|v| !v.is_empty()).map(str::to_string),
        effect: effect.to_string(),
        time_added: None,
    })
}

/// Parse `--register-with-taints` (upstream `ParseTaints`): `key=value:Effect` or
/// `key:Effect`, comma-separated.
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, ConfigError> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|spec| {
            let bad = |reason: String| ConfigError::Flag {
                flag: "register-with-taints",
                reason: format!("{spec:?}: {reason}"),
            };
            let (kv, effect) = spec
                .trim()
                .rsplit_once(':')
                .ok_or_else(|| bad("want key=value:Effect".into()))?;
            let (key, value) = match kv.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (kv, None),
            };
            taint(key, value, effect).map_err(bad)
        })
        .collect()
}
