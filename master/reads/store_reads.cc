#include "master/reads/store_reads.h"

#include <algorithm>
#include <utility>

namespace det::master {

StoreReads::StoreReads(Store& store, int connections) {
  const int n = std::max(1, connections);
  for (int i = 0; i < n && open_status_.ok(); ++i) {
    absl::StatusOr<std::unique_ptr<MetricsReader>> reader = store.OpenReader();
    if (reader.ok()) {
      readers_.push_back(*std::move(reader));
    } else {
      open_status_ = reader.status();
    }
  }
  if (!open_status_.ok()) {
    readers_.clear();
    // One thread answers every read with the error.
    threads_.emplace_back([this] { Work(nullptr); });
    return;
  }
  for (auto& reader : readers_) threads_.emplace_back([this, r = reader.get()] { Work(r); });
}

StoreReads::~StoreReads() { Stop(); }

void StoreReads::Submit(Read read) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.push_back(std::move(read));
      return;
    }
  }
  read(absl::UnavailableError("the master is stopping: no more reads"));
}

void StoreReads::Run(std::function<void(absl::Status)> done,
                     std::function<absl::Status(MetricsReader& reader)> fn) {
  Submit([done = std::move(done), fn = std::move(fn)](absl::StatusOr<MetricsReader*> reader) {
    done(reader.ok() ? fn(**reader) : reader.status());
  });
}

void StoreReads::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool StoreReads::Ready() const { return !queue_.empty() || stopping_; }

void StoreReads::Work(MetricsReader* reader) {
  for (;;) {
    Read read;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &StoreReads::Ready));
      if (queue_.empty()) return;  // stopping, nothing left
      read = std::move(queue_.front());
      queue_.pop_front();
    }
    if (reader != nullptr) {
      read(reader);
    } else {
      read(open_status_);
    }
  }
}

}  // namespace det::master
