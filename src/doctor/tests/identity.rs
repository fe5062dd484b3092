//! doctor's `worker_identity` check at a fleet's size: the first few lines, then a count.

use super::*;

/// 8 instances running past a normal boot with no Curio worker: 5 lines and one that counts
/// the other 3 (one line an instance put 100 lines, 35 KB, into what monitoring mails: the
/// scale walkthrough). `inspect` keeps every one.
#[test]
fn many_instances_without_a_worker_are_a_few_lines_and_a_count() {
    use crate::fleet::fixtures::row;
    use crate::fleet::BOOTED;
    let (dir, s) = test_store(NOW);
    let config = Config::default();
    let lines = || {
        check(&run_checks(dir.path(), &config), "worker_identity")
            .problems
            .iter()
            .map(|p| p.detail.clone())
            .collect::<Vec<_>>()
    };
    let add = |i: i64| {
        let mut r = row(&format!("fa-{i}"), Some(i), BOOTED, 0.4);
        r.created_at = NOW - 3 * 3_600_000;
        crate::store::instances::upsert(&s.conn, &r).unwrap();
    };
    for i in 1..=5 {
        add(i);
    }
    assert_eq!(lines().len(), 5, "five: each named");
    for i in 6..=8 {
        add(i);
    }
    let said = lines();
    assert_eq!(said.len(), 6, "{said:?}");
    assert!(
        said[0].contains("has run for 3h00m with no Curio worker"),
        "{}",
        said[0]
    );
    assert_eq!(
        said[5],
        "3 more instance(s) of ours with a worker problem like those above: `fleetagent inspect` names each (its worker identity lines)"
    );
}
