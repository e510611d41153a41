#include "master/views/pages.h"

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace det::master::views {
namespace {

using ExperimentLess = std::function<bool(const v1::Experiment&, const v1::Experiment&)>;

// Orders by `key`, ties by id.
template <typename Key>
ExperimentLess By(Key key) {
  return [key](const v1::Experiment& a, const v1::Experiment& b) {
    auto ka = key(a);
    auto kb = key(b);
    if (ka != kb) return ka < kb;
    return a.id() < b.id();
  };
}

absl::StatusOr<ExperimentLess> ExperimentOrder(v1::ListExperimentsRequest::SortBy sort_by) {
  using R = v1::ListExperimentsRequest;
  switch (sort_by) {
    case R::SORT_BY_UNSPECIFIED:
    case R::SORT_BY_ID:
      return By([](const v1::Experiment& e) { return e.id(); });
    case R::SORT_BY_DESCRIPTION:
      return By([](const v1::Experiment& e) -> const std::string& { return e.description(); });
    case R::SORT_BY_START_TIME:
      return By([](const v1::Experiment& e) { return e.start_time_ms(); });
    case R::SORT_BY_END_TIME:
      return By([](const v1::Experiment& e) { return e.end_time_ms(); });
    case R::SORT_BY_STATE:
      return By([](const v1::Experiment& e) { return v1::State_Name(e.state()); });
    case R::SORT_BY_NUM_TRIALS:
      return By([](const v1::Experiment& e) { return e.num_trials(); });
    case R::SORT_BY_PROGRESS:
      return By([](const v1::Experiment& e) { return e.progress(); });
    case R::SORT_BY_USER:
      return By([](const v1::Experiment& e) -> const std::string& { return e.owner(); });
    case R::SORT_BY_NAME:
      return By([](const v1::Experiment& e) -> const std::string& { return e.name(); });
    case R::SORT_BY_RESOURCE_POOL:
      return By([](const v1::Experiment& e) -> const std::string& { return e.resource_pool(); });
    case R::SORT_BY_PRIORITY:
      return By([](const v1::Experiment& e) { return e.priority(); });
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("sort_by: unknown sort key ", static_cast<int>(sort_by)));
}

absl::Status CheckOrder(v1::OrderBy order_by) {
  if (v1::OrderBy_IsValid(order_by)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("order_by: expected ASC or DESC, got ", static_cast<int>(order_by)));
}

// The page [offset, offset + limit) of `total` items (limit 0: to the end).
v1::Pagination Page(int32_t offset, int32_t limit, int32_t total) {
  v1::Pagination p;
  p.set_offset(offset);
  p.set_limit(limit);
  p.set_total(total);
  p.set_start_index(std::min(offset, total));
  int64_t end = limit > 0 ? int64_t{offset} + limit : total;
  p.set_end_index(static_cast<int32_t>(std::min<int64_t>(end, total)));
  return p;
}

bool Contains(const std::string& text, const std::string& part) {
  return part.empty() || text.find(part) != std::string::npos;
}

}  // namespace

absl::Status CheckPage(int64_t offset, int64_t limit) {
  if (offset < 0) return absl::InvalidArgumentError(absl::StrCat("offset: expected >= 0, got ", offset));
  if (limit < 0) return absl::InvalidArgumentError(absl::StrCat("limit: expected >= 0, got ", limit));
  return absl::OkStatus();
}

absl::Status PageExperiments(const google::protobuf::RepeatedPtrField<v1::Experiment>& all,
                             const v1::ListExperimentsRequest& req,
                             v1::ListExperimentsResponse* resp) {
  if (absl::Status st = CheckPage(req.offset(), req.limit()); !st.ok()) return st;
  absl::StatusOr<ExperimentLess> less = ExperimentOrder(req.sort_by());
  if (!less.ok()) return less.status();
  if (absl::Status st = CheckOrder(req.order_by()); !st.ok()) return st;
  const std::set<int> states(req.states().begin(), req.states().end());
  std::set<std::string> users(req.users().begin(), req.users().end());
  std::vector<const v1::Experiment*> matched;
  for (const v1::Experiment& e : all) {
    if (e.archived() && !req.include_archived()) continue;
    if (!states.empty() && states.count(e.state()) == 0) continue;
    if (!Contains(e.name(), req.name()) || !Contains(e.description(), req.description())) continue;
    if (!req.user().empty() && e.owner() != req.user()) continue;
    if (!users.empty() && users.count(e.owner()) == 0) continue;
    const auto& have = e.labels();
    if (!std::all_of(req.labels().begin(), req.labels().end(), [&](const std::string& l) {
          return std::find(have.begin(), have.end(), l) != have.end();
        })) {
      continue;
    }
    matched.push_back(&e);
  }
  const bool desc = req.order_by() == v1::ORDER_BY_DESC;
  std::sort(matched.begin(), matched.end(), [&](const v1::Experiment* a, const v1::Experiment* b) {
    return desc ? (*less)(*b, *a) : (*less)(*a, *b);
  });
  v1::Pagination page = Page(req.offset(), req.limit(), static_cast<int32_t>(matched.size()));
  for (int i = page.start_index(); i < page.end_index(); ++i) *resp->add_experiments() = *matched[i];
  resp->set_total(page.total());
  *resp->mutable_pagination() = std::move(page);
  return absl::OkStatus();
}

absl::Status PageJobs(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                      const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
  if (absl::Status st = CheckPage(req.offset(), req.limit()); !st.ok()) return st;
  if (absl::Status st = CheckOrder(req.order_by()); !st.ok()) return st;
  const int32_t total = jobs.size();
  v1::Pagination page = Page(req.offset(), req.limit(), total);
  const bool desc = req.order_by() == v1::ORDER_BY_DESC;
  for (int i = page.start_index(); i < page.end_index(); ++i) {
    *resp->add_jobs() = jobs[desc ? total - 1 - i : i];
  }
  *resp->mutable_pagination() = std::move(page);
  return absl::OkStatus();
}

}  // namespace det::master::views
