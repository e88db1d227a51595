// parse_run_settings: every field holds its key's value (verl's fallbacks for unset keys applied),
// the verlpp.* path choices map onto the options the layers take, and a value that cannot be
// used is an Error naming the key and the value, before any work; a section only one role reads
// is read only when that role runs.
#include <verlpp/config/run_settings.hpp>
#include <verlpp/core/error.hpp>

// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp::config;
using namespace verlpp::reward;
using Catch::Contains;

namespace {

Config small(const std::vector<std::string>& more = {}) {
  Config c = Config::defaults();
  c.apply_overrides({"data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=2",
                     "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.tensor_model_parallel_size=1"});
  c.apply_overrides(more);
  c.resolve();
  return c;
}

std::string error_of(const Config& c, int world = 1) {
  try {
    parse_run_settings(c, world);
  } catch (const verlpp::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("run settings: fields hold their keys' values", "[config][settings]") {
  const RunSettings s = parse_run_settings(
      small({"data.train_files=[\"a.jsonl\",\"b.jsonl\"]", "data.val_files=v.jsonl",
             "actor_rollout_ref.actor.optim.betas=[0.8,0.95]", "actor_rollout_ref.actor.optim.min_lr_ratio=0.25",
             "actor_rollout_ref.rollout.dtype=float32", "trainer.seed=7", "trainer.total_training_steps=12",
             "trainer.resume_from_path=/r"}));
  CHECK(s.data.train_files == std::vector<std::string>{"a.jsonl", "b.jsonl"});
  CHECK(s.data.val_files == std::vector<std::string>{"v.jsonl"});
  CHECK(s.data.train_batch_size == 8);
  CHECK_FALSE(s.data.val_batch_size);
  CHECK_FALSE(s.data.tokenizer);
  CHECK(s.actor.ppo_mini_batch_size == 4);
  CHECK(s.actor.ppo_micro_batch_size_per_gpu == 2);
  CHECK(s.actor.optim.beta1 == 0.8);
  CHECK(s.actor.optim.beta2 == 0.95);
  CHECK(s.actor.optim.min_lr_ratio == 0.25);
  CHECK(s.actor.optim.lr == 1e-6);
  CHECK(s.actor.optim.grad_clip == 1.0);  // actor_rollout_ref.actor.grad_clip
  CHECK_FALSE(s.actor.precision.param_dtype);
  CHECK(s.actor.precision.resolve(/*on_cpu=*/true) == at::kFloat);
  CHECK(s.actor.precision.resolve(/*on_cpu=*/false) == at::kBFloat16);
  CHECK(s.rollout.n == 2);
  CHECK(s.rollout.dtype == at::kFloat);
  CHECK(s.rollout.log_prob_micro_batch_size_per_gpu == 8);  // null: 8
  CHECK(s.algorithm.adv_estimator == "grpo");
  CHECK(s.trainer.seed == 7);
  CHECK(s.trainer.total_training_steps == 12);
  CHECK(s.trainer.resume_from_path == "/r");
  CHECK(s.trainer.device == "auto");
  CHECK_FALSE(s.critic.enable);
  CHECK_FALSE(s.sft.enable);
  CHECK_FALSE(s.custom_reward.path);
  // rollout.val_kwargs: verl's defaults (one greedy response), then every key taken.
  CHECK(s.rollout.val_kwargs.n == 1);
  CHECK_FALSE(s.rollout.val_kwargs.do_sample);
  CHECK(s.rollout.val_kwargs.temperature == 0.0);
  const RunSettings v = parse_run_settings(
      small({"actor_rollout_ref.rollout.val_kwargs.n=4", "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
             "actor_rollout_ref.rollout.val_kwargs.temperature=0.6", "actor_rollout_ref.rollout.val_kwargs.top_k=20",
             "actor_rollout_ref.rollout.val_kwargs.top_p=0.9"}));
  CHECK(v.rollout.val_kwargs.n == 4);
  CHECK(v.rollout.val_kwargs.do_sample);
  CHECK(v.rollout.val_kwargs.temperature == 0.6);
  CHECK(v.rollout.val_kwargs.top_k == 20);
  CHECK(v.rollout.val_kwargs.top_p == 0.9);
  CHECK(v.rollout.temperature == 1.0);  // the training rollout keeps its own
}

TEST_CASE("run settings: verl's fallbacks for unset keys", "[config][settings]") {
  const RunSettings s = parse_run_settings(
      small({"actor_rollout_ref.actor.clip_ratio_low=0.15", "actor_rollout_ref.actor.clip_ratio_high=0.28",
             "actor_rollout_ref.actor.optim.min_lr_ratio=null", "trainer.max_actor_ckpt_to_keep=null"}));
  CHECK(s.actor.clip_ratio_low == 0.15);
  CHECK(s.actor.clip_ratio_high == 0.28);
  CHECK(s.actor.optim.min_lr_ratio == 0.0);
  CHECK(s.trainer.max_actor_ckpt_to_keep == 0);
  // ${...} references are resolved before the read: the critic's mini-batch follows the actor's.
  const RunSettings ppo =
      parse_run_settings(small({"algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=2"}));
  CHECK(ppo.critic.ppo_mini_batch_size == 4);
  CHECK(ppo.critic.ppo_micro_batch_size_per_gpu == 2);
  CHECK(ppo.critic.optim.lr == 1e-5);
}

TEST_CASE("run settings: verlpp.* chooses the compute paths", "[config][settings]") {
  using verlpp::model::TrainingProjections;
  const RunSettings d = parse_run_settings(small());
  CHECK(d.paths.forward.training_projections == TrainingProjections::kAuto);
  CHECK(d.paths.forward.attention.sdpa_gqa);
  CHECK(d.paths.device_graphs);
  CHECK(d.paths.decode_overlap);
  const RunSettings off =
      parse_run_settings(small({"verlpp.model.fused_training_projections=false", "verlpp.model.sdpa_gqa=false",
                                "verlpp.rollout.device_graphs=false", "verlpp.rollout.decode_overlap=false"}));
  CHECK(off.paths.forward.training_projections == TrainingProjections::kSplit);
  CHECK_FALSE(off.paths.forward.attention.sdpa_gqa);
  CHECK_FALSE(off.paths.device_graphs);
  CHECK_FALSE(off.paths.decode_overlap);
  CHECK(
      parse_run_settings(small({"verlpp.model.fused_training_projections=true"})).paths.forward.training_projections ==
      TrainingProjections::kFused);
  CHECK_THAT(error_of(small({"verlpp.model.fused_training_projections=yes"})),
             Contains("verlpp.model.fused_training_projections: \"yes\" is not true, false or null"));
  CHECK_THROWS_WITH(small({"verlpp.rollout.device_graphs=1"}),
                    Contains("'verlpp.rollout.device_graphs' must be a boolean"));
}

TEST_CASE("run settings: unusable values are refused naming the key and the value", "[config][settings]") {
  // Config::validate's checks run first, all problems at once.
  CHECK_THAT(error_of(small({"algorithm.adv_estimator=nope"})),
             Contains("algorithm.adv_estimator = 'nope' is not one of"));
  CHECK_THAT(error_of(small(), 3), Contains("not divisible by the 3 rank(s)"));
  CHECK_THAT(error_of(small({"actor_rollout_ref.actor.optim.betas=[0.9]"})),
             Contains("actor_rollout_ref.actor.optim.betas: needs two values, got 1"));
  CHECK_THAT(
      error_of(small({"actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=bf16"})),
      Contains("actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype: 'bf16': verlpp keeps gradients"));
  CHECK_THAT(error_of(small({"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=int4"})),
             Contains("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype: ") && Contains("'int4'"));
  CHECK_THAT(error_of(small({"actor_rollout_ref.actor.entropy_coeff=null"})),
             Contains("actor_rollout_ref.actor.entropy_coeff: null is not a number"));
  CHECK_THAT(error_of(small({"data.train_files=[1]"})),
             Contains("data.train_files: every entry must be a file path, got 1"));
  const std::string val =
      error_of(small({"actor_rollout_ref.rollout.val_kwargs.n=0", "actor_rollout_ref.rollout.val_kwargs.temperature=-1",
                      "actor_rollout_ref.rollout.val_kwargs.top_p=0", "actor_rollout_ref.rollout.val_kwargs.top_k=0"}));
  CHECK_THAT(val, Contains("actor_rollout_ref.rollout.val_kwargs.n = 0 must be >= 1"));
  CHECK_THAT(val, Contains("actor_rollout_ref.rollout.val_kwargs.temperature = -1 must be >= 0"));
  CHECK_THAT(val, Contains("actor_rollout_ref.rollout.val_kwargs.top_p = 0 must be in (0, 1]"));
  CHECK_THAT(val, Contains("actor_rollout_ref.rollout.val_kwargs.top_k = 0 must be -1 (off) or >= 1"));
}

TEST_CASE("run settings: a role's section is read only when the role runs", "[config][settings]") {
  // Without a critic (grpo) or an SFT warm start, their sections are not read.
  CHECK(error_of(small({"critic.cliprange_value=null", "sft.optim.min_lr_ratio=null"})).empty());
  CHECK_THAT(error_of(small({"algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=2",
                             "critic.cliprange_value=null"})),
             Contains("critic.cliprange_value: null is not a number"));
  CHECK_THAT(error_of(small({"sft.enable=true", "sft.train_files=s.jsonl", "sft.batch_size=8",
                             "sft.micro_batch_size_per_gpu=8", "sft.optim.min_lr_ratio=null"})),
             Contains("sft.optim.min_lr_ratio: null is not a number"));
  const RunSettings sft = parse_run_settings(
      small({"sft.enable=true", "sft.train_files=s.jsonl", "sft.batch_size=8", "sft.micro_batch_size_per_gpu=8"}));
  CHECK(sft.sft.train_files == std::vector<std::string>{"s.jsonl"});
  CHECK(sft.sft.optim.lr == 1e-4);
  CHECK(sft.sft.optim.grad_clip == 1.0);
  CHECK(sft.sft.optim.min_lr_ratio == 0.1);
}

TEST_CASE("run settings: verl's renamed keys and their deprecated aliases", "[config][settings]") {
  // The schedule is lr_scheduler_type; verl's deprecated warmup_style, when set, wins.
  CHECK(parse_run_settings(small({}), 1).actor.optim.lr_scheduler_type == "constant");
  CHECK(parse_run_settings(small({"actor_rollout_ref.actor.optim.lr_scheduler_type=cosine"}), 1)
            .actor.optim.lr_scheduler_type == "cosine");
  CHECK(parse_run_settings(small({"actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
                                  "actor_rollout_ref.actor.optim.warmup_style=constant"}),
                           1)
            .actor.optim.lr_scheduler_type == "constant");
  CHECK_THAT(error_of(small({"actor_rollout_ref.actor.optim.warmup_style=linear"})),
             Contains("actor_rollout_ref.actor.optim.warmup_style = 'linear' is not one of: constant, cosine"));
  // data.seed: verl's default is null; verlpp takes 1 so runs repeat.
  CHECK(parse_run_settings(small({}), 1).data.seed == 1);
  CHECK(parse_run_settings(small({"data.seed=9"}), 1).data.seed == 9);
  // The tokenizer: data.tokenizer, else the model's tokenizer_path, else (unset) the model folder.
  CHECK(parse_run_settings(small({"actor_rollout_ref.model.tokenizer_path=/tok"}), 1).data.tokenizer == "/tok");
  CHECK(parse_run_settings(small({"actor_rollout_ref.model.tokenizer_path=/tok", "data.tokenizer=/data_tok"}), 1)
            .data.tokenizer == "/data_tok");
}
