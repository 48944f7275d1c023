//! The aggregation-gate extension point (the paper's Algorithm 1): the votes of a question's
//! k experts, their plurality confidence, the `AggregationGate` trait that decides whether the
//! aggregator LLM is skipped, and the `GateConfig` registry enum.

use serde::{Deserialize, Serialize};

/// How the k recruited experts voted on one question: the size of the largest group of equal
/// answers (3 for 3:0, 2 for 2:1, 1 for 1:1:1 when k = 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Votes {
    pub k: u32,
    pub plurality: u32,
}

impl Votes {
    /// C_vote = max_a |{i : a_i = a}| / k.
    pub fn confidence(&self) -> f64 {
        if self.k == 0 {
            0.0
        } else {
            f64::from(self.plurality) / f64::from(self.k)
        }
    }
    /// "3:0", "2:1", "1:1:1" for k = 3; "plurality/k" otherwise.
    pub fn bucket_label(&self) -> String {
        match (self.k, self.plurality) {
            (3, 3) => "3:0".into(),
            (3, 2) => "2:1".into(),
            (3, 1) => "1:1:1".into(),
            (k, p) => format!("{p}/{k}"),
        }
    }
}

/// Decides per question whether the majority answer is returned without the aggregator.
pub trait AggregationGate: Send {
    fn name(&self) -> &'static str;
    /// `true`: skip the aggregator and return the majority answer.
    fn skip(&mut self, votes: &Votes) -> bool;
    /// `skip` for question `question` (its index in the workload): what the simulator asks, so
    /// that a wrapper (live's decision log) can name the question; a gate decides by the votes
    /// alone.
    fn decide(&mut self, question: usize, votes: &Votes) -> bool {
        let _ = question;
        self.skip(votes)
    }
}

/// `[gate]`: the gate registry; `strategies::gating::build` turns it into a trait object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GateConfig {
    /// Every question goes to the aggregator (the paper's baseline).
    #[default]
    None,
    /// Skip when C_vote >= tau (tau = 1: unanimous only; tau = 2/3: also 2:1).
    Threshold { tau: f64 },
}

impl GateConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            GateConfig::None => "none",
            GateConfig::Threshold { .. } => "threshold",
        }
    }
}

/// Tolerance of the threshold comparison, so that `tau = 0.6667` or `2/3` written as a decimal
/// admits the 2:1 bucket whose confidence is the float 2.0 / 3.0.
pub const GATE_TOLERANCE: f64 = 1e-3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_and_labels() {
        let v = |p| Votes { k: 3, plurality: p };
        assert_eq!(v(3).confidence(), 1.0);
        assert!((v(2).confidence() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(
            (
                v(3).bucket_label(),
                v(2).bucket_label(),
                v(1).bucket_label()
            ),
            ("3:0".into(), "2:1".into(), "1:1:1".into())
        );
        let g: GateConfig = toml::from_str("kind = \"threshold\"\ntau = 0.6667").unwrap();
        assert_eq!(g, GateConfig::Threshold { tau: 0.6667 });
        assert!(toml::from_str::<GateConfig>("kind = \"threshold\"").is_err());
    }
}
