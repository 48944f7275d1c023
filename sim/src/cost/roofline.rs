//! The analytic default cost model: a roofline over datasheet peaks (scaled by achievable
//! fractions) that produces the same curves a calibration run measures, emitted as a
//! `Profile` labelled "analytic-roofline", plus the committed reference profiles.
//!
//! One kernel group (an expert FFN, a layer's non-expert part, the output head) costs
//!
//! ```text
//! kernels x launch_overhead + max(weight_bytes / achievable_bandwidth,
//!                                 flops(ceil(n / tile) x tile) / achievable_compute)
//! ```
//!
//! Rounding the token count up to whole tiles (GEMMs process rows in tiles of 64) is what
//! makes the curves staircases: flat within a tile once compute-bound, a jump at each tile
//! boundary, and a memory-bound floor (streaming the weights once) at small counts.

use crate::cost::curve::CostCurve;
use crate::cost::gpu::{DEFAULT_COMPUTE_EFFICIENCY, DEFAULT_MEMORY_EFFICIENCY, GpuSpec};
use crate::cost::profile::{
    ExpertExecution, ExpertFfnCurve, PROFILE_FORMAT_VERSION, Profile, ProfileError, ProfileSource,
    SourceKind,
};
use crate::model_shape::MoeModelShape;
use std::path::{Path, PathBuf};

/// The roofline's knobs. Every default is an assumption that calibration replaces; each is
/// listed with its reasoning in docs/cost-model.md.
#[derive(Clone, Debug, PartialEq)]
pub struct RooflineParams {
    /// Fraction of peak memory bandwidth achieved ([`DEFAULT_MEMORY_EFFICIENCY`]).
    pub memory_efficiency: f64,
    /// Fraction of peak dense bf16 throughput achieved ([`DEFAULT_COMPUTE_EFFICIENCY`]).
    pub compute_efficiency: f64,
    /// Rows a GEMM processes per tile; token counts are rounded up to a multiple (64: the
    /// common M-tile of CUTLASS/Triton MoE kernels; GEM section 3.3.2 names 32 or 64).
    pub tile_tokens: u32,
    /// Kernels per routed-expert FFN: fused gate+up GEMM, SwiGLU, down GEMM.
    pub kernels_per_expert_ffn: u32,
    /// Kernels per layer outside the routed experts: 2 RMSNorms, QKV GEMM, RoPE, attention,
    /// O GEMM, router GEMM, top-k, shared gate+up GEMM, SwiGLU, shared down GEMM, shared-gate
    /// scale + residual add = 12.
    pub kernels_per_non_expert_layer: u32,
    /// Kernels of the output head: final RMSNorm, `lm_head` GEMM, sampling.
    pub kernels_per_head: u32,
    /// Bytes per KV-cache element (bf16 cache: 2).
    pub kv_cache_bytes_per_element: f64,
    /// Context length per sequence at which decode steps read the KV cache (prompt + output
    /// tokens so far; 256 covers a CAPS-sized 128-token prompt with its output).
    pub decode_context_tokens: u32,
    /// Token curves are sampled at both sides of every tile boundary up to here ...
    pub dense_sample_limit: u32,
    /// ... then every `sparse_sample_step` tokens ...
    pub sparse_sample_step: u32,
    /// ... up to here, and extrapolated linearly beyond.
    pub sparse_sample_limit: u32,
    /// Batch-size curves are sampled at every size up to one tile, then at both sides of each
    /// tile boundary up to here.
    pub max_decode_batch: u32,
}

impl Default for RooflineParams {
    fn default() -> Self {
        RooflineParams {
            memory_efficiency: DEFAULT_MEMORY_EFFICIENCY,
            compute_efficiency: DEFAULT_COMPUTE_EFFICIENCY,
            tile_tokens: 64,
            kernels_per_expert_ffn: 3,
            kernels_per_non_expert_layer: 12,
            kernels_per_head: 3,
            kv_cache_bytes_per_element: 2.0,
            decode_context_tokens: 256,
            dense_sample_limit: 4096,
            sparse_sample_step: 1024,
            sparse_sample_limit: 16_384,
            max_decode_batch: 256,
        }
    }
}

/// The roofline cost of one model's kernels on one GPU.
#[derive(Clone, Copy, Debug)]
pub struct Roofline<'a> {
    pub gpu: &'a GpuSpec,
    pub shape: &'a MoeModelShape,
    pub params: &'a RooflineParams,
}

impl Roofline<'_> {
    fn padded(&self, count: u64) -> f64 {
        let tile = u64::from(self.params.tile_tokens.max(1));
        (count.div_ceil(tile) * tile) as f64
    }

    /// `kernels` launches plus the slower of streaming `bytes` and computing `flops`.
    fn group_nanos(&self, kernels: u32, bytes: f64, flops: f64) -> f64 {
        let bandwidth = self.gpu.peak_bandwidth() * self.params.memory_efficiency;
        let compute = self.gpu.peak_flops() * self.params.compute_efficiency;
        f64::from(kernels) * self.gpu.kernel_launch_overhead_ns
            + (bytes / bandwidth).max(flops / compute) * 1e9
    }

    /// One routed expert's gated FFN on `tokens` tokens; 0 when it receives none.
    pub fn expert_ffn_nanos(&self, tokens: u64) -> f64 {
        if tokens == 0 {
            return 0.0;
        }
        self.group_nanos(
            self.params.kernels_per_expert_ffn,
            self.shape.expert_weight_bytes(),
            self.shape.expert_flops_per_token() * self.padded(tokens),
        )
    }

    /// One layer's non-expert part in a prefill pass over `tokens` tokens (all sequences of
    /// the batch together). The attention score/value products (quadratic in each prompt's
    /// length) are left out: at 128-token prompts they are 0.5 % of the layer's FLOPs.
    pub fn non_expert_prefill_nanos(&self, tokens: u64) -> f64 {
        if tokens == 0 {
            return 0.0;
        }
        self.group_nanos(
            self.params.kernels_per_non_expert_layer,
            self.shape.dense_weight_bytes_per_layer(),
            2.0 * self.shape.dense_matmul_params_per_layer() as f64 * self.padded(tokens),
        )
    }

    /// One layer's non-expert part in one decode step of `batch` sequences, each reading
    /// `decode_context_tokens` of KV cache.
    pub fn non_expert_decode_nanos(&self, batch: u64) -> f64 {
        if batch == 0 {
            return 0.0;
        }
        let context = f64::from(self.params.decode_context_tokens);
        let kv_bytes = batch as f64
            * context
            * self
                .shape
                .kv_cache_bytes_per_token_per_layer(self.params.kv_cache_bytes_per_element);
        let attention_flops = batch as f64
            * 4.0
            * context
            * (self.shape.n_attention_heads * self.shape.head_dim) as f64;
        self.group_nanos(
            self.params.kernels_per_non_expert_layer,
            self.shape.dense_weight_bytes_per_layer() + kv_bytes,
            2.0 * self.shape.dense_matmul_params_per_layer() as f64 * self.padded(batch)
                + attention_flops,
        )
    }

    /// The output head for `rows` sequences (one next-token row each; prefill computes
    /// logits for the last prompt position only).
    pub fn head_nanos(&self, rows: u64) -> f64 {
        if rows == 0 {
            return 0.0;
        }
        self.group_nanos(
            self.params.kernels_per_head,
            self.shape.lm_head_weight_bytes(),
            2.0 * self.shape.lm_head_params() as f64 * self.padded(rows),
        )
    }

    /// Token counts at which token curves are sampled: 1, both sides of each tile boundary
    /// up to `dense_sample_limit`, then every `sparse_sample_step` up to `sparse_sample_limit`.
    pub fn token_sample_points(&self) -> Vec<u64> {
        let tile = u64::from(self.params.tile_tokens.max(1));
        let dense = u64::from(self.params.dense_sample_limit).max(tile);
        let mut points = vec![1];
        let mut boundary = tile;
        while boundary <= dense {
            points.push(boundary);
            if boundary + tile <= dense {
                points.push(boundary + 1);
            }
            boundary += tile;
        }
        let step = u64::from(self.params.sparse_sample_step.max(1));
        let mut sparse = points[points.len() - 1] + step;
        while sparse <= u64::from(self.params.sparse_sample_limit) {
            points.push(sparse);
            sparse += step;
        }
        points.dedup();
        points
    }

    /// Batch sizes at which batch curves are sampled: every size up to one tile, then both
    /// sides of each tile boundary up to `max_decode_batch`.
    pub fn batch_sample_points(&self) -> Vec<u64> {
        let tile = u64::from(self.params.tile_tokens.max(1));
        let max = u64::from(self.params.max_decode_batch).max(1);
        let mut points: Vec<u64> = (1..=tile.min(max)).collect();
        let mut boundary = tile;
        while boundary + 1 <= max {
            points.push(boundary + 1);
            points.push((boundary + tile).min(max));
            boundary += tile;
        }
        points.dedup();
        points
    }
}

fn sampled(points: &[u64], cost: impl Fn(u64) -> f64) -> CostCurve {
    // Rounded to 0.1 ns so the committed JSON stays readable.
    let samples = points
        .iter()
        .map(|&n| (n as f64, (cost(n) * 10.0).round() / 10.0))
        .collect();
    CostCurve::new(samples).expect("roofline samples are positive, increasing and finite")
}

/// The analytic profile of `shape` on `gpu` with the default [`RooflineParams`].
pub fn analytic_profile(gpu: &GpuSpec, shape: &MoeModelShape) -> Profile {
    analytic_profile_with(gpu, shape, &RooflineParams::default())
}

/// The analytic profile of `shape` on `gpu`: every curve of a measured profile, computed by
/// the roofline. The whole-model decode step spreads each step's `batch x top_k` routed
/// tokens evenly over the experts and reads the expert cost off the expert curve, exactly as
/// the execution models do for an even load.
pub fn analytic_profile_with(
    gpu: &GpuSpec,
    shape: &MoeModelShape,
    params: &RooflineParams,
) -> Profile {
    let roofline = Roofline { gpu, shape, params };
    let tokens = roofline.token_sample_points();
    let batches = roofline.batch_sample_points();
    let expert = sampled(&tokens, |n| roofline.expert_ffn_nanos(n));
    let non_expert_prefill = sampled(&tokens, |n| roofline.non_expert_prefill_nanos(n));
    let non_expert_decode = sampled(&batches, |b| roofline.non_expert_decode_nanos(b));
    let head = sampled(&batches, |b| roofline.head_nanos(b));
    let decode_step = sampled(&batches, |b| {
        let even_load = (b * shape.top_k as u64) as f64 / shape.n_experts as f64;
        shape.n_layers as f64 * (non_expert_decode.at(b as f64) + expert.at(even_load))
            + head.at(b as f64)
    });
    let notes = format!(
        "roofline over datasheet peaks: memory efficiency {}, compute efficiency {}, tile {} \
         tokens, kernel launch {} ns, kernels per expert FFN {} / non-expert layer {} / head {}, \
         KV cache {} B per element, decode context {} tokens; assumptions until calibration \
         replaces them (docs/cost-model.md)",
        params.memory_efficiency,
        params.compute_efficiency,
        params.tile_tokens,
        gpu.kernel_launch_overhead_ns,
        params.kernels_per_expert_ffn,
        params.kernels_per_non_expert_layer,
        params.kernels_per_head,
        params.kv_cache_bytes_per_element,
        params.decode_context_tokens,
    );
    Profile {
        format_version: PROFILE_FORMAT_VERSION,
        gpu: gpu.name.clone(),
        source: ProfileSource {
            kind: SourceKind::AnalyticRoofline,
            tool_version: format!("expertsim-sim {}", env!("CARGO_PKG_VERSION")),
            date: None,
            notes,
        },
        model: shape.clone(),
        decode_context_tokens: params.decode_context_tokens,
        expert_ffn: vec![ExpertFfnCurve {
            hidden: shape.hidden,
            expert_ffn: shape.expert_ffn,
            dtype: shape.weight_dtype,
            curve: expert,
        }],
        non_expert_prefill,
        non_expert_decode,
        head,
        decode_step,
        expert_execution: ExpertExecution::Concurrent,
    }
}

/// The analytic profiles committed under `profiles/`, as (path relative to `profiles/`,
/// profile). Today: L4 + Qwen1.5-MoE-A2.7B with nf4 weights, as CAPS runs it.
pub fn reference_profiles() -> Vec<(&'static str, Profile)> {
    let l4 = GpuSpec::by_name("L4").expect("L4 is in the catalogue");
    vec![(
        "analytic/l4_qwen1.5-moe-a2.7b.json",
        analytic_profile(&l4, &MoeModelShape::qwen1_5_moe_a2_7b_nf4()),
    )]
}

/// Regenerates every reference profile under `profiles_dir`; returns the paths written.
pub fn write_reference_profiles(profiles_dir: &Path) -> Result<Vec<PathBuf>, ProfileError> {
    reference_profiles()
        .into_iter()
        .map(|(relative, profile)| {
            let path = profiles_dir.join(relative);
            profile.save(&path).map(|()| path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l4_qwen() -> (GpuSpec, MoeModelShape, RooflineParams) {
        (
            GpuSpec::by_name("L4").unwrap(),
            MoeModelShape::qwen1_5_moe_a2_7b_nf4(),
            RooflineParams::default(),
        )
    }

    #[test]
    fn expert_curve_is_a_staircase_with_a_memory_floor() {
        let (gpu, shape, params) = l4_qwen();
        let profile = analytic_profile(&gpu, &shape);
        let curve = profile
            .expert_curve(shape.hidden, shape.expert_ffn, shape.weight_dtype)
            .unwrap();
        let launch = 3.0 * gpu.kernel_launch_overhead_ns;
        let floor = launch + shape.expert_weight_bytes() / (300e9 * params.memory_efficiency) * 1e9;
        // Memory-bound floor: one tile of tokens is cheaper to compute than to stream weights.
        assert!(
            (curve.at(1.0) - floor).abs() < 0.1,
            "{} vs {floor}",
            curve.at(1.0)
        );
        assert_eq!(curve.at(1.0), curve.at(64.0));
        assert_eq!(curve.at(0.0), 0.0);
        // Compute-bound from the second tile: flat within a tile, a jump at each boundary.
        let tile_ns =
            shape.expert_flops_per_token() * 64.0 / (121e12 * params.compute_efficiency) * 1e9;
        for k in 2..40u32 {
            let first = curve.at(f64::from((k - 1) * 64 + 1));
            let last = curve.at(f64::from(k * 64));
            let next = curve.at(f64::from(k * 64 + 1));
            assert_eq!(first, last, "tile {k} is not flat");
            assert!(
                (next - last - tile_ns).abs() < 0.2,
                "tile {k}: jump {}",
                next - last
            );
        }
        assert!(curve.at(65.0) > curve.at(64.0) + 1_000.0);
        // Sparse samples at high counts, extrapolated linearly past the last one.
        assert!(curve.len() < 150, "{}", curve.len());
        let slope = (curve.at(16_384.0) - curve.at(15_360.0)) / 1024.0;
        assert!((curve.at(20_000.0) - curve.at(16_384.0) - slope * 3616.0).abs() < 1e-6);
    }

    #[test]
    fn decode_curves_grow_with_batch() {
        let (gpu, shape, _) = l4_qwen();
        let profile = analytic_profile(&gpu, &shape);
        let mut previous = 0.0;
        for b in 1..=256 {
            let step = profile.decode_step.at(f64::from(b));
            assert!(step >= previous, "decode step falls at batch {b}");
            previous = step;
        }
        assert!(profile.non_expert_decode.at(8.0) > profile.non_expert_decode.at(1.0));
    }

    #[test]
    fn sample_points_follow_the_tile_grid() {
        let (gpu, shape, params) = l4_qwen();
        let roofline = Roofline {
            gpu: &gpu,
            shape: &shape,
            params: &params,
        };
        let tokens = roofline.token_sample_points();
        assert_eq!(&tokens[..5], &[1, 64, 65, 128, 129]);
        assert!(tokens.contains(&4096) && !tokens.contains(&4097));
        assert_eq!(&tokens[tokens.len() - 2..], &[15_360, 16_384]);
        assert!(tokens.windows(2).all(|w| w[0] < w[1]));
        let batches = roofline.batch_sample_points();
        assert_eq!(&batches[..3], &[1, 2, 3]);
        assert_eq!(&batches[batches.len() - 3..], &[192, 193, 256]);
        assert_eq!(*batches.last().unwrap(), 256);
    }

    /// The committed reference profiles are what the code generates now. Regenerate with
    /// `EXPERTSIM_UPDATE_PROFILES=1 cargo test -p expertsim-sim committed_reference_profiles`.
    #[test]
    fn committed_reference_profiles_match_the_generator() {
        let profiles_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
        if std::env::var_os("EXPERTSIM_UPDATE_PROFILES").is_some_and(|v| v == "1") {
            write_reference_profiles(&profiles_dir).unwrap();
        }
        for (relative, profile) in reference_profiles() {
            let path = profiles_dir.join(relative);
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == profile.to_json(),
                "{} differs from what the roofline generates; regenerate with \
                 EXPERTSIM_UPDATE_PROFILES=1 cargo test -p expertsim-sim committed_reference_profiles",
                path.display()
            );
            assert_eq!(Profile::load(&path).unwrap(), profile);
        }
    }
}
