//! The dense-decode calibration (`--dense-models`): for each named dense model scaled down as
//! live mode runs a dense replica ([`expertsim_scenario::serving_family::live_scale`]), the kernels of one
//! decode step (one block GEMM with attention per layer, then the output head; the shapes of
//! `expertsim_live::dense::DenseStep`) timed on a grid of rows x cached tokens per row, and
//! the host-to-device copy of the model's bf16 bytes. The profile holds each grid point's
//! whole step, `n_layers x block + head` of the medians.

use crate::pipeline::CalibrateError;
use crate::stats::summarize;
use expertsim_scenario::cost::shape::DenseModelShape;
use expertsim_scenario::serving_family::dense_profile::{
    DENSE_PROFILE_FORMAT, DenseDecodeProfile, DenseModelProfile,
};
use expertsim_scenario::serving_family::live_scale::Scaling;
use kernels::backend::{Backend, Workload};
use kernels::decode::DecodeProblem;

/// What the dense-decode calibration measures and how often.
#[derive(Clone, Debug, PartialEq)]
pub struct DensePlan {
    pub scaling: Scaling,
    pub rows: Vec<u64>,
    pub contexts: Vec<u64>,
    pub tile: usize,
    pub warmup: usize,
    pub repetitions: usize,
    pub seed: u64,
}

impl DensePlan {
    /// The default grid: every row count to 8, then doubling steps to 160 (a live MOSAIC
    /// prefill step has a few hundred rows at most); contexts to 256 tokens per row.
    pub fn default_rows() -> Vec<u64> {
        vec![1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160]
    }

    pub fn default_contexts() -> Vec<u64> {
        vec![1, 8, 16, 24, 32, 48, 64, 128, 256]
    }

    /// Checks the grid; the error names the flag.
    pub fn validate(&self) -> Result<(), CalibrateError> {
        let ascending = |v: &[u64]| !v.is_empty() && v[0] > 0 && v.windows(2).all(|w| w[0] < w[1]);
        if !ascending(&self.rows) {
            return Err(CalibrateError::Input(
                "--dense-rows: must be positive and strictly ascending".into(),
            ));
        }
        if !ascending(&self.contexts) {
            return Err(CalibrateError::Input(
                "--dense-contexts: must be positive and strictly ascending".into(),
            ));
        }
        if self.scaling.widths == 0 || self.scaling.layers == 0 {
            return Err(CalibrateError::Input(
                "--scale-widths and --scale-layers must be at least 1".into(),
            ));
        }
        if self.repetitions == 0 {
            return Err(CalibrateError::Input(
                "--repetitions: must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Median nanoseconds of one decode kernel launch of `shape` over `rows` x `context`.
fn time_decode(
    backend: &mut dyn Backend,
    plan: &DensePlan,
    weights: &DecodeProblem,
    rows: u64,
    context: u64,
) -> Result<f64, CalibrateError> {
    let problem = weights
        .clone()
        .with_synthetic_inputs(rows as usize, context as usize, plan.seed);
    let samples = backend.time(&Workload::Decode(problem), plan.warmup, plan.repetitions)?;
    Ok(summarize(rows as f64, &samples)[1])
}

pub fn calibrate_dense(
    backend: &mut dyn Backend,
    shapes: &[DenseModelShape],
    plan: &DensePlan,
    log: &mut dyn FnMut(&str),
) -> Result<DenseDecodeProfile, CalibrateError> {
    plan.validate()?;
    let device = backend.device().clone();
    let mut models = Vec::new();
    for full in shapes {
        let shape = plan.scaling.apply(full);
        let (block, head) = dense_decode_shapes(&shape);
        // Each kernel's weights once (a backend keeps them on the device), inputs per point.
        let weights = |shape| DecodeProblem::random(shape, plan.tile, 1, 0, plan.seed, true);
        let (block, head) = (weights(block), weights(head));
        let mut head_ns = Vec::new();
        for &r in &plan.rows {
            head_ns.push(time_decode(backend, plan, &head, r, 0)?);
        }
        let mut step_ns = Vec::new();
        for &c in &plan.contexts {
            let mut row = Vec::new();
            for (i, &r) in plan.rows.iter().enumerate() {
                let block_ns = time_decode(backend, plan, &block, r, c)?;
                row.push(shape.n_layers as f64 * block_ns + head_ns[i]);
            }
            step_ns.push(row);
        }
        let weight_bytes = shape.weight_bytes() as u64;
        let host: Vec<u8> = (0..weight_bytes).map(|i| (i % 251) as u8).collect();
        let mut copies = Vec::new();
        for i in 0..plan.warmup + plan.repetitions {
            let ns = backend.copy_to_device(&host)?;
            if i >= plan.warmup {
                copies.push(ns);
            }
        }
        let load_ns = summarize(weight_bytes as f64, &copies)[1];
        log(&format!(
            "{}: {} x {} step points, load of {weight_bytes} bytes {:.1} us",
            shape.name,
            plan.contexts.len(),
            plan.rows.len(),
            load_ns / 1e3
        ));
        models.push(DenseModelProfile {
            shape,
            weight_bytes,
            load_ns: Some(load_ns),
            rows: plan.rows.clone(),
            contexts: plan.contexts.clone(),
            step_ns,
        });
    }
    Ok(DenseDecodeProfile {
        format: DENSE_PROFILE_FORMAT.into(),
        device: device.name.clone(),
        backend: device.backend.as_str().into(),
        timing: device.timing.clone(),
        tool_version: format!("expertsim-calibrate {}", env!("CARGO_PKG_VERSION")),
        date: Some(crate::timestamp::now()),
        notes: format!(
            "measured with the {} backend ({}); each model scaled down to {}; step_ns[context][row] \
             = n_layers x median(one block GEMM hidden -> block parameters / hidden, with \
             attention over `context` cached tokens per row) + median(output head GEMM); load_ns: \
             median host-to-device copy of the scaled model's bf16 bytes (docs/calibration.md)",
            device.backend,
            device.timing,
            plan.scaling.describe()
        ),
        scaling: plan.scaling,
        tile_tokens: plan.tile as u32,
        warmup: plan.warmup as u32,
        repetitions: plan.repetitions as u32,
        models,
    })
}

/// The kernels' decode shapes of a dense model (block, head), as live mode runs them too.
pub fn dense_decode_shapes(
    shape: &expertsim_scenario::cost::shape::DenseModelShape,
) -> (kernels::decode::DecodeShape, kernels::decode::DecodeShape) {
    let [
        hidden,
        block_out_features,
        n_heads,
        n_kv_heads,
        head_dim,
        vocab,
    ] = expertsim_scenario::serving_family::live_scale::kernel_dims(shape);
    kernels::decode::DecodeShape::of_dense(kernels::decode::DenseDims {
        hidden,
        block_out_features,
        n_heads,
        n_kv_heads,
        head_dim,
        vocab,
    })
}
