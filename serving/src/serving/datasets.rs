//! Request-length presets by mean (GEM's datasets, gem.txt section 4.4): log-normal lengths
//! with a given mean (`distributions::TokenCount::from_mean`), shared by the gem family's
//! `[workload] dataset` and the serving family's `workload.dataset`.

use crate::distributions::TokenCount;
use crate::validate::{FieldError, field_error as field};
use serde::{Deserialize, Serialize};

/// A request-length distribution: log-normal with the given mean, rounded and clamped to
/// [1, max] (`distributions::TokenCount::from_mean`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LengthDistribution {
    pub mean: f64,
    pub sigma: f64,
    pub max: u32,
}

impl LengthDistribution {
    pub fn check(&self, path: &str) -> Result<(), FieldError> {
        if !(self.mean.is_finite() && self.mean >= 1.0) {
            return Err(field(
                &format!("{path}.mean"),
                format!("must be at least 1, got {}", self.mean),
            ));
        }
        if !(self.sigma.is_finite() && self.sigma >= 0.0) {
            return Err(field(
                &format!("{path}.sigma"),
                format!("must be finite and >= 0, got {}", self.sigma),
            ));
        }
        if self.max == 0 {
            return Err(field(&format!("{path}.max"), "must be at least 1"));
        }
        Ok(())
    }

    /// The sampler (the distribution is checked by `check` first).
    pub fn sampler(&self) -> TokenCount {
        TokenCount::from_mean(self.mean, self.sigma, self.max)
            .expect("validated length distribution")
    }
}

/// The request-length datasets of section 4.4.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dataset {
    /// ShareGPT-like: means 161.31 prompt / 337.99 output tokens (Kwon et al., vLLM, SOSP
    /// 2023, section 6.1 on ShareGPT); log-normal sigma 1.0 and max 2048 are assumptions.
    #[default]
    Sharegpt,
    /// CodeContests-like: problem statements and solutions. Assumed means 450 prompt / 300
    /// output tokens, sigma 0.5 / 0.8, max 4096 / 2048 (no published token statistics used).
    Codecontests,
    /// `prompt_tokens` and `output_tokens` must be given.
    Custom,
}

impl Dataset {
    pub fn lengths(self) -> Option<(LengthDistribution, LengthDistribution)> {
        let d = |mean, sigma, max| LengthDistribution { mean, sigma, max };
        match self {
            Dataset::Sharegpt => Some((d(161.31, 1.0, 2048), d(337.99, 1.0, 2048))),
            Dataset::Codecontests => Some((d(450.0, 0.5, 4096), d(300.0, 0.8, 2048))),
            Dataset::Custom => None,
        }
    }
}
