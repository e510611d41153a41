// The OS user a det user's workers and tasks run as on the agents: the link an admin set
// with LinkWithAgentUser (`det user link-with-agent-user`).
#ifndef DET_MASTER_AUTH_LINKED_TASK_USER_H_
#define DET_MASTER_AUTH_LINKED_TASK_USER_H_

#include <string>

#include "absl/status/statusor.h"
#include "master/store/store.h"
#include "proto/types.pb.h"

namespace det::master {

// The agent user linked to det user `owner`. Empty agent_user: none (the agents' default
// task user), also for an empty or unknown owner and for a store that keeps no users.
// The store's error when it cannot read its users: callers hold the work back rather
// than run it as the default user.
absl::StatusOr<v1::AgentUserGroup> LinkedTaskUser(Store& store, const std::string& owner);

}  // namespace det::master

#endif  // DET_MASTER_AUTH_LINKED_TASK_USER_H_
