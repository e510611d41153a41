#include "master/auth/linked_task_user.h"

#include <vector>

namespace det::master {

absl::StatusOr<v1::AgentUserGroup> LinkedTaskUser(Store& store, const std::string& owner) {
  if (owner.empty()) return v1::AgentUserGroup();
  absl::StatusOr<std::vector<UserRow>> users = store.ListUsers();
  // A store without users (tests, in-memory masters): nobody is linked.
  if (users.status().code() == absl::StatusCode::kUnimplemented) return v1::AgentUserGroup();
  if (!users.ok()) return users.status();
  for (const UserRow& u : *users) {
    if (u.username == owner) return u.agent_user_group;
  }
  return v1::AgentUserGroup();
}

}  // namespace det::master
