// The learning-rate schedule: its values at known steps against hand-computed ones, and its spec keys.
#include <gtest/gtest.h>

#include "engine/error.h"
#include "models/lr_schedule.h"
#include "models/spec.h"
#include "training_util.h"

namespace te {
namespace {

OptimizerSpec schedule_of(LrScheduleType type, int64_t warmup, int64_t decay, double min_lr) {
  OptimizerSpec o;
  o.lr = 1.0;
  o.schedule = {type, warmup, decay, min_lr};
  return o;
}

// lr 1, warm-up W = 4, cosine over D = 10 steps to 0.1: lr(s) = s/4 for s ≤ 4, then 0.1 + 0.45·(1 + cos(π(s − 4)/10)).
TEST(LrSchedule, CosineValuesAtKnownSteps) {
  const OptimizerSpec o = schedule_of(LrScheduleType::cosine, 4, 10, 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 100, 1), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(o, 100, 2), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 100, 4), 1.0);                    // the peak
  EXPECT_NEAR(learning_rate(o, 100, 6), 0.9140576474687263, 1e-15);   // cos(0.2π) = 0.8090169943749475
  EXPECT_DOUBLE_EQ(learning_rate(o, 100, 9), 0.55);                   // half-way: the mid-point
  EXPECT_NEAR(learning_rate(o, 100, 11), 0.2854966364683872, 1e-15);  // cos(0.7π) = −0.587785252292473
  EXPECT_NEAR(learning_rate(o, 100, 14), 0.1, 1e-15);                 // the end of the decay
  EXPECT_DOUBLE_EQ(learning_rate(o, 100, 50), 0.1);                   // after it: the floor
}

TEST(LrSchedule, DecayRunsToRunStepsWhenDecayStepsIsZero) {
  const OptimizerSpec o = schedule_of(LrScheduleType::cosine, 4, 0, 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 24, 14), 0.55);  // D = 24 − 4 = 20: step 14 is half-way
  EXPECT_NEAR(learning_rate(o, 24, 24), 0.1, 1e-15);
  const OptimizerSpec no_warmup = schedule_of(LrScheduleType::cosine, 0, 0, 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(no_warmup, 10, 5), 0.5);  // lr·½(1 + cos(π/2))
}

TEST(LrSchedule, ConstantWithAndWithoutWarmup) {
  OptimizerSpec o = schedule_of(LrScheduleType::constant, 0, 0, 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 10), 1.0);
  o.schedule.warmup_steps = 2;
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 1), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 2), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 7), 1.0);
}

TEST(LrSchedule, SpecKeysAndTheirErrors) {
  const std::string base = training_test::spec_yaml("none", 1, "adamw");
  ModelSpec s = parse_spec(base, "t.yaml");
  EXPECT_EQ(s.run.optimizer.schedule.type, LrScheduleType::cosine);
  EXPECT_EQ(s.run.optimizer.schedule.warmup_steps, 2);
  EXPECT_EQ(s.run.optimizer.schedule.decay_steps, 4);
  EXPECT_DOUBLE_EQ(s.run.optimizer.schedule.min_lr, 1e-4);
  auto fails = [&](const std::vector<std::string>& sets, const std::string& field) {
    try {
      parse_spec(base, "t.yaml", sets);
      ADD_FAILURE() << "accepted " << sets[0];
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  fails({"run.optimizer.schedule.min_lr=0.5"}, "run.optimizer.schedule.min_lr");
  fails({"run.optimizer.schedule.type=constant"}, "run.optimizer.schedule.decay_steps");
  fails({"run.optimizer.schedule.type=linear"}, "run.optimizer.schedule.type");
  fails({"run.optimizer.schedule.kind=cosine"}, "run.optimizer.schedule");
  fails({"run.optimizer.schedule.warmup_steps=-1"}, "run.optimizer.schedule.warmup_steps");
  fails({"run.eval_every=5"}, "run.eval_data");
  fails({"run.checkpoint_every=-1"}, "run.checkpoint_every");
  fails({"run.data=[]"}, "run.data");
  ModelSpec d = parse_spec(base, "/some/dir/t.yaml", {"run.shuffle=false"});
  EXPECT_FALSE(d.run.shuffle);
  ModelSpec e = parse_spec(base +
                               "  data: [shards, /abs/x.safetensors]\n  eval_data: ev.safetensors\n"
                               "  eval_every: 3\n  checkpoint_every: 2\n",
                           "/some/dir/t.yaml");
  EXPECT_EQ(e.run.data_paths, (std::vector<std::string>{"/some/dir/shards", "/abs/x.safetensors"}));
  EXPECT_EQ(e.run.eval_data_paths, std::vector<std::string>{"/some/dir/ev.safetensors"});
  EXPECT_EQ(e.run.eval_every, 3);
  EXPECT_EQ(e.run.checkpoint_every, 2);
}

}  // namespace
}  // namespace te
