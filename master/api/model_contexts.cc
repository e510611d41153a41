#include "master/api/model_contexts.h"

#include <string>
#include <utility>

#include "common/rpc/context_sha256.h"

namespace det::master {

ModelContexts::~ModelContexts() {
  if (reader_ != nullptr) reads_.RunSync([] {});
}

void ModelContexts::Read(int64_t experiment_id, v1::GetModelContextResponse* response,
                         Done done) {
  if (reader_ == nullptr) {
    absl::StatusOr<std::unique_ptr<MetricsReader>> opened = store_.OpenReader();
    if (!opened.ok()) return done(opened.status());
    reader_ = *std::move(opened);
    reads_.Start();
  }
  reads_.Post([reader = reader_.get(), experiment_id, response, done = std::move(done)] {
    absl::StatusOr<std::string> blob = reader->GetExperimentContext(experiment_id);
    if (!blob.ok()) return done(blob.status());
    response->set_sha256(rpc::ContextSha256(*blob));
    response->set_model_context(*std::move(blob));
    done(absl::OkStatus());
  });
}

}  // namespace det::master
