//! Expert GEMMs priced from measured operations where the data allow, by the roofline where
//! they do not, and always saying which: a gated expert FFN of a shape that a measured op
//! profile (`cost::op_profile`, e.g. Vidur's MLP rows) holds on the same GPU is **measured**
//! (the up, activation and down ops interpolated between measured token counts); one of another
//! shape is **scaled** from the nearest measured shape by the roofline's ratio of the two
//! shapes' bytes or FLOPs, whichever binds at that token count; anything else, a token count
//! past the last measured one included (never extrapolated), is **analytic**.

use crate::cost::gpu::GpuSpec;
use crate::cost::op_profile::{OpProfile, Operation};
use crate::cost::roofline::Roofline;
use crate::serving::step::CostSource;

/// One expert FFN's time and what priced it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExpertPrice {
    pub nanos: f64,
    pub source: CostSource,
}

/// Measured MLP profiles of one GPU and that GPU's roofline.
#[derive(Clone, Debug)]
pub struct ExpertGemmPricing {
    roofline: Roofline,
    /// Kernels of one expert FFN (gate+up GEMM, activation, down GEMM).
    launches: u32,
    /// The profiles measured on this GPU with a gated MLP.
    measured: Vec<OpProfile>,
}

impl ExpertGemmPricing {
    /// The pricing on `gpu`, keeping the `profiles` measured on it with a gated MLP.
    pub fn new(gpu: &GpuSpec, profiles: &[OpProfile]) -> ExpertGemmPricing {
        ExpertGemmPricing {
            roofline: Roofline::of(gpu),
            launches: 3,
            measured: profiles
                .iter()
                .filter(|p| p.gpu.eq_ignore_ascii_case(&gpu.name) && p.shape.use_gated_mlp)
                .cloned()
                .collect(),
        }
    }

    /// The roofline of one gated expert FFN of `hidden x ffn` (bf16) over `tokens` rows.
    fn analytic(&self, hidden: u64, ffn: u64, tokens: u64) -> f64 {
        let params = 3.0 * hidden as f64 * ffn as f64;
        self.roofline.group_nanos(
            self.launches,
            2.0 * params,
            2.0 * params * self.roofline.padded(tokens) as f64,
        )
    }

    /// The measured MLP of `profile` at `tokens` (tensor parallelism 1), if inside its range.
    fn measured_at(profile: &OpProfile, tokens: u64) -> Option<f64> {
        Operation::MLP
            .iter()
            .map(|&op| profile.series(op, 1)?.nanos_at(tokens).ok())
            .sum()
    }

    /// One gated expert FFN of `hidden x ffn` over `tokens` rows.
    pub fn expert_ffn(&self, hidden: u64, ffn: u64, tokens: u64) -> ExpertPrice {
        let analytic = ExpertPrice {
            nanos: self.analytic(hidden, ffn, tokens),
            source: CostSource::Analytic,
        };
        if tokens == 0 {
            return ExpertPrice {
                nanos: 0.0,
                source: CostSource::Analytic,
            };
        }
        let params = (hidden * ffn) as f64;
        let nearest = self.measured.iter().min_by(|a, b| {
            let distance = |p: &OpProfile| {
                ((p.shape.n_embd * p.shape.n_expanded_embd) as f64 / params)
                    .ln()
                    .abs()
            };
            distance(a).total_cmp(&distance(b))
        });
        let Some(profile) = nearest else {
            return analytic;
        };
        let Some(measured) = Self::measured_at(profile, tokens) else {
            return analytic;
        };
        let (h, f) = (profile.shape.n_embd, profile.shape.n_expanded_embd);
        if (h, f) == (hidden, ffn) {
            return ExpertPrice {
                nanos: measured,
                source: CostSource::Measured,
            };
        }
        ExpertPrice {
            nanos: measured * analytic.nanos / self.analytic(h, f, tokens),
            source: CostSource::Scaled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn vidur(file: &str) -> OpProfile {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/vidur");
        OpProfile::load(&root.join(file)).unwrap()
    }

    fn a100() -> ExpertGemmPricing {
        ExpertGemmPricing::new(
            &GpuSpec::by_name("A100-80GB").unwrap(),
            &[
                vidur("a100/Meta-Llama-3-8B.json"),
                vidur("a100/Llama-2-7b-hf.json"),
                vidur("h100/Llama-2-7b-hf.json"),
            ],
        )
    }

    fn mlp(profile: &OpProfile, tokens: u64) -> f64 {
        Operation::MLP
            .iter()
            .map(|&op| profile.series(op, 1).unwrap().nanos_at(tokens).unwrap())
            .sum()
    }

    #[test]
    fn a_measured_shape_uses_the_measured_staircase() {
        // One Mixtral-8x7B expert is Llama-3-8B's MLP (4096 x 14336): measured on the A100.
        let pricing = a100();
        let llama3 = vidur("a100/Meta-Llama-3-8B.json");
        for tokens in [1, 64, 100, 1024, 32_768] {
            let price = pricing.expert_ffn(4096, 14336, tokens);
            assert_eq!(price.source, CostSource::Measured);
            assert_eq!(price.nanos, mlp(&llama3, tokens));
        }
    }

    #[test]
    fn another_shape_is_scaled_from_the_nearest_measured_one() {
        // A Qwen3-30B-A3B expert (2048 x 768) is nearest, in parameters, to Llama-2-7B's MLP
        // (4096 x 11008; 1.6 M against 45 M and 58.7 M per projection). At 4096 rows both are
        // compute-bound (4096 x 11008 x 6 x 4096 FLOPs take 5.9 ms against 0.17 ms of
        // streaming), so the measured time scales by the roofline's ratio of the two: launches
        // plus 2 x 3 x hidden x ffn x 4096 FLOPs over 312 TFLOP/s x 0.6.
        let pricing = a100();
        let price = pricing.expert_ffn(2048, 768, 4096);
        assert_eq!(price.source, CostSource::Scaled);
        let compute = |h: f64, f: f64| 15_000.0 + 6.0 * h * f * 4096.0 / 1.872e14 * 1e9;
        let expected = mlp(&vidur("a100/Llama-2-7b-hf.json"), 4096) * compute(2048.0, 768.0)
            / compute(4096.0, 11008.0);
        assert!((price.nanos - expected).abs() < 1e-6 * expected);
    }

    #[test]
    fn past_the_measured_range_or_without_data_is_analytic() {
        // Llama-2-7B's rows stop at 4096 tokens: no silent extrapolation.
        let pricing = a100();
        let past = pricing.expert_ffn(4096, 11008, 8192);
        assert_eq!(past.source, CostSource::Analytic);
        assert_eq!(past.nanos, pricing.analytic(4096, 11008, 8192));
        // The H100 profile does not price an A100.
        let l4 = ExpertGemmPricing::new(
            &GpuSpec::by_name("L4").unwrap(),
            &[vidur("h100/Llama-2-7b-hf.json")],
        );
        assert_eq!(l4.expert_ffn(4096, 11008, 64).source, CostSource::Analytic);
        assert_eq!(pricing.expert_ffn(4096, 11008, 0).nanos, 0.0);
    }

    #[test]
    fn scaling_one_measured_shape_predicts_another() {
        // Scaled from Llama-2-7B's MLP alone, Llama-3-8B's (14336 wide, 1.30x the parameters)
        // against its own measurement on the A100: within 12 % from 1 to 4096 tokens (0.90x at
        // 64, 1.04x at 4096), where the roofline alone is off by up to 20 % (docs/cost-model.md).
        let only_llama2 = ExpertGemmPricing::new(
            &GpuSpec::by_name("A100-80GB").unwrap(),
            &[vidur("a100/Llama-2-7b-hf.json")],
        );
        let llama3 = vidur("a100/Meta-Llama-3-8B.json");
        for tokens in [1u64, 16, 64, 256, 1024, 2048, 4096] {
            let price = only_llama2.expert_ffn(4096, 14336, tokens);
            assert_eq!(price.source, CostSource::Scaled);
            let ratio = price.nanos / mlp(&llama3, tokens);
            assert!((0.88..1.12).contains(&ratio), "{tokens} tokens: {ratio:.3}");
        }
    }
}
