//! Queues: one per quota leaf (or per namespace without a tree), and the order of jobs in them.
//!
//! Owns queue identity (name, leaf, strategy) and [`JobOrder`]: higher priority first, then
//! earlier submission, then arrival sequence. Holds no jobs' resources and makes no decisions.

use std::cmp::Reverse;
use std::collections::HashMap;

use crate::quota::Strategy;

/// Position of a job in its queue: priority (descending), submission time, arrival sequence.
/// A preempted job keeps its order and so returns to its original place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobOrder {
    pub priority: Reverse<i32>,
    pub submitted: u64,
    pub seq: u64,
}

#[derive(Clone, Debug)]
struct Queue {
    name: String,
    leaf: Option<usize>,
    strategy: Strategy,
}

/// The set of queues, by name.
#[derive(Clone, Debug, Default)]
pub struct Queues {
    queues: Vec<Queue>,
    by_name: HashMap<String, usize>,
}

impl Queues {
    /// The queue called `name` (a leaf's path, or a namespace), created on first use.
    pub fn get_or_add(&mut self, name: &str, leaf: Option<usize>, strategy: Strategy) -> usize {
        if let Some(&i) = self.by_name.get(name) {
            let q = &mut self.queues[i];
            q.leaf = leaf;
            q.strategy = strategy;
            return i;
        }
        let i = self.queues.len();
        self.queues.push(Queue {
            name: name.to_string(),
            leaf,
            strategy,
        });
        self.by_name.insert(name.to_string(), i);
        i
    }

    /// Detaches every queue from its leaf (the tree changed); `get_or_add` attaches them again.
    pub fn forget_leaves(&mut self) {
        for q in &mut self.queues {
            q.leaf = None;
        }
    }

    pub fn name(&self, q: usize) -> &str {
        &self.queues[q].name
    }

    pub fn leaf(&self, q: usize) -> Option<usize> {
        self.queues[q].leaf
    }

    pub fn strategy(&self, q: usize) -> Strategy {
        self.queues[q].strategy
    }

    pub fn len(&self) -> usize {
        self.queues.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_priority_then_time_then_sequence() {
        let o = |p, t, s| JobOrder {
            priority: Reverse(p),
            submitted: t,
            seq: s,
        };
        let mut v = vec![o(0, 5, 1), o(10, 9, 2), o(0, 1, 3), o(10, 9, 0)];
        v.sort();
        assert_eq!(v, vec![o(10, 9, 0), o(10, 9, 2), o(0, 1, 3), o(0, 5, 1)]);
    }
}
