//! How an explanation reads: the multi-line text `muster explain` prints (`Display`), the one
//! line a status `reason` holds ([`Explanation::summary`]), each member's and each component's
//! verdict in words.

use super::*;

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// `c: 3 pods, b-0: 1 pod`.
fn fmt_nodes<V: Copy + Into<u64>>(nodes: &BTreeMap<String, V>) -> String {
    let parts: Vec<String> = nodes
        .iter()
        .map(|(n, k)| format!("{n}: {}", plural((*k).into(), "pod", "pods")))
        .collect();
    parts.join(", ")
}

fn fmt_list(l: &ResourceList) -> String {
    let parts: Vec<String> = l.iter().map(|(r, q)| format!("{r} {q}")).collect();
    parts.join(", ")
}

fn fmt_excluded(ex: &BTreeMap<String, usize>) -> String {
    let parts: Vec<String> = ex
        .iter()
        .map(|(why, k)| format!("{}: {why}", plural(*k as u64, "node", "nodes")))
        .collect();
    parts.join("; ")
}

impl ComponentFit {
    /// One line about this component, e.g. `worker: each pod needs nvidia.com/gpu 3 on one
    /// node; the most free on any node is 2 (node a)`; `None` when it fits on its own.
    pub fn describe(&self) -> Option<String> {
        let p = self.problem.as_ref()?;
        let name = &self.component;
        let mut s = match p {
            ComponentProblem::NoNodes => "the cluster has no nodes".to_string(),
            ComponentProblem::NoNodeAdmits => format!(
                "{name}: no node admits its pods ({})",
                fmt_excluded(&self.excluded_nodes)
            ),
            ComponentProblem::Short { short } => {
                if short.len() == 1 && short[0].resource == "pods" {
                    format!("{name}: every node that admits it is at its pods limit")
                } else {
                    let need: Vec<String> = short
                        .iter()
                        .map(|s| format!("{} {}", s.resource, s.need))
                        .collect();
                    let best: Vec<String> = if short.len() == 1 {
                        vec![format!("{} (node {})", short[0].best_free, short[0].node)]
                    } else {
                        short
                            .iter()
                            .map(|s| format!("{} {} (node {})", s.resource, s.best_free, s.node))
                            .collect()
                    };
                    format!(
                        "{name}: each pod needs {} on one node; the most free on any node is {}",
                        need.join(" and "),
                        best.join(", ")
                    )
                }
            }
            ComponentProblem::NotTogether => format!(
                "{name}: each pod needs {} together on one node; no node has all of it free",
                fmt_list(&self.per_pod)
            ),
            ComponentProblem::TooFew { room, nodes } => {
                let mut shown: BTreeMap<String, u64> = BTreeMap::new();
                for (n, k) in nodes.iter().take(5) {
                    shown.insert(n.clone(), *k);
                }
                let more = if nodes.len() > 5 {
                    format!(", and {} more nodes", nodes.len() - 5)
                } else {
                    String::new()
                };
                format!(
                    "{name}: needs {} ({} each); the free nodes hold only {room} ({}{more})",
                    plural(u64::from(self.pods), "pod", "pods"),
                    fmt_list(&self.per_pod),
                    fmt_nodes(&shown)
                )
            }
        };
        if !matches!(p, ComponentProblem::NoNodeAdmits) && !self.excluded_nodes.is_empty() {
            let _ = write!(s, " [not counting {}]", fmt_excluded(&self.excluded_nodes));
        }
        Some(s)
    }
}

/// `per pod (scheduling gates)` or `pinned by node set (robust plans only)`.
pub fn fmt_placement(mode: PlacementMode) -> &'static str {
    match mode {
        PlacementMode::Gates => "per pod (scheduling gates)",
        PlacementMode::Pinned => "pinned by node set (robust plans only)",
    }
}

/// A member's line in the text, and below it how the member is held to the plan.
fn write_member(f: &mut fmt::Formatter<'_>, c: &ClusterFit) -> fmt::Result {
    writeln!(f, "  {}", c.describe())?;
    if c.excluded || c.refused.is_some() {
        return Ok(());
    }
    writeln!(f, "    placement: {}", fmt_placement(c.placement))
}

impl ClusterFit {
    /// `member-a: worker: each pod needs ...`, or `member-c: fits now (c: 3 pods)`.
    pub fn describe(&self) -> String {
        let name = &self.cluster;
        if self.excluded {
            return format!("{name}: excluded by the job's cluster restriction");
        }
        if let Some(why) = &self.refused {
            return format!("{name}: cannot create it: {why}");
        }
        match &self.fit {
            Fit::NotTried => {
                format!("{name}: unreachable; nothing is placed there until it answers")
            }
            Fit::Fits {
                nodes,
                domain: None,
            } => format!("{name}: fits now ({})", fmt_nodes(nodes)),
            Fit::Fits {
                nodes,
                domain: Some(d),
            } => format!("{name}: fits now in {d} ({})", fmt_nodes(nodes)),
            Fit::NoFit { reason, components } => {
                let parts: Vec<String> = components.iter().filter_map(|c| c.describe()).collect();
                if parts.is_empty() {
                    format!("{name}: {reason}")
                } else {
                    format!("{name}: {}", parts.join("; "))
                }
            }
        }
    }
}

impl Pending {
    /// The first quota row that does not fit (leaf first).
    pub fn quota_block(&self) -> Option<&QuotaRow> {
        self.quota.as_ref()?.iter().find(|r| !r.fits)
    }

    /// Whether the scheduler's last reason says what this explanation already shows in
    /// detail (the same kind of obstacle), so the text need not repeat it. A reason of another
    /// kind (a requeue, a reclaim, an obstacle gone since) is shown.
    fn restates(&self, reason: &str) -> bool {
        let no_fit = self.candidates().next().is_some()
            && self
                .candidates()
                .all(|c| matches!(c.fit, Fit::NoFit { .. }));
        (reason.starts_with("quota ") && self.quota_block().is_some())
            || (reason.starts_with("no cluster fits") && no_fit)
            || (reason.starts_with("waiting behind ") && self.blocked_by.is_some())
            || (reason.starts_with("held behind ") && self.held_by.is_some())
    }

    /// Clusters the job may use now (not excluded, reachable).
    fn candidates(&self) -> impl Iterator<Item = &ClusterFit> {
        self.clusters
            .iter()
            .filter(|c| !c.excluded && c.refused.is_none() && !matches!(c.fit, Fit::NotTried))
    }

    /// What keeps the job itself out (quota, or no cluster fits), apart from the queue.
    /// `brief`: clusters are listed below, so do not repeat them.
    fn own_issue(&self, brief: bool) -> String {
        if let Some(r) = self.quota_block() {
            let max = r.max.unwrap_or_default();
            return format!(
                "quota {}: {} {} in use + {} requested = {}, above max {}",
                r.node,
                r.resource,
                r.used,
                r.request,
                r.total(),
                max
            );
        }
        let fits: Vec<&str> = self
            .candidates()
            .filter(|c| matches!(c.fit, Fit::Fits { .. }))
            .map(|c| c.cluster.as_str())
            .collect();
        if !fits.is_empty() {
            return if self.blocked_by.is_some() || self.held_by.is_some() {
                format!(
                    "by itself it is within quota and fits now on {}",
                    fits.join(", ")
                )
            } else {
                format!(
                    "quota allows it and it fits now on {}; the next admission cycle considers it",
                    fits.join(", ")
                )
            };
        }
        let parts: Vec<String> = self.candidates().map(|c| c.describe()).collect();
        if parts.is_empty() {
            return "no reachable member cluster is a candidate for this job".into();
        }
        if brief {
            return "no member cluster has room for all of its pods now".into();
        }
        format!("no member cluster fits it now: {}", parts.join("; "))
    }
}

impl Explanation {
    /// One line for a status `reason` field (at most [`SUMMARY_MAX`] bytes).
    pub fn summary(&self) -> String {
        let s = match &self.status {
            Status::Pending(p) => match (&p.blocked_by, &p.held_by) {
                (Some(h), _) => format!(
                    "waiting behind {} in StrictFIFO queue {}; {}",
                    h.job,
                    self.queue,
                    p.own_issue(false)
                ),
                (None, Some(h)) => format!(
                    "held behind {}, which may take back the jobs of lower priority of queue {}; {}",
                    h.job,
                    self.queue,
                    p.own_issue(false)
                ),
                (None, None) => format!("waiting: {}", p.own_issue(false)),
            },
            Status::Inadmissible(i) => format!("can never run: {}", i.reason),
            Status::Admitted(a) => format!("admitted to {} ({})", a.cluster, fmt_nodes(&a.nodes)),
            Status::Finished => "finished".into(),
        };
        truncate(s, SUMMARY_MAX)
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut cut = max - 3;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str("...");
    s
}

fn write_quota(f: &mut fmt::Formatter<'_>, rows: &[QuotaRow]) -> fmt::Result {
    let shown: Vec<&QuotaRow> = rows
        .iter()
        .filter(|r| r.max.is_some() || !r.min.is_zero())
        .collect();
    let mut unlimited: Vec<&str> = Vec::new();
    for r in rows {
        if !unlimited.contains(&r.resource.as_str())
            && rows
                .iter()
                .filter(|o| o.resource == r.resource)
                .all(|o| o.max.is_none() && o.min.is_zero())
        {
            unlimited.push(&r.resource);
        }
    }
    if shown.is_empty() {
        return writeln!(
            f,
            "Quota: nothing it asks for is limited on its path ({})",
            unlimited.join(", ")
        );
    }
    writeln!(
        f,
        "Quota, from its queue up to the root (in use + this job, against max):"
    )?;
    let wn = shown.iter().map(|r| r.node.len()).max().unwrap_or(0);
    let wr = shown.iter().map(|r| r.resource.len()).max().unwrap_or(0);
    for r in shown {
        let mut line = format!(
            "  {:<wn$}  {:<wr$}  {} + {} = {}",
            r.node,
            r.resource,
            r.used,
            r.request,
            r.total()
        );
        if let Some(m) = r.max {
            let _ = write!(line, " of max {m}");
        }
        if !r.min.is_zero() {
            let _ = write!(line, ", min {}", r.min);
        }
        let verdict = match (r.fits, r.max) {
            (false, Some(m)) => format!("OVER MAX by {}", r.total() - m),
            _ if r.min.is_zero() => "ok".to_string(),
            _ if r.borrows => format!("ok, borrows {} above min", r.total() - r.min),
            _ => "ok, within min".to_string(),
        };
        writeln!(f, "{line}: {verdict}")?;
    }
    if !unlimited.is_empty() {
        writeln!(f, "  not limited on its path: {}", unlimited.join(", "))?;
    }
    Ok(())
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let job = &self.job;
        match &self.status {
            Status::Finished => writeln!(f, "{job}: finished."),
            Status::Admitted(a) => {
                writeln!(
                    f,
                    "{job}: admitted to {} (queue {}, priority {}).",
                    a.cluster, self.queue, self.priority
                )?;
                writeln!(f, "  planned nodes: {}", fmt_nodes(&a.nodes))?;
                if let Some(d) = &a.domain {
                    writeln!(f, "  topology domain: {d}")?;
                }
                if !self.topology.is_empty() {
                    writeln!(f, "  topology asked: {}", self.topology.join("; "))?;
                }
                writeln!(f, "  placement: {}", fmt_placement(a.placement))?;
                if let Some(w) = &a.waited {
                    writeln!(f, "  before that it waited: {w}")?;
                }
                Ok(())
            }
            Status::Inadmissible(i) => {
                writeln!(f, "{job}: can never run as written (inadmissible).")?;
                writeln!(f, "  {}", i.reason)?;
                if let Some(q) = &i.quota {
                    writeln!(
                        f,
                        "  quota {}: this job alone asks {} {}, above its max {} by {}; no usage can make room",
                        q.node,
                        q.resource,
                        q.request,
                        q.max,
                        q.request - q.max
                    )?;
                }
                let fits = i.clusters.iter().any(|c| matches!(c.fit, Fit::Fits { .. }));
                if !fits && !i.clusters.is_empty() {
                    writeln!(f, "Member clusters, even with nothing else running:")?;
                    for c in &i.clusters {
                        write_member(f, c)?;
                    }
                }
                Ok(())
            }
            Status::Pending(p) => {
                let place = match p.ahead {
                    0 => "first in line".to_string(),
                    n => format!("{} ahead of it", plural(n as u64, "job", "jobs")),
                };
                writeln!(
                    f,
                    "{job}: waiting in queue {} (priority {}, {place}).",
                    self.queue, self.priority
                )?;
                // The job it waits behind (StrictFIFO's head, or A8's holder), and why that one
                // waits.
                let behind = [
                    p.blocked_by.as_ref().map(|h| {
                        (
                            h,
                            format!(
                                "the queue is StrictFIFO: nothing behind its head {} is admitted before it",
                                h.job
                            ),
                        )
                    }),
                    p.held_by.as_ref().map(|h| {
                        (
                            h,
                            format!(
                                "held: {} (higher priority) may take back this queue's jobs of lower priority and waits for room on a member; none of them is admitted before it",
                                h.job
                            ),
                        )
                    }),
                ];
                for (h, line) in behind.into_iter().flatten() {
                    writeln!(f, "  {line}")?;
                    if let Some(r) = &h.reason {
                        writeln!(f, "  {} waits: {r}", h.job)?;
                    }
                }
                writeln!(f, "  {}", p.own_issue(true))?;
                if let Some(r) = p.reason.as_ref().filter(|r| !p.restates(r)) {
                    writeln!(f, "  last admission cycle: {r}")?;
                }
                if let Some(rows) = &p.quota {
                    write_quota(f, rows)?;
                }
                if let Some(rows) = &p.fair {
                    crate::scheduler::fair::write_fair(f, rows)?;
                }
                if !self.topology.is_empty() {
                    writeln!(f, "  topology asked: {}", self.topology.join("; "))?;
                }
                writeln!(
                    f,
                    "Member clusters (all of the job's pods must fit on one of them at once):"
                )?;
                for c in &p.clusters {
                    write_member(f, c)?;
                }
                Ok(())
            }
        }
    }
}
