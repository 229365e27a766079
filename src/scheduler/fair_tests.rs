//! Unit tests of the fair round's keys kept across a pass ([`super::fair`]): an admission
//! that leaves its leaf's key as it was (the leaf within its min, its first waiting head
//! another job) still moves its parent's share, and the next head is taken by that share.

use super::pass_tests::{self, job, parse, queued, scheduler};
use super::*;

/// Root lending 16 GPUs to `p` (min 4: leaf `l`, min 4, and leaf `m`, no min) and leaf `s`
/// (min 1). `m` runs a job of 2 GPUs, `s` one of 2 (it borrows 1); `x` (16 GPUs, over the
/// root's max) heads `l`'s waiting jobs all along. Every job of the next cycle borrows, so all
/// go in its second round, `p` (borrowing nothing) first: `a` (4 GPUs) of `l` is admitted.
/// That keeps `l` within its min and `x` its first head, so `l`'s key is unchanged, but `p`
/// now borrows 2 GPUs against `s`'s 1: `s`'s `c` goes before `l`'s `b`. (With the walk up
/// stopped at `l` as for a change of heads only, `b` went first.)
#[test]
fn an_admission_that_keeps_its_leafs_key_moves_its_parents_share() {
    let mut s = scheduler("16");
    s.set_quota_tree(Some(parse(serde_json::json!(
        {"name": "root", "max": {"nvidia.com/gpu": "16"}, "children": [
            {"name": "p", "min": {"nvidia.com/gpu": "4"}, "children": [
                {"name": "l", "namespaces": ["ns-l"], "min": {"nvidia.com/gpu": "4"}},
                {"name": "m", "namespaces": ["ns-m"]}
            ]},
            {"name": "s", "namespaces": ["ns-s"], "min": {"nvidia.com/gpu": "1"}}
        ]}
    ))));
    let m1 = queued(&mut s, &job("ns-m", "m1", 2, None), 0);
    let s1 = queued(&mut s, &job("ns-s", "s1", 2, None), 0);
    let first = s.cycle();
    assert!(pass_tests::admitted(&first, m1) && pass_tests::admitted(&first, s1));
    let x = queued(&mut s, &job("ns-l", "x", 16, None), 1);
    let a = queued(&mut s, &job("ns-l", "a", 4, None), 1);
    let b = queued(&mut s, &job("ns-l", "b", 1, None), 1);
    let c = queued(&mut s, &job("ns-s", "c", 1, None), 1);
    let admits: Vec<JobId> = s
        .cycle()
        .iter()
        .filter_map(|d| match d {
            Decision::Admit { job, .. } => Some(*job),
            _ => None,
        })
        .collect();
    assert_eq!(admits, vec![a, c, b], "x={x} a={a} b={b} c={c}");
    assert!(matches!(s.state(x), JobState::Pending), "{:?}", s.state(x));
}
