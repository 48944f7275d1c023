//! The family registry: the lookups by name the scenario loader, the runner, the command line
//! and live mode reach a family through, over `FAMILIES`, the one list of every family the
//! simulator knows. That list is declared in `expertsim-serving`'s lib.rs, where the families'
//! modules are (`families!`: one line per family declares its module and registers its
//! `impl Family`); the `Family` trait they implement sits below them, in `family`. Adding a
//! family is its folder under `serving/src/` and its line in `families!`; everything else that
//! lists families reads this registry (ARCHITECTURE.md, "Adding a family").

use crate::family::{FamilyId, RegisteredFamily};

/// Every family the simulator knows, in the order `expertsim` lists them (declared by
/// `expertsim_serving::families!`).
pub use expertsim_serving::FAMILIES;

/// Families that became presets of the serving simulator, and what a scenario file of one
/// writes instead (its error when it still names the old family).
pub const RETIRED: &[(&str, &str)] = &[
    ("caps", CAPS_MOVED),
    ("gem", GEM_MOVED),
    ("expertweave", EW_MOVED),
    ("chimera", CHIMERA_MOVED),
    ("mosaic", MOSAIC_MOVED),
];

/// The caps family's keys as the serving simulator's CAPS preset spells them
/// (docs/unified-model-changes/caps-preset.md; scenarios/caps/evaluation_serving.toml).
pub const CAPS_MOVED: &str = "the caps family is now a preset of the serving simulator: write \
family = \"serving\" (scenarios/caps/evaluation_serving.toml is the CAPS evaluation). Keys: \
[model] preset -> [model] name (n_layers, n_experts, top_k as before); [scheduler] \
max_batch_size -> replica.max_num_seqs, selector -> replica.batch_former, window_size, \
min_batch_trigger, scheduling_interval_ms, seed_with_oldest -> [replica.scheduler] with kind = \
\"static\", loads = \"experts\", streams = \"shared\"; [execution] model -> \
replica.scheduler.pricing (grouped = \"expected_routing\", cv, straggler, constant, \
exponential), gpu -> replica.gpu, profile -> replica.scheduler.profile, measured -> \
replica.measured, sensitivity and service_ms -> replica.scheduler.*; [workload] \
affinity_concentration, topic_purity, prediction_noise -> [experts] routing = { kind = \
\"affinity\", concentration, purity, prediction_noise }, prompt_tokens and output_tokens -> { \
kind = \"log_normal\", median, sigma, max } (defaults were median 128 sigma 0.6 max 2048 and \
median 16 sigma 0.6 max 256), and one_token_stream = true; [metrics] \
queue_sample_interval_ms -> (none: queue_depth_mean/max are exact); [output] per_request_csv \
-> [output] per_request_csv. Metrics: latency_* -> e2e_*, queue_wait_* -> queueing_*, \
mean_batch_time_ms -> mean_step_ms, utilization -> replica_utilization; sweep and figure keys \
likewise (scheduler.selector.kind -> replica.batch_former.kind)";

/// The gem family's keys as the serving simulator's GEM preset spells them
/// (docs/unified-model-changes/gem-preset.md; docs/gem.md).
pub const GEM_MOVED: &str = "the gem family is now a preset of the serving simulator: write \
family = \"serving\" (scenarios/gem/evaluation_serving.toml is GEM's headline cell, \
scenarios/gem/quick.toml the smoke run). Keys: [model] name -> [model] name (n_layers as \
before); [cluster] n_gpus -> replica.gpus with replica.expert_parallel and \
replica.tensor_parallel the same G, gpu -> replica.gpu, variability = \"high\" | \"moderate\" | \
\"low\" -> replica.variability = { setup, straggler_slowdown, moderate_draws, moderate_seed, \
distribution }, variability = \"explicit\" with speed_factors -> replica.speed_factors, \
factors -> replica.speed_factors_kind (the gem default was \"throughput\"), bandwidth_share -> \
replica.bandwidth_share; [model] profile -> replica.scheduler.profile (a calibration profile \
pricing the dense part and head from its curves), measured -> replica.measured; [serving] \
max_num_seqs -> replica.max_num_seqs, \
max_num_batched_tokens -> [replica.scheduler] kind = \"sarathi\", chunk_size, kv = \
\"unbounded\" (vLLM V1's schedule), plus replica.host_time = \"vllm\" (the engine's host time \
per step, which the gem family did not pay); detail_layer, detail_steps -> (none: results carry \
layer 0's first 25 unseen steps in details.deployment[].experts); [trace] -> experts.trace; \
[mapper] -> experts.mapping with experts.streams = \"shared\"; [workload] dataset, n_requests, \
prompt_tokens, output_tokens -> workload.* with workload.streams = \"gem\"; no [arrival] -> \
[arrival] pattern = \"offline\"; experiment = \"variability_at_scale\" | \"profiling_cost\" with \
[scale] draws, distribution and [profiling] method, repetitions, sweep_max_tokens -> [experiment] \
kind, gpus (for cluster.n_gpus), draws, distribution, method, repetitions, sweep_max_tokens. \
Metrics: tpot_* (every token gap) -> itl_*, busy_share_min / \
busy_share_mean -> gpu_busy_min / gpu_busy_mean; sweep and figure keys likewise \
(mapper.kind -> experts.mapping.kind, cluster.variability -> replica.variability.setup)";

/// The expertweave family's keys as the serving simulator's ExpertWeave preset spells them
/// (docs/unified-model-changes/expertweave-preset.md, gap 8; docs/expertweave.md).
pub const EW_MOVED: &str = "the expertweave family is now a preset of the serving simulator: \
write family = \"serving\" with an [adapters] table (scenarios/expertweave/*.toml are the \
paper's experiments, scenarios/live/expertweave.toml the live case). Keys: model -> [model] name; \
model_layers -> model.n_layers; [device] capacity_gib -> replica.gpu_memory_gib (the device \
itself replica.gpu), utilization -> replica.gpu_memory_utilization, runtime_reserve_gib -> \
adapters.runtime_reserve_gib, n_devices -> replica.gpus with replica.expert_parallel the same, \
tensor_parallel -> replica.tensor_parallel, kv_block_tokens -> replica.block_size (default was \
128); [adapters] count, names -> [adapters] count, names; [memory] -> adapters.memory; \
[workload] alpha -> adapters.alpha, horizon_s -> workload.horizon_s, n_requests -> \
workload.n_requests, prompt_tokens and output_tokens with length_spread -> { kind = \
\"rounded_uniform\", mean, spread }, plus workload.streams = \"expertweave\" (its arrivals, \
lengths and adapter draws); [arrival] -> [arrival]; [serving] max_batch_tokens -> \
[replica.scheduler] kind = \"orca\", max_num_batched_tokens (default was 8192), max_num_seqs -> \
replica.max_num_seqs; [cost] gpu -> replica.gpu (default was Ascend-910B), rerouting, \
unfused_ops, expert_zipf_s -> adapters.*, profile -> replica.scheduler.profile (a profile \
measured for the model's widths), and replica.step_overhead_ms = 0 for the family's steps \
without host time (replica.timing = \"eager\" for its eager launches). Metrics: \
requests_completed -> completed, requests_rejected -> refused, utilization -> \
replica_utilization; sweep and figure keys likewise (memory.kind -> adapters.memory.kind, \
cost.rerouting -> adapters.rerouting, workload.alpha -> adapters.alpha)";

/// The chimera family's keys as the serving simulator's Chimera preset spells them
/// (docs/unified-model-changes/chimera-preset.md, key mapping; scenarios/live/chimera.toml).
pub const CHIMERA_MOVED: &str = "the chimera family is now a preset of the serving simulator: \
write family = \"serving\" with one [[replica]] group per model and [workload.workflow] \
(scenarios/chimera/*.toml are the paper's experiments, scenarios/live/chimera.toml the live \
case). Keys: [cluster] models = [a, b, ...] -> one [[replica]] group per model (replica.models = [a, b, \
...] in one [replica] table, sweepable), replica.model \
its catalogue preset (qwen2.5-1.5b -> qwen2.5-1.5b-instruct, qwen2.5-3b -> \
qwen2.5-3b-instruct, qwen2.5-7b -> qwen2.5-7b-instruct, qwen2.5-14b -> qwen2.5-14b-instruct, \
llama3.2-3b -> llama-3.2-3b-instruct, ministral-8b -> ministral-3-8b-instruct-2512, the paper's Ministral3-8B), a repeated \
model -> replica.count; gpu -> replica.gpu (default was RTX-A6000), max_batch_size -> \
replica.max_num_seqs, gpu_memory_utilization -> replica.gpu_memory_utilization, \
step_overhead_ms -> replica.step_overhead_ms (absent: replica.host_time = \"vllm\", the \
family's host time), max_num_batched_tokens (default was 2048) -> replica.scheduler = { kind = \
\"sarathi\", chunk_size } with replica.watermark = 0, prefix_caching (default was true) -> \
replica.prefix_caching, measured -> replica.measured, profile -> replica.scheduler.profile (the \
same dense-decode profile, in every group); [workload] dataset -> workload.workflow.dataset, rps \
-> arrival.rate_per_s (workflows per second, [arrival] pattern = \"poisson\"), duration_s -> \
workload.horizon_s; [predictor] -> [predictor]; [semantic_router] -> routing.semantic_router \
(read by routing.kind = \"chimera\" only); [queue] -> replica.queue (every group); [routing] \
and [arrival] as before. Metrics: latency_per_token_ms -> workflow_latency_per_token_ms, \
score_pct -> workflow_score_pct, workflow_latency_{mean,p50,p99}_ms -> \
workflow_e2e_{mean,p50,p99}_ms, workflow_queue_time_mean_ms -> workflow_queueing_mean_ms, \
throughput_wps -> workflow_throughput_wps, queue_time_* -> queueing_*, \
engine_utilization_mean -> replica_utilization, engine_token_imbalance -> \
replica_token_imbalance (router_map and predictor_kendall_distance as before); sweep and \
figure keys likewise (queue.kind -> replica.queue.kind, workload.rps -> arrival.rate_per_s, \
cluster.models -> the groups' replica.model)";

/// The mosaic family's keys as the serving simulator's MOSAIC preset spells them
/// (docs/unified-model-changes/mosaic-preset.md; scenarios/mosaic/evaluation.toml,
/// scenarios/live/mosaic.toml); the refusal of `family = "mosaic"` since the family's deletion.
pub const MOSAIC_MOVED: &str = "the mosaic family is now a preset of the serving simulator: \
write family = \"serving\" with one [[replica]] group per expert model and one for the \
aggregator, [placement] and [workload.questions] with [arrival] pattern = \"offline\" \
(scenarios/mosaic/*.toml are the paper's experiments, scenarios/live/mosaic.toml the live case). \
Keys: [cluster] n_workers -> placement.workers; [pool] preset -> the pool's models as groups and \
workload.questions.experts (as scenarios/mosaic/evaluation.toml spells the hybrid \
pool); [[experts]] shape -> replica.model (a group each) and workload.questions.experts[].model, \
name -> none (the model names it), load_s -> replica.load = { kind = \"fixed\", seconds }, \
mean_output_tokens, output_sigma, max_output_tokens -> \
workload.questions.experts[].output_tokens = { mean, sigma, max } (sigma was 0.45 for family = \
\"reasoning\", 0.5 for \"instruction\"); [aggregator] shape -> \
workload.questions.aggregator.model (a group of its own), tensor_parallel -> that group's \
replica.gpus and replica.tensor_parallel, load_s -> its replica.load, mean_output_tokens, \
output_sigma, max_output_tokens -> workload.questions.aggregator.output_tokens, template_tokens \
-> workload.questions.aggregator.template_tokens, max_prompt_tokens -> \
workload.questions.aggregator.max_prompt_tokens; [dataset] preset -> \
workload.questions.dataset, questions -> workload.n_requests, slots -> \
workload.questions.experts[].slots, prompt_tokens_sigma -> \
workload.questions.prompt_tokens_sigma, calibration_questions -> placement.calibration.calls \
(3 calls a question), name, prompt_tokens_mean, buckets -> none (the dataset presets'), \
reasoning_output_scale, instruction_output_scale -> the experts' output_tokens.mean scaled; \
[calibration] min_prompts_per_model -> placement.calibration.min_calls_per_model, \
sweep_min_prompts -> placement.calibration.sweep_min_calls, sweep_max_prompts -> \
placement.calibration.sweep_max_calls (without [placement.calibration]: \
placement.predicted_session_s per model); [placement] kind -> placement.policy = { kind, ... } \
with the same policy keys; [gate] -> workload.questions.gate, the aggregator after the whole \
expert stage -> workload.questions.release = \"after_experts\"; [serving] gpu -> replica.gpu \
(default was A100-80GB), step_overhead_ms -> replica.step_overhead_ms (default was 4), \
gpu_memory_utilization -> replica.gpu_memory_utilization, max_num_seqs -> \
replica.max_num_seqs, block_size -> replica.block_size, watermark -> replica.watermark, \
allreduce_latency_us, interconnect_gbps -> replica.interconnect, load_gbps -> replica.load = { \
kind = \"path\", gbps }, profile -> replica.scheduler.profile (the same dense-decode profile, \
in every group), measured -> replica.measured, and every group's replica.scheduler = { kind = \
\"sarathi\", chunk_size = 1_000_000_000 } (MOSAIC's sessions: decodes first, whole prompts); \
[output] record_solve_time -> none (ilp_solve_time_s is not reported: a run's results are \
deterministic). Metrics keep their names; sweep and figure keys likewise (placement.kind -> \
placement.policy.kind, gate.tau -> workload.questions.gate.tau, cluster.n_workers -> \
placement.workers)";

/// The registered family called `name`.
pub fn family(name: &str) -> Option<FamilyId> {
    named_in(FAMILIES, name)
}

/// Every registered family, in registration order.
pub fn families() -> impl Iterator<Item = FamilyId> {
    families_in(FAMILIES)
}

/// Every family of the registration list `list`, in its order.
pub fn families_in(
    list: &'static [&'static dyn RegisteredFamily],
) -> impl Iterator<Item = FamilyId> {
    list.iter().copied().map(FamilyId::of)
}

/// The family called `name` in the registration list `list`.
pub fn named_in(list: &'static [&'static dyn RegisteredFamily], name: &str) -> Option<FamilyId> {
    list.iter()
        .copied()
        .find(|f| f.name() == name)
        .map(FamilyId::of)
}

/// A family is read back from scenario files and results by its registered name (the
/// `deserialize_with` of every `FamilyId` field: the type is `expertsim-serving`'s, the list
/// this crate's).
pub fn deserialize_family<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<FamilyId, D::Error> {
    let name = <String as serde::Deserialize>::deserialize(deserializer)?;
    family(&name).ok_or_else(|| {
        if let Some((_, moved)) = RETIRED.iter().find(|(retired, _)| *retired == name) {
            return serde::de::Error::custom(moved);
        }
        let names: Vec<&str> = FAMILIES.iter().map(|f| f.name()).collect();
        serde::de::Error::custom(format!(
            "unknown family `{name}`, expected one of `{}`",
            names.join("`, `")
        ))
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::Path;

    /// A retired family's name is refused with the keys its preset writes instead.
    #[test]
    fn a_retired_family_is_refused_with_its_key_mapping() {
        for (name, needle) in [
            ("gem", "experts.trace"),
            ("gem", "replica.scheduler.profile"),
            ("caps", "replica.batch_former"),
            ("expertweave", "adapters.memory"),
            ("expertweave", "replica.gpu_memory_gib"),
            ("expertweave", "replica.scheduler.profile"),
            ("mosaic", "placement.workers"),
        ] {
            assert!(family(name).is_none(), "{name} is not registered");
            let err = deserialize_family(serde_json::json!(name))
                .err()
                .unwrap()
                .to_string();
            assert!(
                err.contains("now a preset of the serving simulator"),
                "{err}"
            );
            assert!(err.contains(needle), "{name}: {err}");
        }
    }

    /// The chimera family's refusal: every key of its tables and
    /// every headline metric it reported has its serving spelling in the text.
    /// The mosaic family's refusal, ready for its deletion: every key of its tables has its
    /// serving spelling in the text.
    #[test]
    fn the_mosaic_key_mapping_names_every_key() {
        for (mosaic, serving) in [
            ("n_workers", "placement.workers"),
            ("[pool] preset", "workload.questions.experts"),
            ("[[experts]] shape", "replica.model"),
            ("load_s", "replica.load = { kind = \"fixed\", seconds }"),
            ("max_output_tokens", "output_tokens = { mean, sigma, max }"),
            ("[aggregator] shape", "workload.questions.aggregator.model"),
            ("tensor_parallel", "replica.tensor_parallel"),
            ("template_tokens", "aggregator.template_tokens"),
            ("max_prompt_tokens", "aggregator.max_prompt_tokens"),
            ("[dataset] preset", "workload.questions.dataset"),
            ("questions", "workload.n_requests"),
            ("slots", "workload.questions.experts[].slots"),
            (
                "prompt_tokens_sigma",
                "workload.questions.prompt_tokens_sigma",
            ),
            ("calibration_questions", "placement.calibration.calls"),
            (
                "min_prompts_per_model",
                "placement.calibration.min_calls_per_model",
            ),
            ("sweep_min_prompts", "placement.calibration.sweep_min_calls"),
            ("sweep_max_prompts", "placement.calibration.sweep_max_calls"),
            ("[placement] kind", "placement.policy = { kind, ... }"),
            ("[gate]", "workload.questions.gate"),
            ("[serving] gpu", "replica.gpu"),
            ("step_overhead_ms", "replica.step_overhead_ms"),
            ("gpu_memory_utilization", "replica.gpu_memory_utilization"),
            ("max_num_seqs", "replica.max_num_seqs"),
            ("block_size", "replica.block_size"),
            ("watermark", "replica.watermark"),
            ("interconnect_gbps", "replica.interconnect"),
            ("load_gbps", "kind = \"path\", gbps }"),
            ("profile", "replica.scheduler.profile"),
            ("measured", "replica.measured"),
            ("record_solve_time", "none"),
            ("placement.kind", "placement.policy.kind"),
            ("gate.tau", "workload.questions.gate.tau"),
        ] {
            // The serving spelling follows the mosaic key's arrow.
            let arrow = MOSAIC_MOVED.find(&format!("{mosaic} ->"));
            assert!(
                arrow.is_some_and(|a| MOSAIC_MOVED[a..].contains(serving)),
                "{mosaic} -> {serving}"
            );
        }
        assert!(MOSAIC_MOVED.starts_with("the mosaic family is now a preset"));
        // Deleted: no longer registered, refused with this text.
        assert!(family("mosaic").is_none());
        assert!(RETIRED.contains(&("mosaic", MOSAIC_MOVED)));
    }

    #[test]
    fn the_chimera_key_mapping_names_every_key() {
        for (chimera, serving) in [
            (
                "[cluster] models = [a, b, ...]",
                "[[replica]] group per model",
            ),
            ("qwen2.5-7b", "qwen2.5-7b-instruct"),
            ("ministral-8b", "ministral-3-8b-instruct-2512"),
            ("max_batch_size", "replica.max_num_seqs"),
            ("gpu_memory_utilization", "replica.gpu_memory_utilization"),
            ("step_overhead_ms", "replica.host_time = \"vllm\""),
            (
                "max_num_batched_tokens (default was 2048)",
                "kind = \"sarathi\", chunk_size }",
            ),
            (
                "max_num_batched_tokens (default was 2048)",
                "replica.watermark = 0",
            ),
            (
                "prefix_caching (default was true)",
                "replica.prefix_caching",
            ),
            ("measured", "replica.measured"),
            ("profile", "replica.scheduler.profile"),
            ("dataset", "workload.workflow.dataset"),
            ("rps", "arrival.rate_per_s"),
            ("duration_s", "workload.horizon_s"),
            ("[semantic_router]", "routing.semantic_router"),
            ("[queue]", "replica.queue"),
            ("latency_per_token_ms", "workflow_latency_per_token_ms"),
            ("score_pct", "workflow_score_pct"),
            ("workflow_queue_time_mean_ms", "workflow_queueing_mean_ms"),
            ("engine_token_imbalance", "replica_token_imbalance"),
        ] {
            // The serving spelling follows the chimera key's arrow.
            let arrow = CHIMERA_MOVED.find(&format!("{chimera} ->"));
            assert!(
                arrow.is_some_and(|a| CHIMERA_MOVED[a..].contains(serving)),
                "{chimera} -> {serving}"
            );
        }
        assert!(CHIMERA_MOVED.starts_with("the chimera family is now a preset"));
        // Retired: refused with this text, no longer registered.
        assert!(family("chimera").is_none());
        assert!(RETIRED.contains(&("chimera", CHIMERA_MOVED)));
    }

    #[test]
    fn registered_names_are_distinct_and_found_by_name() {
        let names: Vec<&str> = FAMILIES.iter().map(|f| f.name()).collect();
        for (i, name) in names.iter().enumerate() {
            assert!(!names[..i].contains(name), "{name} registered twice");
            assert_eq!(family(name).unwrap().name(), *name);
        }
        assert!(family("unknown").is_none());
    }

    #[test]
    fn every_family_lists_its_headline_metrics_in_its_table() {
        for family in families() {
            for name in family
                .headline()
                .iter()
                .chain(family.headline_improvements())
            {
                assert!(
                    family.metrics().iter().any(|m| m.name == *name),
                    "{family}: headline metric {name} is not in its table"
                );
            }
        }
    }

    /// The generated part of docs/metrics.md: each family's metric table and per-request
    /// columns, rendered from its registration (`families()` for the file).
    pub(crate) fn metric_tables_markdown(families: impl Iterator<Item = FamilyId>) -> String {
        let mut out = String::new();
        for family in families {
            out.push_str(&format!(
                "\n### {family}\n\n| metric | better | label |\n|---|---|---|\n"
            ));
            for metric in family.metrics() {
                let better = match metric.better {
                    crate::metrics::Better::Lower => "lower",
                    crate::metrics::Better::Higher => "higher",
                };
                out.push_str(&format!(
                    "| `{}` | {better} | {} |\n",
                    metric.name, metric.description
                ));
            }
            out.push_str(&match family.csv_columns() {
                None => "\nNo per-request records.\n".to_string(),
                Some([]) => "\nPer-request CSV: the common columns only.\n".to_string(),
                Some(columns) => format!(
                    "\nPer-request CSV: the common columns, then `{}`.\n",
                    columns.join("`, `")
                ),
            });
        }
        out
    }

    /// The generated part of docs/capacity.md: the arrival-rate key `expertsim capacity`
    /// searches in each family, or that it has none.
    pub(crate) fn rate_keys_markdown(families: impl Iterator<Item = FamilyId>) -> String {
        families
            .map(|family| match family.rate_key() {
                Some(key) => format!("`{key}` for {family}"),
                None => format!("none for {family}"),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Checks that the span of `doc` (under the repository root) between `begin` and `end` is
    /// `expected`; with `EXPERTSIM_WRITE_DOCS` set, writes it there instead.
    fn check_generated(doc: &str, begin: &str, end: &str, expected: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(doc);
        let text = std::fs::read_to_string(&path).unwrap();
        let start = text
            .find(begin)
            .unwrap_or_else(|| panic!("{doc} has the marker {begin}"))
            + begin.len();
        let stop = text
            .find(end)
            .unwrap_or_else(|| panic!("{doc} has the marker {end}"));
        if std::env::var_os("EXPERTSIM_WRITE_DOCS").is_some() {
            let rewritten = format!("{}{expected}{}", &text[..start], &text[stop..]);
            std::fs::write(&path, rewritten).unwrap();
            return;
        }
        assert_eq!(
            &text[start..stop],
            expected,
            "{doc} is out of date with the registered families; regenerate it with \
             EXPERTSIM_WRITE_DOCS=1 cargo test -p expertsim-scenario --lib docs_"
        );
    }

    /// docs/capacity.md names every family's arrival-rate key, which `expertsim capacity`
    /// searches (generated).
    #[test]
    fn docs_capacity_names_every_rate_key() {
        check_generated(
            "docs/capacity.md",
            "<!-- rate-keys:begin -->",
            "<!-- rate-keys:end -->",
            &rate_keys_markdown(families()),
        );
    }

    /// docs/metrics.md's metric tables, one per family (generated).
    #[test]
    fn docs_metrics_lists_every_family_table() {
        check_generated(
            "docs/metrics.md",
            "<!-- metric-tables:begin -->\n",
            "<!-- metric-tables:end -->",
            &metric_tables_markdown(families()),
        );
    }
}
