//! The paper families' scenarios re-expressed in the serving family make the same decisions
//! where the mechanisms coincide (issue 19: the serving family is their superset, not a fork).
//! (ExpertWeave's equivalence test went with the expertweave family, issue 28: its files are
//! the serving family's now.)
//!
//! MOSAIC: one session, one agent model generating its prompts on its replica (docs/serving.md's
//! table), checked by hand on the serving family alone (`a_mosaic_session_is_scheduled_decode_first`;
//! the comparison with the mosaic family's own session went with that family, issue 28).

use expertsim_serving::load_cache::LoadCache;
use expertsim_serving::policies::Policies;
use expertsim_serving::serving::{StepCost, StepTime, StepWork};
use expertsim_serving::serving_family::ServingConfig;
use expertsim_serving::time::SimDuration;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use strategies::Registry;

/// One priced step: sequences, prefill, decode and context tokens, tokens per adapter, and the
/// price.
type Step = (u64, u64, u64, u64, Vec<(u32, u64)>, SimDuration);

/// Prices through `inner` and notes every step.
struct Noting<'a> {
    inner: Box<dyn StepCost + 'a>,
    steps: Rc<RefCell<Vec<Step>>>,
}

impl StepCost for Noting<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let time = self.inner.price(work);
        self.steps.borrow_mut().push((
            work.requests,
            work.prefill_tokens,
            work.decode_tokens,
            work.context_tokens,
            work.adapters
                .iter()
                .map(|a| (a.adapter, a.tokens))
                .collect(),
            time.duration,
        ));
        time
    }
}

/// A MOSAIC session (one model generating its prompts on its replica, docs/serving.md's table)
/// as the serving family schedules it, checked by hand: 400 prompts on a quarter of an A100's
/// memory, whose KV cache is what that quarter leaves beside the weights (90-100 % of it in
/// whole blocks); decode-first (`sarathi`, a chunk past any prompt, as MOSAIC's sessions run)
/// mixes the running sequences' decodes with newly admitted prompts in one step and preempts
/// under the tight cache; vLLM 0.7.1's V0 default (`vllm`, prefill-first) never mixes them.
#[test]
fn a_mosaic_session_is_scheduled_decode_first() {
    let prompts: Vec<(u32, u32)> = (0..400u32)
        .map(|i| (100 + (i * 37) % 300, 200 + (i * 101) % 1000))
        .collect();
    let trace = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mosaic_session_prompts.csv");
    let mut rows = String::from("arrived_at,num_prefill_tokens,num_decode_tokens\n");
    for (prompt, output) in &prompts {
        rows += &format!("0.0,{prompt},{output}\n");
    }
    std::fs::write(&trace, rows).unwrap();
    let run_kind = |scheduler: &str| {
        let text = format!(
            r#"
[model]
name = "llama-3.1-8b-instruct"
[replica]
gpu = "A100-80GB"
gpu_memory_utilization = 0.25
max_num_seqs = 256
block_size = 16
watermark = 0.01
scheduler = {scheduler}
[workload]
n_requests = 400
prompt_tokens = {{ kind = "trace" }}
output_tokens = {{ kind = "trace" }}
[arrival]
pattern = "trace"
trace = {{ path = "{}", time_scale = 1.0 }}
"#,
            trace.display()
        );
        let s = toml::from_str::<ServingConfig>(&text)
            .unwrap()
            .validate(Path::new("."), &mut LoadCache::default())
            .unwrap();
        let deployment =
            expertsim_serving::serving_family::deployment::Deployment::new(&s, None).unwrap();
        let shape =
            expertsim_serving::cost::shape::DenseModelShape::preset("llama-3.1-8b-instruct")
                .unwrap();
        let room = 0.25 * 80e9 - shape.weight_bytes();
        let by_hand = room / shape.kv_bytes_per_token();
        let tokens = deployment.kv_tokens as f64;
        assert!(
            (0.9 * by_hand..=by_hand).contains(&tokens),
            "{tokens} KV tokens, {by_hand} by hand"
        );
        assert_eq!(deployment.kv_blocks, deployment.kv_tokens / 16);
        let steps = Rc::new(RefCell::new(Vec::new()));
        let noted = Rc::clone(&steps);
        let mut queue = Registry.queue_policy(&s.queue);
        let mut router = Registry.router(&s.router);
        let mut mapper = Registry.expert_mapper(&s.expert_mapping);
        let out = expertsim_serving::serving_family::serve(
            &s,
            1,
            &mut *queue,
            &mut *router,
            &mut *mapper,
            &mut [],
            None,
            &mut expertsim_serving::records::DiscardRecords,
            None,
            Some(expertsim_serving::serving_family::StepCosts::Wrapped(
                Box::new(move |_, own| {
                    Box::new(Noting {
                        inner: Box::new(own),
                        steps: Rc::clone(&noted),
                    })
                }),
            )),
        )
        .unwrap();
        assert_eq!(out.scalar("completed"), Some(400.0), "{scheduler}");
        let steps = steps.borrow().clone();
        (steps, out.scalar("preemptions").unwrap())
    };
    let mixed = |steps: &[Step]| {
        steps
            .iter()
            .filter(|(_, prefill, decode, ..)| *prefill > 0 && *decode > 0)
            .count()
    };
    let (decode_first, preempted) = run_kind(r#"{ kind = "sarathi", chunk_size = 1_000_000_000 }"#);
    assert!(preempted > 0.0, "the cache is tight enough to preempt");
    assert!(
        mixed(&decode_first) > 0,
        "decode-first mixes decodes and prompts"
    );
    // Every prompt token is prefilled at least once (more when a preempted one is recomputed).
    let prefilled: u64 = decode_first.iter().map(|s| s.1).sum();
    let prompt_tokens: u64 = prompts.iter().map(|p| u64::from(p.0)).sum();
    assert!(prefilled >= prompt_tokens, "{prefilled} < {prompt_tokens}");
    let (prefill_first, _) =
        run_kind(r#"{ kind = "vllm", max_num_batched_tokens = 1_000_000_000 }"#);
    assert_eq!(mixed(&prefill_first), 0, "prefill-first never mixes");
    assert_ne!(prefill_first, decode_first);
}
