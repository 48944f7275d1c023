//! A dense model's decode step on the kernels, shared by the serving family's dense replicas in
//! live mode (live Chimera's engines, live MOSAIC's placed sessions): the model scaled by a [`Scaling`] (live
//! mode's default `LIVE_SCALING`, or the scaling of the dense-decode profile that prices the
//! run, so that a profile of the real widths runs the real widths), every layer one GEMM over
//! `hidden` of the block's parameters with attention, over the step's kernel rows and cached
//! tokens per row (`live_scale::kernel_rows_and_context`, as the profile was measured), then
//! the output head over the same rows.

use crate::device::Kernels;
use crate::step::Measure;
use calibrate::dense::dense_decode_shapes;
use expertsim_scenario::cost::shape::DenseModelShape;
use expertsim_scenario::serving::step::StepWork;
use expertsim_scenario::serving_family::live_scale::{Scaling, kernel_rows_and_context};
use kernels::BackendError;
use kernels::decode::DecodeShape;

/// One dense model's decode step on the kernels.
pub struct DenseStep {
    block: DecodeShape,
    head: DecodeShape,
    layers: u64,
}

impl DenseStep {
    /// `shape` as `scaling` scales it down.
    pub fn of(shape: &DenseModelShape, scaling: Scaling) -> DenseStep {
        let small = scaling.apply(shape);
        let (block, head) = dense_decode_shapes(&small);
        DenseStep {
            block,
            head,
            layers: small.n_layers,
        }
    }
}

impl Measure for DenseStep {
    fn measure(&mut self, kernels: &mut Kernels, work: &StepWork<'_>) -> Result<f64, BackendError> {
        let (rows, context) = kernel_rows_and_context(work);
        let (rows, context) = (rows as usize, context as usize);
        let mut total = 0.0;
        for _ in 0..self.layers {
            total += kernels.decode_step(self.block, rows, context)?;
        }
        total += kernels.decode_step(self.head, rows, 0)?;
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expertsim_scenario::serving_family::live_scale::LIVE_SCALING;

    #[test]
    fn a_scaled_down_model_keeps_its_heads_and_shrinks_its_bytes() {
        let full = DenseModelShape::preset("llama-3.1-8b-instruct").unwrap();
        let small = LIVE_SCALING.apply(&full);
        assert_eq!((small.hidden, small.n_layers, small.n_heads), (64, 4, 32));
        let ratio = full.weight_bytes() / small.weight_bytes();
        assert!(ratio > 4096.0, "{ratio}");
        let (block, head) = dense_decode_shapes(&small);
        assert_eq!(
            block.out_features * block.hidden,
            small.block_params() as usize
        );
        assert_eq!(head.out_features, small.vocab as usize);
    }

    /// At the real widths (widths 1, layers 8), Llama-3.1-8B's block is its whole layer: hidden
    /// 4096, 32 query and 8 KV heads of 128, vocabulary 128,256, 32 / 8 = 4 layers.
    #[test]
    fn the_real_widths_run_the_real_layer() {
        let full = DenseModelShape::preset("llama-3.1-8b-instruct").unwrap();
        let step = DenseStep::of(
            &full,
            Scaling {
                widths: 1,
                layers: 8,
            },
        );
        assert_eq!(step.layers, 4);
        assert_eq!(
            (step.block.hidden, step.block.n_heads, step.block.n_kv_heads),
            (4096, 32, 8)
        );
        assert_eq!(step.block.head_dim, 128);
        assert_eq!(step.head.out_features, 128_256);
        assert_eq!(
            step.block.out_features as u64 * 4096,
            full.block_params().div_ceil(4096) * 4096
        );
    }
}
