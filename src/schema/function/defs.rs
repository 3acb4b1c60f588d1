//! The `$defs` a schema refers to: only those reachable from its root.

use std::collections::HashSet;

use serde_json::{Map, Value};

/// Adds the `$defs` reachable from `root` (in definition order).
pub(crate) fn attach_defs(root: &mut Value, defs: &Map<String, Value>) {
    let mut reachable: HashSet<String> = HashSet::new();
    let mut queue = Vec::new();
    collect_refs(root, &mut queue, 0);
    while let Some(name) = queue.pop() {
        if reachable.insert(name.clone())
            && let Some(def) = defs.get(&name)
        {
            collect_refs(def, &mut queue, 0);
        }
    }
    if reachable.is_empty() {
        return;
    }
    let used: Map<String, Value> = defs
        .iter()
        .filter(|(k, _)| reachable.contains(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Value::Object(o) = root {
        o.insert("$defs".into(), Value::Object(used));
    }
}

/// Names of `#/$defs/NAME` references under `v`.
pub(crate) fn collect_refs(v: &Value, out: &mut Vec<String>, depth: u32) {
    if depth > 256 {
        return;
    }
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                if k == "$ref" {
                    if let Some(name) = x.as_str().and_then(|s| s.strip_prefix("#/$defs/")) {
                        out.push(name.to_string());
                    }
                } else {
                    collect_refs(x, out, depth + 1);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out, depth + 1)),
        _ => {}
    }
}
