//! The paper families' scenarios re-expressed in the serving family make the same decisions
//! where the mechanisms coincide (issue 19: the serving family is their superset, not a fork).
//! (ExpertWeave's equivalence test went with the expertweave family, issue 28: its files are
//! the serving family's now.)
//!
//! MOSAIC: what coincides is one session, one agent model generating its prompts on its replica
//! (`mosaic::server::run_session`, docs/serving.md's table); see
//! `a_mosaic_session_is_scheduled_alike` for what differs.

use sim::load_cache::LoadCache;
use sim::policies::Policies;
use sim::serving::{StepCost, StepTime, StepWork};
use sim::serving_family::ServingConfig;
use sim::time::SimDuration;
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

#[test]
fn a_mosaic_session_is_scheduled_alike() {
    use sim::cost::gpu::{GpuSpec, LinkSpec};
    use sim::cost::shape::DenseModelShape;
    use sim::mosaic::session::{GenerationRequest, ModelServing, ServingParams};
    use sim::mosaic::{ModelStepCost, SessionPricing};

    // A quarter of the A100's memory: 20 GB less 16.06 GB of weights leaves about 30,000 KV
    // tokens, so the 400 prompts queue and running sequences get preempted.
    let params = ServingParams {
        gpu: GpuSpec::by_name("A100-80GB").unwrap(),
        step_overhead_s: 0.004,
        gpu_memory_utilization: 0.25,
        max_num_seqs: 256,
        block_size: 16,
        watermark: 0.01,
        interconnect: LinkSpec::NVLINK4,
    };
    let shape = DenseModelShape::preset("llama-3.1-8b-instruct").unwrap();
    let serving = ModelServing::new(&shape, &params, 1, None).unwrap();
    let prompts: Vec<GenerationRequest> = (0..400u32)
        .map(|i| GenerationRequest {
            prompt_tokens: 100 + (i * 37) % 300,
            output_tokens: 200 + (i * 101) % 1000,
        })
        .collect();

    // MOSAIC: one session of the model, its steps noted.
    struct Pricing<'a> {
        serving: &'a ModelServing,
        steps: Rc<RefCell<Vec<Step>>>,
    }
    impl<'a> SessionPricing<'a> for Pricing<'a> {
        fn load(&mut self, _unit: usize, _model: usize) -> SimDuration {
            SimDuration(0)
        }
        fn steps(&mut self, _unit: usize, _model: usize) -> Box<dyn StepCost + 'a> {
            Box::new(Noting {
                inner: Box::new(ModelStepCost::of(self.serving)),
                steps: Rc::clone(&self.steps),
            })
        }
    }
    let mosaic_steps = Rc::new(RefCell::new(Vec::new()));
    let mut pricing = Pricing {
        serving: &serving,
        steps: Rc::clone(&mosaic_steps),
    };
    let fcfs = sim::serving::QueuePolicyConfig::Fcfs;
    let session = sim::mosaic::server::run_session(
        0,
        &serving,
        &prompts,
        &mut pricing,
        &mut *Registry.queue_policy(&fcfs),
    );
    assert!(
        session.preemptions > 0,
        "the cache is tight enough to preempt"
    );

    // The serving family: the same prompts as a trace arriving at once.
    let trace = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mosaic_session_prompts.csv");
    let mut rows = String::from("arrived_at,num_prefill_tokens,num_decode_tokens\n");
    for p in &prompts {
        rows += &format!("0.0,{},{}\n", p.prompt_tokens, p.output_tokens);
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
        let deployment = sim::serving_family::deployment::Deployment::new(&s, None).unwrap();
        assert_eq!(deployment.kv_blocks, serving.kv_blocks(), "{scheduler}");
        assert_eq!(
            deployment.kv_tokens, serving.dense.kv_capacity_tokens,
            "{scheduler}"
        );
        let steps = Rc::new(RefCell::new(Vec::new()));
        let costs: Vec<Box<dyn StepCost + '_>> = vec![Box::new(Noting {
            inner: Box::new(ModelStepCost::of(&serving)),
            steps: Rc::clone(&steps),
        })];
        let mut queue = Registry.queue_policy(&s.queue);
        let mut router = Registry.router(&s.router);
        let mut mapper = Registry.expert_mapper(&s.expert_mapping);
        let out = sim::serving_family::serve(
            &s,
            1,
            &mut *queue,
            &mut *router,
            &mut *mapper,
            &mut [],
            None,
            &mut sim::records::DiscardRecords,
            None,
            Some(sim::serving_family::StepCosts::Given(costs)),
        )
        .unwrap();
        assert_eq!(out.scalar("completed"), Some(400.0), "{scheduler}");
        let steps = steps.borrow().clone();
        (steps, out.scalar("preemptions").unwrap())
    };
    let (decode_first, preempted) = run_kind(r#"{ kind = "sarathi", chunk_size = 1_000_000_000 }"#);
    let mosaic_steps = mosaic_steps.borrow();
    assert_eq!(mosaic_steps.len() as u64, session.steps);
    assert_eq!(decode_first.len(), mosaic_steps.len());
    for (i, (a, b)) in mosaic_steps.iter().zip(&decode_first).enumerate() {
        assert_eq!(a, b, "step {i}");
    }
    assert_eq!(preempted, session.preemptions as f64);
    // vLLM 0.7.1's V0 default scheduler (prefill-first) schedules otherwise.
    let (prefill_first, _) =
        run_kind(r#"{ kind = "vllm", max_num_batched_tokens = 1_000_000_000 }"#);
    assert_ne!(prefill_first, *mosaic_steps);
}
