//! The serving-family documents the tests share, this crate's and the loader's above it
//! (`expertsim-scenario`'s file, line and field checks): two models whose replicas load their weights, their
//! fixed-length calls or GPQA's questions, offline on two placed workers, and one model's calls
//! on one resident replica. Built here once so that a test's edit (`replacen` of a line) means
//! the same document wherever it is made.

/// Llama-2-7B (its weights loading in 10 s) and Qwen2.5-7B (5 s), one H100 replica group each.
pub const TWO_LOADING_MODELS: &str = r#"
[[replica]]
model = "llama-2-7b"
gpu = "H100-SXM"
load = { kind = "fixed", seconds = 10.0 }
[[replica]]
model = "qwen2.5-7b-instruct"
gpu = "H100-SXM"
load = { kind = "fixed", seconds = 5.0 }
"#;

/// `llama` calls of Llama-2-7B (300 prompt and 40 output tokens) then 3 of Qwen2.5-7B (200 and
/// 60): the `[workload]` of `TWO_LOADING_MODELS`.
pub fn calls(llama: u32) -> String {
    format!(
        r#"[workload]
n_requests = {n}
[[workload.calls]]
model = "llama-2-7b"
n_requests = {llama}
prompt_tokens = {{ kind = "fixed", value = 300 }}
output_tokens = {{ kind = "fixed", value = 40 }}
[[workload.calls]]
model = "qwen2.5-7b-instruct"
n_requests = 3
prompt_tokens = {{ kind = "fixed", value = 200 }}
output_tokens = {{ kind = "fixed", value = 60 }}
"#,
        n = llama + 3
    )
}

/// GPQA's 198 questions recruited to the two models of `TWO_LOADING_MODELS` (Llama-2-7B 300
/// slots, Qwen2.5-7B 294), each expert's output lengths the inline table given; `questions` are
/// the `[workload.questions]` lines after its dataset (release, gate), each ending in `\n`.
pub fn gpqa(questions: &str, llama_output: &str, qwen_output: &str) -> String {
    format!(
        r#"[workload]
n_requests = 198
[workload.questions]
dataset = "gpqa"
{questions}[[workload.questions.experts]]
model = "llama-2-7b"
slots = 300
output_tokens = {llama_output}
[[workload.questions.experts]]
model = "qwen2.5-7b-instruct"
slots = 294
output_tokens = {qwen_output}
"#
    )
}

/// Offline arrivals, then two workers placed by the policy of kind `policy` (the `[placement]`
/// table last, open for more keys or a subtable).
pub fn offline_on_two_workers(policy: &str) -> String {
    format!(
        "[arrival]\npattern = \"offline\"\n[placement]\nworkers = 2\npolicy = {{ kind = \"{policy}\" }}\n"
    )
}

/// Four Llama calls and three Qwen calls of `calls`, offline on two workers placed round-robin.
pub fn placed() -> String {
    format!(
        "{TWO_LOADING_MODELS}{}{}",
        calls(4),
        offline_on_two_workers("round_robin")
    )
}

/// Sixteen Llama calls and three Qwen calls, placed by the ILP on two workers from predictions
/// that sessions of 4 and 8 calls calibrate.
pub fn calibrated() -> String {
    format!(
        "{TWO_LOADING_MODELS}{}{}[placement.calibration]\ncalls = 20\nsweep_min_calls = 4\n\
         sweep_max_calls = 8\n",
        calls(16),
        offline_on_two_workers("ilp")
    )
}

/// GPQA's questions on the two experts (short outputs, so a run is cheap), released after the
/// expert stage to the aggregator DeepSeek-R1-Distill-Qwen-7B at TP = 2 (the two workers' GPUs,
/// loading 7 s), placed round-robin on two workers.
pub fn placed_questions() -> String {
    let short = "{ mean = 20.0, sigma = 0.5, max = 200 }";
    format!(
        r#"{TWO_LOADING_MODELS}[[replica]]
model = "deepseek-r1-distill-qwen-7b"
gpu = "H100-SXM"
gpus = 2
tensor_parallel = 2
load = {{ kind = "fixed", seconds = 7.0 }}
{}[workload.questions.aggregator]
model = "deepseek-r1-distill-qwen-7b"
output_tokens = {{ mean = 15.0, sigma = 0.6, max = 200 }}
{}"#,
        gpqa(
            "release = \"after_experts\"\ngate = { kind = \"threshold\", tau = 1.0 }\n",
            short,
            short
        ),
        offline_on_two_workers("round_robin")
    )
}

/// `calls` offline calls of `model` with fixed `prompt` and `output` lengths on one resident
/// H100 replica: what a session of those calls generates once its model is loaded.
pub fn resident(model: &str, calls: u32, prompt: u32, output: u32) -> String {
    format!(
        "[model]\nname = \"{model}\"\n[replica]\ngpu = \"H100-SXM\"\n[workload]\n\
         n_requests = {calls}\nprompt_tokens = {{ kind = \"fixed\", value = {prompt} }}\n\
         output_tokens = {{ kind = \"fixed\", value = {output} }}\n[arrival]\n\
         pattern = \"offline\"\n"
    )
}
