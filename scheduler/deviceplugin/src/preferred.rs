//! `GetPreferredAllocation`: keep a container's replicas on one GPU, and fill the least-loaded GPU first
//! (the one with the most of its replicas still free), so containers spread over the node's GPUs.

use crate::inventory::parse_replica_id;

/// The replicas to prefer for a container: `size` IDs from `available`, all of one GPU, including every
/// ID of `must_include`. Among the GPUs that can hold them, the one with the most available replicas wins
/// (the first in `available` on a tie). Empty when no single GPU can (kubelet then chooses by itself,
/// and `Allocate` refuses replicas of several GPUs).
pub fn preferred(available: &[String], must_include: &[String], size: usize) -> Vec<String> {
    // GPU keys in order of first appearance, with their available IDs.
    let mut by_gpu: Vec<(&str, Vec<&String>)> = Vec::new();
    for id in available {
        let Some((key, _)) = parse_replica_id(id) else { continue };
        match by_gpu.iter_mut().find(|(k, _)| *k == key) {
            Some((_, ids)) => ids.push(id),
            None => by_gpu.push((key, vec![id])),
        }
    }
    let required: Vec<&str> = must_include.iter().filter_map(|id| parse_replica_id(id).map(|(k, _)| k)).collect();
    if required.len() != must_include.len() || required.windows(2).any(|w| w[0] != w[1]) || size < must_include.len() {
        return Vec::new();
    }
    let candidates = by_gpu
        .iter()
        .filter(|(key, ids)| ids.len() >= size && required.first().is_none_or(|r| r == key))
        .filter(|(_, ids)| must_include.iter().all(|m| ids.contains(&m)));
    // max_by_key keeps the last maximum; reversing keeps the first.
    let Some((_, ids)) = candidates.rev().max_by_key(|(_, ids)| ids.len()) else {
        return Vec::new();
    };
    let mut chosen: Vec<String> = must_include.to_vec();
    for id in ids {
        if chosen.len() == size {
            break;
        }
        if !chosen.contains(id) {
            chosen.push((*id).clone());
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn one_gpu_least_loaded_first() {
        let available = ids(&["A-0", "B-0", "B-1", "B-2", "A-1"]);
        assert_eq!(preferred(&available, &[], 2), ids(&["B-0", "B-1"]), "B has the most free replicas");
        assert_eq!(preferred(&available, &ids(&["A-1"]), 2), ids(&["A-1", "A-0"]), "must-include decides the GPU");
        assert_eq!(preferred(&available, &[], 3), ids(&["B-0", "B-1", "B-2"]));
        assert!(preferred(&available, &[], 4).is_empty(), "no GPU has 4 free");
        assert!(preferred(&available, &ids(&["A-1", "B-1"]), 2).is_empty(), "must-include of two GPUs");
        let tie = ids(&["A-0", "B-0"]);
        assert_eq!(preferred(&tie, &[], 1), ids(&["A-0"]), "a tie goes to the first");
    }
}
