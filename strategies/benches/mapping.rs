//! The expert-mapping search at the paper's operating points: GEM for all 48 layers of
//! Qwen3-30B-A3B (128 experts, 4 GPUs, 16-step window, K = 30; goal under 1 s) and of
//! Llama-4-Scout (16 experts; the model of GEM's "mapping takes just 8.8 seconds"), and EPLB for
//! 58 layers x 256 experts x 32 GPUs (DeepSeek-V3's MoE layers; goal under 50 ms).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use expertsim_serving::cost::gpu::GpuSpec;
use expertsim_serving::cost::kernel::Timing;
use expertsim_serving::cost::moe_layer::{MoeLayerCost, SpeedFactors};
use expertsim_serving::cost::shape::MoeModelShape;
use expertsim_serving::policies::mapping::LayerProblem;
use expertsim_serving::policies::mapping::gpu_costs::planning_costs;
use expertsim_serving::serving::expert_trace::{TraceParams, generate};
use strategies::mapping::eplb::Eplb;
use strategies::mapping::gem::Gem;

/// GEM's search over every layer of `model` (4 H200s, GPU 0 at 0.88 of the clock, the default
/// synthetic trace from `(1, "gem/trace")`, window 16, K = 30): the GEM preset's mapping.
fn gem_search(c: &mut Criterion, model: &str, name: &str) {
    let shape = MoeModelShape::preset(model).unwrap();
    let params = TraceParams::default();
    let (trace, _) = generate(
        &params,
        shape.n_layers,
        shape.n_experts,
        shape.top_k,
        &mut expertsim_serving::rng::stream(1, "gem/trace"),
    );
    let layer = MoeLayerCost::new(&GpuSpec::by_name("H200").unwrap(), &shape, Timing::Graph);
    let speeds: Vec<SpeedFactors> = [0.88, 1.0, 1.0, 1.0]
        .iter()
        .map(|&s| SpeedFactors::split(s, 0.0))
        .collect();
    let limit = (trace.max_step_total().ceil() as usize).min(1 << 22);
    let costs = planning_costs(&layer, shape.n_experts / 4, &speeds, limit);
    let mut group = c.benchmark_group("mapping");
    group.sample_size(10);
    group.bench_function(name, |b| {
        b.iter(|| {
            // The search itself, not the process's memo of it (`SEARCHED` in mapping/gem.rs).
            strategies::mapping::gem::forget_searches();
            let mut gem = Gem::default();
            let mappings: Vec<_> = (0..shape.n_layers)
                .map(|l| {
                    let problem = LayerProblem {
                        layer: l,
                        n_experts: shape.n_experts,
                        window: trace.window(l, 0..16),
                        costs: &costs,
                    };
                    expertsim_serving::policies::mapping::ExpertMapper::map_layer(
                        &mut gem,
                        &problem,
                        &mut expertsim_serving::rng::stream(1, &format!("gem/mapper/layer{l}")),
                    )
                })
                .collect();
            black_box(mappings)
        })
    });
    group.finish();
}

fn gem_qwen3(c: &mut Criterion) {
    gem_search(c, "qwen3-30b-a3b", "gem_qwen3_30b_a3b_48_layers_k30_w16");
}

fn gem_scout(c: &mut Criterion) {
    gem_search(c, "llama-4-scout", "gem_llama_4_scout_48_layers_k30_w16");
}

fn eplb_deepseek_scale(c: &mut Criterion) {
    // 58 MoE layers x 256 experts, 32 GPUs: a synthetic trace supplies the loads.
    let params = TraceParams {
        observed_steps: 16,
        unseen_steps: 1,
        ..TraceParams::default()
    };
    let (trace, _) = generate(
        &params,
        58,
        256,
        8,
        &mut expertsim_serving::rng::stream(1, "bench-trace"),
    );
    let curve =
        expertsim_serving::cost::curve::CostCurve::new(vec![(1.0, 1.0), (1e6, 1e6)]).unwrap();
    let costs =
        expertsim_serving::policies::mapping::gpu_costs::GpuCosts::scaled(&curve, &[1.0; 32], 0);
    let mut group = c.benchmark_group("mapping");
    group.bench_function("eplb_58_layers_256_experts_32_gpus", |b| {
        b.iter(|| {
            let mut eplb = Eplb {
                redundant_slots: 32,
                n_groups: 8,
                n_nodes: 4,
            };
            let mut rng = expertsim_serving::rng::stream(1, "eplb");
            for layer in 0..58 {
                let problem = LayerProblem {
                    layer,
                    n_experts: 256,
                    window: trace.window(layer, 0..16),
                    costs: &costs,
                };
                black_box(
                    expertsim_serving::policies::mapping::ExpertMapper::map_layer(
                        &mut eplb, &problem, &mut rng,
                    ),
                );
            }
        })
    });
    group.finish();
}

criterion_group!(benches, gem_qwen3, gem_scout, eplb_deepseek_scale);
criterion_main!(benches);
