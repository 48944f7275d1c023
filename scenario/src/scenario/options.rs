//! The named options of scenario files that are not policies (those are
//! `strategies::catalogue`, but the routers: every `routing.kind` is listed here, the serving
//! layer's own `least_outstanding` with the policies): the families, the serving family's
//! scheduler kinds, routers,
//! expert-routing and length distributions and links, the length predictors and semantic
//! routers, the arrival patterns, the static pricings (CAPS's execution models), the figure kinds, and the model and
//! GPU catalogues, each with the key that names it and one line. `expertsim list` prints them;
//! a test holds every group's kinds equal to what the parser accepts (`schema::variants`), and
//! the models and GPUs are the catalogues the parser looks names up in.

use crate::cost::gpu::{GPU_NAMES, GpuSpec};
use crate::cost::shape::{
    DENSE_PRESETS, DenseModelShape, MLA_MOE_PRESETS, MOE_PRESETS, MlaMoeShape, MoeModelShape,
};

/// One group of named options: what they are, the key a scenario names one with, and each kind
/// with one line.
#[derive(Clone, Debug)]
pub struct OptionGroup {
    /// A short name (`expertsim list`'s first column).
    pub group: &'static str,
    /// Where a scenario names one, and in which families.
    pub key: &'static str,
    pub kinds: Vec<(String, String)>,
}

fn group(group: &'static str, key: &'static str, kinds: &[(&str, &str)]) -> OptionGroup {
    OptionGroup {
        group,
        key,
        kinds: kinds
            .iter()
            .map(|(k, d)| (k.to_string(), d.to_string()))
            .collect(),
    }
}

/// The `family` group: each of `families` (the registry's for `expertsim list`) with its line.
pub fn family_group(families: impl Iterator<Item = crate::family::FamilyId>) -> OptionGroup {
    OptionGroup {
        group: "family",
        key: "family (every scenario)",
        kinds: families
            .map(|f| (f.name().to_string(), f.description().to_string()))
            .collect(),
    }
}

/// Every group, in the order `expertsim list` prints them. The routers are the `routing` group
/// here, every kind `routing.kind` takes (`strategies::catalogue`'s `routing` policies among
/// them), so that the key is listed once.
pub fn catalogue() -> Vec<OptionGroup> {
    vec![
        family_group(crate::registry::families()),
        group(
            "scheduler",
            "replica.scheduler.kind (serving)",
            &[
                (
                    "vllm",
                    "vLLM v0's default: prefill-first steps of whole prompts within \
                     max_num_batched_tokens (4096), paged KV cache, recompute (or swap) preemption",
                ),
                (
                    "sarathi",
                    "Sarathi-Serve: decodes first, prompts chunked to fill chunk_size (512) \
                     tokens a step, paged KV cache, recompute (or swap) preemption",
                ),
                (
                    "orca",
                    "Orca: iteration-level batching, prompt + output reserved at admission, \
                     no paging, never preempts",
                ),
                (
                    "static",
                    "static batches (CAPS): replica.batch_former picks up to max_num_seqs of \
                     the window_size oldest; a batch runs to its longest output",
                ),
            ],
        ),
        group(
            "routing",
            "routing.kind (serving)",
            &[
                ("round_robin", "replicas in turn"),
                (
                    "least_outstanding",
                    "the replica with the fewest requests waiting or running",
                ),
                (
                    "least_loaded",
                    "vLLM's balancer: lowest waiting_weight (4) x waiting + running_weight (1) \
                     x running",
                ),
                (
                    "chimera",
                    "Chimera's dispatcher: the most confident replica within (1 + slack) of \
                     the fastest estimated delay",
                ),
            ],
        ),
        group(
            "semantic_router",
            "routing.semantic_router.kind (serving)",
            &[
                (
                    "noisy",
                    "a learned router: each model's confidence from a difficulty estimate \
                     with noise",
                ),
                (
                    "oracle",
                    "ground truth: 1 where the model solves the request, else 0",
                ),
                (
                    "static",
                    "each model's standalone score, no per-request information",
                ),
            ],
        ),
        group(
            "predictor",
            "predictor.kind (serving)",
            &[
                (
                    "noisy",
                    "the true output length x exp(noise x eps), eps ~ N(0, 1) (default noise \
                     0.6)",
                ),
                ("oracle", "the true output length"),
                ("input_length", "the prompt length as a proxy"),
                (
                    "fcfs",
                    "the submission order (length-aware queues become first-come first-served)",
                ),
            ],
        ),
        group(
            "expert_routing",
            "experts.routing.kind (serving, MoE models)",
            &[
                ("uniform", "every expert of every layer equally likely"),
                (
                    "zipf",
                    "expert popularity Zipf(exponent), ranked by a random permutation per layer \
                     and topic",
                ),
                (
                    "affinity",
                    "CAPS's request model: per topic and layer Dirichlet(concentration) over the \
                     experts, a secondary topic per request mixed in (purity), optional \
                     prediction_noise on the static dry-run",
                ),
            ],
        ),
        group(
            "static_pricing",
            "replica.scheduler.pricing (serving, static kind)",
            &[
                (
                    "passes",
                    "pass by pass on whole routed tokens through the replica's step cost",
                ),
                (
                    "expected_routing",
                    "from the batch's expected routing, each layer one grouped GEMM (CAPS's \
                     grouped model; loads = \"experts\", one GPU)",
                ),
                (
                    "cv",
                    "caps.txt's model on the expected routing: base x (1 + CV x sensitivity), \
                     the sensitivity derived from the profile unless given (loads = \"experts\", \
                     one GPU)",
                ),
                (
                    "straggler",
                    "per layer the most loaded expected expert on the expert curve (loads = \
                     \"experts\", one GPU)",
                ),
                (
                    "constant",
                    "every batch takes service_ms (queueing reference: M/D/1)",
                ),
                (
                    "exponential",
                    "batch times exponential with mean service_ms (queueing reference: M/M/1)",
                ),
            ],
        ),
        group(
            "arrival",
            "arrival.pattern (serving)",
            &[
                ("poisson", "Poisson arrivals at rate_per_s"),
                (
                    "gamma",
                    "gamma inter-arrival gaps with coefficient of variation cv at rate_per_s",
                ),
                (
                    "bursty",
                    "Markov-modulated bursts ([arrival.bursty]: 4x the calm rate for ~1 s, \
                     calm ~3 s, a burst's requests mostly of one topic)",
                ),
                ("offline", "every request at t = 0"),
                (
                    "trace",
                    "replay a CSV trace ([arrival.trace] path, time_scale; BurstGPT or \
                     Azure/Splitwise columns)",
                ),
            ],
        ),
        group(
            "length",
            "workload.prompt_tokens.kind, workload.output_tokens.kind (serving)",
            &[
                ("fixed", "every request the same value"),
                ("uniform", "uniform integers in [low, high]"),
                (
                    "rounded_uniform",
                    "a continuous uniform on mean x [1 - spread, 1 + spread], rounded, at least 1",
                ),
                ("zipf", "Zipf(exponent) over [min, max]"),
                (
                    "log_normal",
                    "log-normal from its mean or median and sigma, rounded, clamped to [1, max]",
                ),
                (
                    "trace",
                    "the replayed trace's own lengths (arrival.pattern = \"trace\")",
                ),
            ],
        ),
        group(
            "interconnect",
            "replica.interconnect (serving)",
            &[
                (
                    "nvlink4",
                    "NVLink 4 through NVSwitch: tensor-parallel all-reduces, expert all-to-all",
                ),
                ("pcie4_x16", "PCIe 4.0 x16"),
            ],
        ),
        group(
            "figure",
            "figure.kind (every scenario; gem_* and expertweave_* the serving family's)",
            &[
                (
                    "metric",
                    "a metric's seed mean (95 % CI) vs a sweep key, one line or bar set per \
                     series",
                ),
                (
                    "improvement",
                    "change vs the [report] baseline in %, as bars",
                ),
                ("stacked", "stacked bars, the metrics as layers"),
                (
                    "frontier",
                    "(metric 0, metric 1) points with each series' Pareto frontier",
                ),
                (
                    "gem_expert_load",
                    "tokens per expert slot and per GPU, heatmaps",
                ),
                ("gem_staircase", "per-GPU MoE-layer latency vs tokens"),
                (
                    "expertweave_memory",
                    "device memory per adapter count and manager, stacked",
                ),
                (
                    "timeline",
                    "per replica or worker: load / run / idle intervals over time",
                ),
                (
                    "decode_curve",
                    "per replica group: decode step latency and tokens/s vs batch",
                ),
            ],
        ),
        OptionGroup {
            group: "model",
            key: "model.name / replica.model (serving)",
            kinds: models(),
        },
        OptionGroup {
            group: "gpu",
            key: "replica.gpu (serving)",
            kinds: GPU_NAMES
                .iter()
                .map(|name| {
                    let g = GpuSpec::by_name(name).expect("a catalogue name");
                    (
                        name.to_string(),
                        format!(
                            "{:.0} GB, {:.0} GB/s, {:.0} dense bf16 TFLOP/s, {} SMs",
                            g.memory_gb, g.memory_bandwidth_gbps, g.dense_bf16_tflops, g.sm_count
                        ),
                    )
                })
                .collect(),
        },
    ]
}

/// Every model preset with its kind, size and weights.
fn models() -> Vec<(String, String)> {
    let dense = DENSE_PRESETS.iter().map(|name| {
        let s = DenseModelShape::preset(name).expect("a catalogue name");
        (
            name.to_string(),
            format!(
                "dense, {} parameters, {} layers, {} of bf16 weights",
                count(s.params() as f64),
                s.n_layers,
                bytes(s.weight_bytes())
            ),
        )
    });
    let moe = MOE_PRESETS.iter().map(|name| {
        let s = MoeModelShape::preset(name).expect("a catalogue name");
        (
            name.to_string(),
            format!(
                "MoE, {} parameters, {} layers, {} experts top-{}, {} of weights",
                count(s.total_params() as f64),
                s.n_layers,
                s.n_experts,
                s.top_k,
                bytes(s.total_weight_bytes())
            ),
        )
    });
    let mla = MLA_MOE_PRESETS.iter().map(|name| {
        let s = MlaMoeShape::preset(name).expect("a catalogue name");
        let g = s.moe_geometry();
        (
            name.to_string(),
            format!(
                "MLA MoE, {} parameters, {} MoE layers, {} routed experts top-{}, {} of \
                 weights",
                count(s.total_params() as f64),
                g.n_layers,
                g.n_experts,
                g.top_k,
                bytes(s.weight_bytes() as f64)
            ),
        )
    });
    dense.chain(moe).chain(mla).collect()
}

/// A parameter count in billions, or millions below 0.1 B.
fn count(n: f64) -> String {
    scaled(n, "B", "M")
}

/// Bytes in GB, or MB below 0.1 GB.
fn bytes(n: f64) -> String {
    scaled(n, "GB", "MB")
}

/// `n` in units of 1e9 (`giga`), or of 1e6 (`mega`) below 1e8.
fn scaled(n: f64, giga: &str, mega: &str) -> String {
    if n >= 1e8 {
        format!("{:.1} {giga}", n / 1e9)
    } else {
        format!("{:.2} {mega}", n / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::schema::variants;

    fn kinds_of(name: &str) -> Vec<String> {
        catalogue()
            .into_iter()
            .find(|g| g.group == name)
            .unwrap_or_else(|| panic!("no group {name}"))
            .kinds
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    #[test]
    fn every_group_lists_exactly_the_kinds_the_parser_accepts() {
        use crate::serving_family::config::{
            ExpertRoutingTable, Interconnect, LengthTable, RoutingTable, SchedulerTable,
        };
        let cases = [
            ("scheduler", variants::<SchedulerTable>()),
            ("routing", variants::<RoutingTable>()),
            (
                "semantic_router",
                variants::<crate::serving::predictors::SemanticRouterConfig>(),
            ),
            (
                "predictor",
                variants::<crate::serving::predictors::PredictorConfig>(),
            ),
            ("expert_routing", variants::<ExpertRoutingTable>()),
            (
                "static_pricing",
                variants::<crate::serving_family::config::StaticPricing>(),
            ),
            ("arrival", variants::<crate::arrivals::ArrivalPattern>()),
            ("length", variants::<LengthTable>()),
            ("interconnect", variants::<Interconnect>()),
            ("figure", variants::<crate::family::FigureKind>()),
        ];
        for (group, accepted) in cases {
            assert_eq!(kinds_of(group), accepted, "{group}");
        }
        let families: Vec<String> = crate::registry::families()
            .map(|f| f.name().to_string())
            .collect();
        assert_eq!(kinds_of("family"), families);
    }

    /// A group's key names where a scenario writes it and which families take it: never a
    /// family that became a preset of the serving simulator (`registry::RETIRED`), whose keys
    /// a scenario can no longer write.
    #[test]
    fn no_key_names_a_retired_family() {
        for group in catalogue() {
            for (retired, _) in crate::registry::RETIRED {
                for stale in [
                    format!("({retired})"),
                    format!("({retired},"),
                    format!(" {retired})"),
                    format!("{retired}'s"),
                ] {
                    assert!(
                        !group.key.contains(&stale),
                        "group {}: key {:?} names the retired family {retired}",
                        group.group,
                        group.key
                    );
                }
            }
        }
    }

    #[test]
    fn models_and_gpus_are_the_catalogues_the_parser_reads() {
        let models = kinds_of("model");
        for name in DENSE_PRESETS
            .iter()
            .chain(MOE_PRESETS)
            .chain(MLA_MOE_PRESETS)
        {
            assert!(models.contains(&name.to_string()), "{name}");
        }
        assert_eq!(kinds_of("gpu"), GPU_NAMES);
        let h100 = catalogue()
            .into_iter()
            .find(|g| g.group == "gpu")
            .unwrap()
            .kinds
            .into_iter()
            .find(|(k, _)| k == "H100-SXM")
            .unwrap();
        assert!(h100.1.starts_with("80 GB"), "{h100:?}");
    }
}
