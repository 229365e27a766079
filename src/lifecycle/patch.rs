//! How a driver writes an object the hub holds as JSON (a QueuedJob's status, the record's wire
//! form: `lifecycle::wire`): as a JSON merge patch (RFC 7386) from what it knows the hub holds.
//! A write whose outcome is unknown (no answer, or an error after which it may still have
//! landed) leaves the writer unsure of some keys ([`unsure_keys`]); until a later write lands,
//! each write covers them ([`covering_patch`]: the whole object, null for every key that may be
//! there and should not). The controller and the fault simulation both write this way; the
//! simulated hub applies each patch as the API server does (`json_patch::merge`).

use serde_json::{Map, Value};

use super::Defect;
use super::outbox::Landed;

/// The patch that turns what the hub holds into `new`: the diff from `held` (what the last
/// write known to have landed left there), or, while writes since may have landed unseen
/// (`unsure`: their keys), a patch covering those keys. None: nothing to send. With the defect
/// `patch-from-belief`, the diff from `held` alone.
pub fn patch_for(
    held: &Value,
    unsure: Option<&Value>,
    new: &Value,
    defect: Option<Defect>,
) -> Option<Value> {
    match unsure {
        Some(u) if defect != Some(Defect::PatchFromBelief) => {
            Some(covering_patch(&unsure_keys(Some(u), held), new))
        }
        _ => merge_diff(held, new),
    }
}

/// The keys a writer is unsure of once a write of `sent` ended as `landed`: none after one
/// that landed (its patch covered every key in doubt, so the hub holds `sent`), `sent`'s added
/// after one without a clear outcome (it may have landed all the same), unchanged when it was
/// not sent. Both drivers keep their belief by it.
pub fn unsure_after(unsure: Option<&Value>, sent: &Value, landed: &Landed) -> Option<Value> {
    match landed {
        Landed::Written => None,
        Landed::Failed(_) => Some(unsure_keys(unsure, sent)),
        Landed::NotSent | Landed::NameHeld(_) => unsure.cloned(),
    }
}

/// A status patch of `job` met a conflict (the QueuedJob changed since the resourceVersion it
/// was made against), or its resourceVersion was unknown, and the executor read the QueuedJob
/// of its name: it holds the record of `there_job`, with status `there`. Another job's (its
/// QueuedJob taken since): Err with that job, nothing is written. Its own: the patch made
/// again from what is there ([`over`]), to send against the version read.
pub fn again(
    (job, there_job): (&str, &str),
    there: &Value,
    (planned, new): (Option<&Value>, &Value),
    defect: Option<Defect>,
) -> Result<Option<Value>, String> {
    if job != there_job {
        return Err(there_job.to_string());
    }
    Ok(over(there, planned, new, defect))
}

/// The status patch a create makes when it finds a QueuedJob of its name there (an earlier
/// job's, taken over, or its own, made by a write whose answer was lost): from what is there
/// (`there`), read in that same request, so that none of the earlier job's keys (its member,
/// old copies, charge) stay in it. With the defect `status-taken-over`, the patch the write
/// was planned with (`planned`: from what the writer believed, nothing for a create).
pub fn over(
    there: &Value,
    planned: Option<&Value>,
    new: &Value,
    defect: Option<Defect>,
) -> Option<Value> {
    if defect == Some(Defect::StatusTakenOver) {
        return planned.cloned();
    }
    merge_diff(there, new)
}

/// What the hub may hold beyond the status last known to have landed: the keys of every
/// status sent since whose outcome is unknown (no answer, or an error after which it may still
/// have landed). Leaves are `true`; an object where any of them held an object.
pub fn unsure_keys(earlier: Option<&Value>, sent: &Value) -> Value {
    match (earlier, sent) {
        (Some(Value::Object(e)), Value::Object(s)) => {
            let mut u = e.clone();
            for (k, v) in s {
                let merged = unsure_keys(e.get(k), v);
                u.insert(k.clone(), merged);
            }
            Value::Object(u)
        }
        (Some(e @ Value::Object(_)), _) => e.clone(),
        (_, Value::Object(s)) => Value::Object(
            s.iter()
                .map(|(k, v)| (k.clone(), unsure_keys(None, v)))
                .collect(),
        ),
        _ => Value::Bool(true),
    }
}

/// The merge patch that turns whatever the hub holds into `new` when some of what it holds is
/// unknown: every member of `new` (none can be trusted to be there already), and null for every
/// key in `keys` that `new` lacks.
pub fn covering_patch(keys: &Value, new: &Value) -> Value {
    match (keys, new) {
        (Value::Object(k), Value::Object(n)) => {
            let mut d: Map<String, Value> = n
                .iter()
                .map(|(key, nv)| {
                    let v = match k.get(key) {
                        Some(kv) => covering_patch(kv, nv),
                        None => nv.clone(),
                    };
                    (key.clone(), v)
                })
                .collect();
            for key in k.keys() {
                if !n.contains_key(key) {
                    d.insert(key.clone(), Value::Null);
                }
            }
            Value::Object(d)
        }
        (_, n) => n.clone(),
    }
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: only the members that changed,
/// null for the ones gone; None when they are equal. ([`covering_patch`] sends every member of
/// `new` instead, for a hub that may hold more than is known: a write whose outcome is unknown,
/// or a hub job status read from a store that may lag.)
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut d = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) if ov == nv => {}
                    Some(ov) if ov.is_object() && nv.is_object() => {
                        if let Some(sub) = merge_diff(ov, nv) {
                            d.insert(k.clone(), sub);
                        }
                    }
                    _ if nv.is_null() && !o.contains_key(k) => {}
                    _ => {
                        d.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys() {
                if !n.contains_key(k) || n.get(k).is_some_and(Value::is_null) {
                    d.insert(k.clone(), Value::Null);
                }
            }
            (!d.is_empty()).then_some(Value::Object(d))
        }
        (o, n) if o == n => None,
        (_, n) => Some(n.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn patch_for(belief: &Value, unsure: Option<&Value>, new: &Value) -> Option<Value> {
        super::patch_for(belief, unsure, new, None)
    }

    #[test]
    fn a_write_that_landed_without_an_answer_is_covered_by_the_next() {
        let belief = json!({"state": "Queued", "reason": "waits"});
        // Sent, no answer; it landed all the same.
        let lost = json!({"state": "Admitted", "cluster": "member-a", "lifecycle": {"orphans": {"m": "t"}}});
        let mut hub = belief.clone();
        json_patch::merge(&mut hub, &merge_diff(&belief, &lost).expect("differs"));
        let new = json!({"state": "Queued", "reason": "taken back", "lifecycle": {"orphans": {}}});
        // Diffed against the belief alone, `cluster` and the orphan stay on the hub.
        let mut naive = hub.clone();
        json_patch::merge(&mut naive, &merge_diff(&belief, &new).expect("differs"));
        assert_ne!(naive, new, "the belief alone leaves keys behind");
        let unsure = unsure_keys(None, &lost);
        let mut covered = hub.clone();
        json_patch::merge(
            &mut covered,
            &patch_for(&belief, Some(&unsure), &new).expect("sent"),
        );
        assert_eq!(covered, new);
        // And when it did not land, the same patch gives the same status.
        let mut not_landed = belief.clone();
        json_patch::merge(
            &mut not_landed,
            &patch_for(&belief, Some(&unsure), &new).expect("sent"),
        );
        assert_eq!(not_landed, new);
    }

    fn status() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            (0..3i64).prop_map(Value::from),
            Just(Value::String("s".into())),
        ];
        let inner =
            prop::collection::btree_map(prop::sample::select(vec!["x", "y"]), leaf.clone(), 0..3)
                .prop_map(|m| {
                    Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                });
        let value = prop_oneof![leaf, inner];
        prop::collection::btree_map(prop::sample::select(vec!["a", "b", "c", "d"]), value, 0..4)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
    }

    proptest! {
        /// Whatever subset of the writes without an answer landed, the next write that lands
        /// leaves the hub holding exactly the status it sends.
        #[test]
        fn the_hub_holds_what_the_last_landed_write_sent(
            first in status(),
            tries in prop::collection::vec((status(), any::<bool>()), 0..5),
            last in status(),
        ) {
            let mut hub = first.clone();
            let belief = first;
            let mut unsure: Option<Value> = None;
            for (sent, landed) in tries {
                if let Some(p) = patch_for(&belief, unsure.as_ref(), &sent) && landed {
                    json_patch::merge(&mut hub, &p);
                }
                unsure = Some(unsure_keys(unsure.as_ref(), &sent));
            }
            if let Some(p) = patch_for(&belief, unsure.as_ref(), &last) {
                json_patch::merge(&mut hub, &p);
            }
            prop_assert_eq!(hub, last);
        }
    }

    #[test]
    fn a_merge_diff_turns_old_into_new() {
        let old = json!({"state": "Queued", "reason": "waits", "lifecycle": {"spec": "a", "ran": false, "orphans": {"m": "t"}}, "queue": "q"});
        let new = json!({"state": "Admitted", "lifecycle": {"spec": "a", "ran": true, "orphans": {}}, "queue": "q", "cluster": "member-a"});
        let d = merge_diff(&old, &new).expect("differs");
        assert_eq!(
            d,
            json!({"state": "Admitted", "reason": null, "cluster": "member-a", "lifecycle": {"ran": true, "orphans": {"m": null}}})
        );
        // Applying the patch as RFC 7386 says gives `new`.
        let mut applied = old.clone();
        json_patch::merge(&mut applied, &d);
        assert_eq!(applied, new);
        assert_eq!(merge_diff(&new, &new), None);
        // From nothing: everything.
        assert_eq!(
            merge_diff(&json!({}), &new),
            Some(new.clone()),
            "a first write sends the whole status"
        );
    }
}
