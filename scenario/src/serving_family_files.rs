//! The serving family through the loader above it (`scenario::load`, the registry, the shipped
//! scenarios), which the family's own crate, `expertsim-serving`, cannot name: the shipped live
//! files' pricing, the MOSAIC preset's workers, the study and Chimera files in every cell, the
//! `replica.models` list, docs/serving-family.md's key table, and a bad field of a placed run
//! named by its file and line.

use crate::serving_family::fixtures;
use crate::serving_family::{ServingScenario, config, deployment, step_cost};
use std::path::Path;

/// `body` as a file of the serving family (`name` and `family` before it) with `from` replaced
/// by `to` is refused through the loader naming `name`, the line that reads `bad_line`, and
/// `field`.
fn refused_at_its_line(name: &str, body: &str, from: &str, to: &str, bad_line: &str, field: &str) {
    let text = format!("name = \"t\"\nfamily = \"serving\"\n{body}").replacen(from, to, 1);
    let e = crate::scenario::load_str(Path::new(name), &text, &[]).expect_err(to);
    let line = text.lines().position(|l| l == bad_line).unwrap() + 1;
    let message = e.to_string();
    assert!(
        message.contains(&format!("{name}:{line}:")) && message.contains(field),
        "{message}"
    );
}

/// Placed questions, a placement and a calibration, each with one bad field.
#[test]
fn a_placed_runs_bad_field_is_refused_naming_its_file_and_line() {
    refused_at_its_line(
        "questions.toml",
        &fixtures::placed_questions(),
        "gpus = 2\ntensor_parallel = 2",
        "gpus = 4\ntensor_parallel = 4",
        "gpus = 4",
        "replica[2].gpus",
    );
    refused_at_its_line(
        "placed.toml",
        &fixtures::placed(),
        "workers = 2",
        "workers = 0",
        "workers = 0",
        "placement.workers",
    );
    refused_at_its_line(
        "calibrated.toml",
        &fixtures::calibrated(),
        "calls = 20",
        "calls = 20\nsweep_max = 8",
        "sweep_max = 8",
        "sweep_max",
    );
}

/// A dense replica priced from a measured dense-decode profile (`replica.scheduler.profile`,
/// scenarios/live/chimera.toml's two groups): a decode step at a sampled (rows, context) point
/// costs the profile's sample of the group's scaled-down model, with no host time beside
/// `step_overhead_ms = 0`, and reports a measured source; the run's cost model is measured; a
/// profile without the group's model is refused naming the field.
#[test]
fn a_dense_replica_is_priced_from_its_dense_decode_profile() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/live/chimera.toml");
    let plan = crate::scenario::load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
    let s: &ServingScenario = plan.cells[0].scenario.get().unwrap();
    let file = crate::serving_family::dense_profile::DenseDecodeProfile::load(
        &path
            .parent()
            .unwrap()
            .join("../../profiles/measured/amd-epyc_chimera-live-dense.json"),
    )
    .unwrap();
    assert_eq!(
        s.cost_model(),
        crate::serving::CostSource::Measured.cost_model_name()
    );
    for g in 0..2 {
        let group = s.group(g);
        let config::ServedModel::Dense(shape) = &group.model else {
            panic!("group {g} is dense");
        };
        let model = file
            .models
            .iter()
            .find(|m| m.shape == file.scaling.apply(shape))
            .unwrap();
        let (ci, ri) = (2, 3);
        let (context, rows) = (model.contexts[ci], model.rows[ri]);
        let deployment = deployment::Deployment::new(&group, None).unwrap();
        let time = step_cost::ReplicaStepCost::new(&group, &deployment, None, None)
            .decode_profile(rows, context);
        assert_eq!(
            time.duration.0,
            model.step_ns[ci][ri].round() as u64,
            "group {g}"
        );
        assert_eq!(time.source, crate::serving::CostSource::Measured);
        assert_eq!(time.breakdown.parts.host_ns, 0.0);
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let other = ["replica.model=\"qwen2.5-3b-instruct\"".to_string()];
    let err = crate::scenario::load_str(&path, &text, &other).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("scheduler.profile") && message.contains("has no decode samples"),
        "{message}"
    );
}

#[test]
fn the_shipped_study_scenario_loads() {
    // scenarios/studies/caps_x_mapping.toml (study (a), docs/studies.md): 3 selectors x 3
    // mappings x 2 GPU setups.
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/studies/caps_x_mapping.toml");
    let plan = crate::scenario::load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.family.name(), "serving");
    assert_eq!(plan.cells.len(), 18);
}

/// The MOSAIC preset (scenarios/mosaic/gpqa_round_robin_serving.toml) deploys each worker as
/// MOSAIC's worker by hand: every replica group is one A100 that loads its model's bf16 weights
/// over the 0.4 GB/s path (`load = { kind = "path", gbps = 0.4 }`: weights / 0.4e9 seconds), whose
/// KV cache holds 90-100 % of what the card's memory at `gpu_memory_utilization` leaves beside
/// the weights (whole blocks), and whose calls are Table 3's GPQA slots of its model.
#[test]
fn the_mosaic_preset_deploys_each_worker_by_hand() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/mosaic");
    let plan = crate::scenario::load(&dir.join("gpqa_round_robin_serving.toml"), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let preset = plan.cells[0]
        .scenario
        .get::<ServingScenario>()
        .expect("a serving scenario");
    // Table 3's GPQA slots of the hybrid pool's models.
    let slots = [
        ("r1-distill-llama-8b", 429),
        ("r1-distill-qwen-7b", 158),
        ("gemma-2-9b", 4),
        ("exaone-3.5-7.8b", 3),
    ];
    let mut groups = 0;
    for (g, (model, replica)) in preset.groups().enumerate() {
        let config::ServedModel::Dense(shape) = model else {
            panic!("{} is not dense", model.name());
        };
        let deployment = deployment::Deployment::new(&preset.group(g), None).unwrap();
        let weights = shape.weight_bytes();
        assert_eq!(
            deployment.weights_per_gpu_bytes,
            weights,
            "{}",
            model.name()
        );
        let load = replica.load.expect("the preset loads its models");
        assert_eq!(
            load.duration(weights),
            crate::time::SimDuration::from_secs_f64(weights / 0.4e9),
            "{}",
            model.name()
        );
        let room = replica.gpu.memory_gb * 1e9 * replica.gpu_memory_utilization - weights;
        let by_hand = room / shape.kv_bytes_per_token();
        let tokens = deployment.kv_tokens as f64;
        assert!(
            (0.9 * by_hand..=by_hand).contains(&tokens),
            "{}: {tokens} KV tokens, {by_hand} by hand",
            model.name()
        );
        assert_eq!(
            deployment.kv_blocks,
            deployment.kv_tokens / u64::from(replica.block_size)
        );
        let (_, n) = slots
            .iter()
            .find(|(key, _)| model.name().to_lowercase().contains(key))
            .unwrap_or_else(|| panic!("{} is no hybrid-pool model", model.name()));
        assert_eq!(preset.calls[g].n_requests, *n as usize, "{}", model.name());
        groups += 1;
    }
    // Every model GPQA recruits has its worker.
    assert_eq!(groups, slots.len());
}

/// scenarios/live/expertweave.toml (the ExpertWeave preset's live file) with `edit` applied.
fn live_expertweave(edit: &[(&str, &str)]) -> Result<ServingScenario, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/live/expertweave.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (from, to) in edit {
        assert!(text.contains(from), "{from}");
        text = text.replace(from, to);
    }
    let plan = crate::scenario::load_str(&path, &text, &[]).map_err(|e| e.to_string())?;
    Ok(plan.cells[0]
        .scenario
        .get::<ServingScenario>()
        .unwrap()
        .clone())
}

#[test]
fn an_mla_adapter_replica_is_priced_from_its_profiles_widths_and_rerouting_series() {
    // profiles/measured/amd-epyc_live-tiny-moe-ffn32.json measured live-tiny-mla's GEMMs at
    // their own widths: 651 outputs (the dense layer: attention + 3 x 64 x 128 FFN over hidden
    // 64), 427 (a MoE layer's attention, shared expert and router) and 512 (the head); at 1 row
    // 775,094, 511,281 and 625,972 ns, at 64 rows 816,325, 548,326 and 666,693 ns; its fused
    // rerouting of 3 adapters 140 ns at 1 row and 1,432 ns at 64, the unfused chain 150 ns at 1.
    let s = live_expertweave(&[]).unwrap();
    let curves = s.replica.curves.as_ref().expect("priced from the profile");
    let mla = curves.mla.as_ref().expect("an MLA model's GEMMs");
    let one = crate::cost::moe_layer::SpeedFactors {
        compute: 1.0,
        bandwidth: 1.0,
    };
    // A decode step of one sequence: every layer's GEMM at 1 row, the head at 1.
    let decode = curves.gpu_nanos(0, 1, 1, 2, 1, one);
    assert_eq!(decode.layers_ns, 775_094.0 + 2.0 * 511_281.0);
    assert_eq!(decode.head_ns, 625_972.0);
    // A 64-token prompt: the layers at 64 rows, the head on the one sequence that emits.
    let prefill = curves.gpu_nanos(64, 0, 1, 2, 1, one);
    assert_eq!(prefill.layers_ns, 816_325.0 + 2.0 * 548_326.0);
    assert_eq!(prefill.head_ns, 625_972.0);
    // Twice as fast a GPU halves it.
    let fast = crate::cost::moe_layer::SpeedFactors {
        compute: 2.0,
        bandwidth: 2.0,
    };
    assert_eq!(
        curves.gpu_nanos(64, 0, 1, 2, 1, fast).nanos(),
        prefill.nanos() / 2.0
    );
    // The series the profile has, by variant and nearest adapter count.
    use crate::serving_family::rerouting::Rerouting;
    assert_eq!(mla.reroute(Rerouting::Fused, 3).unwrap().at(64.0), 1_432.0);
    assert_eq!(mla.reroute(Rerouting::Fused, 7).unwrap().at(1.0), 140.0);
    assert_eq!(mla.reroute(Rerouting::Unfused, 3).unwrap().at(1.0), 150.0);
    // In the step: the replica that reroutes adds each MoE layer's measured kernel, 2 x 140 ns
    // for a one-token decode, on the same routed tokens (six experts, no copy).
    let d = deployment::Deployment::new(&s, None).unwrap();
    let layout = std::rc::Rc::new(crate::serving_family::mapping::ExpertLayout::linear(
        2, 64, 1, 1,
    ));
    let instance = |reroutes: bool| crate::policies::memory::InstancePlan {
        adapters: vec![0, 1, 2],
        reroutes,
        adapter_experts: reroutes,
        n_devices: 1,
        weight_bytes: 0,
        kv: crate::policies::memory::device::KvCapacity {
            kv_bytes: 1 << 30,
            kv_tokens: 1 << 20,
            out_of_memory: false,
        },
    };
    let mut per_expert = vec![0u32; 128];
    for layer in 0..2 {
        per_expert[layer * 64..][..6].fill(1);
    }
    let routed = crate::serving::RoutedTokens {
        layers: 2,
        per_expert: &per_expert,
        per_gpu: &[6, 6],
        per_slot: &[],
        copies: &[],
    };
    let price = |reroutes: bool| {
        let plan = instance(reroutes);
        let mut cost = step_cost::ReplicaStepCost::new(&s, &d, Some(layout.clone()), Some(&plan));
        cost.decode_routed(1, 40, routed).duration.0
    };
    assert_eq!(price(true) - price(false), 280);
    // A profile measured for another expert width (live-tiny-moe's) is refused by its key.
    let err = live_expertweave(&[(
        "amd-epyc_live-tiny-moe-ffn32.json",
        "amd-epyc_live-tiny-moe.json",
    )])
    .unwrap_err();
    assert!(
        err.contains("replica.scheduler.profile") && err.contains("expert_ffn 32"),
        "{err}"
    );
}

/// Every scenario under scenarios/chimera/ (the Chimera preset) loads through the real
/// loader in every sweep cell as a serving scenario with workflows, and every aging STJF
/// queue in them uses the documented default starvation threshold (a scenario without
/// aging, threshold 0, is the vLLM(STJF) reference).
#[test]
fn shipped_chimera_scenarios_validate_in_every_cell() {
    let plans = crate::shipped_scenarios::load_all("chimera", 10);
    let mut stjf = 0;
    for plan in &plans {
        for cell in &plan.cells {
            let Some(scenario) = cell
                .scenario
                .get::<crate::serving_family::ServingScenario>()
            else {
                panic!("{}: not a serving scenario", plan.path.display());
            };
            assert!(scenario.workflow.is_some(), "{}", plan.path.display());
            if let crate::serving::policy::QueuePolicyConfig::Stjf {
                starvation_threshold,
                ..
            } = &scenario.queue
            {
                stjf += 1;
                assert!(
                    *starvation_threshold == 0
                        || *starvation_threshold
                            == crate::serving::policy::default_starvation_threshold(),
                    "{}: starvation_threshold {starvation_threshold}",
                    plan.path.display()
                );
            }
        }
    }
    assert!(stjf > 0);
}

/// Chimera's `systems` grid runs the paper's systems of Figure 5 and no other queue x router
/// pair: every queue (vLLM's FCFS, MLFQ, LTR, STJF) with least-loaded routing, and STJF with
/// Chimera's router at each slack, in every model x dataset x rate cell.
#[test]
fn the_chimera_systems_grid_keeps_the_papers_systems() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/chimera/systems.toml");
    let pairs = |sets: &[String]| {
        let plan = crate::scenario::load(&path, sets).unwrap_or_else(|e| panic!("{e}"));
        let mut count = std::collections::BTreeMap::<String, usize>::new();
        for cell in &plan.cells {
            let coord = |key: &str| &cell.coords.iter().find(|(k, _)| k == key).expect(key).1;
            let routing = coord("routing");
            let name = format!(
                "{}+{}{}",
                coord("replica.queue")["kind"].as_str().unwrap(),
                routing["kind"].as_str().unwrap(),
                routing
                    .get("slack")
                    .map(|s| format!("@{s}"))
                    .unwrap_or_default()
            );
            *count.entry(name).or_default() += 1;
        }
        count
    };
    let kept = pairs(&[]);
    assert_eq!(
        kept.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "fcfs+least_loaded",
            "ltr+least_loaded",
            "mlfq+least_loaded",
            "stjf+chimera@0.0",
            "stjf+chimera@0.5",
            "stjf+chimera@1.0",
            "stjf+chimera@2.0",
            "stjf+least_loaded",
        ]
    );
    // 4 model combinations x 2 datasets x 3 rates each.
    assert!(kept.values().all(|&n| n == 24), "{kept:?}");
    // Lifting the filter gives the whole 4 x 5 cross product.
    assert_eq!(pairs(&["sweep_only=[]".to_string()]).len(), 20);
}

/// `replica.models` through the loader: its groups per cell and its errors' lines.
mod replica_models {
    use crate::scenario::{Location, load_str};
    use crate::serving_family::ServingScenario;
    use std::path::Path;

    const FILE: &str = r#"name = "models"
family = "serving"
[replica]
models = ["qwen2.5-7b-instruct", "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"]
gpu = "RTX-A6000"
[workload]
n_requests = 10
prompt_tokens = { kind = "fixed", value = 64 }
output_tokens = { kind = "fixed", value = 8 }
[arrival]
pattern = "poisson"
rate_per_s = 1.0
[sweep]
"replica.models" = [["qwen2.5-7b-instruct", "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"], ["llama-3.2-3b-instruct"]]
"#;

    /// Each cell's groups: (model, replicas, GPU) in replica order.
    fn groups(s: &ServingScenario) -> Vec<(String, usize, String)> {
        s.groups()
            .map(|(m, r)| (m.name().to_lowercase(), r.count, r.gpu.name.clone()))
            .collect()
    }

    /// `replica.models` = [7B, 1.5B, 7B] is two groups, the 7B's of two replicas first (the
    /// order first named), each the template's GPU; a sweep over it is one cell per combination.
    #[test]
    fn replica_models_names_one_group_per_distinct_model() {
        let plan = load_str(Path::new("m.toml"), FILE, &[]).unwrap();
        assert_eq!(plan.cells.len(), 2);
        let cell = |i: usize| plan.cells[i].scenario.get::<ServingScenario>().unwrap();
        let first = groups(cell(0));
        assert_eq!(first.len(), 2, "{first:?}");
        assert!(first[0].0.contains("qwen2.5-7b"), "{first:?}");
        assert_eq!((first[0].1, first[1].1), (2, 1));
        assert!(first[1].0.contains("qwen2.5-1.5b"), "{first:?}");
        assert!(first.iter().all(|g| g.2 == "RTX-A6000"), "{first:?}");
        assert_eq!(cell(0).replica_count(), 3);
        let second = groups(cell(1));
        assert_eq!(second.len(), 1);
        assert!(second[0].0.contains("llama-3.2-3b"), "{second:?}");
        assert_eq!(second[0].1, 1);
        assert_eq!(plan.cells[1].coords[0].0, "replica.models");
    }

    /// Errors name the key as written: an unknown model the list (or the sweep that set it), a
    /// group's own field `replica.<field>`, `count` and `model` beside the list are refused, and
    /// the list only on a single `[replica]` table.
    #[test]
    fn replica_models_errors_name_the_key_and_line() {
        let one = FILE.split("[sweep]").next().unwrap();
        let err = |text: &str| load_str(Path::new("m.toml"), text, &[]).unwrap_err();
        let e = err(&one.replace("\"qwen2.5-1.5b-instruct\"", "\"qwen9-1b\""));
        assert_eq!(e.field.as_deref(), Some("replica.models"), "{e}");
        assert_eq!(e.location, Location::File { line: 4, column: 1 }, "{e}");
        let e = err(&FILE.replace("[\"llama-3.2-3b-instruct\"]", "[\"qwen9-1b\"]"));
        assert_eq!(e.field.as_deref(), Some("replica.models"), "{e}");
        assert!(matches!(e.location, Location::File { line: 14, .. }), "{e}");
        let e = err(&one.replace(
            "gpu = \"RTX-A6000\"",
            "gpu = \"RTX-A6000\"\nwatermark = 2.0",
        ));
        assert_eq!(e.field.as_deref(), Some("replica.watermark"), "{e}");
        assert_eq!(e.location, Location::File { line: 6, column: 1 }, "{e}");
        let e = err(&one.replace("gpu = \"RTX-A6000\"", "count = 2"));
        assert_eq!(e.field.as_deref(), Some("replica.count"), "{e}");
        let e = err(&one.replace("gpu = \"RTX-A6000\"", "model = \"llama-2-7b\""));
        assert_eq!(e.field.as_deref(), Some("replica.model"), "{e}");
        let e = err(&one.replace("[replica]", "[[replica]]"));
        assert_eq!(e.field.as_deref(), Some("replica[0].models"), "{e}");
        let e = err(&one.replace(
            "models = [\"qwen2.5-7b-instruct\", \"qwen2.5-1.5b-instruct\", \"qwen2.5-7b-instruct\"]",
            "models = []",
        ));
        assert_eq!(e.field.as_deref(), Some("replica.models"), "{e}");
    }
}

/// docs/serving-family.md's key table: the common keys' rows, then the family's.
mod keys {
    use crate::family::KeyDoc;
    use crate::scenario::{keys, schema};
    use crate::serving_family::keys::KEYS;
    use std::path::Path;

    /// The generated key table of docs/serving-family.md: the common keys, then the family's.
    fn table() -> String {
        let rows: Vec<KeyDoc> = keys::COMMON.iter().chain(KEYS).copied().collect();
        keys::markdown(&rows)
    }

    #[test]
    fn docs_serving_family_key_table_is_generated_from_the_rows() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/serving-family.md");
        keys::check_generated(&path, "key-table", &table());
    }

    #[test]
    fn every_key_the_serving_family_accepts_has_a_row() {
        let accepted = schema::family_keys(crate::registry::family("serving").unwrap());
        assert!(accepted.len() > 40, "{accepted:?}");
        let missing = keys::uncovered(KEYS, &accepted);
        assert!(missing.is_empty(), "undocumented serving keys: {missing:?}");
    }
}
