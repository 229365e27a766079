//! The table of tests/peer_cases.rs: situations from the quota and preemption tests of Kueue,
//! scheduler-plugins' capacity scheduling and koord-queue, restated in muster's model, each with
//! the outcome muster documents (docs/concepts.md). Upstream terms map as follows: a ClusterQueue's
//! nominalQuota is a leaf's `min`, nominal + borrowingLimit its `max`, a cohort a parent node
//! whose `max` is the cohort's total; an ElasticQuota's min/max are a leaf's. Cases that need
//! lendingLimit, flavors, partial admission or admission checks have no muster equivalent and are
//! left out. Sources are cited by file and upstream case name; the fixtures and wording are ours.

/// A job: a batch/v1 Job of `pods` pods, each asking `res` (a YAML flow map of limits).
pub struct J {
    pub name: &'static str,
    pub ns: &'static str,
    /// A PriorityClass of [`PRIORITY_CLASSES`], or "" for none (priority 0).
    pub class: &'static str,
    pub pods: u32,
    pub res: &'static str,
}

pub const fn j(
    name: &'static str,
    ns: &'static str,
    class: &'static str,
    pods: u32,
    res: &'static str,
) -> J {
    J {
        name,
        ns,
        class,
        pods,
        res,
    }
}

/// What must have happened once the incoming jobs were submitted and cycles ran.
pub struct Expect {
    /// `(victim, preemptor)`: every preemption of the first cycle, and no other in later ones.
    pub preempted: &'static [(&'static str, &'static str)],
    /// Incoming jobs admitted by the first cycle.
    pub admitted: &'static [&'static str],
    /// Incoming jobs still pending after three cycles, with a substring of their reason.
    pub waiting: &'static [(&'static str, &'static str)],
    /// Incoming jobs inadmissible as written, with a substring of the reason.
    pub inadmissible: &'static [(&'static str, &'static str)],
}

pub struct Case {
    /// Upstream file and case name; with a difference, what upstream does instead.
    pub source: &'static str,
    /// One member cluster: `(count, allocatable)` per node group.
    pub nodes: &'static [(u32, &'static str)],
    /// The tree's root node, a YAML flow map.
    pub tree: &'static str,
    /// Admitted one per cycle, in this order (so the last is the most recently admitted).
    pub running: &'static [J],
    /// Submitted together, in this order, after `running`.
    pub incoming: &'static [J],
    pub expect: Expect,
}

pub const PRIORITY_CLASSES: &str = "{p-2: -2, p-1: -1, p0: 0, p1: 1, p2: 2, p3: 3}";

/// Room for everything: quota alone decides.
const BIG: &[(u32, &str)] = &[(2, "{cpu: '64', memory: 256Gi, pods: '200'}")];
/// Eight cpus: capacity is shorter than the quota.
const CPU8: &[(u32, &str)] = &[(1, "{cpu: '8', memory: 64Gi, pods: '110'}")];
/// capacity scheduling's fixtures: one node of 150 (here Mi) memory.
const MEM150: &[(u32, &str)] = &[(1, "{cpu: '8', memory: 150Mi, pods: '110'}")];

/// Kueue's preemption fixture "cohort": c1 (LowerPriority within its queue) and c2 (Never),
/// each nominal 6 cpu / 3Gi and borrowing limit 6 cpu / 3Gi.
const COHORT: &str = "{name: root, max: {cpu: '12', memory: 6Gi}, children: [
  {name: c1, namespaces: [c1], min: {cpu: '6', memory: 3Gi}, max: {cpu: '12', memory: 6Gi},
   attributes: {muster.dev/within-queue-preemption: LowerPriority}},
  {name: c2, namespaces: [c2], min: {cpu: '6', memory: 3Gi}, max: {cpu: '12', memory: 6Gi}}]}";

/// Kueue's preemption fixture "standalone": 6 cpu, LowerPriority within its queue.
const STANDALONE: &str = "{name: root, children: [{name: standalone, namespaces: [standalone],
  min: {cpu: '6'}, max: {cpu: '6'},
  attributes: {muster.dev/within-queue-preemption: LowerPriority}}]}";

/// Kueue's preemption fixture "cohort-three": a, b, c of 2 cpu / 2Gi each, no borrowing limit.
const THREE: &str = "{name: root, max: {cpu: '6', memory: 6Gi}, children: [
  {name: a, namespaces: [a], min: {cpu: '2', memory: 2Gi},
   attributes: {muster.dev/within-queue-preemption: LowerPriority}},
  {name: b, namespaces: [b], min: {cpu: '2', memory: 2Gi}},
  {name: c, namespaces: [c], min: {cpu: '2', memory: 2Gi}}]}";

/// Kueue's scheduler fixture "eng": eng-alpha nominal 50 + 50, eng-beta nominal 50 + 10.
const ENG: &str = "{name: root, max: {cpu: '100'}, children: [
  {name: eng-alpha, namespaces: [eng-alpha], min: {cpu: '50'}, max: {cpu: '100'}},
  {name: eng-beta, namespaces: [eng-beta], min: {cpu: '50'}, max: {cpu: '60'}}]}";

const NO_EXPECT: Expect = Expect {
    preempted: &[],
    admitted: &[],
    waiting: &[],
    inadmissible: &[],
};

const QUOTA_SHORT: &str = "exceeds max";

pub const CASES: &[Case] = &[
    // ----- Kueue pkg/scheduler/preemption/preemption_test.go -----------------------------------
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "reclaim quota from borrower""#,
        nodes: BIG,
        tree: COHORT,
        running: &[
            j("c1-low", "c1", "p-1", 1, "{cpu: '3'}"),
            j("c2-mid", "c2", "p0", 1, "{cpu: '3'}"),
            j("c2-high", "c2", "p1", 1, "{cpu: '6'}"),
        ],
        incoming: &[j("in", "c1", "p1", 1, "{cpu: '3'}")],
        expect: Expect {
            preempted: &[("c2-mid", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "reclaim quota if workload requests 0 resources for a resource at nominal quota""#,
        nodes: BIG,
        tree: COHORT,
        running: &[
            j("c1-low", "c1", "p-1", 1, "{cpu: '3', memory: 3Gi}"),
            j("c2-mid", "c2", "p0", 1, "{cpu: '3'}"),
            j("c2-high", "c2", "p1", 1, "{cpu: '6'}"),
        ],
        incoming: &[j("in", "c1", "p1", 1, "{cpu: '3', memory: '0'}")],
        expect: Expect {
            preempted: &[("c2-mid", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    // Upstream checks the targets alone (nobody borrows, so none); with quota to spare the job
    // would simply fit, so here the member is what is short: c2 holds no more than its min.
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "no workloads borrowing""#,
        nodes: CPU8,
        tree: COHORT,
        running: &[
            j("c1-high", "c1", "p1", 1, "{cpu: '4'}"),
            j("c2-low-1", "c2", "p-1", 1, "{cpu: '4'}"),
        ],
        incoming: &[j("in", "c1", "p1", 1, "{cpu: '2'}")],
        expect: Expect {
            waiting: &[("in", "the most free on any node is 0")],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "not enough workloads borrowing""#,
        nodes: BIG,
        tree: COHORT,
        running: &[
            j("c1-high", "c1", "p1", 1, "{cpu: '4'}"),
            j("c2-low-1", "c2", "p-1", 1, "{cpu: '4'}"),
            j("c2-low-2", "c2", "p-1", 1, "{cpu: '4'}"),
        ],
        incoming: &[j("in", "c1", "p1", 1, "{cpu: '4'}")],
        expect: Expect {
            waiting: &[("in", QUOTA_SHORT)],
            ..NO_EXPECT
        },
    },
    // Only cpu is short; with c1-low gone the job is within c1's min in cpu (it borrows memory,
    // which the tree has room for).
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "preempting locally and borrowing other resources in cohort, without cohort candidates""#,
        nodes: BIG,
        tree: COHORT,
        running: &[
            j("c1-low", "c1", "p-1", 1, "{cpu: '4'}"),
            j("c2-low-1", "c2", "p-1", 1, "{cpu: '4'}"),
            j("c2-high-2", "c2", "p1", 1, "{cpu: '4'}"),
        ],
        incoming: &[j("in", "c1", "p1", 1, "{cpu: '4', memory: 5Gi}")],
        expect: Expect {
            preempted: &[("c1-low", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    // DIFFERS on purpose: Kueue preempts c1-low only and admits the job borrowing 2 cpu above
    // nominal. muster preempts by priority only for a place within min, so it takes c1-med too.
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "preempting locally and borrowing same resource in cohort""#,
        nodes: BIG,
        tree: COHORT,
        running: &[
            j("c1-med", "c1", "p0", 1, "{cpu: '4'}"),
            j("c1-low", "c1", "p-1", 1, "{cpu: '4'}"),
            j("c2-low-1", "c2", "p-1", 1, "{cpu: '4'}"),
        ],
        incoming: &[j("in", "c1", "p1", 1, "{cpu: '4'}")],
        expect: Expect {
            preempted: &[("c1-low", "in"), ("c1-med", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    // The cohort holds l1's nominal 6 only. Removing l1-low (lowest) is not enough, l1-med is;
    // l1-low then turns out unnecessary and is given back.
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "preempting locally and not borrowing same resource in 1-queue cohort""#,
        nodes: BIG,
        tree: "{name: root, max: {cpu: '6'}, children: [{name: l1, namespaces: [l1],
          min: {cpu: '6'}, max: {cpu: '12'},
          attributes: {muster.dev/within-queue-preemption: LowerPriority}}]}",
        running: &[
            j("l1-med", "l1", "p0", 1, "{cpu: '4'}"),
            j("l1-low", "l1", "p-1", 1, "{cpu: '2'}"),
        ],
        incoming: &[j("in", "l1", "p1", 1, "{cpu: '4'}")],
        expect: Expect {
            preempted: &[("l1-med", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    // DIFFERS on purpose: Kueue's reclaimWithinCohort LowerPriority keeps a borrower of equal
    // priority. In muster min is a guarantee whatever the priorities: the most recently admitted
    // borrower goes.
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "do not reclaim borrowed quota from same priority for withinCohort=ReclaimFromLowerPriority""#,
        nodes: BIG,
        tree: COHORT,
        running: &[
            j("c1-job", "c1", "p0", 1, "{cpu: '2'}"),
            j("c2-1", "c2", "p0", 1, "{cpu: '4'}"),
            j("c2-2", "c2", "p0", 1, "{cpu: '4'}"),
        ],
        incoming: &[j("in", "c1", "p0", 1, "{cpu: '4'}")],
        expect: Expect {
            preempted: &[("c2-2", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "reclaim borrowed quota from same priority for withinCohort=ReclaimFromAny""#,
        nodes: BIG,
        tree: COHORT,
        running: &[
            j("c1-1", "c1", "p0", 1, "{cpu: '4'}"),
            j("c1-2", "c1", "p1", 1, "{cpu: '4'}"),
            j("c2-job", "c2", "p0", 1, "{cpu: '2'}"),
        ],
        incoming: &[j("in", "c2", "p0", 1, "{cpu: '4'}")],
        expect: Expect {
            preempted: &[("c1-1", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "preempt from all ClusterQueues in cohort""#,
        nodes: BIG,
        tree: COHORT,
        running: &[
            j("c1-low", "c1", "p-1", 1, "{cpu: '3'}"),
            j("c1-mid", "c1", "p0", 1, "{cpu: '2'}"),
            j("c2-low", "c2", "p-1", 1, "{cpu: '3'}"),
            j("c2-mid", "c2", "p0", 1, "{cpu: '4'}"),
        ],
        incoming: &[j("in", "c1", "p0", 1, "{cpu: '4'}")],
        expect: Expect {
            preempted: &[("c1-low", "in"), ("c2-low", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    // c2 does not preempt within its queue (the default `Never`): the job would be within c2's
    // min with c2-low gone, yet it waits for the member to have room.
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "can't preempt workloads in ClusterQueue for withinClusterQueue=Never""#,
        nodes: CPU8,
        tree: COHORT,
        running: &[j("c2-low", "c2", "p-1", 1, "{cpu: '6'}")],
        incoming: &[j("in", "c2", "p1", 1, "{cpu: '4'}")],
        expect: Expect {
            waiting: &[("in", "the most free on any node is 2")],
            ..NO_EXPECT
        },
    },
    // DIFFERS on purpose: Kueue's LowerOrNewerEqualPriority preempts a job of equal priority;
    // muster preempts within a queue by strictly lower priority only.
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "preempt newer workloads with the same priority""#,
        nodes: BIG,
        tree: STANDALONE,
        running: &[
            j("wl1", "standalone", "p2", 1, "{cpu: '2'}"),
            j("wl2", "standalone", "p1", 1, "{cpu: '2'}"),
            j("wl3", "standalone", "p1", 1, "{cpu: '2'}"),
        ],
        incoming: &[j("in", "standalone", "p1", 1, "{cpu: '2'}")],
        expect: Expect {
            waiting: &[("in", QUOTA_SHORT)],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "preempt multiple""#,
        nodes: BIG,
        tree: STANDALONE,
        running: &[
            j("low", "standalone", "p-1", 1, "{cpu: '2'}"),
            j("mid", "standalone", "p0", 1, "{cpu: '2'}"),
            j("high", "standalone", "p1", 1, "{cpu: '2'}"),
        ],
        incoming: &[j("in", "standalone", "p1", 1, "{cpu: '3'}")],
        expect: Expect {
            preempted: &[("low", "in"), ("mid", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "minimal set excludes low priority""#,
        nodes: BIG,
        tree: STANDALONE,
        running: &[
            j("low", "standalone", "p-1", 1, "{cpu: '1'}"),
            j("mid", "standalone", "p0", 1, "{cpu: '2'}"),
            j("high", "standalone", "p1", 1, "{cpu: '3'}"),
        ],
        incoming: &[j("in", "standalone", "p1", 1, "{cpu: '2'}")],
        expect: Expect {
            preempted: &[("mid", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "not enough low priority workloads""#,
        nodes: BIG,
        tree: STANDALONE,
        running: &[
            j("low", "standalone", "p-1", 1, "{cpu: '3'}"),
            j("mid", "standalone", "p0", 1, "{cpu: '3'}"),
        ],
        incoming: &[j("in", "standalone", "p0", 1, "{cpu: '4'}")],
        expect: Expect {
            waiting: &[("in", QUOTA_SHORT)],
            ..NO_EXPECT
        },
    },
    // DIFFERS on purpose: Kueue's BorrowWithinCohort lets a job that borrows preempt lower
    // priority jobs of other queues. In muster a job that would borrow never preempts.
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "use BorrowWithinCohort; allow preempting a lower-priority workload from another ClusterQueue while borrowing""#,
        nodes: BIG,
        tree: "{name: root, max: {cpu: '13'}, children: [
          {name: a-standard, namespaces: [a-standard], min: {cpu: '1'}, max: {cpu: '13'}},
          {name: b-standard, namespaces: [b-standard], min: {cpu: '1'}, max: {cpu: '13'}},
          {name: a-best-effort, namespaces: [a-best-effort], min: {cpu: '1'}, max: {cpu: '13'}},
          {name: b-best-effort, namespaces: [b-best-effort], min: {cpu: '0'}, max: {cpu: '13'}},
          {name: shared, namespaces: [shared], min: {cpu: '10'}, max: {cpu: '10'}}]}",
        running: &[
            j("a-best-effort-low", "a-best-effort", "p-1", 1, "{cpu: '10'}"),
            j("b-best-effort-low", "b-best-effort", "p-1", 1, "{cpu: '1'}"),
        ],
        incoming: &[j("in", "a-standard", "p0", 1, "{cpu: '10'}")],
        expect: Expect {
            waiting: &[("in", QUOTA_SHORT)],
            ..NO_EXPECT
        },
    },
    // DIFFERS on purpose: Kueue preempts a1 and a2 and admits the job borrowing 1 cpu and 1Gi;
    // muster takes every lower-priority job of `a` the job needs to be within a's min (a3 too).
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "preemptions from cq when target queue is exhausted for two requested resources""#,
        nodes: BIG,
        tree: THREE,
        running: &[
            j("a1", "a", "p-2", 1, "{cpu: '1', memory: 1Gi}"),
            j("a2", "a", "p-2", 1, "{cpu: '1', memory: 1Gi}"),
            j("a3", "a", "p-1", 1, "{cpu: '1', memory: 1Gi}"),
            j("b1", "b", "p0", 1, "{cpu: '1', memory: 1Gi}"),
            j("b2", "b", "p0", 1, "{cpu: '1', memory: 1Gi}"),
            j("b3", "b", "p0", 1, "{cpu: '1', memory: 1Gi}"),
        ],
        incoming: &[j("in", "a", "p0", 1, "{cpu: '2', memory: 2Gi}")],
        expect: Expect {
            preempted: &[("a1", "in"), ("a2", "in"), ("a3", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "allow preemption from other cluster queues if target cq is not exhausted for the requested resource""#,
        nodes: BIG,
        tree: THREE,
        running: &[
            j("a1", "a", "p-1", 1, "{cpu: '1'}"),
            j("b1", "b", "p0", 1, "{cpu: '1'}"),
            j("b2", "b", "p0", 1, "{cpu: '1'}"),
            j("b3", "b", "p0", 1, "{cpu: '1'}"),
            j("b4", "b", "p0", 1, "{cpu: '1'}"),
            j("b5", "b", "p-1", 1, "{cpu: '1'}"),
        ],
        incoming: &[j("in", "a", "p0", 1, "{cpu: '2'}")],
        expect: Expect {
            preempted: &[("a1", "in"), ("b5", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    // Kueue's cohorts left and right under a root cohort: three levels here.
    Case {
        source: r#"Kueue pkg/scheduler/preemption/preemption_test.go, "long range preemption""#,
        nodes: BIG,
        tree: "{name: root, max: {cpu: '10'}, children: [
          {name: left, min: {cpu: '10'}, children: [
            {name: cq-left, namespaces: [cq-left], min: {cpu: '10'}, max: {cpu: '10'}}]},
          {name: right, min: {cpu: '0'}, children: [
            {name: cq-right, namespaces: [cq-right], min: {cpu: '0'}, max: {cpu: '10'}}]}]}",
        running: &[j("to-be-preempted", "cq-right", "", 1, "{cpu: '5'}")],
        incoming: &[j("in", "cq-left", "", 1, "{cpu: '8'}")],
        expect: Expect {
            preempted: &[("to-be-preempted", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    // No upstream case; the hierarchical variant of the one above. a2 borrows from its sibling
    // a1 inside org-a, which stays within its own min: reclaim is decided where the paths meet,
    // so a1's job takes a2's newest job, not b1-y of lower priority (org-b borrows nothing).
    Case {
        source: "muster docs/concepts.md \"Reclaim\" (three levels), after Kueue \"long range preemption\"",
        nodes: BIG,
        tree: "{name: root, max: {cpu: '12'}, children: [
          {name: org-a, min: {cpu: '6'}, max: {cpu: '12'}, children: [
            {name: a1, namespaces: [a1], min: {cpu: '3'}, max: {cpu: '12'}},
            {name: a2, namespaces: [a2], min: {cpu: '3'}, max: {cpu: '12'}}]},
          {name: org-b, min: {cpu: '6'}, max: {cpu: '12'}, children: [
            {name: b1, namespaces: [b1], min: {cpu: '6'}, max: {cpu: '12'}}]}]}",
        running: &[
            j("a2-x", "a2", "p0", 1, "{cpu: '3'}"),
            j("a2-y", "a2", "p0", 1, "{cpu: '3'}"),
            j("b1-x", "b1", "p0", 1, "{cpu: '3'}"),
            j("b1-y", "b1", "p-1", 1, "{cpu: '3'}"),
        ],
        incoming: &[j("in", "a1", "p0", 1, "{cpu: '3'}")],
        expect: Expect {
            preempted: &[("a2-y", "in")],
            admitted: &["in"],
            ..NO_EXPECT
        },
    },
    // ----- Kueue pkg/scheduler/scheduler_test.go ------------------------------------------------
    Case {
        source: r#"Kueue pkg/scheduler/scheduler_test.go, "admit in same cohort with no borrowing""#,
        nodes: BIG,
        tree: ENG,
        running: &[],
        incoming: &[
            j("new-alpha", "eng-alpha", "", 1, "{cpu: '1'}"),
            j("new-beta", "eng-beta", "", 1, "{cpu: '1'}"),
        ],
        expect: Expect {
            admitted: &["new-alpha", "new-beta"],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"Kueue pkg/scheduler/scheduler_test.go, "cannot borrow if cohort was assigned and would result in overadmission""#,
        nodes: BIG,
        tree: ENG,
        running: &[],
        incoming: &[
            j("new-alpha", "eng-alpha", "", 45, "{cpu: '1'}"),
            j("new-beta", "eng-beta", "", 56, "{cpu: '1'}"),
        ],
        expect: Expect {
            admitted: &["new-alpha"],
            waiting: &[("new-beta", "quota root: cpu used 45 + requested 56 exceeds max 100")],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"Kueue pkg/scheduler/scheduler_test.go, "can borrow if cohort was assigned and will not result in overadmission""#,
        nodes: BIG,
        tree: ENG,
        running: &[],
        incoming: &[
            j("new-alpha", "eng-alpha", "", 45, "{cpu: '1'}"),
            j("new-beta", "eng-beta", "", 55, "{cpu: '1'}"),
        ],
        expect: Expect {
            admitted: &["new-alpha", "new-beta"],
            ..NO_EXPECT
        },
    },
    // Kueue parks the job as inadmissible until something changes; in muster it is pending (only
    // a request that alone exceeds a max is inadmissible) and, as a borrower, preempts nobody.
    Case {
        source: r#"Kueue pkg/scheduler/scheduler_test.go, "A workload is only eligible to do preemptions if it fits fully within nominal quota""#,
        nodes: BIG,
        tree: "{name: root, max: {cpu: '4'}, children: [
          {name: other-alpha, namespaces: [other-alpha], min: {cpu: '2'},
           attributes: {muster.dev/within-queue-preemption: LowerPriority}},
          {name: other-beta, namespaces: [other-beta], min: {cpu: '2'}}]}",
        running: &[
            j("a1", "other-alpha", "", 1, "{cpu: '1'}"),
            j("b1", "other-beta", "", 1, "{cpu: '1'}"),
        ],
        incoming: &[j("incoming", "other-alpha", "", 1, "{cpu: '3'}")],
        expect: Expect {
            waiting: &[("incoming", QUOTA_SHORT)],
            ..NO_EXPECT
        },
    },
    // DIFFERS on purpose: Kueue leaves the job pending in its queue; muster reports a request
    // that alone exceeds a max as inadmissible, and it blocks nobody.
    Case {
        source: r#"Kueue pkg/scheduler/scheduler_test.go, "not enough resources""#,
        nodes: BIG,
        tree: "{name: root, children: [{name: sales, namespaces: [sales],
          min: {cpu: '50'}, max: {cpu: '50'}, attributes: {muster.dev/queueing-strategy: StrictFIFO}}]}",
        running: &[],
        incoming: &[
            j("new", "sales", "", 1, "{cpu: '100'}"),
            j("small", "sales", "", 1, "{cpu: '1'}"),
        ],
        expect: Expect {
            admitted: &["small"],
            inadmissible: &[("new", "can never be admitted")],
            ..NO_EXPECT
        },
    },
    // ----- Kueue pkg/cache/queue/cluster_queue_test.go -----------------------------------------
    // The higher priority job heads the queue though submitted later; in StrictFIFO it blocks
    // the one behind it, which would fit.
    Case {
        source: r#"Kueue pkg/cache/queue/cluster_queue_test.go, TestStrictFIFO "w1.priority is higher than w2.priority""#,
        nodes: BIG,
        tree: "{name: root, children: [{name: q, namespaces: [q], min: {cpu: '4'}, max: {cpu: '4'},
          attributes: {muster.dev/queueing-strategy: StrictFIFO}}]}",
        running: &[j("hold", "q", "", 1, "{cpu: '2'}")],
        incoming: &[
            j("w2", "q", "p-1", 1, "{cpu: '1'}"),
            j("w1", "q", "p1", 1, "{cpu: '4'}"),
        ],
        expect: Expect {
            waiting: &[
                ("w1", QUOTA_SHORT),
                ("w2", "waiting behind q/w1 in StrictFIFO queue root/q"),
            ],
            ..NO_EXPECT
        },
    },
    // A BestEffortFIFO head that did not fit is set aside (upstream: moved to the inadmissible
    // list), so the job behind it is tried and fits.
    Case {
        source: r#"Kueue pkg/cache/queue/cluster_queue_test.go, TestBestEffortFIFORequeueIfNotPresent "didn't fit and no pending flavors""#,
        nodes: BIG,
        tree: "{name: root, children: [{name: q, namespaces: [q], min: {cpu: '4'}, max: {cpu: '4'}}]}",
        running: &[j("hold", "q", "", 1, "{cpu: '2'}")],
        incoming: &[
            j("w2", "q", "p-1", 1, "{cpu: '1'}"),
            j("w1", "q", "p1", 1, "{cpu: '4'}"),
        ],
        expect: Expect {
            admitted: &["w2"],
            waiting: &[("w1", QUOTA_SHORT)],
            ..NO_EXPECT
        },
    },
    // ----- scheduler-plugins pkg/capacityscheduling/capacity_scheduling_test.go ----------------
    Case {
        source: r#"scheduler-plugins pkg/capacityscheduling/capacity_scheduling_test.go, TestPreFilter "pod subjects to ElasticQuota""#,
        nodes: BIG,
        tree: "{name: root, children: [{name: ns1, namespaces: [ns1],
          min: {memory: 1000Mi}, max: {memory: 2000Mi}}]}",
        running: &[j("used", "ns1", "", 1, "{memory: 300Mi}")],
        incoming: &[
            j("ns1-p1", "ns1", "", 1, "{memory: 500Mi}"),
            j("ns1-p2", "ns1", "", 1, "{memory: 1800Mi}"),
        ],
        expect: Expect {
            admitted: &["ns1-p1"],
            waiting: &[("ns1-p2", QUOTA_SHORT)],
            ..NO_EXPECT
        },
    },
    // The plugin refuses a pod once all quotas together would use more than the sum of the mins
    // (the root's max here), then preempts in PostFilter; muster does both in one cycle.
    Case {
        source: r#"scheduler-plugins pkg/capacityscheduling/capacity_scheduling_test.go, TestPreFilter "the sum of used is bigger than the sum of min""#,
        nodes: BIG,
        tree: "{name: root, max: {memory: 2000Mi}, children: [
          {name: ns1, namespaces: [ns1], min: {memory: 1000Mi}, max: {memory: 2000Mi}},
          {name: ns2, namespaces: [ns2], min: {memory: 1000Mi}, max: {memory: 2000Mi}}]}",
        running: &[
            j("ns1-a", "ns1", "", 1, "{memory: 1000Mi}"),
            j("ns1-b", "ns1", "", 1, "{memory: 800Mi}"),
            j("ns2-a", "ns2", "", 1, "{memory: 200Mi}"),
        ],
        incoming: &[j("ns2-p1", "ns2", "", 1, "{memory: 500Mi}")],
        expect: Expect {
            preempted: &[("ns1-b", "ns2-p1")],
            admitted: &["ns2-p1"],
            ..NO_EXPECT
        },
    },
    // The plugin preempts by priority inside a quota always; muster only where the leaf says so.
    Case {
        source: r#"scheduler-plugins pkg/capacityscheduling/capacity_scheduling_test.go, TestPostFilter and TestDryRunPreemption "in-namespace preemption""#,
        nodes: MEM150,
        tree: "{name: root, children: [
          {name: ns1, namespaces: [ns1], min: {memory: 50Mi}, max: {memory: 200Mi},
           attributes: {muster.dev/within-queue-preemption: LowerPriority}},
          {name: ns2, namespaces: [ns2], min: {memory: 200Mi}, max: {memory: 200Mi}}]}",
        running: &[
            j("t1-p2", "ns1", "p0", 1, "{memory: 50Mi}"),
            j("t1-p3", "ns2", "p0", 1, "{memory: 50Mi}"),
            j("t1-p4", "ns2", "p0", 1, "{memory: 50Mi}"),
        ],
        incoming: &[j("t1-p1", "ns1", "p1", 1, "{memory: 50Mi}")],
        expect: Expect {
            preempted: &[("t1-p2", "t1-p1")],
            admitted: &["t1-p1"],
            ..NO_EXPECT
        },
    },
    // DIFFERS on purpose: the same situation on a leaf left at the default `Never`. The plugin
    // would still preempt t1-p2 (kube-scheduler's priority preemption); muster waits for room.
    Case {
        source: r#"scheduler-plugins pkg/capacityscheduling/capacity_scheduling_test.go, TestPostFilter "in-namespace preemption" (leaf without the attribute)"#,
        nodes: MEM150,
        tree: "{name: root, children: [
          {name: ns1, namespaces: [ns1], min: {memory: 50Mi}, max: {memory: 200Mi}},
          {name: ns2, namespaces: [ns2], min: {memory: 200Mi}, max: {memory: 200Mi}}]}",
        running: &[
            j("t1-p2", "ns1", "p0", 1, "{memory: 50Mi}"),
            j("t1-p3", "ns2", "p0", 1, "{memory: 50Mi}"),
            j("t1-p4", "ns2", "p0", 1, "{memory: 50Mi}"),
        ],
        incoming: &[j("t1-p1", "ns1", "p1", 1, "{memory: 50Mi}")],
        expect: Expect {
            waiting: &[("t1-p1", "the most free on any node is 0")],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"scheduler-plugins pkg/capacityscheduling/capacity_scheduling_test.go, TestDryRunPreemption "cross-namespace preemption""#,
        nodes: MEM150,
        tree: "{name: root, children: [
          {name: ns1, namespaces: [ns1], min: {memory: 150Mi}, max: {memory: 200Mi}},
          {name: ns2, namespaces: [ns2], min: {memory: 50Mi}, max: {memory: 200Mi}}]}",
        running: &[
            j("t1-p1", "ns1", "p0", 1, "{memory: 50Mi}"),
            j("t1-p2", "ns2", "p1", 1, "{memory: 50Mi}"),
            j("t1-p3", "ns2", "p0", 1, "{memory: 50Mi}"),
        ],
        incoming: &[j("t1-p", "ns1", "p1", 1, "{memory: 50Mi}")],
        expect: Expect {
            preempted: &[("t1-p3", "t1-p")],
            admitted: &["t1-p"],
            ..NO_EXPECT
        },
    },
    // ----- koord-queue pkg/framework/plugins/elasticquota ---------------------------------------
    Case {
        source: r#"koord-queue pkg/framework/plugins/elasticquota/elastic_quota_tree_test.go, TestFilter "Invalid preemptible request over max""#,
        nodes: BIG,
        tree: "{name: root, min: {cpu: '10'}, max: {cpu: '10'}, children: [
          {name: child1, namespaces: [default], min: {cpu: '0'}, max: {cpu: '0'}}]}",
        running: &[],
        incoming: &[j("unit-1", "default", "", 3, "{cpu: '1'}")],
        expect: Expect {
            inadmissible: &[("unit-1", "can never be admitted")],
            ..NO_EXPECT
        },
    },
    // DIFFERS on purpose: koord-queue keeps a job labelled non-preemptible within its quota's
    // min. muster has no such label: every job may borrow up to max (and may be reclaimed).
    Case {
        source: r#"koord-queue pkg/framework/plugins/elasticquota/elastic_quota_tree_test.go, TestFilter "Invalid non-preemptible request over min""#,
        nodes: BIG,
        tree: "{name: root, min: {cpu: '10'}, max: {cpu: '10'}, children: [
          {name: child1, namespaces: [default], min: {cpu: '0'}, max: {cpu: '10'}}]}",
        running: &[],
        incoming: &[j("unit-1", "default", "", 3, "{cpu: '1'}")],
        expect: Expect {
            admitted: &["unit-1"],
            ..NO_EXPECT
        },
    },
    Case {
        source: r#"koord-queue pkg/framework/plugins/elasticquota/elasticquotatree/elasticquota_test.go, TestElasticQuotaInfo_UsedOverMax"#,
        nodes: BIG,
        tree: "{name: root, children: [{name: test-quota, namespaces: [test-namespace],
          min: {cpu: '1', memory: 1Gi}, max: {cpu: '2', memory: 2Gi}}]}",
        running: &[j("used", "test-namespace", "", 1, "{cpu: 1500m, memory: 1536Mi}")],
        incoming: &[
            j("one-cpu", "test-namespace", "", 1, "{cpu: '1'}"),
            j("tenth-cpu", "test-namespace", "", 1, "{cpu: 100m}"),
        ],
        expect: Expect {
            admitted: &["tenth-cpu"],
            waiting: &[("one-cpu", "cpu used 1500m + requested 1 exceeds max 2")],
            ..NO_EXPECT
        },
    },
    // koord-queue counts jobs against `koord-queue/max-jobs` in min (times an oversell ratio);
    // muster counts them against `kube-queue/max-jobs` in max, a ceiling like any other.
    Case {
        source: r#"koord-queue pkg/framework/plugins/elasticquota/elasticquotatree/elasticquota_test.go, TestElasticQuotaInfo_UsedOverMinWithOverSell (jobs)"#,
        nodes: BIG,
        tree: "{name: root, children: [{name: q, namespaces: [q],
          min: {cpu: '4'}, max: {cpu: '8', kube-queue/max-jobs: '2'}}]}",
        running: &[
            j("job-1", "q", "", 1, "{cpu: '1'}"),
            j("job-2", "q", "", 1, "{cpu: '1'}"),
        ],
        incoming: &[j("job-3", "q", "p3", 1, "{cpu: '1'}")],
        expect: Expect {
            waiting: &[("job-3", "kube-queue/max-jobs used 2 + requested 1 exceeds max 2")],
            ..NO_EXPECT
        },
    },
];
