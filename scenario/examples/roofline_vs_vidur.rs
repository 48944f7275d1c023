//! The kernel model's gated MLP (up GEMM, activation, down GEMM on the GPU's rates) beside
//! measured GPU timings of the same shape: Vidur's Meta-Llama-3-8B MLP on an A100 (hidden 4096,
//! intermediate 14336, gated: one Mixtral-8x7B expert as a dense MLP) and Llama-2-7B's on an
//! H100 (intermediate 11008), tensor parallelism 1, up + activation + down; and, beside it, the
//! same expert as one group of the grouped expert GEMM (the MoE entry point, CUDA graph).
//! Prints a markdown table (docs/cost-model.md, "Against Vidur's MLPs").
//! Run: `cargo run --release -p expertsim-scenario --example roofline_vs_vidur`.

use expertsim_scenario::cost::gpu::GpuSpec;
use expertsim_scenario::cost::kernel::Timing;
use expertsim_scenario::cost::measured_ops::{LayerShape, OpClass, roofline_nanos};
use expertsim_scenario::cost::moe_layer::{ExpertRows, MoeLayerCost, SpeedFactors};
use expertsim_scenario::cost::op_profile::{OpProfile, Operation};
use expertsim_scenario::cost::roofline::Roofline;
use expertsim_scenario::cost::shape::WeightDtype;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/vidur");
    println!(
        "| GPU | MLP (hidden x intermediate) | tokens | measured (us) | kernel model (us) | model / measured | as one grouped-GEMM expert (us) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (gpu, file) in [
        ("A100-80GB", "a100/Meta-Llama-3-8B.json"),
        ("H100-SXM", "h100/Llama-2-7b-hf.json"),
    ] {
        let profile = OpProfile::load(&root.join(file)).expect("committed profile");
        let spec = GpuSpec::by_name(gpu).expect("catalogue GPU");
        let roofline = Roofline::of(&spec);
        let shape = LayerShape::of_profile(&profile);
        let expert = MoeLayerCost::for_experts(
            &spec,
            shape.hidden as usize,
            shape.ffn as usize,
            WeightDtype::Bf16,
            Timing::Graph,
        );
        for tokens in [1u64, 16, 64, 128, 256, 512, 1024, 2048, 4096] {
            let measured: f64 = Operation::MLP
                .iter()
                .map(|&op| profile.series(op, 1).unwrap().nanos_at(tokens).unwrap())
                .sum();
            let predicted = roofline_nanos(&roofline, OpClass::Mlp, &shape, 1, tokens);
            let grouped = expert
                .gpu(ExpertRows::Counted(&[tokens as u32]), SpeedFactors::NOMINAL)
                .nanos;
            println!(
                "| {gpu} | {} x {} | {tokens} | {:.1} | {:.1} | {:.2} | {:.1} |",
                shape.hidden,
                shape.ffn,
                measured / 1e3,
                predicted / 1e3,
                predicted / measured,
                grouped / 1e3
            );
        }
    }
}
