//! The analytic roofline's routed-expert FFN beside measured GPU timings of the same shape:
//! Vidur's Meta-Llama-3-8B MLP on an A100 (hidden 4096, intermediate 14336, gated: one
//! Mixtral-8x7B expert) and Llama-2-7B's on an H100 (intermediate 11008), tensor parallelism 1,
//! up + activation + down. Prints a markdown table (docs/cost-model.md, "Against measured GPU
//! timings"). Run: `cargo run --release -p expertsim-sim --example roofline_vs_vidur`.

use sim::cost::gpu::GpuSpec;
use sim::cost::op_profile::{OpProfile, Operation};
use sim::cost::roofline::{ProfileCurves, RooflineParams};
use sim::cost::shape::MoeModelShape;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/vidur");
    let params = RooflineParams::default();
    println!(
        "| GPU | MLP (hidden x intermediate) | tokens | measured (us) | roofline (us) | roofline / measured |"
    );
    println!("|---|---|---|---|---|---|");
    for (gpu, file, ffn) in [
        ("A100-80GB", "a100/Meta-Llama-3-8B.json", 14336),
        ("H100-SXM", "h100/Llama-2-7b-hf.json", 11008),
    ] {
        let profile = OpProfile::load(&root.join(file)).expect("committed profile");
        let spec = GpuSpec::by_name(gpu).expect("catalogue GPU");
        let mut shape = MoeModelShape::mixtral_8x7b();
        shape.expert_ffn = ffn;
        let roofline = ProfileCurves::new(&spec, &shape, &params);
        for tokens in [1u64, 16, 64, 128, 256, 512, 1024, 2048, 4096] {
            let measured: f64 = Operation::MLP
                .iter()
                .map(|&op| profile.series(op, 1).unwrap().nanos_at(tokens).unwrap())
                .sum();
            let predicted = roofline.expert_ffn_nanos(tokens);
            println!(
                "| {gpu} | 4096 x {ffn} | {tokens} | {:.1} | {:.1} | {:.2} |",
                measured / 1e3,
                predicted / 1e3,
                predicted / measured
            );
        }
    }
}
