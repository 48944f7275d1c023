//! Criterion benchmark of the Chimera preset's speed target (docs/performance.md): one
//! simulated hour of APPS agent workflows at 16 per second on four heterogeneous replicas
//! (Qwen2.5 1.5B/3B/7B/14B on an RTX A6000 each: vLLM's chunked-prefill engine with prefix
//! caching, STJF queues, the Chimera router), in under one second, run as `expertsim run` runs a
//! cell of the serving family (`[workload.workflow]`; the Chimera family's own loop is gone from
//! this bench, issue 28).
//! Run: `cargo bench -p expertsim-scenario --bench chimera`.

use criterion::{Criterion, criterion_group, criterion_main};
use std::path::Path;

/// One group per model, each Chimera's engine as the key mapping writes it
/// (docs/unified-model-changes/chimera-preset.md; scenarios/chimera/speed.toml's cell).
fn scenario() -> String {
    let mut text = String::from(
        "name = \"bench-chimera-hour\"\nfamily = \"serving\"\nseeds = [1]\n\
         [workload]\nhorizon_s = 3600\nworkflow = { dataset = \"apps\" }\n\
         [arrival]\npattern = \"poisson\"\nrate_per_s = 16.0\n\
         [routing]\nkind = \"chimera\"\nslack = 0.5\n",
    );
    for model in [
        "qwen2.5-1.5b-instruct",
        "qwen2.5-3b-instruct",
        "qwen2.5-7b-instruct",
        "qwen2.5-14b-instruct",
    ] {
        text += &format!(
            "[[replica]]\nmodel = \"{model}\"\ngpu = \"RTX-A6000\"\n\
             scheduler = {{ kind = \"sarathi\", chunk_size = 2048 }}\nwatermark = 0.0\n\
             prefix_caching = true\nhost_time = \"vllm\"\n\
             queue = {{ kind = \"stjf\" }}\n"
        );
    }
    text
}

fn one_hour_rps16(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench-chimera-hour.toml");
    let plan = expertsim_scenario::scenario::load_str(&path, &scenario(), &[])
        .expect("bench scenario is valid");
    let cell = &plan.cells[0].scenario;
    let mut group = c.benchmark_group("chimera");
    group.sample_size(10);
    group.bench_function("one_hour_rps16_four_engines", |b| {
        b.iter(|| {
            let out =
                expertsim_scenario::runner::run_cell(cell, 1, &strategies::Registry, None, None)
                    .expect("the bench scenario runs");
            let completed = out
                .output
                .scalars
                .iter()
                .find(|(name, _)| name == "completed")
                .map(|(_, n)| *n)
                .expect("a serving run reports its completed requests");
            // About 57,600 workflows of 7/3 stages on average arrive in the hour (some 134,000
            // stages), and every one is served.
            assert!(completed > 120_000.0, "{completed} stages served");
            out
        })
    });
    group.finish();
}

criterion_group!(benches, one_hour_rps16);
criterion_main!(benches);
