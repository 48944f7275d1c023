//! Reproduces the memory numbers of the ExpertWeave paper (Section 3.1, Table 1, Section 5.4,
//! Figure 9) from the base model's shape, the adapters' expert counts and the device capacity:
//! `cargo run -p expertsim-strategies --example expertweave_memory`.
//!
//! One quantity is not derivable from the paper's inputs: the per-device memory that is neither
//! weights nor KV cache (activations of vLLM's profiling pass, workspaces, the runtime). It is
//! fitted to one anchor, the merged single-adapter KV capacity (810K tokens), and printed; every
//! other number below is then a prediction. A second table repeats everything with no reserve.
//!
//! The serving part runs the cells of Figures 5, 6 and 7 of the shipped serving-family files
//! (scenarios/expertweave/{serving_scale, merged_skew, rerouting}.toml) and prints the overheads
//! and gains.

use expertsim_scenario::cost::shape::MlaMoeShape;
use expertsim_scenario::policies::memory::adapters::{ESFT_TABLE1, padding_fragmentation_factor};
use expertsim_scenario::policies::memory::adapters::{EsftAdapter, esft_adapter, esft_adapters};
use expertsim_scenario::policies::memory::device::DeviceMemory;
use expertsim_scenario::policies::memory::device::GIB;
use expertsim_scenario::policies::memory::{MemoryConfig, MemoryReport};
use strategies::memory::build;

const CAPACITY: u64 = 64 * GIB;
const UTILIZATION: f64 = 0.9;
/// The anchor: vLLM-Ascend (Merged) with one adapter holds KV for 810K tokens (Section 5.4).
const ANCHOR_MERGED_ONE_KV_TOKENS: u64 = 810_000;

fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB as f64
}

fn adapters(names: &[&str], shape: &MlaMoeShape) -> Vec<EsftAdapter> {
    names
        .iter()
        .map(|name| esft_adapter(name, shape).expect("a Table 1 adapter"))
        .collect()
}

fn managers() -> Vec<MemoryConfig> {
    vec![
        MemoryConfig::Merged {
            separate_devices: false,
            utilization: None,
        },
        MemoryConfig::Padding {
            e_max: None,
            a_max: None,
        },
        MemoryConfig::VirtualWeightTensor {
            page_bytes: 2 << 20,
            e_max: None,
            a_max: None,
        },
    ]
}

fn report(config: &MemoryConfig, device: &DeviceMemory, adapters: &[EsftAdapter]) -> MemoryReport {
    build(config)
        .plan(&MlaMoeShape::esft_vanilla_16b(), device, adapters)
        .expect("valid inputs")
        .report
}

fn memory_table(device: &DeviceMemory, orders: &[(&str, Vec<&str>)]) {
    let shape = MlaMoeShape::esft_vanilla_16b();
    for (label, order) in orders {
        println!(
            "\nadapters loaded in the order {label}: {}",
            order.join(", ")
        );
        println!(
            "{:<22} {:>2} {:>12} {:>14} {:>12} {:>8} {:>12} {:>4}",
            "manager", "A", "weights GiB", "adapter GiB", "waste GiB", "F", "KV tokens", "OOM"
        );
        for n in 1..=order.len() {
            let loaded = adapters(&order[..n], &shape);
            let mut per_kind = Vec::new();
            for config in managers() {
                let r = report(&config, device, &loaded);
                println!(
                    "{:<22} {:>2} {:>12.2} {:>14.3} {:>12.3} {:>8.3} {:>12} {:>4}",
                    config.kind(),
                    n,
                    gib(r.weight_bytes),
                    gib(r.adapter_allocated_bytes),
                    gib(r.padding_waste_bytes),
                    r.fragmentation_factor,
                    r.kv_capacity_tokens,
                    if r.out_of_memory { "yes" } else { "no" }
                );
                per_kind.push(r);
            }
            let (padding, virtual_tensor) = (&per_kind[1], &per_kind[2]);
            let saving = 1.0
                - virtual_tensor.adapter_allocated_bytes as f64
                    / padding.adapter_allocated_bytes as f64;
            let kv_gain =
                virtual_tensor.kv_capacity_tokens as f64 / padding.kv_capacity_tokens as f64 - 1.0;
            let versus_merged = if per_kind[0].out_of_memory {
                "merged is out of memory".to_string()
            } else {
                format!(
                    "virtual vs merged KV: {:.2}x",
                    virtual_tensor.kv_capacity_tokens as f64
                        / per_kind[0].kv_capacity_tokens as f64
                )
            };
            println!(
                "   virtual vs padding: {:.1}% less adapter memory, {:.1}% more KV tokens; {}",
                100.0 * saving,
                100.0 * kv_gain,
                versus_merged
            );
        }
    }
}

fn main() {
    let shape = MlaMoeShape::esft_vanilla_16b();
    println!("base: {}", shape.name);
    println!(
        "  parameters {} ({:.2} B), weights {} bytes = {:.3} GiB",
        shape.total_params(),
        shape.total_params() as f64 / 1e9,
        shape.weight_bytes(),
        gib(shape.weight_bytes())
    );
    println!(
        "  routed expert {} bytes ({:.2} pages of 2 MiB), {} MoE layers x {} experts",
        shape.expert_bytes(),
        shape.expert_bytes() as f64 / (2u64 << 20) as f64,
        shape.n_moe_layers(),
        shape.n_routed_experts
    );
    println!(
        "  KV cache {} bytes per token (MLA latent + rope key)",
        shape.kv_bytes_per_token()
    );

    println!("\nTable 1 (sparsity recomputed from the synthesized per-layer counts):");
    for row in &ESFT_TABLE1 {
        let adapter = esft_adapter(row.name, &shape).expect("a Table 1 adapter");
        println!(
            "  {:<18} max {:>2} (paper {:>2})  mean {:.2} (paper {:.2})  sparsity {:.2} (paper {:.2})",
            row.name,
            adapter.max_experts(),
            row.max_experts,
            adapter.mean_experts(),
            row.mean_experts,
            adapter.sparsity_factor(),
            row.sparsity
        );
    }
    let ten = esft_adapters(10, &shape).expect("ten adapters");
    let e_max = ten.iter().map(EsftAdapter::max_experts).max().unwrap_or(0);
    println!(
        "  all ten at the smallest feasible e_max = {e_max}: fragmentation factor {:.3}",
        padding_fragmentation_factor(&ten, e_max)
    );

    let usable = DeviceMemory::single(CAPACITY, UTILIZATION, 0).usable_bytes();
    let reserve =
        usable - shape.weight_bytes() - ANCHOR_MERGED_ONE_KV_TOKENS * shape.kv_bytes_per_token();
    println!(
        "\ndevice: {} GiB at {:.0}% = {} bytes; fitted non-KV reserve {} bytes = {:.3} GiB",
        CAPACITY / GIB,
        100.0 * UTILIZATION,
        usable,
        reserve,
        gib(reserve)
    );
    let orders = [
        (
            "matching the KV figures",
            vec!["gate-math", "gate-intent", "token-math"],
        ),
        (
            "as the text lists them",
            vec!["gate-math", "token-math", "gate-intent"],
        ),
    ];
    memory_table(
        &DeviceMemory::single(CAPACITY, UTILIZATION, reserve),
        &orders,
    );
    println!("\n--- the same with no reserve (upper bound on KV) ---");
    memory_table(
        &DeviceMemory::single(CAPACITY, UTILIZATION, 0),
        &orders[..1],
    );
    serving_figures();
}

const SEEDS: [u64; 3] = [1, 2, 3];

/// Mean over `SEEDS` of the named scalars of the cell of scenarios/expertweave/`file`.toml that
/// `sets` (as `expertsim run --set`) narrow it to, run on the serving family as `expertsim run`
/// runs it.
fn serve(file: &str, sets: &[(&str, &str)], names: &[&str]) -> Vec<f64> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../scenarios/expertweave/{file}.toml"));
    let arguments: Vec<String> = sets.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let plan =
        expertsim_scenario::scenario::load(&path, &arguments).expect("a shipped scenario loads");
    let value = |v: &str| -> toml::Value {
        toml::from_str::<toml::Table>(&format!("v = {v}"))
            .expect("a TOML value")
            .get("v")
            .cloned()
            .expect("the value")
    };
    // Narrowing the compared key keeps its baseline cell: take the cell the sets name.
    let cell = plan
        .cells
        .iter()
        .find(|cell| {
            sets.iter().all(|(k, v)| {
                cell.coords
                    .iter()
                    .all(|(key, given)| key != k || *given == value(v))
            })
        })
        .expect("the sets name a cell");
    let mut sums = vec![0.0; names.len()];
    for seed in SEEDS {
        let run = expertsim_scenario::runner::run_cell(
            &cell.scenario,
            seed,
            &strategies::Registry,
            None,
            None,
        )
        .expect("the cell runs");
        for (sum, name) in sums.iter_mut().zip(names) {
            *sum += run.output.scalar(name).expect("a metric");
        }
    }
    sums.iter().map(|s| s / SEEDS.len() as f64).collect()
}

/// Figure 7's cell of rerouting.toml: one request at a time on one device.
fn figure7(prompt: u64, memory: &str, rerouting: &str, names: &[&str]) -> Vec<f64> {
    let (prompt, memory, rerouting) = (
        prompt.to_string(),
        format!("\"{memory}\""),
        format!("\"{rerouting}\""),
    );
    serve(
        "rerouting",
        &[
            ("workload.prompt_tokens.value", prompt.as_str()),
            ("adapters.memory.kind", memory.as_str()),
            ("adapters.rerouting", rerouting.as_str()),
        ],
        names,
    )
}

/// Figure 5's cell of serving_scale.toml (uniform shares).
fn figure5(adapters: usize, rate: f64, memory: &str, names: &[&str]) -> Vec<f64> {
    let (adapters, rate, memory) = (
        adapters.to_string(),
        format!("{rate:?}"),
        format!("\"{memory}\""),
    );
    serve(
        "serving_scale",
        &[
            ("adapters.count", adapters.as_str()),
            ("adapters.alpha", "1.0"),
            ("arrival.rate_per_s", rate.as_str()),
            ("adapters.memory.kind", memory.as_str()),
        ],
        names,
    )
}

/// Figure 6's cell of merged_skew.toml (`memory` an inline table, as the file sweeps it).
fn figure6(rate: f64, alpha: f64, memory: &str, names: &[&str]) -> Vec<f64> {
    let (rate, alpha) = (format!("{rate:?}"), format!("{alpha:?}"));
    serve(
        "merged_skew",
        &[
            ("arrival.rate_per_s", rate.as_str()),
            ("adapters.alpha", alpha.as_str()),
            ("adapters.memory", memory),
        ],
        names,
    )
}

fn rerouting_microbenchmark() {
    let names = ["ttft_mean_ms", "tpot_mean_ms"];
    println!(
        "\n--- Figure 7 setting: gate-math on one device, one request at a time (0.05 req/s), \
         128 output tokens ---"
    );
    println!(
        "{:>7} {:>30} {:>30} {:>20}",
        "prompt",
        "TTFT ms merged/fused/unfused",
        "TPOT ms merged/fused/unfused",
        "unfused +% TTFT/TPOT"
    );
    for prompt in [128, 512, 1024, 2048] {
        let merged = figure7(prompt, "merged", "fused", &names);
        let fused = figure7(prompt, "virtual_weight_tensor", "fused", &names);
        let unfused = figure7(prompt, "virtual_weight_tensor", "unfused", &names);
        println!(
            "{:>7} {:>10.2} /{:>8.2} /{:>8.2} {:>10.3} /{:>8.3} /{:>8.3} {:>9.1} /{:>8.1}",
            prompt,
            merged[0],
            fused[0],
            unfused[0],
            merged[1],
            fused[1],
            unfused[1],
            100.0 * (unfused[0] / merged[0] - 1.0),
            100.0 * (unfused[1] / merged[1] - 1.0)
        );
    }
}

fn serving_figures() {
    rerouting_microbenchmark();
    let names = [
        "ttft_mean_ms",
        "tpot_mean_ms",
        "prefill_throughput_tps",
        "decode_throughput_tps",
    ];
    println!(
        "\n--- Figure 5 setting: 8 devices, TP = EP = 8, uniform shares, mean of seeds 1-3 ---"
    );
    println!(
        "{:>8} {:>5} {:>22} {:>22} {:>10} {:>10}",
        "adapters", "rate", "TTFT ms (base/weave)", "TPOT ms (base/weave)", "TTFT +%", "TPOT +%"
    );
    for adapters in [5, 10, 20] {
        for rate in [1.0, 2.0, 3.0, 4.0, 5.0] {
            let base = figure5(adapters, rate, "base_only", &names);
            let weave = figure5(adapters, rate, "virtual_weight_tensor", &names);
            println!(
                "{:>8} {:>5.1} {:>10.2} / {:>9.2} {:>10.3} / {:>9.3} {:>10.1} {:>10.1}",
                adapters,
                rate,
                base[0],
                weave[0],
                base[1],
                weave[1],
                100.0 * (weave[0] / base[0] - 1.0),
                100.0 * (weave[1] / base[1] - 1.0)
            );
        }
    }
    println!(
        "\n--- Figure 6 setting: gate-math + gate-intent (100 s horizon); ExpertWeave on 2 devices \
         at 90%, merged on 2 x 2 devices at 45% ---"
    );
    println!(
        "{:>5} {:>6} {:>9} {:>26} {:>26} {:>10} {:>10}",
        "rate",
        "alpha",
        "math %",
        "prefill tok/s (merged/EW)",
        "decode tok/s (merged/EW)",
        "prefill +%",
        "decode +%"
    );
    for (rate, alpha) in [8.0, 150.0]
        .into_iter()
        .flat_map(|rate| [1.0, 0.5, 0.3, 0.2].map(|alpha| (rate, alpha)))
    {
        let merged = figure6(
            rate,
            alpha,
            "{ kind = \"merged\", separate_devices = true, utilization = 0.45 }",
            &names,
        );
        let weave = figure6(rate, alpha, "{ kind = \"virtual_weight_tensor\" }", &names);
        let share = expertsim_scenario::serving_family::adapters::adapter_shares(2, alpha)[0];
        println!(
            "{:>5.0} {:>6.1} {:>9.1} {:>12.0} / {:>11.0} {:>12.0} / {:>11.0} {:>10.1} {:>10.1}",
            rate,
            alpha,
            100.0 * share,
            merged[2],
            weave[2],
            merged[3],
            weave[3],
            100.0 * (weave[2] / merged[2] - 1.0),
            100.0 * (weave[3] / merged[3] - 1.0)
        );
    }
}
