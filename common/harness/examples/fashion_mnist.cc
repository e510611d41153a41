// det-fashion-mnist: the example worker. Trains a multi-layer perceptron on Fashion-MNIST
// (Debian's dataset-fashion-mnist package) for the number of batches the searcher asks for,
// reporting training loss every scheduling unit and validation loss and accuracy on the
// 10,000 test images every min_validation_period and at the end.
//
// Hyperparameters: global_batch_size (64), learning_rate (0.05, falling linearly to 0 over
// the run), momentum (0.9), hidden_size (128). config.data.dir: the IDX files' directory.
#include <iostream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock/clock.h"
#include "common/data/idx.h"
#include "common/data/sampler.h"
#include "common/harness/context.h"
#include "common/harness/reporter_client.h"
#include "common/nn/mlp.h"
#include "common/status/status_macros.h"

namespace det {
namespace {

absl::Status Train(Clock& clock) {
  ASSIGN_OR_RETURN(harness::TrialContext ctx,
                   harness::ContextFromEnvironment(harness::ProcessEnvironment()));
  if (ctx.world_size != 1) {
    return absl::UnimplementedError(absl::StrCat(
        "det-fashion-mnist trains on one slot; this trial has ", ctx.world_size,
        " (set resources.slots_per_trial: 1)"));
  }
  ASSIGN_OR_RETURN(int64_t global_batch, ctx.HparamInt("global_batch_size", 64));
  ASSIGN_OR_RETURN(double lr0, ctx.HparamDouble("learning_rate", 0.05));
  ASSIGN_OR_RETURN(double momentum, ctx.HparamDouble("momentum", 0.9));
  ASSIGN_OR_RETURN(int64_t hidden, ctx.HparamInt("hidden_size", 128));
  if (global_batch <= 0) return absl::InvalidArgumentError("hyperparameters.global_batch_size: must be > 0");
  std::string dir = ctx.DataString("dir", "/usr/share/datasets/fashion-mnist");

  ASSIGN_OR_RETURN(data::Dataset train, data::LoadIdxDataset(dir + "/train-images-idx3-ubyte.gz",
                                                             dir + "/train-labels-idx1-ubyte.gz"));
  ASSIGN_OR_RETURN(data::Dataset test, data::LoadIdxDataset(dir + "/t10k-images-idx3-ubyte.gz",
                                                            dir + "/t10k-labels-idx1-ubyte.gz"));
  const int64_t batches_per_epoch = train.num_examples / global_batch;
  const int64_t target = ctx.target_batches > 0 ? ctx.target_batches : batches_per_epoch;
  const int64_t unit = std::max<int64_t>(1, ctx.scheduling_unit);
  const int64_t validate_every = ctx.validation_period > 0 ? ctx.validation_period : target;
  std::cout << absl::StrFormat(
                   "trial %d: %d training and %d test images; %d batches of %d (%.2f epochs), "
                   "hidden %d, lr %.3g, seed %u",
                   ctx.trial_id, train.num_examples, test.num_examples, target, global_batch,
                   static_cast<double>(target) / batches_per_epoch, hidden, lr0, ctx.trial_seed)
            << std::endl;

  nn::MlpOptions options;
  options.layer_sizes = {train.rows * train.cols, static_cast<int>(hidden), 10};
  options.momentum = static_cast<float>(momentum);
  ASSIGN_OR_RETURN(nn::Mlp model, nn::Mlp::Create(options, ctx.trial_seed));
  auto reporter = harness::NewGrpcReporter(ctx);

  const int64_t example = train.example_size();
  std::vector<float> x(global_batch * example);
  std::vector<uint8_t> y(global_batch);
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  double loss_sum = 0, load_s = 0, train_s = 0;
  int64_t group_batches = 0;
  absl::Time group_start = clock.Now();
  for (int64_t batch = 0; batch < target; ++batch) {
    absl::Time t0 = clock.Now();
    int64_t epoch = batch / batches_per_epoch;
    if (epoch != order_epoch) {
      order = data::EpochOrder(train.num_examples, ctx.trial_seed, epoch);
      order_epoch = epoch;
    }
    int64_t first = (batch % batches_per_epoch) * global_batch;
    for (int64_t i = 0; i < global_batch; ++i) {
      int64_t idx = order[first + i];
      std::copy_n(&train.images[idx * example], example, &x[i * example]);
      y[i] = train.labels[idx];
    }
    absl::Time t1 = clock.Now();
    loss_sum += model.ForwardBackward(x.data(), y.data(), static_cast<int>(global_batch));
    model.Step(static_cast<float>(lr0 * (1.0 - static_cast<double>(batch) / target)));
    absl::Time t2 = clock.Now();
    load_s += absl::ToDoubleSeconds(t1 - t0);
    train_s += absl::ToDoubleSeconds(t2 - t1);
    ++group_batches;

    int64_t done = batch + 1;
    if (done % unit == 0 || done == target) {
      double loss = loss_sum / group_batches;
      double rate = group_batches / std::max(1e-9, absl::ToDoubleSeconds(clock.Now() - group_start));
      RETURN_IF_ERROR(reporter->ReportMetrics("training", done, {{"loss", loss}}));
      RETURN_IF_ERROR(reporter->ReportMetrics(
          "timings", done,
          {{"dataloader_next_s", load_s / group_batches}, {"train_batch_s", train_s / group_batches}}));
      std::cout << absl::StrFormat("batch %d/%d  loss %.4f  (%.0f batches/s)", done, target, loss, rate)
                << std::endl;
      loss_sum = load_s = train_s = 0;
      group_batches = 0;
      group_start = clock.Now();
    }
    if (done % validate_every == 0 || done == target) {
      nn::Evaluation eval = model.Evaluate(test.images.data(), test.labels.data(), test.num_examples);
      RETURN_IF_ERROR(reporter->ReportMetrics(
          "validation", done, {{"validation_loss", eval.loss}, {"accuracy", eval.accuracy}}));
      std::cout << absl::StrFormat("validation at batch %d: loss %.4f  accuracy %.4f", done,
                                   eval.loss, eval.accuracy)
                << std::endl;
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace det

int main() {
  det::RealClock clock;
  absl::Status st = det::Train(clock);
  if (!st.ok()) {
    std::cerr << "det-fashion-mnist: " << st.message() << std::endl;
    return 1;
  }
  return 0;
}
