//! The confidence gate of Algorithm 1 with C_vote, the plurality fraction of the k answers:
//! skip the aggregator when C_vote >= tau. With k = 3, tau = 1 skips the unanimous (3:0)
//! questions only, tau = 2/3 also the 2:1 ones, tau <= 1/3 every question.

use expertsim_serving::policies::gate::GATE_TOLERANCE;
use expertsim_serving::policies::gate::{AggregationGate, Votes};

pub struct Threshold {
    tau: f64,
}

impl Threshold {
    pub fn new(tau: f64) -> Self {
        Threshold { tau }
    }
}

impl AggregationGate for Threshold {
    fn name(&self) -> &'static str {
        "threshold"
    }
    fn skip(&mut self, votes: &Votes) -> bool {
        votes.confidence() >= self.tau - GATE_TOLERANCE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skips(tau: f64) -> Vec<bool> {
        let mut gate = Threshold::new(tau);
        (1..=3)
            .rev()
            .map(|plurality| gate.skip(&Votes { k: 3, plurality }))
            .collect()
    }

    #[test]
    fn tau_one_skips_exactly_the_unanimous_questions() {
        assert_eq!(skips(1.0), vec![true, false, false]);
        assert_eq!(skips(2.0 / 3.0), vec![true, true, false]);
        assert_eq!(skips(0.6667), vec![true, true, false]);
        assert_eq!(skips(0.34), vec![true, true, false]);
        assert_eq!(skips(1.0 / 3.0), vec![true, true, true]);
        assert_eq!(skips(0.0), vec![true, true, true]);
    }
}
