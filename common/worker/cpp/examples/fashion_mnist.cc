// det-fashion-mnist: the example worker. Trains a multi-layer perceptron on Fashion-MNIST
// (Debian's dataset-fashion-mnist package) for the number of batches the searcher asks for,
// data-parallel over every rank of the trial, reporting training loss and timings every
// scheduling unit, validation loss and accuracy on the 10,000 test images every
// min_validation_period and at the end, and checkpoints to checkpoint_storage; a restarted
// trial resumes from the trial spec's latest_checkpoint. The loop's platform part (report,
// validation and checkpoint periods, aggregation boundaries, stopping when the master or a
// signal asks) is harness::TrialController's; this file is the model's part (a
// harness::Trial).
//
// On CPU slots the model runs on the CPU and the gradients are all-reduced with Gloo over
// TCP; on CUDA slots (DET_SLOT_TYPE=cuda, one GPU per rank) it runs on the GPU with cuBLAS
// (nn::CudaModel) and everything is all-reduced with NCCL, the host-side values (metrics,
// checksums, stop requests) through a host-staged view of the same communicator.
//
// Each global batch is the next window of effective_global_batch_size positions of the
// epoch's elastic sample order (data::ElasticLoader: a pure function of the trial seed,
// the epoch, num_canonical_nodes and the data set, never of the rank count); rank r trains
// on its per-slot slice of the window, and the gradients are averaged over the ranks, so
// 1 rank and N ranks with the same global batch make the same steps up to the order of
// floating-point sums. With reproducibility.deterministic: true they make bitwise the
// same steps: each global batch is trained as fixed micro-batches of micro_batch_size
// (hyperparameter, default 1) samples whatever the rank count, each micro-batch's
// gradient and loss are converted to int64 fixed point (kFixedScale) and summed exactly
// (docs/determinism.md). The loader's state is in every checkpoint; a resumed run
// continues at the exact next sample. Training metrics include diag/sample_checksum (an
// order-independent checksum of the sample ids trained); the last validation includes
// diag/params_hash_hi and _lo (FNV-1a of the final parameters' bytes), also printed.
//
// Hyperparameters: global_batch_size (64), learning_rate (0.05, falling linearly to 0 over
// the run), momentum (0.9), hidden_size (128), lr_warmup_epochs (0 = off: with N slots
// the rate rises linearly from learning_rate to N x learning_rate over that many epochs,
// for weak scaling, where the global batch grows with the slots), input_noise (0: per-sample
// uniform noise of that amplitude added to the pixels, keyed by the sample's position in
// the epoch), micro_batch_size (1, deterministic mode). config.data.dir: the IDX files'
// directory; config.data.num_canonical_nodes: the sample order's canonical partitions
// (default: the first run's node count; later runs keep the checkpoint's).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock/clock.h"
#include "common/worker/cpp/collective/host_staged_collective.h"
#include "common/worker/cpp/data/elastic_sampler.h"
#include "common/worker/cpp/data/idx.h"
#include "common/worker/cpp/harness/checkpoint.h"
#include "common/worker/cpp/harness/context.h"
#include "common/worker/cpp/harness/cuda_gradient_math.h"
#include "common/worker/cpp/harness/distributed.h"
#include "common/worker/cpp/harness/gradient_reducer.h"
#include "common/worker/cpp/harness/rendezvous_client.h"
#include "common/worker/cpp/harness/timings.h"
#include "common/worker/cpp/harness/trial_controller.h"
#include "common/worker/cpp/nn/cuda_mlp.h"
#include "common/worker/cpp/nn/mlp.h"
#include "common/worker/cpp/nn/model.h"
#include "common/status/status_macros.h"

namespace det {
namespace {

// Fixed-point scale of deterministic mode: 2^32 (resolution 2.3e-10). ToFixed clamps each
// micro-batch value to +-9e15 fixed units, so 1,024 micro-batches cannot overflow int64.
constexpr double kFixedScale = 4294967296.0;

int64_t ToFixed(double v) {
  double q = std::nearbyint(v * kFixedScale);
  // Clamp far beyond any sane gradient, so that overflow cannot wrap around.
  constexpr double kMax = 9.0e15;
  return static_cast<int64_t>(std::max(-kMax, std::min(kMax, q)));
}

uint64_t Fnv1a(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

absl::Status Annotate(const absl::Status& st, const std::string& what) {
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
}

class Trainer : public harness::Trial {
 public:
  // Constructs the controller first: its stop handler covers the set-up.
  Trainer(harness::TrialContext ctx, Clock& clock)
      : ctx_(std::move(ctx)), clock_(clock), controller_(ctx_, clock_), timings_(controller_.timings()) {}

  absl::Status Run();

  absl::Status TrainBatch(int64_t batch) override;
  absl::StatusOr<harness::TrainingMetrics> TakeTrainingMetrics() override;
  absl::StatusOr<std::map<std::string, double>> Validate(int64_t done) override;
  absl::StatusOr<std::map<std::string, std::string>> Save(harness::TrainingState& state) override;

 private:
  absl::Status Setup();
  // Restores `host` and the loader from the checkpoint the controller read.
  absl::Status Restore(const harness::TrialController::Restored& checkpoint, nn::Mlp& host);
  // The model on this rank's device, and the collectives for it.
  absl::Status Connect(const nn::Mlp& host);
  double LearningRate(int64_t batch) const;
  // Deterministic mode's forward/backward and exact all-reduce; returns the global loss.
  absl::StatusOr<float> DeterministicStep(int64_t batch, int64_t checksum);

  harness::TrialContext ctx_;
  Clock& clock_;
  harness::TrialController controller_;
  harness::Timings& timings_;
  std::unique_ptr<collective::Rendezvous> rendezvous_;
  // The collective on the model's memory (gradients, parameters), and one on host memory
  // for everything else: the same object on CPUs, a host-staged view of it on GPUs.
  std::unique_ptr<collective::Collective> collective_;
  std::unique_ptr<collective::Collective> staged_;
  collective::Collective* host_collective_ = nullptr;
  std::unique_ptr<harness::CudaGradientMath> cuda_math_;
  std::unique_ptr<harness::GradientReducer> reducer_;
  std::unique_ptr<nn::Model> model_;
  data::Dataset train_, test_;
  // Random generator of this rank (for augmentation, dropout, ...); checkpointed.
  std::mt19937_64 rng_;

  double lr0_ = 0.05, momentum_ = 0.9, warmup_epochs_ = 0;
  int64_t hidden_ = 128, requested_batch_ = 64, per_slot_ = 0, global_batch_ = 0;
  int64_t batches_per_epoch_ = 0, target_ = 0;

  bool deterministic_ = false;
  int64_t micro_ = 1;
  double input_noise_ = 0;
  std::optional<data::ElasticLoader> loader_;
  std::vector<int64_t> fixed_;  // deterministic mode: grads, loss, checksum in fixed point
  std::vector<float> host_grads_;  // deterministic mode on a device: the gradients' host copy
  double checksum_sum_ = 0;
  std::vector<float> x_;
  std::vector<uint8_t> y_;

  double loss_sum_ = 0;
  int64_t group_batches_ = 0;
};

absl::Status Trainer::Setup() {
  ASSIGN_OR_RETURN(requested_batch_, ctx_.HparamInt("global_batch_size", 64));
  ASSIGN_OR_RETURN(lr0_, ctx_.HparamDouble("learning_rate", 0.05));
  ASSIGN_OR_RETURN(momentum_, ctx_.HparamDouble("momentum", 0.9));
  ASSIGN_OR_RETURN(hidden_, ctx_.HparamInt("hidden_size", 128));
  ASSIGN_OR_RETURN(warmup_epochs_, ctx_.HparamDouble("lr_warmup_epochs", 0));
  ASSIGN_OR_RETURN(input_noise_, ctx_.HparamDouble("input_noise", 0));
  ASSIGN_OR_RETURN(micro_, ctx_.HparamInt("micro_batch_size", 1));
  deterministic_ = ctx_.spec.deterministic();
  if (deterministic_) {
    if (requested_batch_ % ctx_.world_size != 0 || micro_ <= 0 || (requested_batch_ / ctx_.world_size) % micro_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reproducibility.deterministic: the ", ctx_.world_size, " slots must divide global_batch_size ",
          requested_batch_, " into per-slot batches that are multiples of micro_batch_size ", micro_));
    }
    if (ctx_.spec.aggregation_frequency() != 1) {
      return absl::InvalidArgumentError("reproducibility.deterministic needs optimizations.aggregation_frequency 1");
    }
  }
  if (requested_batch_ <= 0) return absl::InvalidArgumentError("hyperparameters.global_batch_size: must be > 0");
  per_slot_ = requested_batch_ / ctx_.world_size;
  if (per_slot_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat("hyperparameters.global_batch_size (", requested_batch_,
                                                   ") is smaller than the trial's ", ctx_.world_size, " slots"));
  }
  global_batch_ = per_slot_ * ctx_.world_size;
  rng_.seed(ctx_.spec.trial_seed() * 1000003ULL + static_cast<uint64_t>(ctx_.rank));
  std::cout << absl::StrFormat(
                   "rank %d of %d (local rank %d, pid %d): per-slot batch %d, global batch %d%s",
                   ctx_.rank, ctx_.world_size, ctx_.local_rank, getpid(), per_slot_, global_batch_,
                   global_batch_ == requested_batch_
                       ? ""
                       : absl::StrFormat(" (%d requested; %d records per batch dropped)", requested_batch_,
                                         requested_batch_ - global_batch_))
            << std::endl;

  std::string dir = ctx_.DataString("dir", "/usr/share/datasets/fashion-mnist");
  ASSIGN_OR_RETURN(train_, data::LoadIdxDataset(dir + "/train-images-idx3-ubyte.gz",
                                                dir + "/train-labels-idx1-ubyte.gz"));
  ASSIGN_OR_RETURN(test_, data::LoadIdxDataset(dir + "/t10k-images-idx3-ubyte.gz",
                                               dir + "/t10k-labels-idx1-ubyte.gz"));
  batches_per_epoch_ = train_.num_examples / global_batch_;
  if (batches_per_epoch_ == 0) return absl::InvalidArgumentError("hyperparameters.global_batch_size: larger than the data set");
  controller_.set_default_target(batches_per_epoch_);
  controller_.set_global_batch_size(global_batch_);
  target_ = controller_.target();

  nn::MlpOptions options;
  options.layer_sizes = {train_.rows * train_.cols, static_cast<int>(hidden_), 10};
  options.momentum = static_cast<float>(momentum_);
  ASSIGN_OR_RETURN(nn::Mlp host, nn::Mlp::Create(options, ctx_.spec.trial_seed()));
  const int64_t canonical = std::max<int64_t>(1, ctx_.DataInt("num_canonical_nodes", ctx_.cross_size));
  loader_.emplace(train_.num_examples, train_.Fingerprint(), ctx_.spec.trial_seed(), canonical, global_batch_);
  ASSIGN_OR_RETURN(std::optional<harness::TrialController::Restored> checkpoint, controller_.Restore());
  if (checkpoint.has_value()) RETURN_IF_ERROR(Restore(*checkpoint, host));
  RETURN_IF_ERROR(Connect(host));
  // Every rank starts from rank 0's model and optimizer state.
  RETURN_IF_ERROR(Annotate(collective_->Broadcast(model_->params(), 0), "broadcasting the parameters"));
  RETURN_IF_ERROR(Annotate(collective_->Broadcast(model_->velocity(), 0), "broadcasting the optimizer state"));

  harness::GradientReducerOptions ro;
  ro.bucket_bytes = ctx_.spec.bucket_bytes();
  ro.aggregation_frequency = ctx_.spec.aggregation_frequency();
  ro.math = cuda_math_.get();
  reducer_ = std::make_unique<harness::GradientReducer>(*collective_, model_->grads(), ro);
  x_.resize(per_slot_ * train_.example_size());
  y_.resize(per_slot_);
  if (ctx_.is_chief()) {
    std::cout << absl::StrFormat(
                     "trial %d: %d training and %d test images; batches %d..%d of %d (%.2f epochs), "
                     "hidden %d, lr %.3g, seed %u, on %s, %s collective, %d gradient bucket(s), "
                     "aggregation frequency %d",
                     ctx_.spec.trial_id(), train_.num_examples, test_.num_examples, controller_.start_batch(), target_,
                     global_batch_, static_cast<double>(target_) / batches_per_epoch_, hidden_, lr0_,
                     ctx_.spec.trial_seed(), model_->device_name(), collective_->backend(), reducer_->buckets().size(),
                     ctx_.spec.aggregation_frequency())
              << std::endl;
    if (ctx_.spec.checkpoint_dir().empty()) {
      std::cout << "checkpoint_storage is not configured: no checkpoints; a restart begins from scratch"
                << std::endl;
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::Connect(const nn::Mlp& host) {
  rendezvous_ = harness::NewMasterRendezvous(ctx_);
  if (ctx_.slot_type != "cuda") {
    ASSIGN_OR_RETURN(collective_, harness::ConnectCollective(ctx_, *rendezvous_));
    host_collective_ = collective_.get();
    model_ = nn::HostModel(host);
    return absl::OkStatus();
  }
  // One GPU per rank: the only device CUDA_VISIBLE_DEVICES leaves this process.
  constexpr int kDevice = 0;
  ASSIGN_OR_RETURN(model_, nn::CudaModel(host, kDevice));
  ASSIGN_OR_RETURN(collective_, harness::ConnectCudaCollective(ctx_, *rendezvous_, kDevice));
  staged_ = std::make_unique<collective::HostStagedCollective>(*collective_, kDevice);
  host_collective_ = staged_.get();
  cuda_math_ = std::make_unique<harness::CudaGradientMath>(kDevice);
  return absl::OkStatus();
}

absl::Status Trainer::Restore(const harness::TrialController::Restored& checkpoint, nn::Mlp& host) {
  const std::string& path = ctx_.spec.latest_checkpoint();
  auto weights = checkpoint.files.find("model.bin");
  if (weights == checkpoint.files.end()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": model.bin is missing"));
  }
  ASSIGN_OR_RETURN(nn::Mlp model, nn::Mlp::Deserialize(weights->second));
  if (model.options().layer_sizes != host.options().layer_sizes) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, " holds a model of another shape"));
  }
  const harness::TrainingState& state = checkpoint.state;
  if (!state.extra.contains("loader")) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "checkpoint %s was written for sample order %s; this run has %s version %d", path, state.order_algorithm,
        data::kElasticOrderAlgorithm, data::kElasticOrderVersion));
  }
  ASSIGN_OR_RETURN(data::LoaderState ls, data::LoaderState::FromJson(state.extra.at("loader")));
  absl::StatusOr<data::ElasticLoader> loader =
      data::ElasticLoader::Restore(ls, train_.num_examples, train_.Fingerprint(), global_batch_);
  if (!loader.ok()) return Annotate(loader.status(), absl::StrCat("checkpoint ", path));
  loader_.emplace(std::move(*loader));
  host = std::move(model);
  if (ctx_.rank < static_cast<int>(state.rng_states.size())) {
    std::istringstream in(state.rng_states[ctx_.rank]);
    in >> rng_;
  }
  if (ctx_.is_chief()) {
    std::cout << absl::StrFormat("resuming from checkpoint %s at batch %d (epoch %d, sample %d, %d canonical "
                                 "nodes)%s",
                                 path, controller_.start_batch(), ls.epoch, ls.samples_in_epoch, ls.num_canonical_nodes,
                                 state.global_batch_size == global_batch_
                                     ? ""
                                     : absl::StrFormat("; its global batch was %d, now %d",
                                                       state.global_batch_size, global_batch_))
              << std::endl;
  }
  return absl::OkStatus();
}

double Trainer::LearningRate(int64_t batch) const {
  double decay = 1.0 - static_cast<double>(batch) / static_cast<double>(target_);
  double scale = 1.0;
  if (warmup_epochs_ > 0 && ctx_.world_size > 1) {
    double epochs = static_cast<double>(batch) / static_cast<double>(batches_per_epoch_);
    scale = 1.0 + (ctx_.world_size - 1) * std::min(1.0, epochs / warmup_epochs_);
  }
  return lr0_ * scale * decay;
}

absl::StatusOr<float> Trainer::DeterministicStep(int64_t batch, int64_t checksum) {
  const bool host = model_->memory() == nn::Memory::kHost;
  const size_t p = model_->grads().size();
  host_grads_.resize(host ? 0 : p);
  absl::Span<float> g = host ? model_->grads() : absl::MakeSpan(host_grads_);
  fixed_.assign(p + 2, 0);
  for (int64_t m = 0; m < per_slot_; m += micro_) {
    RETURN_IF_ERROR(model_->ForwardBackward(static_cast<int>(m), static_cast<int>(micro_), nullptr));
    ASSIGN_OR_RETURN(float l, model_->Loss());
    if (!host) RETURN_IF_ERROR(model_->GradsToHost(g));
    for (size_t j = 0; j < p; ++j) fixed_[j] += ToFixed(g[j]);
    fixed_[p] += ToFixed(l);
  }
  fixed_[p + 1] = checksum;
  {
    harness::ScopedTiming w(timings_, "gradient_sync", clock_);
    if (ctx_.world_size > 1) {
      RETURN_IF_ERROR(Annotate(host_collective_->AllReduceSum(absl::MakeSpan(fixed_)),
                               absl::StrCat("fixed-point all-reduce at batch ", batch)));
    }
  }
  // The mean over the global batch's fixed micro-batches, rounded once.
  const double denom = kFixedScale * static_cast<double>(global_batch_ / micro_);
  for (size_t j = 0; j < p; ++j) g[j] = static_cast<float>(static_cast<double>(fixed_[j]) / denom);
  if (!host) RETURN_IF_ERROR(model_->GradsFromHost(g));
  checksum_sum_ += static_cast<double>(fixed_[p + 1]);
  return static_cast<float>(static_cast<double>(fixed_[p]) / denom);
}

absl::Status Trainer::TrainBatch(int64_t batch) {
  int64_t checksum = 0;
  {
    harness::ScopedTiming t(timings_, "dataloader_next", clock_);
    data::Window w = loader_->Next();
    absl::Span<const int64_t> mine = data::ElasticLoader::RankSlice(w, ctx_.rank, ctx_.world_size);
    const int64_t example = train_.example_size();
    const int64_t first = w.first_position + ctx_.rank * per_slot_;
    for (int64_t i = 0; i < per_slot_; ++i) {
      int64_t idx = mine[i];
      checksum += static_cast<int64_t>(data::Mix64(static_cast<uint64_t>(idx)) & 0xffffffffULL);
      std::copy_n(&train_.images[idx * example], example, &x_[i * example]);
      if (input_noise_ > 0) {
        // Per-sample randomness keyed by the sample's global position, not by the rank.
        uint64_t key = data::SampleKey(ctx_.spec.trial_seed(), w.epoch, first + i);
        for (int64_t j = 0; j < example; ++j) {
          double u = static_cast<double>(data::Mix64(key + static_cast<uint64_t>(j)) >> 11) * 0x1.0p-53;
          x_[i * example + j] += static_cast<float>(input_noise_ * (2 * u - 1));
        }
      }
      y_[i] = train_.labels[idx];
    }
  }
  {
    harness::ScopedTiming t(timings_, "to_device", clock_);
    RETURN_IF_ERROR(model_->SetBatch(x_.data(), y_.data(), static_cast<int>(per_slot_)));
  }
  float lr;
  {
    harness::ScopedTiming t(timings_, "step_lr_schedulers", clock_);
    lr = static_cast<float>(LearningRate(batch));
  }
  float loss;
  {
    harness::ScopedTiming t(timings_, "train_batch", clock_);
    if (deterministic_) {
      ASSIGN_OR_RETURN(loss, DeterministicStep(batch, checksum));
      RETURN_IF_ERROR(model_->Step(lr));
      loss_sum_ += loss;
      ++group_batches_;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(model_->ForwardBackward(0, static_cast<int>(per_slot_), [this](size_t begin, size_t end) {
      reducer_->MarkReady(begin, end);
    }));
    absl::StatusOr<bool> sync;
    {
      harness::ScopedTiming w(timings_, "gradient_sync", clock_);
      sync = reducer_->Finish();
    }
    if (!sync.ok()) {
      return Annotate(sync.status(), absl::StrCat("gradient all-reduce at batch ", batch));
    }
    if (*sync) RETURN_IF_ERROR(model_->Step(lr));
    // After the gradients: a lost peer shows up in the gradient all-reduce first.
    if (ctx_.world_size > 1) {
      RETURN_IF_ERROR(Annotate(host_collective_->AllReduceSum(absl::MakeSpan(&checksum, 1)),
                               absl::StrCat("sample checksum all-reduce at batch ", batch)));
    }
    checksum_sum_ += static_cast<double>(checksum);
  }
  {
    harness::ScopedTiming t(timings_, "from_device", clock_);
    ASSIGN_OR_RETURN(loss, model_->Loss());
    loss_sum_ += loss;
  }
  ++group_batches_;
  return absl::OkStatus();
}

absl::StatusOr<harness::TrainingMetrics> Trainer::TakeTrainingMetrics() {
  harness::TrainingMetrics m;
  // Deterministic mode's loss is already the exact global mean.
  (deterministic_ ? m.global : m.per_rank)["loss"] = loss_sum_ / group_batches_;
  m.global["diag/sample_checksum"] = checksum_sum_;  // the same on every rank
  checksum_sum_ = 0;
  loss_sum_ = 0;
  group_batches_ = 0;
  return m;
}

absl::StatusOr<std::map<std::string, double>> Trainer::Validate(int64_t done) {
  // Each rank evaluates its shard of the test set; the sums are all-reduced.
  const int64_t n = test_.num_examples;
  std::map<std::string, double> validation;
  if (deterministic_) {
    // Fixed chunks of 100 examples, dealt round-robin to the ranks, summed in fixed point.
    constexpr int64_t kChunk = 100;
    std::vector<int64_t> sums(2, 0);
    for (int64_t c = ctx_.rank; c * kChunk < n; c += ctx_.world_size) {
      const int64_t lo = c * kChunk, cnt = std::min(kChunk, n - lo);
      ASSIGN_OR_RETURN(nn::Evaluation e, model_->Evaluate(test_.images.data() + lo * test_.example_size(),
                                                          test_.labels.data() + lo, cnt));
      sums[0] += ToFixed(e.loss * static_cast<double>(cnt) / static_cast<double>(n));
      sums[1] += static_cast<int64_t>(std::llround(e.accuracy * static_cast<double>(cnt)));
    }
    if (ctx_.world_size > 1) RETURN_IF_ERROR(host_collective_->AllReduceSum(absl::MakeSpan(sums)));
    validation = {{"validation_loss", static_cast<double>(sums[0]) / kFixedScale},
                  {"accuracy", static_cast<double>(sums[1]) / static_cast<double>(n)}};
  } else {
    const int64_t lo = n * ctx_.rank / ctx_.world_size, hi = n * (ctx_.rank + 1) / ctx_.world_size;
    ASSIGN_OR_RETURN(nn::Evaluation e, model_->Evaluate(test_.images.data() + lo * test_.example_size(),
                                                        test_.labels.data() + lo, hi - lo));
    std::map<std::string, double> sums = {{"loss_sum", e.loss * static_cast<double>(hi - lo)},
                                          {"correct", std::round(e.accuracy * static_cast<double>(hi - lo))},
                                          {"count", static_cast<double>(hi - lo)}};
    if (ctx_.world_size > 1) {
      ASSIGN_OR_RETURN(sums, harness::ReduceMetrics(*host_collective_, sums, /*average=*/false));
    }
    validation = {{"validation_loss", sums["loss_sum"] / sums["count"]}, {"accuracy", sums["correct"] / sums["count"]}};
  }
  if (done == target_) {
    ASSIGN_OR_RETURN(nn::Mlp final_model, model_->ToHost());
    absl::Span<const float> params = final_model.params();
    uint64_t h = Fnv1a(params.data(), params.size() * sizeof(float));
    validation["diag/params_hash_hi"] = static_cast<double>(h >> 32);
    validation["diag/params_hash_lo"] = static_cast<double>(h & 0xffffffffULL);
    if (ctx_.is_chief()) std::cout << absl::StrFormat("final parameters hash %016x", h) << std::endl;
  }
  return validation;
}

absl::StatusOr<std::map<std::string, std::string>> Trainer::Save(harness::TrainingState& state) {
  std::ostringstream rng_text;
  rng_text << rng_;
  ASSIGN_OR_RETURN(std::vector<std::string> rngs, harness::AllGatherBytes(*host_collective_, rng_text.str()));
  if (!ctx_.is_chief()) return std::map<std::string, std::string>();
  state.epoch = loader_->state().epoch;
  state.samples_in_epoch = loader_->state().samples_in_epoch;
  state.extra["loader"] = loader_->state().ToJson();
  state.global_batch_size = global_batch_;
  state.order_algorithm = absl::StrCat(data::kElasticOrderAlgorithm, "_v", data::kElasticOrderVersion);
  state.dataset_fingerprint = train_.Fingerprint();
  state.dataset_size = train_.num_examples;
  state.rng_states = std::move(rngs);
  ASSIGN_OR_RETURN(nn::Mlp model, model_->ToHost());
  return std::map<std::string, std::string>{{"model.bin", model.Serialize()}};
}

absl::Status Trainer::Run() {
  RETURN_IF_ERROR(Setup());
  return controller_.Run(*this, *host_collective_);
}

}  // namespace
}  // namespace det

int main() {
  det::RealClock clock;
  auto ctx = det::harness::ContextFromEnvironment(det::harness::ProcessEnvironment());
  if (!ctx.ok()) {
    std::cerr << "det-fashion-mnist: " << ctx.status().message() << std::endl;
    return 1;
  }
  int rank = ctx->rank;
  det::Trainer trainer(std::move(*ctx), clock);
  absl::Status st = trainer.Run();
  if (absl::IsCancelled(st)) {
    // A cooperative stop (pause, preemption, resize, early stop, kill), after the
    // checkpoint: a clean exit, as det's Python runtime makes.
    std::cout << "det-fashion-mnist: rank " << rank << ": " << st.message() << std::endl;
    std::cout.flush();
    _exit(0);
  }
  if (!st.ok()) {
    std::cerr << "det-fashion-mnist: rank " << rank << ": " << st.message() << std::endl;
    // Skip destructors: tearing down connections to failed peers must not delay the exit.
    std::cout.flush();
    _exit(1);
  }
  return 0;
}
