//! The checks every serving run passes before it reports (a failure is a bug in the simulator,
//! reported as the run's failure with the numbers that disagree): conservation of requests and
//! tokens on each replica, and Little's law between the replica's own population integral and
//! the recorder's end-to-end latencies.

use crate::recorder::ServingSummary;
use crate::serving::ReplicaStats;
use crate::time::SimTime;

/// What was routed to a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submitted {
    pub requests: u64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
}

/// Requests submitted = admitted = finished (none left in flight at the end of a run that
/// drains); prompt tokens in = tokens prefilled less those recomputed after preemptions, plus
/// those found cached (prefix caching); output tokens asked = emitted = recorded.
pub fn conservation(
    replica: usize,
    stats: &ReplicaStats,
    summary: &ServingSummary,
    submitted: Submitted,
) -> Result<(), String> {
    let fail = |what: String| Err(format!("conservation broken on replica {replica}: {what}"));
    if stats.in_system != 0 {
        return fail(format!(
            "{} requests still in flight at the end",
            stats.in_system
        ));
    }
    if stats.admitted != submitted.requests || stats.completed != submitted.requests {
        return fail(format!(
            "{} requests submitted, {} admitted, {} finished",
            submitted.requests, stats.admitted, stats.completed
        ));
    }
    if summary.latencies.completed != stats.completed {
        return fail(format!(
            "{} finished, {} recorded",
            stats.completed, summary.latencies.completed
        ));
    }
    let cached = stats.prefix_hit_tokens + stats.prefix_rehit_tokens;
    if stats.prefill_tokens + cached != submitted.prompt_tokens + stats.recomputed_tokens {
        return fail(format!(
            "{} prompt tokens submitted and {} recomputed, {} prefilled and {} found cached",
            submitted.prompt_tokens, stats.recomputed_tokens, stats.prefill_tokens, cached
        ));
    }
    if stats.tokens != submitted.output_tokens
        || summary.latencies.output_tokens != submitted.output_tokens
    {
        return fail(format!(
            "{} output tokens asked, {} emitted, {} recorded",
            submitted.output_tokens, stats.tokens, summary.latencies.output_tokens
        ));
    }
    Ok(())
}

/// Little's law over [0, `end`]: the time-average number of requests the replica held (its own
/// population integral) equals its completion rate times the mean end-to-end latency the
/// recorder measured (exact sums, so to rounding: relative 1e-9).
pub fn littles_law(
    replica: usize,
    stats: &ReplicaStats,
    summary: &ServingSummary,
    end: SimTime,
) -> Result<(), String> {
    if stats.completed == 0 || end.0 == 0 {
        return Ok(());
    }
    let in_system = stats.mean_in_system(end);
    let rate_per_ns = stats.completed as f64 / end.0 as f64;
    let sojourn_ns = summary.latencies.e2e.mean_ms() * 1e6;
    let predicted = rate_per_ns * sojourn_ns;
    if (in_system - predicted).abs() > 1e-9 * in_system.max(1e-12) + 1e-12 {
        return Err(format!(
            "Little's law broken on replica {replica}: mean in system {in_system}, rate x mean \
             e2e {predicted}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_token_or_request_is_reported() {
        let mut stats = ReplicaStats::default();
        (stats.admitted, stats.completed) = (2, 2);
        (stats.tokens, stats.prefill_tokens) = (10, 100);
        let mut summary = ServingSummary::default();
        summary.latencies.completed = 2;
        summary.latencies.output_tokens = 10;
        let fine = Submitted {
            requests: 2,
            prompt_tokens: 100,
            output_tokens: 10,
        };
        assert_eq!(conservation(0, &stats, &summary, fine), Ok(()));
        let lost_token = Submitted {
            output_tokens: 11,
            ..fine
        };
        let err = conservation(3, &stats, &summary, lost_token).unwrap_err();
        assert!(
            err.contains("replica 3") && err.contains("11 output tokens asked"),
            "{err}"
        );
        let lost_request = Submitted {
            requests: 3,
            ..fine
        };
        assert!(conservation(0, &stats, &summary, lost_request).is_err());
    }

    #[test]
    fn littles_law_holds_on_consistent_books_and_catches_a_lost_second() {
        // Two requests: [0, 2 s] and [1 s, 4 s]. Population integral 2 + 3 = 5 request-seconds
        // over 4 s: L = 1.25; rate 2 / 4 s, mean sojourn 2.5 s: rate x W = 1.25.
        let s = |secs: f64| SimTime::from_secs_f64(secs);
        let mut stats = ReplicaStats::default();
        stats.population(s(0.0), 1);
        stats.population(s(1.0), 1);
        stats.population(s(2.0), -1);
        stats.population(s(4.0), -1);
        stats.completed = 2;
        let mut summary = ServingSummary::default();
        summary.latencies.e2e.record(2_000_000_000);
        summary.latencies.e2e.record(3_000_000_000);
        assert_eq!(littles_law(0, &stats, &summary, s(4.0)), Ok(()));
        // A recorder that lost a second of one request's latency.
        let mut short = ServingSummary::default();
        short.latencies.e2e.record(2_000_000_000);
        short.latencies.e2e.record(2_000_000_000);
        let err = littles_law(1, &stats, &short, s(4.0)).unwrap_err();
        assert!(err.contains("replica 1") && err.contains("1.25"), "{err}");
    }
}
