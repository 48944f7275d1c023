//! Offline arrivals: every request is present at time zero, as in a batch or throughput job.

use super::{Arrival, ArrivalProcess, check_n_topics, uniform_topic};
use crate::rng::SimRng;
use crate::time::SimTime;

/// `n_requests` arrivals, all at `t = 0`, each with a topic drawn uniformly from `0..n_topics`.
pub struct Offline {
    n_topics: u32,
    remaining: usize,
    rng: SimRng,
}

impl Offline {
    /// # Panics
    /// If `n_topics` is zero.
    pub fn new(n_requests: usize, n_topics: u32, rng: SimRng) -> Offline {
        check_n_topics("Offline", n_topics);
        Offline {
            n_topics,
            remaining: n_requests,
            rng,
        }
    }
}

impl ArrivalProcess for Offline {
    fn next_arrival(&mut self) -> Option<Arrival> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        Some(Arrival {
            time: SimTime::ZERO,
            topic: uniform_topic(&mut self.rng, self.n_topics),
            prompt_tokens: None,
            output_tokens: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::collect;
    use super::*;
    use crate::rng::stream;

    #[test]
    fn all_requests_arrive_at_zero_and_the_count_is_exact() {
        let arrivals = collect(&mut Offline::new(3_000, 8, stream(42, "arrivals")));
        assert_eq!(arrivals.len(), 3_000);
        assert!(arrivals.iter().all(|a| a.time == SimTime::ZERO));
        assert!(arrivals.iter().all(|a| a.topic < 8));
        // Every topic occurs (each is missing with probability (7/8)^3000).
        for topic in 0..8 {
            assert!(
                arrivals.iter().any(|a| a.topic == topic),
                "topic {topic} never drawn"
            );
        }
    }

    #[test]
    fn same_seed_gives_the_same_topics() {
        let run = |seed| collect(&mut Offline::new(500, 8, stream(seed, "arrivals")));
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    #[test]
    fn zero_requests_is_immediately_exhausted() {
        assert_eq!(
            Offline::new(0, 1, stream(1, "arrivals")).next_arrival(),
            None
        );
    }
}
