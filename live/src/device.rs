//! The kernels a live run executes, on one backend: MoE layers on a given token-to-expert
//! assignment, the dense part of a layer and the output head as the calibration measures them,
//! each timed once. Inputs are generated once per shape and kept, so a step's measurement does
//! not include input generation (except with `--realtime`, where all host work counts).
//!
//! GPU variability is emulated, not taken from other devices: a virtual GPU with speed factor
//! `s` does its GEMM-bound work `1 / s` times over, on both backends (cuBLAS's GEMMs cannot be
//! confined to a fraction of the multiprocessors). A MoE layer runs once, then its experts'
//! GEMM pairs again as standalone GEMMs for the rest of `1 / s` (whole passes, then one at the
//! remaining fraction of the expert FFN width: GEMM work is tile-quantized in tokens, not in
//! width); the layer's routing, gather, SwiGLU and combine kernels run once, as the simulator's
//! MoE layer (`cost::moe_layer`) slows only its experts' work. A dense launch (GEMM and
//! attention) runs whole passes, then one at the remaining fraction of its output width and
//! cached context. Its measured time grows with the work it really had; a fraction of a pass
//! is proportional where the kernels' time is proportional to their width (the CPU references;
//! on a GPU, a narrow GEMM still pays its launch floor, so speeds with a whole `1 / s` are the
//! exact case there).

use expertsim_scenario::cost::shape::MoeModelShape;
use kernels::backend::{self, Backend, BackendError, BackendKind, Workload};
use kernels::decode::{DecodeProblem, DecodeShape};
use kernels::moe::{MoeProblem, MoeShape};
use kernels::reroute::{RerouteProblem, RerouteVariant};
use std::collections::BTreeMap;
use std::time::Instant;

/// How the repeated-work emulation works, as reported in the output.
const REPEATED_WORK: &str = "a virtual GPU with speed factor s does its GEMM-bound work 1/s \
     times over: each MoE layer once, then its experts' GEMM pairs again (whole passes, then \
     one at that fraction of the expert FFN width); each dense launch in whole passes, then one \
     at that fraction of its output width and cached context";

/// Inputs of the same seed for every problem, so that runs are repeatable.
const INPUT_SEED: u64 = 7;

/// One backend and the problems it has prepared.
pub struct Kernels {
    backend: Box<dyn Backend>,
    kind: BackendKind,
    realtime: bool,
    repetitions: usize,
    tile: usize,
    /// The MoE families' model shape (MOSAIC's dense models give their shapes per call).
    shape: Option<MoeModelShape>,
    decode_context: usize,
    /// MoE weights per (layer, experts in the problem, expert FFN width).
    moe: BTreeMap<(usize, usize, usize), MoeProblem>,
    /// Decode-step problems per (shape, batch, context).
    dense: BTreeMap<(DenseKey, usize, usize), DecodeProblem>,
    /// Decode-step weights per shape, shared by its problems of every batch and context (so a
    /// backend uploads each shape's weights once).
    dense_weights: BTreeMap<DenseKey, kernels::Weights>,
    /// The host bytes model loads copy from, grown to the largest load.
    host_weights: Vec<u8>,
    /// Per timed launch (at least 3 repetitions): its repetitions' interquartile range over
    /// their median, the run's own measure of timing noise (`crate::noise`).
    spreads: Vec<f64>,
}

/// A decode shape as a map key: (hidden, out_features, n_heads, n_kv_heads, head_dim).
type DenseKey = (usize, usize, usize, usize, usize);

impl Kernels {
    /// Opens `kind` on device `ordinal` for `shape` (the MoE families'); `tile` is the GEMM tile the profile was
    /// measured with, `decode_context` the profile's KV-cache length; each launch is timed
    /// `repetitions` times and its median counts (a single wall-clock run on a shared CPU
    /// mostly measures preemption).
    pub fn open(
        kind: BackendKind,
        ordinal: usize,
        shape: Option<&MoeModelShape>,
        tile: usize,
        decode_context: usize,
        realtime: bool,
        repetitions: usize,
    ) -> Result<Kernels, BackendError> {
        kernels::moe::check_tile_tokens(tile)?;
        if repetitions == 0 {
            return Err(BackendError::Timing(
                "repetitions must be at least 1".into(),
            ));
        }
        let backend: Box<dyn Backend> = match kind {
            BackendKind::Cpu => backend::open(BackendKind::Cpu)?,
            BackendKind::Cuda => Box::new(kernels::cuda::CudaBackend::open(ordinal)?),
        };
        Ok(Kernels {
            backend,
            kind,
            realtime,
            repetitions,
            tile,
            shape: shape.cloned(),
            decode_context,
            moe: BTreeMap::new(),
            dense: BTreeMap::new(),
            dense_weights: BTreeMap::new(),
            host_weights: Vec::new(),
            spreads: Vec::new(),
        })
    }

    /// Every timed launch's relative spread so far (interquartile range / median of its
    /// repetitions); empty with fewer than 3 repetitions or `--realtime`.
    pub fn spreads(&self) -> &[f64] {
        &self.spreads
    }

    /// The device's name, as the driver or /proc/cpuinfo gives it.
    pub fn device_name(&self) -> &str {
        &self.backend.device().name
    }

    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// The backend itself, for work that is not a step (the profile probe, `--calibrate`).
    pub fn backend_mut(&mut self) -> &mut dyn Backend {
        self.backend.as_mut()
    }

    /// How a duration is measured.
    pub fn timing(&self) -> String {
        if self.realtime {
            "wall clock around each step, host work included (--realtime)".into()
        } else {
            format!(
                "{} around each kernel launch, median of {}",
                self.backend.device().timing,
                self.repetitions
            )
        }
    }

    /// The MoE model shape the kernels were opened for.
    pub fn shape(&self) -> &MoeModelShape {
        self.shape
            .as_ref()
            .expect("the MoE families open the kernels with their model shape")
    }

    /// A model load: `bytes` host bytes copied into a fresh device buffer, timed once (a load
    /// happens once; the host buffer is prepared outside the timing).
    pub fn load(&mut self, bytes: usize) -> Result<f64, BackendError> {
        if self.host_weights.len() < bytes {
            self.host_weights = (0..bytes).map(|i| (i % 251) as u8).collect();
        }
        let host = Instant::now();
        let measured = self.backend.copy_to_device(&self.host_weights[..bytes])?;
        Ok(if self.realtime {
            host.elapsed().as_nanos() as f64
        } else {
            measured
        })
    }

    /// Times `workload` once (kernel time, or wall time with host work under `--realtime`).
    fn measure(&mut self, workload: &Workload) -> Result<f64, BackendError> {
        if self.realtime {
            let start = Instant::now();
            std::hint::black_box(self.backend.run(workload)?);
            return Ok(start.elapsed().as_nanos() as f64);
        }
        let mut samples = self.backend.time(workload, 0, self.repetitions)?;
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let median = samples[n / 2];
        if n >= 3 && median > 0.0 {
            self.spreads
                .push((samples[(3 * n) / 4] - samples[n / 4]) / median);
        }
        Ok(median)
    }

    /// One MoE layer of layer `layer`'s experts (`counts.len()` of them) on the assignment in
    /// which expert `e` receives `counts[e]` routed tokens; `top_k` slots per token. The
    /// assignments are laid out slot-major, so a token never gets one expert twice unless an
    /// expert receives more than all tokens. Returns 0 when no token is routed.
    pub fn moe(&mut self, layer: usize, counts: &[u32], top_k: usize) -> Result<f64, BackendError> {
        let ffn = self.shape().expert_ffn;
        self.moe_of_width(layer, counts, top_k, ffn)
    }

    /// `moe` with experts of FFN width `expert_ffn`.
    fn moe_of_width(
        &mut self,
        layer: usize,
        counts: &[u32],
        top_k: usize,
        expert_ffn: usize,
    ) -> Result<f64, BackendError> {
        let assignments: u32 = counts.iter().sum();
        if assignments == 0 {
            return Ok(0.0);
        }
        let n_experts = counts.len();
        let top_k = top_k.clamp(1, n_experts);
        let tokens = (assignments as usize).div_ceil(top_k);
        let host = Instant::now();
        let shape = MoeShape {
            hidden: self.shape().hidden,
            expert_ffn,
            n_experts,
            top_k,
        };
        let (tile, seed) = (self.tile, INPUT_SEED + layer as u64);
        let mut problem = self
            .moe
            .remove(&(layer, n_experts, expert_ffn))
            .unwrap_or_else(|| MoeProblem::synthetic(shape, tile, seed));
        problem.shape = shape;
        problem.x = kernels::numeric::random_bf16(tokens * shape.hidden, 1.0, seed, "live.x");
        problem.topk_weights = kernels::numeric::random_weights(tokens * top_k, seed, "live.w");
        problem.topk_ids = slot_major_ids(counts, tokens, top_k);
        let workload = Workload::Moe(problem);
        let measured = self.measure(&workload);
        let host_ns = host.elapsed().as_nanos() as f64;
        if let Workload::Moe(p) = workload {
            self.moe.insert((layer, n_experts, expert_ffn), p);
        }
        let measured = measured?;
        Ok(if self.realtime { host_ns } else { measured })
    }

    /// One layer's batched rerouting (fused kernel or the unfused sequence).
    pub fn reroute(
        &mut self,
        problem: RerouteProblem,
        variant: RerouteVariant,
    ) -> Result<f64, BackendError> {
        let host = Instant::now();
        let measured = self.measure(&Workload::Reroute(problem, variant))?;
        Ok(if self.realtime {
            host.elapsed().as_nanos() as f64
        } else {
            measured
        })
    }

    /// `moe` on a virtual GPU of speed `speed`: the layer once, then each active expert's
    /// GEMM pair (gate/up, then down) as standalone GEMMs over its rows for the passes
    /// `passes(speed)` has beyond the first, a fractional one at that fraction of the expert
    /// FFN width (GEMM work is quantized in tiles of tokens, so a fraction of the tokens would
    /// cost a whole tile; it is not quantized in FFN width). The layer's fixed kernels run
    /// once, as the simulator's MoE layer slows only the experts' work.
    pub fn moe_at_speed(
        &mut self,
        layer: usize,
        counts: &[u32],
        top_k: usize,
        speed: f64,
    ) -> Result<f64, BackendError> {
        let (hidden, ffn) = (self.shape().hidden, self.shape().expert_ffn);
        let mut total = self.moe(layer, counts, top_k)?;
        for fraction in passes(speed).into_iter().skip(1) {
            let width = fraction_of(ffn, fraction);
            for &rows in counts.iter().filter(|&&c| c > 0) {
                for (k, n) in [(hidden, 2 * width), (width, hidden)] {
                    total += self.decode_step(gemm_only(k, n), rows as usize, 0)?;
                }
            }
        }
        Ok(total)
    }

    /// How variability between virtual GPUs of `speeds` is reproduced on this one device, as
    /// reported in the output.
    pub fn variability_emulation(&self, speeds: &[f64]) -> String {
        format!(
            "emulated: repeated work ({REPEATED_WORK}); not a measurement of slower hardware; \
             speed factors {speeds:?}"
        )
    }

    /// The dense GEMM `hidden -> out_features` over `batch` rows, with attention over
    /// `context` cached tokens per row when `context > 0` (the calibration's non-expert and
    /// head series use the same kernel).
    pub fn dense(
        &mut self,
        out_features: usize,
        batch: usize,
        context: usize,
    ) -> Result<f64, BackendError> {
        let shape = self.dense_shape(out_features);
        self.decode_step(shape, batch, context)
    }

    /// The decode-step shape of a dense launch of `out_features` outputs with the model's
    /// attention heads.
    pub fn dense_shape(&self, out_features: usize) -> DecodeShape {
        DecodeShape {
            hidden: self.shape().hidden,
            out_features,
            n_heads: self.shape().n_attention_heads,
            n_kv_heads: self.shape().n_kv_heads,
            head_dim: self.shape().head_dim,
        }
    }

    /// The decode-step kernel of `shape` (a GEMM `hidden -> out_features` over `batch` rows,
    /// with attention over `context` cached tokens per row when `context > 0`). Returns 0 when
    /// there is no row or no output feature.
    pub fn decode_step(
        &mut self,
        shape: DecodeShape,
        batch: usize,
        context: usize,
    ) -> Result<f64, BackendError> {
        if batch == 0 || shape.out_features == 0 {
            return Ok(0.0);
        }
        let host = Instant::now();
        let dims = (
            shape.hidden,
            shape.out_features,
            shape.n_heads,
            shape.n_kv_heads,
            shape.head_dim,
        );
        let key = (dims, batch, context);
        let problem = match self.dense.remove(&key) {
            Some(p) => p,
            None => {
                let tile = self.tile;
                let weights = self.dense_weights.entry(dims).or_insert_with(|| {
                    DecodeProblem::random(shape, tile, 1, 0, INPUT_SEED, true).w
                });
                DecodeProblem {
                    shape,
                    tile_tokens: tile,
                    batch: 0,
                    context: 0,
                    x: Vec::new(),
                    w: weights.clone(),
                    q: Vec::new(),
                    k_cache: Vec::new(),
                    v_cache: Vec::new(),
                }
                .with_synthetic_inputs(batch, context, INPUT_SEED)
            }
        };
        let workload = Workload::Decode(problem);
        let measured = self.measure(&workload);
        let host_ns = host.elapsed().as_nanos() as f64;
        if let Workload::Decode(p) = workload {
            self.dense.insert(key, p);
        }
        let measured = measured?;
        Ok(if self.realtime { host_ns } else { measured })
    }

    /// The decode-step kernel of `shape` on a virtual GPU of speed `speed`: whole passes, then
    /// one over the same rows at that fraction of the output features and of the cached
    /// context (see [`Kernels::moe_at_speed`] for why not rows).
    pub fn decode_step_at_speed(
        &mut self,
        shape: DecodeShape,
        batch: usize,
        context: usize,
        speed: f64,
    ) -> Result<f64, BackendError> {
        let mut total = 0.0;
        for fraction in passes(speed) {
            let part = DecodeShape {
                out_features: fraction_of(shape.out_features, fraction),
                ..shape
            };
            let context = if context > 0 {
                fraction_of(context, fraction)
            } else {
                0
            };
            total += self.decode_step(part, batch, context)?;
        }
        Ok(total)
    }

    /// Output features of one layer's dense part as one GEMM (the calibration's
    /// `non_expert_*` series): the layer's matmul parameters over `hidden`.
    pub fn dense_out_features(&self) -> usize {
        (self.shape().dense_matmul_params_per_layer() as usize).div_ceil(self.shape().hidden)
    }

    /// The KV-cache length of decode steps (the profile's).
    pub fn decode_context(&self) -> usize {
        self.decode_context
    }
}

/// The work fractions a virtual GPU of speed `speed` runs: `floor(1/s)` whole passes, then
/// the remainder (speeds at or above 1 run one pass: one device cannot be made faster).
pub fn passes(speed: f64) -> Vec<f64> {
    let repeat = if speed > 0.0 && speed < 1.0 {
        1.0 / speed
    } else {
        1.0
    };
    let whole = repeat.floor();
    let mut fractions = vec![1.0; whole as usize];
    let rest = repeat - whole;
    if rest > 1e-9 {
        fractions.push(rest);
    }
    fractions
}

/// A GEMM `k -> n` alone, as a decode step without attention (the heads do not matter
/// without a cache).
fn gemm_only(k: usize, n: usize) -> DecodeShape {
    DecodeShape {
        hidden: k,
        out_features: n,
        n_heads: 1,
        n_kv_heads: 1,
        head_dim: 1,
    }
}

/// `fraction` of `width`, rounded, at least 1.
fn fraction_of(width: usize, fraction: f64) -> usize {
    ((width as f64 * fraction).round() as usize).max(1)
}

/// Expert ids `[tokens][top_k]` in which expert `e` appears `counts[e]` times: the experts in
/// order fill slot 0 of every token, then slot 1, and so on; unfilled slots (when the counts
/// do not fill `tokens x top_k`) repeat the last expert with a routed token.
pub fn slot_major_ids(counts: &[u32], tokens: usize, top_k: usize) -> Vec<i32> {
    let mut ids = vec![0i32; tokens * top_k];
    let mut order = counts
        .iter()
        .enumerate()
        .flat_map(|(e, &c)| std::iter::repeat_n(e as i32, c as usize));
    let mut last = 0;
    for position in 0..tokens * top_k {
        let (slot, token) = (position / tokens, position % tokens);
        last = order.next().unwrap_or(last);
        ids[token * top_k + slot] = last;
    }
    ids
}

/// Integer counts that sum to `total` and follow `load` (largest remainder; ties go to the
/// lower index): the routed tokens each expert receives, from expected counts.
pub fn round_counts(load: &[f32], total: u32) -> Vec<u32> {
    let shares: Vec<f64> = load.iter().map(|&v| f64::from(v)).collect();
    expertsim_scenario::apportion::apportion(total, &shares)
}

/// `total` routed tokens spread as evenly as possible over `n` experts (the first ones get the
/// remainder).
pub fn even_counts(total: u32, n: usize) -> Vec<u32> {
    let n = n.max(1);
    let mut counts = vec![total / n as u32; n];
    for c in counts.iter_mut().take(total as usize % n) {
        *c += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_keeps_the_total_and_the_order_of_loads() {
        let counts = round_counts(&[0.5, 2.6, 0.9, 4.0], 8);
        assert_eq!(counts.iter().sum::<u32>(), 8);
        assert_eq!(counts, vec![0, 3, 1, 4]);
        assert_eq!(round_counts(&[0.0, 0.0, 0.0], 4), vec![2, 1, 1]);
        assert_eq!(even_counts(7, 3), vec![3, 2, 2]);
    }

    #[test]
    fn slot_major_layout_gives_each_expert_its_count_and_no_token_a_repeat() {
        let counts = [3u32, 1, 2, 2];
        let ids = slot_major_ids(&counts, 4, 2);
        for (e, &c) in counts.iter().enumerate() {
            assert_eq!(ids.iter().filter(|&&id| id == e as i32).count(), c as usize);
        }
        for token in ids.chunks(2) {
            assert_ne!(token[0], token[1], "{ids:?}");
        }
    }

    #[test]
    fn a_slower_virtual_gpu_runs_more_passes() {
        assert_eq!(passes(1.0), vec![1.0]);
        assert_eq!(passes(1.3), vec![1.0]);
        assert_eq!(passes(0.5), vec![1.0, 1.0]);
        let p = passes(0.8);
        assert_eq!(p.len(), 2);
        assert!((p[1] - 0.25).abs() < 1e-9);
    }

    #[test]
    fn the_cpu_labels_its_variability_as_repeated_work() {
        let shape = MoeModelShape::live_tiny_moe();
        let k = Kernels::open(BackendKind::Cpu, 0, Some(&shape), 16, 8, false, 1).unwrap();
        let label = k.variability_emulation(&[1.0, 0.8]);
        assert!(label.starts_with("emulated: repeated work"), "{label}");
        assert!(label.contains("[1.0, 0.8]"), "{label}");
    }

    #[test]
    fn cpu_kernels_time_a_moe_layer_and_zero_work_costs_nothing() {
        let shape = MoeModelShape::live_tiny_moe();
        let mut k = Kernels::open(BackendKind::Cpu, 0, Some(&shape), 16, 8, false, 1).unwrap();
        assert_eq!(k.moe(0, &[0, 0, 0], 2).unwrap(), 0.0);
        assert!(k.moe(0, &[3, 1, 0, 4], 2).unwrap() > 0.0);
        assert!(k.dense(k.dense_out_features(), 4, 8).unwrap() > 0.0);
        assert!(k.moe_at_speed(1, &[2, 2], 2, 0.7).unwrap() > 0.0);
        let shard = k.dense_shape(k.dense_out_features()).shard(4);
        assert!(k.decode_step_at_speed(shard, 3, 8, 0.7).unwrap() > 0.0);
    }
}
