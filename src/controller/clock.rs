//! The hub's clock. Every time muster writes into a record (admitted, dispatched, missing since,
//! backoff until) is read again by whichever replica leads next; dated by each replica's own
//! clock, a replica whose clock runs ahead would find every deadline long past (and take every
//! job back), one behind would hold jobs past their timeouts. So every replica dates by the hub
//! API server's clock: the offset of its own clock from the hub's is measured from the `Date`
//! header of a request to the hub (one-second resolution: within half a second plus half the
//! round trip), at start and every minute, and [`now_ms`] adds it. Decides nothing.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use kube::Client;

use crate::lifecycle::Ms;

/// The hub's clock minus this machine's, in milliseconds.
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// A measured offset moves the one in use only when it differs by more than this: a
/// measurement is only good to about half a second, and a clock that steps back and forth by
/// that much at every minute would make no deadline more right.
const STEP_MS: i64 = 1_000;

/// How often the offset is measured again.
const EVERY: Duration = Duration::from_secs(60);

fn local_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// Now on the hub's clock, in milliseconds since the Unix epoch.
pub fn now_ms() -> Ms {
    local_ms()
        .saturating_add(OFFSET_MS.load(Ordering::Relaxed))
        .max(0) as Ms
}

/// Now on the hub's clock, as a timestamp (for the times muster writes into statuses).
pub fn now() -> jiff::Timestamp {
    jiff::Timestamp::from_millisecond(now_ms() as i64).unwrap_or_else(|_| jiff::Timestamp::now())
}

/// The hub's clock minus this machine's, as last measured (0 before the first measurement).
pub fn offset_ms() -> i64 {
    OFFSET_MS.load(Ordering::Relaxed)
}

/// The hub's time given by an HTTP `Date` header (`Fri, 04 Dec 2026 08:42:57 GMT`), in
/// milliseconds: the middle of the second it names.
pub fn date_ms(date: &str) -> Result<i64, String> {
    let t = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(date)
        .map_err(|e| format!("the hub's Date header {date:?} does not parse: {e}"))?;
    Ok(t.as_millisecond() + 500)
}

/// The offset of the hub's clock from this machine's, from one request.
pub async fn measure(hub: &Client) -> Result<i64, String> {
    let req = kube::client::Body::from(Vec::new());
    let req = hyper::Request::get("/version")
        .body(req)
        .map_err(|e| e.to_string())?;
    let before = local_ms();
    let resp = tokio::time::timeout(Duration::from_secs(10), hub.send(req))
        .await
        .map_err(|_| "the hub did not answer within 10 s".to_string())?
        .map_err(|e| e.to_string())?;
    let after = local_ms();
    let date = resp
        .headers()
        .get(hyper::header::DATE)
        .ok_or("the hub's answer has no Date header")?
        .to_str()
        .map_err(|e| e.to_string())?;
    Ok(date_ms(date)? - (before + after) / 2)
}

/// Whether a measured offset replaces the one in use.
fn moves(current: i64, measured: i64) -> bool {
    (measured - current).abs() > STEP_MS
}

/// Measures the offset once (before the first pass), logging what it found.
pub async fn set(hub: &Client) {
    match measure(hub).await {
        Ok(o) => {
            if moves(0, o) {
                tracing::warn!(
                    offset_ms = o,
                    "this machine's clock differs from the hub API server's; muster dates its records by the hub's"
                );
                OFFSET_MS.store(o, Ordering::Relaxed);
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not read the hub API server's clock; dating records by this machine's until it can")
        }
    }
}

/// Measures the offset every minute from now on.
pub async fn keep(hub: Client) {
    loop {
        tokio::time::sleep(EVERY).await;
        if let Ok(o) = measure(&hub).await {
            let current = offset_ms();
            if moves(current, o) {
                tracing::warn!(
                    from_ms = current,
                    to_ms = o,
                    "the offset of this machine's clock from the hub's changed"
                );
                OFFSET_MS.store(o, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_date_header_is_the_middle_of_its_second() {
        let t = date_ms("Fri, 04 Dec 2026 08:42:57 GMT").expect("parses");
        let want = jiff::Timestamp::from_second(1_796_373_777).expect("a time");
        assert_eq!(t, want.as_millisecond() + 500);
        assert!(date_ms("yesterday").is_err());
    }

    #[test]
    fn the_offset_moves_only_by_more_than_a_second() {
        assert!(!moves(0, 900));
        assert!(!moves(2_000, 1_200));
        assert!(moves(0, -1_500));
        assert!(moves(300_000, 0));
    }
}
