//! The dependency graph between apps: start order, stop order, cycles.

use std::collections::{BTreeMap, BTreeSet};

/// A dependency cycle, as the path that closes it: `a -> b -> a`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dependency cycle: {}", .path.join(" -> "))]
pub struct Cycle {
    /// The apps on the cycle, the first one repeated at the end.
    pub path: Vec<String>,
}

/// Orders `nodes` so that every app comes after the apps it depends on.
/// `edges` maps an app to the apps it depends on; dependencies outside
/// `nodes` are ignored. A cycle is an error naming it: `a -> b -> a`.
pub fn order(
    nodes: &[String],
    edges: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<String>, Cycle> {
    let set: BTreeSet<&String> = nodes.iter().collect();
    let mut out = Vec::with_capacity(nodes.len());
    // 0 = unvisited, 1 = on the current path, 2 = done.
    let mut state: BTreeMap<&String, u8> = BTreeMap::new();
    let mut path: Vec<&String> = Vec::new();
    fn visit<'a>(
        n: &'a String,
        set: &BTreeSet<&'a String>,
        edges: &'a BTreeMap<String, Vec<String>>,
        state: &mut BTreeMap<&'a String, u8>,
        path: &mut Vec<&'a String>,
        out: &mut Vec<String>,
    ) -> Result<(), Cycle> {
        match state.get(n).copied().unwrap_or(0) {
            2 => return Ok(()),
            1 => {
                let start = path.iter().position(|p| *p == n).unwrap_or(0);
                let mut path: Vec<String> = path[start..].iter().map(|s| s.to_string()).collect();
                path.push(n.clone());
                return Err(Cycle { path });
            }
            _ => {}
        }
        state.insert(n, 1);
        path.push(n);
        for d in edges.get(n).into_iter().flatten() {
            if set.contains(d) {
                visit(d, set, edges, state, path, out)?;
            }
        }
        path.pop();
        state.insert(n, 2);
        out.push(n.clone());
        Ok(())
    }
    for n in nodes {
        visit(n, &set, edges, &mut state, &mut path, &mut out)?;
    }
    Ok(out)
}

/// `nodes` plus everything they depend on, transitively.
pub fn with_dependencies(nodes: &[String], edges: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut out: Vec<String> = nodes.to_vec();
    let mut i = 0;
    while i < out.len() {
        for d in edges.get(&out[i]).into_iter().flatten() {
            if !out.contains(d) {
                out.push(d.clone());
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(e: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        e.iter()
            .map(|(a, d)| (a.to_string(), d.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn orders_dependencies_first() {
        let e = edges(&[("web", &["db", "cache"]), ("db", &["init"])]);
        let o = order(&names(&["web", "db", "init", "cache", "other"]), &e).unwrap();
        let pos = |n: &str| o.iter().position(|x| x == n).unwrap();
        assert!(pos("init") < pos("db"));
        assert!(pos("db") < pos("web"));
        assert!(pos("cache") < pos("web"));
        assert_eq!(o.len(), 5);
    }

    #[test]
    fn names_the_cycle() {
        let e = edges(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])]);
        let err = order(&names(&["a", "b", "c"]), &e).unwrap_err();
        assert_eq!(err.to_string(), "dependency cycle: a -> b -> c -> a");
        let e = edges(&[("a", &["a"])]);
        assert!(order(&names(&["a"]), &e).is_err());
    }

    #[test]
    fn closure() {
        let e = edges(&[("web", &["db"]), ("db", &["init"])]);
        let mut c = with_dependencies(&names(&["web"]), &e);
        c.sort();
        assert_eq!(c, names(&["db", "init", "web"]));
    }
}
