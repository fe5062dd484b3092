//! Matching our listed instances to Curio's live workers: by machine name, then by IP.

use std::collections::{HashMap, HashSet};

use crate::demand::Worker;
use crate::vast::Instance;

/// The host part of Curio's `host_and_port` (`10.0.0.1:12300`, `[::1]:12300`).
pub fn host_of(host_and_port: &str) -> &str {
    let s = host_and_port.trim();
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match s.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) && !h.contains(':') => h,
        _ => s,
    }
}

/// Match listed instances to live Curio workers: by machine name == label first, then by
/// public IP == the host of `host_and_port` (only where the IP is unambiguous: vast.ai puts
/// several instances of one machine behind the same IP). Each worker matches at most once.
/// Returns instance id -> index into `workers`.
pub fn match_workers(listed: &[&Instance], workers: &[Worker]) -> HashMap<u64, usize> {
    let mut out = HashMap::new();
    let mut used = HashSet::new();
    for inst in listed {
        let Some(label) = inst.label.as_deref().map(str::trim) else {
            continue;
        };
        if let Some((i, _)) = workers
            .iter()
            .enumerate()
            .find(|(i, w)| !used.contains(i) && w.machine_name.trim() == label)
        {
            used.insert(i);
            out.insert(inst.id, i);
        }
    }
    let mut ip_count: HashMap<&str, usize> = HashMap::new();
    for inst in listed {
        if let Some(ip) = inst
            .public_ip
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            *ip_count.entry(ip).or_default() += 1;
        }
    }
    for inst in listed {
        if out.contains_key(&inst.id) {
            continue;
        }
        let Some(ip) = inst
            .public_ip
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        if ip_count.get(ip).copied() != Some(1) {
            continue;
        }
        let candidates: Vec<usize> = workers
            .iter()
            .enumerate()
            .filter(|(i, w)| !used.contains(i) && host_of(&w.host_and_port) == ip)
            .map(|(i, _)| i)
            .collect();
        if let [only] = candidates[..] {
            used.insert(only);
            out.insert(inst.id, only);
        }
    }
    out
}
