//! Stopping in two steps, so that nothing is sent to a replica that is going away: when asked
//! to stop (a signal, or a leader that lost its lease), `/readyz` answers 503 at once and the
//! sync loop stops, while the webhook and health servers keep answering for a drain period, long
//! enough for the Service to take the replica out of its endpoints; only then do they stop and
//! the process exits. Owns the two tokens and the readiness answer; never decides anything.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The controller's stop.
#[derive(Clone, Debug)]
pub struct Stop {
    /// Cancelled when the controller is to stop: the loop ends, readiness answers 503.
    pub token: CancellationToken,
    /// Cancelled `drain` after `token`: the webhook and health servers stop.
    pub servers: CancellationToken,
}

impl Stop {
    /// A stop whose servers end `drain` after the stop itself, whatever cancelled it. Needs a
    /// tokio runtime (it spawns the timer).
    pub fn new(drain: Duration) -> Stop {
        let stop = Stop {
            token: CancellationToken::new(),
            servers: CancellationToken::new(),
        };
        let (token, servers) = (stop.token.clone(), stop.servers.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = servers.cancelled() => return,
            }
            if servers.is_cancelled() {
                return;
            }
            tracing::info!(
                drain_seconds = drain.as_secs_f64(),
                "stopping: not ready; the webhook answers until the drain ends"
            );
            tokio::select! {
                _ = tokio::time::sleep(drain) => {}
                _ = servers.cancelled() => {}
            }
            servers.cancel();
        });
        stop
    }

    /// Whether `/readyz` answers 200: the replica is ready (`ready`) and not stopping.
    pub fn ready(&self, ready: &AtomicBool) -> bool {
        ready.load(Ordering::Relaxed) && !self.token.is_cancelled()
    }

    /// The end of a run: after a stop, waits until the drain is over; after an error nobody
    /// asked to stop for (nothing was ever ready to drain), stops the servers at once.
    pub async fn finish(&self) {
        if !self.token.is_cancelled() {
            // Servers first: the drain timer then sees that there is nothing to drain.
            self.servers.cancel();
            self.token.cancel();
        }
        self.servers.cancelled().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn not_ready_at_once_servers_after_the_drain() {
        let stop = Stop::new(Duration::from_millis(300));
        let ready = AtomicBool::new(true);
        assert!(stop.ready(&ready));
        ready.store(false, Ordering::Relaxed);
        assert!(!stop.ready(&ready), "not ready before it is ready");
        ready.store(true, Ordering::Relaxed);
        let asked = Instant::now();
        stop.token.cancel();
        assert!(
            !stop.ready(&ready),
            "503 from the moment it is asked to stop"
        );
        assert!(!stop.servers.is_cancelled(), "the servers still answer");
        stop.finish().await;
        assert!(stop.servers.is_cancelled());
        assert!(
            asked.elapsed() >= Duration::from_millis(300),
            "{:?}",
            asked.elapsed()
        );
        assert!(!stop.ready(&ready));
    }

    #[tokio::test]
    async fn an_error_without_a_stop_ends_at_once() {
        let stop = Stop::new(Duration::from_secs(3600));
        let started = Instant::now();
        stop.finish().await;
        assert!(stop.servers.is_cancelled() && stop.token.is_cancelled());
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
