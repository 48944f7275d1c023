//! The serving family's documented keys: the rows docs/serving-family.md's key table is
//! rendered from (after the common keys, `scenario::keys::COMMON`). Tests hold the table in the
//! doc equal to these rows and every key `ServingConfig` accepts covered by one.

use crate::family::KeyDoc;

/// The serving family's own keys, in the order the table lists them.
pub const KEYS: &[KeyDoc] = &[
    KeyDoc {
        key: "model.name",
        default: "(required unless every group names its own)",
        meaning: "a preset of the shape catalogue, dense (`llama-2-7b`, `qwen2.5-7b-instruct`, ...), MoE (`mixtral-8x7b`, `qwen3-30b-a3b`, ...) or MLA MoE (`esft-vanilla-16b`, DeepSeek-V2-Lite's shape, ExpertWeave's base; `live-tiny-mla`); an unknown name lists them; the model of every replica group without its own `replica.model`",
    },
    KeyDoc {
        key: "model.n_layers, model.n_experts, model.top_k",
        default: "the preset's",
        meaning: "an MoE preset's routing shape overridden (its first `n_layers` layers, `n_experts` routed experts per layer, `top_k` per token; as the caps family's `[model]`): a scaled-down model for live runs, or a slice that fits one GPU; refused on a dense preset, and where `top_k` exceeds the experts. On an MLA preset only `n_layers`: its first layers, the dense ones and at least one MoE layer (live mode's cut ExpertWeave model)",
    },
    KeyDoc {
        key: "replica",
        default: "one table",
        meaning: "one `[replica]` table (every replica alike), or an array of `[[replica]]` tables, one per replica group (below): every `replica.*` key is then per group, its errors named `replica[i].key`",
    },
    KeyDoc {
        key: "replica.model",
        default: "`model.name`",
        meaning: "the group's model",
    },
    KeyDoc {
        key: "replica.count",
        default: "1",
        meaning: "replicas of the group, all alike",
    },
    KeyDoc {
        key: "replica.models",
        default: "none",
        meaning: "the cluster's models from one `[replica]` table (not beside `replica.model`, `replica.count` or `[[replica]]` groups): one group per distinct model in the order first named, each the table with its `model`, a model named `n` times a group of `n` replicas (`[\"qwen2.5-1.5b-instruct\", \"qwen2.5-7b-instruct\"]`: two groups of one); a sweep can range over it (`\"replica.models\" = [[...], [...]]`) and a claim key on it; an error in a group's own field names `replica.<field>`, an unknown model `replica.models`",
    },
    KeyDoc {
        key: "replica.gpu",
        default: "`H100-SXM`",
        meaning: "GPU catalogue name (`cost::gpu`)",
    },
    KeyDoc {
        key: "replica.gpus",
        default: "max(TP, EP)",
        meaning: "GPUs per replica",
    },
    KeyDoc {
        key: "replica.tensor_parallel",
        default: "1",
        meaning: "TP degree of the dense part; divides `gpus` and the attention heads. A dense replica is TP over all its GPUs (more copies are more replicas); an MoE replica runs `gpus / TP` data-parallel copies of its dense part",
    },
    KeyDoc {
        key: "replica.expert_parallel",
        default: "1",
        meaning: "EP degree of the routed experts (MoE only); divides `gpus` and the experts per layer; the EP group repeats `gpus / EP` times, each expert's tokens split over its copies",
    },
    KeyDoc {
        key: "replica.speed_factors",
        default: "all 1",
        meaning: "one per GPU, (0, 10]: each GPU's speed relative to its datasheet",
    },
    KeyDoc {
        key: "replica.speed_factors_kind",
        default: "`clock`",
        meaning: "what the speed factors are: `clock` (the SM clock factor) or `throughput` (the share of the nominal throughput the GPU delivers on the workload's mean MoE layer, gem.txt section 4.2: the clock solved per seed so that layer, on one GPU's even share of the trace's mean observed step, takes `1 / s` as long, `gpu_costs::throughput_speed`, as the gem family's `cluster.factors = \"throughput\"`); `throughput` needs an MoE model and `experts.trace`",
    },
    KeyDoc {
        key: "replica.variability",
        default: "none",
        meaning: "a variability setup standing for `speed_factors` (refused beside them; `serving::variability`, gem.txt section 4.2), by `setup`: `{ setup = \"low\" }` (all 1), `\"high\"` (GPU 0 slower by `straggler_slowdown`, 0.12), `\"moderate\"` (the sorted means of `moderate_draws` (1000) Monte-Carlo draws of the GPUs' throughputs from `distribution` (`fastest_above_mean` 0.108, `slowest_below_mean` 0.1323, `population` 128), seeded by `moderate_seed` (0), normalized to the fastest)",
    },
    KeyDoc {
        key: "replica.bandwidth_share",
        default: "0",
        meaning: "share of a GPU's slowdown that reaches its memory bandwidth (`SpeedFactors::split`: 0 = a clock effect only, 1 = uniformly slower)",
    },
    KeyDoc {
        key: "replica.interconnect",
        default: "`nvlink4`",
        meaning: "`nvlink4` or `pcie4_x16`: the link of the TP all-reduces and the EP all-to-all",
    },
    KeyDoc {
        key: "replica.gpu_memory_gib",
        default: "the catalogue's",
        meaning: "each GPU's memory in GiB where the deployment's differs from the catalogue's decimal GB (`expertsim list`): ExpertWeave's 64 GiB NPUs against the catalogue's 64 GB Ascend-910B",
    },
    KeyDoc {
        key: "replica.gpu_memory_utilization",
        default: "0.9",
        meaning: "vLLM's share of each GPU's memory for weights and KV cache",
    },
    KeyDoc {
        key: "replica.step_overhead_ms",
        default: "the scheduler kind's measured term",
        meaning: "host time per step (scheduling, input preparation, sampling, detokenization; CUDA graphs replay the kernels), flat whatever the batch; left out, `sarathi` uses Sarathi-Serve's measured line (0.94 ms + 49.2 µs per sequence in the step) and the other kinds vLLM's (6.32 ms + 35.1 µs per sequence; docs/cost-model.md, \"The host's time per step\")",
    },
    KeyDoc {
        key: "replica.timing",
        default: "`graph`",
        meaning: "how a step's kernels are launched: `graph` (replayed in a CUDA graph, each kernel its GPU-side time, the launches covered by the host time per step) or `eager` (launched one by one from the host, as vLLM-Ascend runs: each layer takes the longer of its kernels' launches at the GPU's host launch cost, `docs/cost-model.md`, and its GPU time, each grouped MoE kernel and each rerouting operator the longer of its launch and its time; the host time per step kept). An MoE or MLA model's continuous replica only",
    },
    KeyDoc {
        key: "replica.host_time",
        default: "the scheduler kind's engine",
        meaning: "whose measured host time per step the replica pays, whatever its scheduler kind: `vllm` (vLLM 0.5.4's loop, 6.32 ms + 35.1 µs per sequence) or `sarathi-serve` (Sarathi-Serve's as Vidur profiled it, 0.94 ms + 49.2 µs per sequence); a study comparing schedulers sets one for all so that the comparison isolates the scheduling. Refused together with `step_overhead_ms`",
    },
    KeyDoc {
        key: "replica.measured",
        default: "none",
        meaning: "a measured set of the group's GPU (`profiles/<name>/`, e.g. `vidur/h100`): a dense model's steps priced from its measured operations (`cost::measured_steps::MeasuredDenseStep`, as Chimera's `cluster.measured` and MOSAIC's `[serving] measured`); results say `cost_model = \"measured\"` (or `scaled`) and hold each group's `pricing` record in the details. With an MoE model, the model's curves built from the set (`cost::measured_steps::moe`): on a continuous replica at its tensor parallelism (the dense part, head and routed experts priced from the curves at each GPU's speed factors, `serving_family::curve_pricing`, as the gem family's `model.measured`), on a static replica priced from its expected routing at tensor parallelism 1 (`pricing = \"expected_routing\"`, `cv`, `straggler`, as the caps family's `execution.measured`). Refused naming the key: another GPU's set, a static MoE replica priced pass by pass, a latent-attention model, `speed_factors` other than 1 on a dense model, beside `replica.scheduler.profile`",
    },
    KeyDoc {
        key: "replica.scheduler",
        default: "`{ kind = \"vllm\" }`",
        meaning: "the scheduler kind (`vllm`, `sarathi`, `orca`, `static`; \"Scheduler kinds\" below) and its keys: `max_num_batched_tokens` (vllm: 4096; orca: none), `chunk_size` (sarathi: 512), `preemption` (vllm, sarathi: `recompute`, the default, or `swap`: the newest sequence's KV blocks copied to host memory and back over the GPU's host link, PCIe 5.0 x16 on H100/H200, else PCIe 4.0 x16), `kv` (sarathi: `paged`, the default, or `unbounded`: no KV limit, one-token blocks, no watermark, each request admitted on its prompt and never preempted, vLLM V1 as GEM's runs treat it), `profile` (vllm, sarathi, orca; an MoE model: a calibration profile JSON, relative to the scenario file, whose `non_expert_prefill` / `non_expert_decode` / `head` curves price the dense part and head, each GPU its tensor-parallel share at its own compute (prefill) or bandwidth (decode, head) factor, the slowest setting the pace, and whose measured expert entry prices the routed experts: `serving_family::curve_pricing`; an MLA model (ExpertWeave's) takes a profile measured for its widths (`expertsim-calibrate --for-scenario`): each layer's dense part one GEMM of its non-routed parameters over the step's rows and the head one over the emitting sequences, at their measured widths (`dense_gemm/out=W`, else the dense GEMM scaled in width), and with `[adapters]` the profile's measured rerouting series (`reroute/<variant>/adapters=N`, the count nearest the instance's) per MoE layer; live mode's `--calibrate` sets it; refused on another model's profile, a profile measured as one GPU's shard of another tensor-parallel degree; a dense model takes a dense-decode profile of itself scaled down (`expertsim-calibrate --dense-models`, or `--for-scenario`), each step its whole time looked up at its rows and attended tokens per row, with one GPU and not beside `replica.measured`: `serving_family::dense_profile`, the Chimera preset's live case), `window_size` (32), `min_batch_trigger` (16), `scheduling_interval_ms` (100), `seed_with_oldest` (true) and `loads` (`gpus`, the default: the batch former sees each candidate's expected tokens per layer and GPU; `experts`: per layer and expert, CAPS's load vector) and `pricing` (`passes`, the default: pass by pass on whole routed tokens; `expected_routing`: from the batch's expected routing by CAPS's grouped model, one grouped GEMM per layer through the one MoE entry point; `cv`: caps.txt's base x (1 + CV x `sensitivity`), derived from the profile unless given; `straggler`: per layer the most loaded expert; these three need `loads = \"experts\"`, an MoE model, one GPU, and price on the GPU's analytic profile unless `profile` names a calibration profile JSON (relative to the scenario file; live mode's `--calibrate` sets it) or `replica.measured` a measured set; `constant`, `exponential`: the queueing references, every batch `service_ms` or exponential with that mean) and `streams` (`per_replica`, the default: the selector, dry-run noise and service draw from `selector_<r>`, `prediction_<r>`, `service_<r>`; `shared`: from `selector`, `prediction`, `service`, the caps family's names; one replica) (static)",
    },
    KeyDoc {
        key: "replica.max_num_seqs",
        default: "256",
        meaning: "vLLM's `max_num_seqs`",
    },
    KeyDoc {
        key: "replica.block_size",
        default: "16 (orca: 1)",
        meaning: "tokens per KV block (vllm, sarathi); for orca, which does not page, the KV pool's allocation block: its capacity in whole blocks, each request still reserving exactly its tokens (ExpertWeave's Ascend pool: 128)",
    },
    KeyDoc {
        key: "replica.max_model_len",
        default: "what the KV cache holds",
        meaning: "vLLM's `max_model_len`: the longest sequence (prompt + output) a replica takes; a prompt that leaves no room for an output token is refused at admission (metric `refused`), an output that would pass it stops there; at most what the cache holds",
    },
    KeyDoc {
        key: "replica.watermark",
        default: "0.01",
        meaning: "share of the blocks an admission leaves free (vllm, sarathi)",
    },
    KeyDoc {
        key: "replica.queue",
        default: "`{ kind = \"fcfs\" }`",
        meaning: "the queue policy of each replica (`strategies::queue`), with Chimera's parameters: `fcfs`; `sjf` (predicted output tokens); `stjf` (`starvation_threshold` 4096, `quantum` 64: predicted total tokens with aging); `mlfq` (`levels` 4, `base_quantum_tokens` 256); `ltr` (`noise` 0.5). One policy serves the cluster: every group names the same",
    },
    KeyDoc {
        key: "replica.task_score_pct",
        default: "none",
        meaning: "the model's standalone task score, % in (0, 100): the capability Chimera's semantic router weighs (below); required on every group with `routing.kind = \"chimera\"` where the models differ",
    },
    KeyDoc {
        key: "replica.batch_former",
        default: "`{ kind = \"fcfs\" }`",
        meaning: "`static` kind only: any CAPS selector of `strategies::batch` (`fcfs`, `random`, `greedy_variance`, `greedy_dot_product`, `norm_minimizing`, `best_fit`, `power_of_d`, `power_of_d_dot`, `lpt`, `lpt_balanced`, `karmarkar_karp`, `differencing`; the `power_of_d` ones take `samples`, 8), below; on `vllm`, `sarathi` or `orca` it exits 2 naming it and `replica.scheduler.kind`",
    },
    KeyDoc {
        key: "replica.load",
        default: "none (resident)",
        meaning: "the model's load onto the replica's GPUs before it serves (MOSAIC's session load; `serving_family::load`): `{ kind = \"host_link\" }` (each GPU's weights over its host link, the measured PCIe 5.0 x16 on H100/H200, else PCIe 4.0 x16), `{ kind = \"path\", gbps }` (each GPU's weights over an effective load path: storage, host, PCIe and engine start-up as one rate, as the mosaic family's `[serving] load_gbps`, 0.4 there) or `{ kind = \"fixed\", seconds }`; requests queue from time zero and no step starts before the load ends (makespan and latencies include it); `details.deployment[g].load_s` gives it; the keys: `gbps`, `seconds`",
    },
    KeyDoc {
        key: "replica.prefix_caching",
        default: "false",
        meaning: "vLLM V1's automatic prefix caching (`serving::prefix`, as the chimera family's `cluster.prefix_caching`): a prompt's leading full `block_size` blocks that an earlier request on the replica computed and that are still resident (freed blocks are reused least recently freed first) are not prefilled again; which prompts share tokens: `workload.shared_prefix_tokens`; `details.replicas[r].prefix_hit_rate` is the share of the prompt tokens found cached. Paged caches only: refused on `orca`, `static` and `sarathi` with `kv = \"unbounded\"`, and beside `[adapters]`",
    },
    KeyDoc {
        key: "experts.routing",
        default: "`{ kind = \"uniform\" }`",
        meaning: "MoE only: `uniform`, `{ kind = \"zipf\", exponent = s }` (`exponent` in [0, 10]), or `{ kind = \"affinity\", concentration, purity, prediction_noise }` (CAPS's request model: Dirichlet(`concentration` > 0) per topic and layer, `purity` in [0, 1], `prediction_noise` >= 0, default 0; below)",
    },
    KeyDoc {
        key: "experts.mapping",
        default: "`{ kind = \"linear\" }`",
        meaning: "the per-layer expert mapping of each EP group of every MoE replica group, each over its own model and EP degree (`policies::mapping::MapperConfig`): `linear`, `round_robin`, `eplb` (`redundant_slots`, `n_groups`, `n_nodes`, `window`), `gem` (`restarts`, `window`, `noise`, `min_relative_drop`, `keep_linear_if_better`), below",
    },
    KeyDoc {
        key: "experts.trace",
        default: "none",
        meaning: "MoE, continuous batching only: an expert-utilization trace (`serving::expert_trace`, the gem family's `[trace]` table): the synthetic generator's keys (`observed_steps` 256, `unseen_steps` 256, `tokens_per_step` 2048, `popularity_sigma`, `consistent_fraction`, `consistent_activity`, `consistent_boost`, `temporal_fraction`, `temporal_group_size`, `temporal_activity`, `temporal_boost`, `temporal_correlation`, `step_noise`; drawn per seed from `(seed, \"gem/trace\")`) or a recorded file's `path`; each step routes by the next unseen step (in turn), and a mapper's window is the first `window` observed steps instead of an observation pass; refused beside `experts.routing`, `[adapters]` or a `static` replica (below, \"Expert traces\")",
    },
    KeyDoc {
        key: "experts.streams",
        default: "`per_replica`",
        meaning: "where layer `l`'s mapper draws: `per_replica` (`expert_mapping/replica<r>/copy<c>/layer<l>`) or `shared` (`gem/mapper/layer<l>`, the gem family's names; one MoE replica of one EP copy)",
    },
    KeyDoc {
        key: "routing",
        default: "`{ kind = \"round_robin\" }`",
        meaning: "the router across replicas, by `kind`: `round_robin`, `least_outstanding` (fewest waiting + running), `least_loaded` (vLLM's `waiting_weight` (4) x waiting + `running_weight` (1) x running), `chimera` (`slack` required, `margin` 0.05, `semantic_router` `{ kind = \"noisy\", noise = 1.0 }` (its `noise`), `\"oracle\"` or `\"static\"`; below)",
    },
    KeyDoc {
        key: "predictor",
        default: "`{ kind = \"noisy\", noise = 0.6 }`",
        meaning: "Chimera's length predictor (`serving::predictors::PredictorConfig`): `noisy` (the true output length x `exp(noise x eps)`, `noise` 0.6), `oracle`, `input_length`, `fcfs` (the request id); what the length-aware queues and Chimera's activity monitor read",
    },
    KeyDoc {
        key: "[adapters]",
        default: "none",
        meaning: "ExpertWeave's ESFT adapters on an MLA MoE model (below, \"Adapters\"): `names` and/or `count` (Table 1), `alpha` (1), `memory` (required: `{ kind = \"base_only\" }`, `\"padding\"` (`e_max`, `a_max`), `\"virtual_weight_tensor\"` (`page_bytes`, `e_max`, `a_max`); `\"merged\"` (`separate_devices`, `utilization`): with more than one adapter only `separate_devices = true`, each merged copy a replica of its own, `replica.count` = the adapters (a count left at 1 becomes it), below, unless `plan_only`), `plan_only` (false: true evaluates the memory plan without serving, every instance in one replica's budget, merged copies sharing it, and reports only the plan's metrics, an out-of-memory plan's included), `runtime_reserve_gib` (0), `rerouting` (`fused`), `unfused_ops` (5), `expert_zipf_s` (1); refused on a dense model (no experts) and on the other MoE models (no ESFT adapters), and on a `static` replica; one replica group only: beside more than one `[[replica]]` group it is refused naming `adapters` and `replica`",
    },
    KeyDoc {
        key: "[experiment]",
        default: "none (the run serves)",
        meaning: "what a run computes instead of serving (`serving_family::experiment`; every serving metric null): `kind = \"variability_at_scale\"` (GEM's Figure 19: the expected slowest-to-fastest gap among `gpus` GPUs drawn from `distribution` (`fastest_above_mean` 0.108, `slowest_below_mean` 0.1323, `population` 128), `draws` 10000 from `(seed, \"gem/scale\")`: `gap_vs_fastest`, `gap_vs_slowest`) or `\"profiling_cost\"` (GEM's Figure 18: the kernel time of profiling one GPU of the replica's MoE layer over its expert parallelism, `method` `tile_boundaries` or `full_sweep` to `sweep_max_tokens` 16384, `repetitions` 500 launches per count, over the per-GPU range of the replica's step budget or `experts.trace`'s step: `profiling_min`, `profiled_counts`; refused on a dense model)",
    },
    KeyDoc {
        key: "workload.n_requests",
        default: "(required; unbounded beside `horizon_s`)",
        meaning: "requests (a trace serves at most its rows)",
    },
    KeyDoc {
        key: "workload.horizon_s",
        default: "none",
        meaning: "requests arriving at or after this many seconds are not served (the run lasts until the earlier ones finish), as the expertweave family's runs; `n_requests` may then be left out; refused beside `arrival.pattern = \"offline\"` and `[[workload.calls]]`",
    },
    KeyDoc {
        key: "workload.n_topics",
        default: "1",
        meaning: "topics the arrival process draws; with Zipf routing each topic ranks the experts its own way",
    },
    KeyDoc {
        key: "workload.one_token_stream",
        default: "false",
        meaning: "draw each request's prompt and then output length from one stream (`tokens`, as the caps family draws them) instead of one stream each",
    },
    KeyDoc {
        key: "workload.streams",
        default: "`own`",
        meaning: "the random streams of the arrivals and lengths: `own` (`arrivals`; `prompt_tokens` and `output_tokens`, or `tokens`) `gem` (`gem/arrivals`, and prompt then output from one `gem/lengths` stream, the gem family's) or `expertweave` (`expertweave/arrivals` and `expertweave/lengths`, likewise, the expertweave family's); the two others refused beside `one_token_stream`",
    },
    KeyDoc {
        key: "workload.shared_prefix_tokens",
        default: "0",
        meaning: "tokens every request's prompt begins with, the same for all (a shared system prompt, as Chimera's agents' role prompts); a shorter prompt is that prefix alone; what `replica.prefix_caching` finds cached; refused unless some replica group caches prefixes",
    },
    KeyDoc {
        key: "workload.workflow.dataset",
        default: "none (each arrival one request)",
        meaning: "each arrival a multi-stage agent workflow (Chimera's, `serving_family::workflows`): 4, 2 or 1 stages in equal shares (planner, coder/solver, QA/verifier, coder/solver), stage `i + 1` submitted the instant stage `i` finishes, its prompt the 150-token role prompt, the workflow's user message and every earlier stage's output (three prefix streams a `replica.prefix_caching` replica finds cached), its output the workflow's for the model of the replica it is routed to; `apps` or `math` gives the user prompts, each model's output lengths and standalone task score (`serving::agent_workflows`; every group's model one of Chimera's: Qwen2.5 1.5B / 3B / 7B / 14B Instruct, Llama-3.2-3B-Instruct, Ministral-3-8B-Instruct-2512); `workload.n_requests` and `arrival.rate_per_s` count workflows; a trace's prompt replaces the user message; the `workflow_*` metrics; refused beside `workload.prompt_tokens`, `output_tokens`, `dataset`, `one_token_stream`, `calls`, `shared_prefix_tokens`, `replica.task_score_pct`, `[adapters]` and the `static` scheduler kind",
    },
    KeyDoc {
        key: "workload.questions",
        default: "none (each arrival one request)",
        meaning: "each arrival a benchmark question of MOSAIC's (`serving_family::questions`, `serving::questions`): `dataset` (`gpqa`, `mmlu_pro`, `medmcqa`: Table 3's question count, which `workload.n_requests` must equal and which it defaults to, the prompt mean, Table 1's vote-agreement buckets with their length weights and per-bucket accuracies), `prompt_tokens_sigma` (0.3); `questions`, `calibration_questions` and `prompt_tokens_mean` (each a positive number; left out, the benchmark's): a question count of the file's own (then `workload.n_requests` must equal it, its default, and every expert's `slots` are given, adding up to 3 x it), the calibration questions (`[placement.calibration]`'s default calls are 3 x them) and the prompt mean (a small live run's: scenarios/live/mosaic.toml); `experts` (an array of `[[workload.questions.experts]]`), each `model` (one replica group's; `group`, its `[[replica]]` index, where several groups serve the model), `slots` (Table 3's; they add up to 3 x the questions; left out, the dataset's for the hybrid pool's expert the model serves, 0 where the benchmark never recruits it, whose group a placement then leaves without a session: one file sweeps `workload.questions.dataset`) and `output_tokens` (the keys `mean`, `sigma`, `max`: log-normal by its mean, clipped to `[1, max]`, times the bucket's length factor): the slots shuffled and cut into questions of 3 calls, each submitted at the question's arrival to its expert's group; `aggregator` (a `[workload.questions.aggregator]` table; none: no aggregator stage), `model`, `group`, `output_tokens`, `template_tokens` (100), `max_prompt_tokens` (16384): when a question's three calls have finished, one aggregator call, its prompt the question + the template + the three outputs (cut at `max_prompt_tokens`), unless `gate` (`{ kind = \"threshold\", tau }`: skip when the plurality share >= `tau`; default `none`) skips it; `release` = `\"fan_in\"` (default: at the last expert call's finish) or `\"after_experts\"` (once every expert call has finished, MOSAIC's stage barrier); per question one uniform draw decides the majority's and the aggregator's correctness; the metrics `expert_makespan_s`, `aggregator_s`, `end_to_end_s`, `skip_pct`, `accuracy_pct`, `accuracy_change_pp`; refused beside `workload.prompt_tokens`, `output_tokens`, `dataset`, `calls`, `workflow`, `horizon_s`, a trace, `routing.kind = \"chimera\"`, `[adapters]` and the `static` scheduler kind",
    },
    KeyDoc {
        key: "workload.dataset",
        default: "none",
        meaning: "a length preset by mean (`serving::datasets`, GEM's section 4.4) for whichever of `prompt_tokens` and `output_tokens` is not given: `sharegpt` (log-normal means 161.31 / 337.99, sigma 1, max 2048 / 2048), `codecontests` (450 / 300, sigma 0.5 / 0.8, max 4096 / 2048)",
    },
    KeyDoc {
        key: "workload.prompt_tokens, workload.output_tokens",
        default: "(required unless `workload.dataset` or `[[workload.calls]]` gives them)",
        meaning: "`{ kind = \"fixed\", value }`, `{ kind = \"uniform\", low, high }` (integers), `{ kind = \"rounded_uniform\", mean, spread }` (a continuous uniform on `mean x [1 - spread, 1 + spread]` rounded, at least 1: its end points half as likely; `spread` in [0, 1); ExpertWeave's lengths), `{ kind = \"zipf\", min, max, exponent }`, `{ kind = \"log_normal\", mean or median, sigma, max }`, `{ kind = \"trace\" }` (the replayed trace's column; needs `arrival.pattern = \"trace\"`); the keys: `value`, `low`, `high`, `spread`, `min`, `max`, `exponent`, `mean`, `median`, `sigma`",
    },
    KeyDoc {
        key: "workload.calls",
        default: "none",
        meaning: "an array of `[[workload.calls]]` tables, classes of calls addressed to one model each (MOSAIC's agent calls): `model` (the model of exactly one replica group), `n_requests` (the class's calls; the classes add up to `workload.n_requests`), `prompt_tokens` and `output_tokens` (as `workload.prompt_tokens`, not `trace`: the keys `value`, `low`, `high`, `spread`, `min`, `max`, `exponent`, `mean`, `median`, `sigma`), which then replace `workload.prompt_tokens` and `workload.output_tokens`; the run's requests in arrival order are the first class's calls, then the second's, ...; the router chooses among the class's group's replicas only. Refused beside `arrival.pattern = \"trace\"` and `routing.kind = \"chimera\"` (below, \"Model loads and addressed calls\")",
    },
    KeyDoc {
        key: "placement.workers",
        default: "(required with `[placement]`)",
        meaning: "MOSAIC's expert placement (`serving_family::placement`, below, \"Placed sessions\"): the workers, one GPU set each, that run sessions one after another; each session is one replica of a group's model that loads it (`replica.load`, once per session) and then generates the calls the plan gives it, released to it when its load ends (timed from there); the plan is made before the run, each group's replicas being its model's sessions; needs `arrival.pattern = \"offline\"` and `[[workload.calls]]` with one class per group and every group addressed, or `[workload.questions]` with each expert a group of its own with slots (given to the policy in the order the seed's questions first recruit them, MOSAIC's first-seen order, each expert's calls taken by its sessions in question order) and the aggregator a group of its own of at most the workers' GPUs, run on the workers once every worker is done, loading its model first, when the gate left it calls (`details.sessions.aggregator`; `expert_makespan_s` the last worker's end, `aggregator_s` its load and generation), each group `count` left at 1 (the plan sets it), a continuous scheduler kind, no `[adapters]`; `details.placement` (the problem, plan, predicted makespan, solver) and `details.sessions` (`worker_walls_s`, `worker_idle_s`, `idle_pct`, `loads`, `load_time_s`, `barriers_s`, per worker its sessions' times)",
    },
    KeyDoc {
        key: "placement.policy",
        default: "(required with `[placement]`)",
        meaning: "the placement policy (`strategies::placement`) by `kind`: `round_robin` (model m to worker m mod N, groups in file order), `data_parallel` (every model on every worker, calls split evenly, a barrier per model: round r + 1 starts on every worker once all finished round r, a worker without calls of a model still loads it), `ilp` (MOSAIC's MILP: `node_limit` 20000 branch-and-bound nodes, `max_models_per_worker` 2, `valid_bound` true, `warm_start` true), `lpt` (`max_models_per_worker` 2)",
    },
    KeyDoc {
        key: "placement.predicted_session_s",
        default: "none",
        meaning: "per placed model (as `[[workload.calls]]` or `[[workload.questions.experts]]` names it), its predicted session time for all its calls, seconds: what `ilp` and `lpt` read (required for them unless `[placement.calibration]` computes them; not beside it), with the load it gives each model's replica cap clamp(1, floor(T / load), workers)",
    },
    KeyDoc {
        key: "placement.calibration.calls",
        default: "with `[workload.questions]` the benchmark's calibration questions x 3; else required",
        meaning: "MOSAIC's calibration pass (`serving_family::session_calibration`, below, \"Placed sessions\"): before each run, per seed, each placed model's predicted session time is computed instead of given: `calls` calibration calls drawn over the models in proportion to their classes' `n_requests`, each with its class's lengths (stream `calibration`; MOSAIC's calibration questions x 3); with `[workload.questions]` drawn from the question generator as MOSAIC draws its calibration questions (each call an expert by its slots, a vote-agreement bucket by its share, the benchmark's prompt, the expert's output times the bucket's length factor), a sweep of resident sessions of one replica of the group (no load, every call at t = 0, this family's server) resampling the model's subset (stream `calibration-sweep`), T = b0 + b1 P O_mean + b2 O_max fitted by least squares, evaluated at the class's `n_requests` (an expert's slots) with the subset's mean and longest output; `details.placement.calibration` gives per model the subset, the sweep, the coefficients and the prediction",
    },
    KeyDoc {
        key: "placement.calibration.min_calls_per_model, placement.calibration.sweep_min_calls, placement.calibration.sweep_max_calls",
        default: "8, 8, 2048",
        meaning: "every model's subset topped up to `min_calls_per_model`; the sweep's sessions have `sweep_min_calls`, twice that, ... up to `sweep_max_calls` calls",
    },
    KeyDoc {
        key: "[arrival]",
        default: "(required)",
        meaning: "the shared table (with the tables `bursty` and `trace`): `pattern` = `\"poisson\"` or `\"gamma\"` (`cv`) at `rate_per_s` (the key `expertsim capacity` searches), `\"bursty\"` (MMPP, `[arrival.bursty]`: `burst_rate_multiplier` 4, `mean_burst_s` 1, `mean_calm_s` 3, `burst_topic_share` 0.8), `\"offline\"`, `\"trace\"` (`[arrival.trace]`: `path` of the CSV, `time_scale` 1)",
    },
    KeyDoc {
        key: "output.per_request_csv",
        default: "false",
        meaning: "as `--per-request-csv`",
    },
    KeyDoc {
        key: "output.trace_events",
        default: "false",
        meaning: "as `--trace-events`",
    },
    KeyDoc {
        key: "output.kv_sample_interval_ms",
        default: "100",
        meaning: "grid of each replica's KV-use series in the details (0: none)",
    },
    KeyDoc {
        key: "output.timeline",
        default: "false",
        meaning: "`details.timeline`: per replica (placed, per worker) the intervals its model loads, runs steps and idles, what `timeline` figures draw",
    },
    KeyDoc {
        key: "output.staircase",
        default: "false",
        meaning: "`details.deployment[].experts.staircase` (an MoE group with `experts.trace`): each GPU's MoE-layer latency at every whole token up to the trace's busiest step, the curve its mapper planned with, what `gem_staircase` figures draw (tens of thousands of numbers a run: off unless a figure draws it)",
    },
    KeyDoc {
        key: "output.decode_curves",
        default: "false",
        meaning: "`details.decode_curves`: per replica group its decode step as the replica's own step cost prices it (`serving_family::decode_curves`: `ReplicaStepCost::decode_profile`, the step price of the run) at batch sizes 1, 2, 4, ... up to the most sequences of 1,024 cached tokens each its KV cache and `max_num_seqs` hold, with the tokens per second a step of that batch emits: what `decode_curve` figures draw (MOSAIC's Figure 3b)",
    },
];
