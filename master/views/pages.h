// Pages of the master's long lists, as Determined's API serves them (v1.Pagination):
// filters, then a stable sort, then `offset` and `limit`, with the totals. Pure functions
// of a list the caller holds (a read snapshot, off the loop); no I/O, no clock.
#ifndef DET_MASTER_VIEWS_PAGES_H_
#define DET_MASTER_VIEWS_PAGES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "google/protobuf/repeated_field.h"
#include "proto/api.pb.h"
#include "proto/types.pb.h"

namespace det::master::views {

// InvalidArgument naming the field for a negative `offset` or `limit` ("offset: expected
// >= 0, got -1").
absl::Status CheckPage(int64_t offset, int64_t limit);

// The experiments of `all` that `req` selects (states, name, user, users, labels,
// description; archived ones only with include_archived), sorted by req.sort_by in
// req.order_by (ties by id), the page [offset, offset + limit) of them (limit 0: to the
// end) into resp->experiments, with resp->total and resp->pagination. InvalidArgument
// naming the field for a negative offset or limit, or a sort_by or order_by this master
// does not know; `resp` is then untouched.
absl::Status PageExperiments(const google::protobuf::RepeatedPtrField<v1::Experiment>& all,
                             const v1::ListExperimentsRequest& req,
                             v1::ListExperimentsResponse* resp);

// The page of `jobs` (the scheduler's order; reversed with ORDER_BY_DESC) that `req`
// asks for, into resp->jobs, with resp->pagination. InvalidArgument as PageExperiments.
absl::Status PageJobs(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                      const v1::ListJobsRequest& req, v1::ListJobsResponse* resp);

}  // namespace det::master::views

#endif  // DET_MASTER_VIEWS_PAGES_H_
