// Pages of experiments and jobs: totals, bounds, sort keys and orders, filters, and the
// refusal of bad values naming the field.
#include "master/views/pages.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::master::views {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using R = v1::ListExperimentsRequest;

google::protobuf::RepeatedPtrField<v1::Experiment> Five() {
  // id, name, owner, state, progress, labels, archived
  google::protobuf::RepeatedPtrField<v1::Experiment> all;
  struct Row {
    int64_t id;
    const char* name;
    const char* owner;
    v1::State state;
    double progress;
    std::vector<std::string> labels;
    bool archived;
  };
  for (const Row& r : std::vector<Row>{
           {1, "mnist-a", "ann", v1::STATE_COMPLETED, 1.0, {"prod"}, false},
           {2, "cifar", "bob", v1::STATE_ACTIVE, 0.5, {"prod", "gpu"}, false},
           {3, "mnist-b", "ann", v1::STATE_ACTIVE, 0.25, {}, false},
           {4, "old", "bob", v1::STATE_CANCELED, 0.75, {"gpu"}, true},
           {5, "bert", "cid", v1::STATE_PAUSED, 0.5, {"gpu"}, false},
       }) {
    v1::Experiment* e = all.Add();
    e->set_id(r.id);
    e->set_name(r.name);
    e->set_description(absl::StrCat("about ", r.name));
    e->set_owner(r.owner);
    e->set_state(r.state);
    e->set_progress(r.progress);
    e->set_start_time_ms(1000 - r.id);
    for (const auto& l : r.labels) e->add_labels(l);
    e->set_archived(r.archived);
  }
  return all;
}

std::vector<int64_t> Ids(const v1::ListExperimentsResponse& resp) {
  std::vector<int64_t> ids;
  for (const auto& e : resp.experiments()) ids.push_back(e.id());
  return ids;
}

v1::ListExperimentsResponse Page(const R& req) {
  v1::ListExperimentsResponse resp;
  absl::Status st = PageExperiments(Five(), req, &resp);
  EXPECT_TRUE(st.ok()) << st;
  return resp;
}

TEST(PageExperimentsTest, EverythingUnarchivedByIdWithTheTotals) {
  v1::ListExperimentsResponse resp = Page(R());
  EXPECT_THAT(Ids(resp), ElementsAre(1, 2, 3, 5));
  EXPECT_EQ(resp.total(), 4);
  EXPECT_EQ(resp.pagination().total(), 4);
  EXPECT_EQ(resp.pagination().start_index(), 0);
  EXPECT_EQ(resp.pagination().end_index(), 4);
}

TEST(PageExperimentsTest, OffsetAndLimitBoundThePageAndKeepTheTotal) {
  struct Case {
    int offset, limit;
    std::vector<int64_t> ids;
    int start, end;
  };
  for (const Case& c : std::vector<Case>{
           {0, 2, {1, 2}, 0, 2},
           {2, 2, {3, 5}, 2, 4},
           {3, 2, {5}, 3, 4},
           {4, 2, {}, 4, 4},
           {9, 0, {}, 4, 4},
           {1, 0, {2, 3, 5}, 1, 4},
       }) {
    R req;
    req.set_offset(c.offset);
    req.set_limit(c.limit);
    v1::ListExperimentsResponse resp = Page(req);
    SCOPED_TRACE(absl::StrCat("offset ", c.offset, " limit ", c.limit));
    EXPECT_THAT(Ids(resp), ElementsAreArray(c.ids));
    EXPECT_EQ(resp.total(), 4);
    EXPECT_EQ(resp.pagination().offset(), c.offset);
    EXPECT_EQ(resp.pagination().limit(), c.limit);
    EXPECT_EQ(resp.pagination().start_index(), c.start);
    EXPECT_EQ(resp.pagination().end_index(), c.end);
  }
}

TEST(PageExperimentsTest, SortKeysAndOrdersTiesById) {
  struct Case {
    R::SortBy sort_by;
    v1::OrderBy order_by;
    std::vector<int64_t> ids;
  };
  for (const Case& c : std::vector<Case>{
           {R::SORT_BY_UNSPECIFIED, v1::ORDER_BY_UNSPECIFIED, {1, 2, 3, 5}},
           {R::SORT_BY_ID, v1::ORDER_BY_DESC, {5, 3, 2, 1}},
           {R::SORT_BY_NAME, v1::ORDER_BY_ASC, {5, 2, 1, 3}},
           {R::SORT_BY_NAME, v1::ORDER_BY_DESC, {3, 1, 2, 5}},
           {R::SORT_BY_PROGRESS, v1::ORDER_BY_ASC, {3, 2, 5, 1}},
           {R::SORT_BY_START_TIME, v1::ORDER_BY_ASC, {5, 3, 2, 1}},
           {R::SORT_BY_USER, v1::ORDER_BY_ASC, {1, 3, 2, 5}},
           {R::SORT_BY_STATE, v1::ORDER_BY_ASC, {2, 3, 1, 5}},
           {R::SORT_BY_DESCRIPTION, v1::ORDER_BY_ASC, {5, 2, 1, 3}},
       }) {
    R req;
    req.set_sort_by(c.sort_by);
    req.set_order_by(c.order_by);
    SCOPED_TRACE(absl::StrCat(R::SortBy_Name(c.sort_by), " ", v1::OrderBy_Name(c.order_by)));
    EXPECT_THAT(Ids(Page(req)), ElementsAreArray(c.ids));
  }
}

TEST(PageExperimentsTest, FiltersCombineAndTheTotalCountsTheMatches) {
  struct Case {
    std::string what;
    R req;
    std::vector<int64_t> ids;
  };
  std::vector<Case> cases;
  cases.push_back({"name", R(), {1, 3}});
  cases.back().req.set_name("mnist");
  cases.push_back({"user", R(), {2}});
  cases.back().req.set_user("bob");
  cases.push_back({"users", R(), {1, 3, 5}});
  cases.back().req.add_users("ann");
  cases.back().req.add_users("cid");
  cases.push_back({"labels (all of them)", R(), {2}});
  cases.back().req.add_labels("gpu");
  cases.back().req.add_labels("prod");
  cases.push_back({"states", R(), {2, 3}});
  cases.back().req.add_states(v1::STATE_ACTIVE);
  cases.push_back({"archived too", R(), {2, 4, 5}});
  cases.back().req.set_include_archived(true);
  cases.back().req.add_labels("gpu");
  cases.push_back({"description", R(), {2}});
  cases.back().req.set_description("cif");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::ListExperimentsResponse resp = Page(c.req);
    EXPECT_THAT(Ids(resp), ElementsAreArray(c.ids));
    EXPECT_EQ(resp.total(), static_cast<int>(c.ids.size()));
  }
}

TEST(PageExperimentsTest, BadValuesAreRefusedNamingTheField) {
  struct Case {
    std::string field;
    R req;
  };
  std::vector<Case> cases(4);
  cases[0].field = "offset";
  cases[0].req.set_offset(-1);
  cases[1].field = "limit";
  cases[1].req.set_limit(-5);
  cases[2].field = "sort_by";
  cases[2].req.set_sort_by(static_cast<R::SortBy>(77));
  cases[3].field = "order_by";
  cases[3].req.set_order_by(static_cast<v1::OrderBy>(9));
  for (const Case& c : cases) {
    v1::ListExperimentsResponse resp;
    absl::Status st = PageExperiments(Five(), c.req, &resp);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.field + ":"));
    EXPECT_EQ(resp.experiments_size(), 0);
  }
}

TEST(PageJobsTest, PagesInTheSchedulersOrderOrItsReverse) {
  google::protobuf::RepeatedPtrField<v1::Job> jobs;
  for (int64_t id : {7, 3, 9}) jobs.Add()->set_experiment_id(id);
  v1::ListJobsRequest req;
  req.set_limit(2);
  v1::ListJobsResponse resp;
  ASSERT_TRUE(PageJobs(jobs, req, &resp).ok());
  ASSERT_EQ(resp.jobs_size(), 2);
  EXPECT_EQ(resp.jobs(0).experiment_id(), 7);
  EXPECT_EQ(resp.jobs(1).experiment_id(), 3);
  EXPECT_EQ(resp.pagination().total(), 3);
  EXPECT_EQ(resp.pagination().end_index(), 2);

  req.set_offset(1);
  req.set_order_by(v1::ORDER_BY_DESC);
  v1::ListJobsResponse desc;
  ASSERT_TRUE(PageJobs(jobs, req, &desc).ok());
  ASSERT_EQ(desc.jobs_size(), 2);
  EXPECT_EQ(desc.jobs(0).experiment_id(), 3);
  EXPECT_EQ(desc.jobs(1).experiment_id(), 7);

  req.set_offset(-2);
  v1::ListJobsResponse bad;
  absl::Status st = PageJobs(jobs, req, &bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("offset: expected >= 0, got -2"));
}

}  // namespace
}  // namespace det::master::views
