//! The managers against each other on the paper's memory setup (one 64 GiB device at 90%).

use super::*;
use expertsim_serving::cost::shape::MlaMoeShape;
use expertsim_serving::policies::memory::MemoryPlan;
use expertsim_serving::policies::memory::adapters::esft_adapter;
use expertsim_serving::policies::memory::device::DeviceMemory;
use expertsim_serving::policies::memory::device::GIB;

/// The first `n` of the adapters Section 5.4 names, in its order ("gate-math, token-math and
/// gate-intent").
fn paper_adapters(n: usize) -> Vec<expertsim_serving::policies::memory::adapters::EsftAdapter> {
    ["gate-math", "token-math", "gate-intent"][..n]
        .iter()
        .map(|name| esft_adapter(name, &MlaMoeShape::esft_vanilla_16b()).unwrap())
        .collect()
}

fn plan(config: &MemoryConfig, n: usize, reserve: u64) -> MemoryPlan {
    let device = DeviceMemory::single(64 * GIB, 0.9, reserve);
    build(config)
        .plan(
            &MlaMoeShape::esft_vanilla_16b(),
            &device,
            &paper_adapters(n),
        )
        .unwrap()
}

fn vwt() -> MemoryConfig {
    MemoryConfig::VirtualWeightTensor {
        page_bytes: 2 << 20,
        e_max: None,
        a_max: None,
    }
}

fn merged() -> MemoryConfig {
    MemoryConfig::Merged {
        separate_devices: false,
        utilization: None,
    }
}

#[test]
fn merged_at_three_adapters_is_out_of_memory_not_a_crash() {
    for reserve in [0, 4 * GIB] {
        let one = plan(&merged(), 1, reserve);
        assert!(!one.report.out_of_memory);
        assert!(one.report.kv_capacity_tokens > 0);
        let three = plan(&merged(), 3, reserve);
        assert!(three.report.out_of_memory);
        assert_eq!(three.report.kv_capacity_tokens, 0);
        assert!(three.report.weight_bytes > 87 * GIB);
        // the shared managers hold three adapters where merged cannot
        assert!(!plan(&vwt(), 3, reserve).report.out_of_memory);
    }
}

#[test]
fn virtual_weight_tensor_allocates_what_the_experts_need_padding_more() {
    for n in 1..=3 {
        let virtual_plan = plan(&vwt(), n, 0).report;
        let padding_plan = plan(
            &MemoryConfig::Padding {
                e_max: None,
                a_max: None,
            },
            n,
            0,
        )
        .report;
        assert_eq!(
            virtual_plan.adapter_expert_bytes,
            padding_plan.adapter_expert_bytes
        );
        // at most one partly used page per adapter per layer beyond the experts' bytes
        let slack = n as u64 * 26 * (2 << 20);
        assert!(virtual_plan.adapter_allocated_bytes >= virtual_plan.adapter_expert_bytes);
        assert!(virtual_plan.adapter_allocated_bytes < virtual_plan.adapter_expert_bytes + slack);
        assert!(virtual_plan.fragmentation_factor < 1.01);
        assert!(padding_plan.fragmentation_factor > 1.3);
        assert!(padding_plan.kv_capacity_tokens < virtual_plan.kv_capacity_tokens);
        // base experts: 64 x 8.25 = 528 pages per layer
        assert!(virtual_plan.mapped_pages >= 26 * 528);
    }
}

#[test]
fn base_only_and_separate_merged_instances() {
    let base = plan(&MemoryConfig::BaseOnly, 2, 0);
    let one_merged = plan(&merged(), 1, 0);
    assert_eq!(
        base.report.kv_capacity_tokens,
        one_merged.report.kv_capacity_tokens
    );
    assert!(!base.instances[0].adapter_experts);
    let separate = plan(
        &MemoryConfig::Merged {
            separate_devices: true,
            utilization: Some(0.9),
        },
        3,
        0,
    );
    assert_eq!(separate.instances.len(), 3);
    assert!(!separate.report.out_of_memory);
    for instance in &separate.instances {
        assert_eq!(instance.kv, one_merged.instances[0].kv);
    }
}

#[test]
fn bad_configs_are_typed_errors() {
    let device = DeviceMemory::single(64 * GIB, 0.9, 0);
    let shape = MlaMoeShape::esft_vanilla_16b();
    let adapters = paper_adapters(2);
    let small_e_max = MemoryConfig::Padding {
        e_max: Some(4),
        a_max: None,
    };
    assert!(
        build(&small_e_max)
            .plan(&shape, &device, &adapters)
            .is_err()
    );
    let zero_page = MemoryConfig::VirtualWeightTensor {
        page_bytes: 0,
        e_max: None,
        a_max: None,
    };
    assert!(build(&zero_page).plan(&shape, &device, &adapters).is_err());
    assert!(build(&merged()).plan(&shape, &device, &[]).is_err());
    let bad_utilization = MemoryConfig::Merged {
        separate_devices: true,
        utilization: Some(1.5),
    };
    assert!(
        build(&bad_utilization)
            .plan(&shape, &device, &adapters)
            .is_err()
    );
}

#[test]
fn catalogue_kinds_round_trip() {
    let configs = [
        merged(),
        MemoryConfig::Padding {
            e_max: None,
            a_max: None,
        },
        vwt(),
        MemoryConfig::BaseOnly,
    ];
    for (info, config) in catalogue().iter().zip(configs) {
        assert_eq!(info.kind, config.kind());
        assert_eq!(build(&config).kind(), info.kind);
        let json = serde_json::to_value(&config).unwrap();
        let back: MemoryConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back, config);
    }
}

/// The paper's Section 5.4 figures with the reserve the shipped scenarios/expertweave/memory.toml
/// uses (its one fitted input, rounded to 4.88 GiB), the adapters in the paper's order: the
/// merged single-adapter anchor (810K tokens) must come out of that shipped value, and the others
/// are predictions, within the tolerances docs/reproduction.md (ExpertWeave section) reports where
/// they agree. With two adapters the paper's order loads token-math (6.12 experts per layer on
/// average, 9 at most) where the paper's 28.9% reduction and its KV drop fit gate-intent (9.50,
/// 12): ours holds more than the paper's "more than 572K tokens" and saves more than 28.9%.
#[test]
fn paper_memory_figures_within_tolerance() {
    let scenario = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/expertweave/memory.toml"
    ))
    .unwrap();
    let reserve_gib: f64 = scenario
        .lines()
        .find_map(|l| l.trim().strip_prefix("runtime_reserve_gib = "))
        .and_then(|v| v.split('#').next())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let reserve = (reserve_gib * GIB as f64).round() as u64;
    let tokens = |config: &MemoryConfig, n| plan(config, n, reserve).report.kv_capacity_tokens;
    let near = |ours: u64, paper: f64, tolerance: f64| {
        assert!(
            (ours as f64 / paper - 1.0).abs() < tolerance,
            "{ours} vs the paper's {paper}"
        );
    };
    near(tokens(&merged(), 1), 810_000.0, 0.001);
    assert!(tokens(&vwt(), 2) > 572_000);
    near(tokens(&vwt(), 3), 477_000.0, 0.02);
    let padding = MemoryConfig::Padding {
        e_max: None,
        a_max: None,
    };
    let reduction = |n| {
        let padded = plan(&padding, n, reserve).report.adapter_allocated_bytes as f64;
        let mapped = plan(&vwt(), n, reserve).report.adapter_allocated_bytes as f64;
        1.0 - mapped / padded
    };
    for (n, paper_reduction) in [(1, 0.404), (3, 0.373)] {
        assert!(
            (reduction(n) - paper_reduction).abs() < 0.02,
            "{n} adapters: {} vs {paper_reduction}",
            reduction(n)
        );
    }
    // Two adapters: padding reserves 2 x 12 slots per layer, the virtual tensor maps gate-math's
    // and token-math's experts (within a page per adapter and layer of `1 - (7.04 + 6.12) / 24`).
    assert!((reduction(2) - (1.0 - (7.04 + 6.12) / 24.0)).abs() < 0.01);
}
