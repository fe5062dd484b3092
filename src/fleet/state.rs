//! Lifecycle states of one of our instances (the `instances.state` column) and how a listed
//! instance is classified from vast.ai's status and the Curio worker matched to it.

use crate::demand::Worker;

pub use crate::store::instances::State;

/// Lifecycle states of an instance (the `instances.state` column), by their old names.
pub const LAUNCHING: State = State::Launching;
pub const LOADING: State = State::Loading;
pub const BOOTED: State = State::Booted;
pub const REGISTERED: State = State::Registered;
pub const PROVING: State = State::Proving;
pub const DEAD: State = State::Dead;
pub const STOPPED: State = State::Stopped;
pub const OUTBID: State = State::Outbid;
pub const GONE: State = State::Gone;

/// Whose a listed instance is, by its label (DESIGN.md "Operations": labels are
/// `<label_prefix>-<install id>-r<run>-<suffix>`; before install ids, `<label_prefix>-r<run>-<suffix>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner<'a> {
    /// Under our prefix with our install id, or with none (a label made before install ids,
    /// or one an operator gave by hand): ours.
    Ours,
    /// Under our prefix with another install's id: another state dir on the same account.
    /// Never adopted, counted, stopped or destroyed.
    OtherInstall(&'a str),
    /// Not under our prefix at all.
    NotOurs,
}

/// Whose the instance labelled `label` is, for an install with this prefix and id. The id is
/// read from the end of the label: a label that ends in `-<letters>-r<digits>-<8 hex>` (the
/// shape `launch_label` makes) carries the install id `<letters>`; it is ours only when that
/// id is ours and it follows our prefix directly. So a prefix that contains `-` cannot hide
/// another install's id (prefix `fleet` sees `fleet-agent-qwerty-r1-...` as install
/// `qwerty`'s), and an id can never be mistaken for a run part (ids are letters only).
pub fn owner<'a>(label: Option<&'a str>, prefix: &str, install_id: &str) -> Owner<'a> {
    let Some(rest) = label
        .map(str::trim)
        .and_then(|l| l.strip_prefix(prefix))
        .and_then(|r| r.strip_prefix('-'))
        .filter(|r| !r.is_empty())
    else {
        return Owner::NotOurs;
    };
    match label_install_id(rest) {
        None => match loose_install_id(rest) {
            Some(id) if !id.eq_ignore_ascii_case(install_id) => Owner::OtherInstall(id),
            _ => Owner::Ours,
        },
        Some(id) if id == install_id && rest.len() == id.len() + 1 + tail_len(rest) => Owner::Ours,
        Some(id) => Owner::OtherInstall(id),
    }
}

/// The prefix of a label in the exact shape `<prefix>-<install_id>-r<run>-<suffix>`, whatever
/// the prefix (None for any other label).
pub fn prefix_with_id<'a>(label: &'a str, install_id: &str) -> Option<&'a str> {
    let at = label.find(&format!("-{install_id}-"))?;
    let rest = &label[at + 1..];
    let exact = label_install_id(rest) == Some(install_id)
        && rest.len() == install_id.len() + 1 + tail_len(rest);
    exact.then_some(&label[..at])
}

/// The install id of a label in the exact shape another fleetagent gives
/// (`<prefix>-<install id>-r<run>-<8 hex>`, whatever the prefix); None for any other label
/// (one given by hand: `manual-prover`, and `curio-worker-r1-01` or `my-box-r1-a`, which a
/// looser reading took for install ids `worker` and `box`: a re-test).
pub fn fleetagent_install_id(label: &str) -> Option<&str> {
    let label = label.trim();
    let suffix = label.rsplit('-').next()?;
    let hex8 = suffix.len() == 8
        && suffix
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let id = label_install_id(label).filter(|_| hex8)?;
    let at = label.len() - tail_len(label) - 1 - id.len();
    (at >= 2 && label.as_bytes()[at - 1] == b'-').then_some(id)
}

/// For a label not in the exact shape: a word of letters followed by a run part (`r` or `R`
/// and a digit, anything after it), anywhere after the prefix, reads as an install id. A
/// label an operator gives by hand (`fleetagent-spare`) has none and stays ours; one that
/// looks like another install's (`fleetagent-other-r3`, `-Other-R3-1.5`) is never taken
/// for ours: adopted, it was counted and destroyed by the floor as over the caps.
fn loose_install_id(rest: &str) -> Option<&str> {
    let parts: Vec<&str> = rest.split('-').collect();
    parts.windows(2).find_map(|w| {
        let (word, run) = (w[0], w[1].as_bytes());
        let id_like =
            (1..=16).contains(&word.len()) && word.bytes().all(|b| b.is_ascii_alphabetic());
        let run_like = run.len() >= 2 && matches!(run[0], b'r' | b'R') && run[1].is_ascii_digit();
        (id_like && run_like).then_some(word)
    })
}

/// Is this label one of ours (our prefix, and our install id or none)?
pub fn is_ours(label: Option<&str>, prefix: &str, install_id: &str) -> bool {
    owner(label, prefix, install_id) == Owner::Ours
}

/// The run number a label of ours carries (`<prefix>-<our id>-r<run>-<8 hex>`, or the older
/// `<prefix>-r<run>-<8 hex>`); None for another install's label, or one of another shape.
pub fn label_run(label: &str, prefix: &str, install_id: &str) -> Option<i64> {
    if owner(Some(label), prefix, install_id) != Owner::Ours {
        return None;
    }
    let rest = label.trim().strip_prefix(prefix)?.strip_prefix('-')?;
    let tail = tail_len(rest);
    if tail == 0 {
        return None;
    }
    let run = rest[rest.len() - tail..].split('-').next()?;
    run.strip_prefix('r')?.parse().ok()
}

/// The install id a label (after `<prefix>-`) carries: the letters before a trailing
/// `-r<digits>-<suffix>`, when they are preceded by `-` or start `rest`.
fn label_install_id(rest: &str) -> Option<&str> {
    let tail = tail_len(rest);
    if tail == 0 {
        return None;
    }
    let head = &rest[..rest.len() - tail];
    let head = head.strip_suffix('-')?;
    let start = head.rfind('-').map_or(0, |i| i + 1);
    let id = &head[start..];
    crate::store::ops::is_install_id(id).then_some(id)
}

/// The length of a trailing `r<digits>-<suffix>` in `rest` (0 when there is none). The suffix
/// `launch_label` makes is 8 hex digits; any letters and digits are read as one, so that a
/// label another tool (or a test) wrote in the same shape with another install's id is never
/// taken for ours, and destroyed by the panic button.
fn tail_len(rest: &str) -> usize {
    let Some((run_part, suffix)) = rest.rsplit_once('-') else {
        return 0;
    };
    let suffix_ok = !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_alphanumeric());
    let run = run_part.rsplit('-').next().unwrap_or("");
    let run_ok = run
        .strip_prefix('r')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
    if suffix_ok && run_ok {
        run.len() + 1 + suffix.len()
    } else {
        0
    }
}

/// The lifecycle state of a listed instance from vast.ai's `actual_status` and the live
/// Curio worker matched to it (if any).
pub fn classify(actual_status: Option<&str>, worker: Option<&Worker>) -> State {
    let status = actual_status.map(|s| s.trim().to_ascii_lowercase());
    match status.as_deref() {
        Some("stopped") => return STOPPED,
        Some("exited" | "offline") => return DEAD,
        _ => {}
    }
    if let Some(w) = worker {
        return if w.running > 0 { PROVING } else { REGISTERED };
    }
    match status.as_deref() {
        Some("running") => BOOTED,
        // `frozen`: paused with its memory kept; a live worker proves it runs (as `unknown`).
        Some("unknown" | "frozen") => DEAD,
        // null (provisioning), loading, created, rebooting, restarting, anything new.
        _ => LOADING,
    }
}

/// States that count as a live container (booted or better).
pub fn is_running_state(state: State) -> bool {
    matches!(state, BOOTED | REGISTERED | PROVING)
}

/// States that count toward slots and $/h: everything not stopped or gone (dead ones bill,
/// and an outbid bid may resume at any moment).
pub fn is_billing_state(state: State) -> bool {
    !matches!(state, STOPPED | GONE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_a_label_of_ours_carries() {
        assert_eq!(
            label_run("fa-qwerty-r17-5a3528e1", "fa", "qwerty"),
            Some(17)
        );
        assert_eq!(label_run("fa-r3-5a3528e1", "fa", "qwerty"), Some(3));
        assert_eq!(label_run("fa-asdfgh-r17-5a3528e1", "fa", "qwerty"), None);
        assert_eq!(label_run("fa-by-hand", "fa", "qwerty"), None);
        assert_eq!(label_run("other-qwerty-r17-5a3528e1", "fa", "qwerty"), None);
    }

    #[test]
    fn ours_by_prefix_and_dash() {
        assert!(is_ours(Some("fleetagent-r1-abc"), "fleetagent", "qwerty"));
        assert!(!is_ours(Some("fleetagent2-x"), "fleetagent", "qwerty"));
        assert!(!is_ours(Some("fleetagent-"), "fleetagent", "qwerty"));
        assert!(!is_ours(None, "fleetagent", "qwerty"));
    }

    #[test]
    fn the_install_id_in_a_label_decides_whose_it_is() {
        fn o<'a>(label: &'a str, prefix: &str) -> Owner<'a> {
            owner(Some(label), prefix, "qwerty")
        }
        // Ours: our id, or none (labels made before install ids, or given by hand).
        assert_eq!(
            o("fleetagent-qwerty-r12-0a1b2c3d", "fleetagent"),
            Owner::Ours
        );
        assert_eq!(
            o(" fleetagent-qwerty-r12-0a1b2c3d ", "fleetagent"),
            Owner::Ours
        );
        assert_eq!(o("fleetagent-r12-0a1b2c3d", "fleetagent"), Owner::Ours);
        assert_eq!(o("fleetagent-stray", "fleetagent"), Owner::Ours);
        assert_eq!(o("fleetagent-a-b", "fleetagent"), Owner::Ours);
        assert_eq!(o("fleetagent-abc-", "fleetagent"), Owner::Ours);
        // The shape launch_label makes with another suffix: the id is read all the same (a
        // contract audit saw the panic button destroy `fleetagent-other-r3-1`).
        assert_eq!(
            o("fleetagent-abc-r12-0A1B2C3D", "fleetagent"),
            Owner::OtherInstall("abc")
        );
        assert_eq!(
            o("fleetagent-other-r3-1", "fleetagent"),
            Owner::OtherInstall("other")
        );
        assert_eq!(
            o("fleetagent-other-r3-worker1", "fleetagent"),
            Owner::OtherInstall("other")
        );
        assert_eq!(o("fleetagent-qwerty-r3-1", "fleetagent"), Owner::Ours);
        // Odd shapes that still read as another install's (a re-test saw them adopted and
        // destroyed as over the caps): a word of letters, then `r` and a digit.
        for odd in [
            "fleetagent-other-r3",
            "fleetagent-other-R3-1",
            "fleetagent-other-r3-1-x",
            "fleetagent-Other-r3-1",
            "fleetagent-other-r3-\u{e9}1",
            "fleetagent-other-r3-1.5",
            "fleetagent-other-r3-ab_c",
            "fleetagent-abc-r12-0a1b_2c3",
        ] {
            assert!(
                matches!(o(odd, "fleetagent"), Owner::OtherInstall(_)),
                "{odd}"
            );
        }
        assert_eq!(o("fleetagent-qwerty-r3", "fleetagent"), Owner::Ours);
        assert_eq!(o("fleetagent-QWERTY-r3-x", "fleetagent"), Owner::Ours);
        // No run part: a label given by hand, ours.
        assert_eq!(o("fleetagent-abc-r-0a1b2c3d", "fleetagent"), Owner::Ours);
        assert_eq!(o("fleetagent-spare-box", "fleetagent"), Owner::Ours);
        assert_eq!(o("fleetagent-abc-12-0a1b2c3d", "fleetagent"), Owner::Ours);
        assert_eq!(o("fleetagent-ab1-r12-0a1b2c3d", "fleetagent"), Owner::Ours);
        // Another install's id.
        assert_eq!(
            o("fleetagent-zxcvbn-r3-0a1b2c3d", "fleetagent"),
            Owner::OtherInstall("zxcvbn")
        );
        // A run part is never read as an id (ids are letters only): r12 is not install "r".
        assert_eq!(o("fleetagent-r12-r3-0a1b2c3d", "fleetagent"), Owner::Ours);
        // Prefixes with '-': ours and theirs told apart in both directions.
        assert_eq!(
            o("fleet-agent-qwerty-r1-0a1b2c3d", "fleet-agent"),
            Owner::Ours
        );
        assert_eq!(o("fleet-agent-r1-0a1b2c3d", "fleet-agent"), Owner::Ours);
        assert_eq!(
            o("fleet-agent-zxcvbn-r1-0a1b2c3d", "fleet-agent"),
            Owner::OtherInstall("zxcvbn")
        );
        // Prefix `fleet` sees install qwerty of prefix `fleet-agent` as another install,
        // even though the id is ours: it does not follow our prefix directly.
        assert_eq!(
            o("fleet-agent-qwerty-r1-0a1b2c3d", "fleet"),
            Owner::OtherInstall("qwerty")
        );
        assert_eq!(
            o("fleet-agent-zxcvbn-r1-0a1b2c3d", "fleet"),
            Owner::OtherInstall("zxcvbn")
        );
        // ...and an older build of prefix `fleet-x` (no id) as install "x", not ours.
        assert_eq!(o("fleet-x-r1-0a1b2c3d", "fleet"), Owner::OtherInstall("x"));
        assert_eq!(o("other-qwerty-r1-0a1b2c3d", "fleet"), Owner::NotOurs);
    }
}
