//! How live mode runs a MOSAIC expert, shared by the live executor, the calibration binary
//! and the profile-priced session cost: the dense model scaled down by [`Scaling`], one
//! transformer block as one GEMM over `hidden` with attention, and a continuous-batching
//! [`DecodeStep`] as that kernel's rows and cached tokens per row.

use super::decode::DecodeStep;
use crate::cost::shape::DenseModelShape;
use serde::{Deserialize, Serialize};

/// A dense model at 1/`widths` of its hidden, intermediate, head and vocabulary widths and
/// 1/`layers` of its layers (at least one of each); the heads are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scaling {
    pub widths: u64,
    pub layers: u64,
}

/// The scaling live mode runs every MOSAIC expert at.
pub const LIVE_SCALING: Scaling = Scaling {
    widths: 64,
    layers: 8,
};

impl Scaling {
    /// `shape` scaled down ([`DenseModelShape::scaled_down`]).
    pub fn apply(&self, shape: &DenseModelShape) -> DenseModelShape {
        shape.scaled_down(self.widths, self.layers)
    }

    /// One line for reports.
    pub fn describe(&self) -> String {
        format!(
            "1/{} of the hidden, intermediate, head and vocabulary widths and 1/{} of the \
             layers (heads kept)",
            self.widths, self.layers
        )
    }
}

/// The dimensions the decode kernel runs `shape` at: hidden, one block's GEMM width, query and
/// KV heads, head width and vocabulary (the order of `kernels::decode::DenseDims`).
pub fn kernel_dims(shape: &DenseModelShape) -> [usize; 6] {
    [
        shape.hidden as usize,
        block_gemm_width(shape) as usize,
        shape.n_heads as usize,
        shape.n_kv_heads as usize,
        shape.head_dim as usize,
        shape.vocab as usize,
    ]
}

/// Output features of one transformer block of `shape` run as one GEMM over `hidden`.
pub fn block_gemm_width(shape: &DenseModelShape) -> u64 {
    shape.block_params().div_ceil(shape.hidden)
}

/// The decode kernel's rows (sequences plus prefill tokens) and cached tokens per row for
/// `step`: the attention the cost model counts (every cached token once, prefills causally)
/// spread evenly over the rows.
pub fn kernel_rows_and_context(step: &DecodeStep) -> (u64, u64) {
    let rows = step.batch + step.prefill_tokens;
    let attended = step.context_tokens + step.prefill_square / 2;
    (rows, attended.div_ceil(rows.max(1)))
}
