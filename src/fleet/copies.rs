//! Instances a copy of this database launched, pure: one state dir copied to another host (a
//! move whose old host was not stopped; a host left running after HA was turned off) gives
//! the same install id and the same run ids on both. Each copy adopts the other's instances
//! (ours by label), so the caps hold over both, but two passes that decide at once both rent,
//! and each stops what the other launched. The one trace the other copy leaves is an instance
//! adopted under a label of a run this database gave and finished, which this database never
//! launched as that instance. The SQL is `store::instances::adopted_live` and
//! `store::actions::launches_of_label`; `run::observe` and `doctor` ask.

use crate::clock::Millis;
use crate::store::actions::LabelLaunches;

use super::state::label_run;

/// An adopted instance as the table holds it: label (maybe with a `~id` suffix), vast.ai id,
/// when it was rented (vast.ai's start date, as the adoption recorded it).
pub type Adopted = (String, Option<i64>, Millis);

/// One instance of ours that a copy of this database launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub label: String,
    pub vast_id: Option<i64>,
    /// The run its label names: a run of this database too.
    pub run: i64,
    pub rented_at: Millis,
}

/// The label without the `~id` a second instance under one label gets, and the run it names
/// when it carries our exact install id (not a label made before install ids, nor one given
/// by hand).
pub fn our_run(label: &str, prefix: &str, install_id: &str) -> Option<(String, i64)> {
    let base = label.split('~').next().unwrap_or(label).trim();
    if !base.starts_with(&format!("{prefix}-{install_id}-r")) {
        return None;
    }
    Some((base.to_string(), label_run(base, prefix, install_id)?))
}

/// Whether what the ledger says of an adopted instance's label makes it a copy's: the run it
/// names finished ok here (a run this database gave and saw to its end; an interrupted one
/// may have lost its launch with a restore or a lost WAL), and no launch under the label went
/// through as this instance: none at all, or one that went through as another instance (both
/// copies give the same label in the same run: the second instance is adopted beside ours). A
/// launch settled without an instance (a listing that lagged past the intent's grace) is ours.
pub fn is_copy(launches: &LabelLaunches, vast_id: Option<i64>) -> bool {
    if !launches.run_finished_ok || launches.as_instance(vast_id) {
        return false;
    }
    launches.total == 0 || launches.as_other_instance(vast_id)
}

/// The line that names them (the journal's and `doctor`'s).
pub fn line(copied: &[Copied], install_id: &str) -> String {
    let named = crate::text::first_and_more(
        copied.iter().map(|c| {
            format!(
                "{} (instance {}, run {})",
                crate::text::quote(&c.label, super::LABEL_CHARS),
                c.vast_id.map_or("?".to_string(), |id| id.to_string()),
                c.run
            )
        }),
        5,
    );
    format!(
        "{} instance(s) under this install's id ({install_id}) were launched by runs this database gave but not by this database: {named}; another copy of this state dir is running (copied to another host, or a restore beside the running install), and each copy rents for the same need; a restore without its run.lock gives the same sign once",
        copied.len(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launches(total: i64, ok_as: &[i64], finished_ok: bool) -> LabelLaunches {
        LabelLaunches {
            run_finished_ok: finished_ok,
            total,
            instances: ok_as.to_vec(),
        }
    }

    #[test]
    fn a_copys_instance_is_one_our_finished_run_never_launched_as_itself() {
        // No launch under the label, in a run that finished ok here: a copy's.
        assert!(is_copy(&launches(0, &[], true), Some(11)));
        // Our launch went through as another instance: the twin is a copy's.
        assert!(is_copy(&launches(1, &[10], true), Some(11)));
        // Ours.
        assert!(!is_copy(&launches(1, &[11], true), Some(11)));
        // Settled without an instance (the listing lagged past the grace): ours, late.
        assert!(!is_copy(&launches(1, &[], true), Some(11)));
        // The run did not finish ok here (interrupted: a restore or a lost WAL may have lost
        // its launch), or never ran here.
        assert!(!is_copy(&launches(0, &[], false), Some(11)));
    }

    #[test]
    fn only_labels_with_our_exact_install_id_name_a_run() {
        assert_eq!(
            our_run("fa-abc-r1-0000aaaa~11", "fa", "abc"),
            Some(("fa-abc-r1-0000aaaa".to_string(), 1))
        );
        for other in [
            "fa-xyz-r1-0000dddd",
            "fa-r1-0000eeee",
            "fa-spare",
            "fb-abc-r1-00",
        ] {
            assert_eq!(our_run(other, "fa", "abc"), None, "{other}");
        }
        let c = Copied {
            label: "fa-abc-r1-0000aaaa~11".into(),
            vast_id: Some(11),
            run: 1,
            rented_at: 5,
        };
        assert!(line(&[c], "abc").starts_with(
            "1 instance(s) under this install's id (abc) were launched by runs this database gave but not by this database: \"fa-abc-r1-0000aaaa~11\" (instance 11, run 1)"
        ));
    }
}
