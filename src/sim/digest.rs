//! A digest of a run's decision trace: every admission (instant, job, member, plan) and
//! preemption (instant, victim, preemptor, reason) in the order the core returned them, and
//! separately every wait (instant, job, reason). Two runs with the same digests took the same
//! decisions; the benchmarks print them so that a speed-up can be shown to change none.

use crate::scheduler::Decision;

/// A multiply-rotate hash (FxHash's step, 8 bytes at a time) over the decisions, as they come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceDigest {
    /// Admissions and preemptions.
    pub moves: u64,
    /// Waits, with their reasons.
    pub waits: u64,
    /// How many waits were added.
    pub wait_count: u64,
}

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const K: u64 = 0x517c_c1b7_2722_0a95;

fn step(h: &mut u64, w: u64) {
    *h = (h.rotate_left(5) ^ w).wrapping_mul(K);
}

impl Default for TraceDigest {
    fn default() -> Self {
        TraceDigest {
            moves: OFFSET,
            waits: OFFSET,
            wait_count: 0,
        }
    }
}

/// Bytes, then their length (so that fields cannot run into each other).
fn feed(h: &mut u64, bytes: &[u8]) {
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        step(h, u64::from_le_bytes(w));
    }
    let mut w = [0u8; 8];
    w[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    step(h, u64::from_le_bytes(w));
    step(h, bytes.len() as u64);
}

fn num(h: &mut u64, n: u64) {
    step(h, n);
}

impl TraceDigest {
    /// Adds one decision taken at virtual instant `now`.
    pub fn add(&mut self, now: u64, d: &Decision) {
        match d {
            Decision::Admit {
                job,
                cluster,
                placement,
                nodes,
            } => {
                let h = &mut self.moves;
                feed(h, b"admit");
                num(h, now);
                num(h, *job as u64);
                feed(h, cluster.as_bytes());
                for (node, pods) in nodes {
                    feed(h, node.as_bytes());
                    num(h, u64::from(*pods));
                }
                for g in &placement.groups {
                    num(h, g.len() as u64);
                    for (n, k) in g {
                        num(h, *n as u64);
                        num(h, u64::from(*k));
                    }
                }
            }
            Decision::Preempt { job, by, reason } => {
                let h = &mut self.moves;
                feed(h, b"preempt");
                num(h, now);
                num(h, *job as u64);
                num(h, *by as u64);
                feed(h, reason.as_bytes());
            }
            Decision::Wait { job, reason } => {
                self.wait_count += 1;
                let h = &mut self.waits;
                num(h, now);
                num(h, *job as u64);
                feed(h, reason.as_bytes());
            }
        }
    }
}

impl std::fmt::Display for TraceDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "moves {:016x} waits {:016x} ({} waits)",
            self.moves, self.waits, self.wait_count
        )
    }
}
