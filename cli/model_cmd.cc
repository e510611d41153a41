// det model|m create|list|ls|describe|register-version|list-versions|delete|delete-version|
// edit-version: the model registry, with Determined's commands (a model is named by its
// name). Tables and fields wrap to the terminal's width (CliContext::width).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

constexpr char kJsonHelp[] = "print machine-readable JSON";

struct ModelOptions {
  std::string name;
  std::string description;
  std::vector<std::string> labels;
  std::string user;
  std::string uuid;
  std::string version_name;
  std::string comment;
  std::string notes;
  std::string metadata;
  std::vector<std::string> remove_labels;
  int32_t version = 0;
  bool yes = false;
  // edit-version: which of the optional fields were given.
  bool set_name = false, set_comment = false, set_notes = false, set_metadata = false;
};

KeyValues ModelFields(const v1::Model& m) {
  KeyValues fields = {
      {"ID", absl::StrCat(m.id())},
      {"Name", m.name()},
      {"Description", m.description()},
      {"Owner", m.username()},
      {"Labels", absl::StrJoin(m.labels(), ", ")},
      {"Created", FormatTimeMs(m.creation_time_ms())},
      {"Last Updated", FormatTimeMs(m.last_updated_time_ms())},
      {"Versions", absl::StrCat(m.num_versions())},
  };
  if (!m.metadata_json().empty()) fields.emplace_back("Metadata", m.metadata_json());
  return fields;
}

// One row per version: its number and its checkpoint (where it came from, its state and
// the validation metrics at its batch).
Table VersionsTable(const google::protobuf::RepeatedPtrField<v1::ModelVersion>& versions) {
  Table table({"Version", "Checkpoint UUID", "Experiment", "Trial", "Batches", "State",
               "Metrics", "Registered", "By", "Name", "Labels"});
  for (const v1::ModelVersion& v : versions) {
    const v1::Checkpoint& c = v.checkpoint();
    std::vector<std::string> metrics;
    for (const auto& [name, value] : c.metrics()) {
      metrics.push_back(absl::StrCat(name, "=", FormatMetric(name, value)));
    }
    std::sort(metrics.begin(), metrics.end());
    table.AddRow({absl::StrCat(v.version()), v.checkpoint_uuid(),
                  c.experiment_id() ? absl::StrCat(c.experiment_id()) : "",
                  c.trial_id() ? absl::StrCat(c.trial_id()) : "", absl::StrCat(c.total_batches()),
                  c.state() == v1::STATE_UNSPECIFIED ? "not found" : StateName(c.state()),
                  absl::StrJoin(metrics, " "), FormatTimeMs(v.creation_time_ms()), v.username(),
                  v.name(), absl::StrJoin(v.labels(), ", ")});
  }
  return table;
}

absl::Status Create(CliContext& ctx, const ModelOptions& o) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::CreateModelRequest request;
  request.set_name(o.name);
  request.set_description(o.description);
  for (const std::string& l : o.labels) request.add_labels(l);
  ASSIGN_OR_RETURN(v1::CreateModelResponse response, api->CreateModel(request));
  if (ctx.json) return WriteJson(response.model(), ctx.out);
  RenderKeyValues(ModelFields(response.model()), ctx.out, ctx.width);
  return absl::OkStatus();
}

absl::Status List(CliContext& ctx, const ModelOptions& o) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::ListModelsRequest request;
  for (const std::string& l : o.labels) request.add_labels(l);
  request.set_user(o.user);
  ASSIGN_OR_RETURN(v1::ListModelsResponse response, api->ListModels(request));
  if (ctx.json) return WriteJson(response, ctx.out);
  Table table({"ID", "Name", "Owner", "Versions", "Labels", "Created", "Last Updated",
               "Description"});
  for (const v1::Model& m : response.models()) {
    table.AddRow({absl::StrCat(m.id()), m.name(), m.username(), absl::StrCat(m.num_versions()),
                  absl::StrJoin(m.labels(), ", "), FormatTimeMs(m.creation_time_ms()),
                  FormatTimeMs(m.last_updated_time_ms()), m.description()});
  }
  table.Render(ctx.out, ctx.width);
  return absl::OkStatus();
}

// The model and one version of it: --version N, else the latest (none for a model without
// versions).
absl::Status Describe(CliContext& ctx, const ModelOptions& o) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetModelResponse model, api->GetModel(o.name));
  v1::ListModelVersionsResponse shown;  // model and the version shown, as JSON prints them
  *shown.mutable_model() = model.model();
  if (o.version > 0 || model.model().num_versions() > 0) {
    ASSIGN_OR_RETURN(v1::GetModelVersionResponse version, api->GetModelVersion(o.name, o.version));
    *shown.add_model_versions() = version.model_version();
  }
  if (ctx.json) return WriteJson(shown, ctx.out);
  RenderKeyValues(ModelFields(shown.model()), ctx.out, ctx.width);
  if (shown.model_versions_size() > 0) {
    ctx.out << '\n';
    VersionsTable(shown.model_versions()).Render(ctx.out, ctx.width);
  }
  return absl::OkStatus();
}

absl::Status RegisterVersion(CliContext& ctx, const ModelOptions& o) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::RegisterModelVersionRequest request;
  request.set_model_name(o.name);
  request.set_checkpoint_uuid(o.uuid);
  request.set_name(o.version_name);
  request.set_comment(o.comment);
  request.set_notes(o.notes);
  ASSIGN_OR_RETURN(v1::RegisterModelVersionResponse response, api->RegisterModelVersion(request));
  if (ctx.json) return WriteJson(response.model_version(), ctx.out);
  ctx.out << "Registered checkpoint " << o.uuid << " as version "
          << response.model_version().version() << " of model " << o.name << "\n\n";
  google::protobuf::RepeatedPtrField<v1::ModelVersion> one;
  *one.Add() = response.model_version();
  VersionsTable(one).Render(ctx.out, ctx.width);
  return absl::OkStatus();
}

absl::Status ListVersions(CliContext& ctx, const ModelOptions& o) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::ListModelVersionsResponse response, api->ListModelVersions(o.name));
  if (ctx.json) return WriteJson(response, ctx.out);
  RenderKeyValues(ModelFields(response.model()), ctx.out, ctx.width);
  ctx.out << '\n';
  VersionsTable(response.model_versions()).Render(ctx.out, ctx.width);
  return absl::OkStatus();
}

absl::Status Delete(CliContext& ctx, const ModelOptions& o) {
  if (!o.yes) {
    RETURN_IF_ERROR(Confirm(
        ctx, absl::StrCat("Delete model ", o.name, " with all its versions?"), "--yes"));
  }
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  RETURN_IF_ERROR(api->DeleteModel(o.name));
  ctx.out << "Deleted model " << o.name << '\n';
  return absl::OkStatus();
}

absl::Status DeleteVersion(CliContext& ctx, const ModelOptions& o) {
  if (!o.yes) {
    RETURN_IF_ERROR(Confirm(
        ctx, absl::StrCat("Delete version ", o.version, " of model ", o.name, "?"), "--yes"));
  }
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  RETURN_IF_ERROR(api->DeleteModelVersion(o.name, o.version));
  ctx.out << "Deleted version " << o.version << " of model " << o.name
          << " (its checkpoint is no longer protected from deletion)\n";
  return absl::OkStatus();
}

// Version fields (name, comment, notes, metadata, labels) of an existing version; only the
// options given change.
absl::Status EditVersion(CliContext& ctx, const ModelOptions& o) {
  v1::PatchModelVersionRequest request;
  request.set_model_name(o.name);
  request.set_version(o.version);
  if (o.set_name) request.set_name(o.version_name);
  if (o.set_comment) request.set_comment(o.comment);
  if (o.set_notes) request.set_notes(o.notes);
  if (o.set_metadata) request.set_metadata_json(o.metadata);
  for (const std::string& l : o.labels) request.add_add_labels(l);
  for (const std::string& l : o.remove_labels) request.add_remove_labels(l);
  if (!o.set_name && !o.set_comment && !o.set_notes && !o.set_metadata && o.labels.empty() &&
      o.remove_labels.empty()) {
    return absl::InvalidArgumentError(
        "det model edit-version: nothing to change; give --name, --comment, --notes, "
        "--metadata, --add-label or --remove-label");
  }
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::PatchModelVersionResponse response, api->PatchModelVersion(request));
  if (ctx.json) return WriteJson(response.model_version(), ctx.out);
  ctx.out << "Changed version " << response.model_version().version() << " of model " << o.name
          << "\n\n";
  google::protobuf::RepeatedPtrField<v1::ModelVersion> one;
  *one.Add() = response.model_version();
  VersionsTable(one).Render(ctx.out, ctx.width);
  if (!response.model_version().notes().empty()) {
    ctx.out << '\n';
    RenderKeyValues({{"Notes", response.model_version().notes()}}, ctx.out, ctx.width);
  }
  return absl::OkStatus();
}

using Action = absl::Status (*)(CliContext&, const ModelOptions&);

CLI::App* Add(CLI::App& group, CliContext& ctx, const std::shared_ptr<ModelOptions>& options,
              const std::string& name, const std::string& help, Action action) {
  CLI::App* cmd = group.add_subcommand(name, help);
  cmd->callback([&ctx, options, action] {
    ctx.action = [&ctx, options, action] { return action(ctx, *options); };
  });
  return cmd;
}

}  // namespace

void RegisterModelCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* group =
      app.add_subcommand("model", "manage the model registry (models and their versions)")
          ->alias("m");
  group->require_subcommand(1);
  auto o = std::make_shared<ModelOptions>();

  CLI::App* create = Add(*group, ctx, o, "create", "create a model", Create);
  create->add_option("NAME", o->name, "model name")->required();
  create->add_option("--description", o->description, "description of the model");
  create->add_option("--label", o->labels, "a label (repeat for several)");
  create->add_flag("--json", ctx.json, kJsonHelp);

  CLI::App* list = Add(*group, ctx, o, "list", "list the models in the registry", List);
  list->alias("ls");
  list->add_option("--label", o->labels, "only models with this label (repeatable)");
  list->add_option("--user", o->user, "only models this user created");
  list->add_flag("--json", ctx.json, kJsonHelp);

  CLI::App* describe = Add(*group, ctx, o, "describe",
                           "describe a model and one version (the latest by default)", Describe);
  describe->add_option("NAME", o->name, "model name")->required();
  describe->add_option("--version", o->version, "version number to show (default: the latest)");
  describe->add_flag("--json", ctx.json, kJsonHelp);

  CLI::App* reg = Add(*group, ctx, o, "register-version",
                      "register a checkpoint as the next version of a model", RegisterVersion);
  reg->add_option("NAME", o->name, "model name")->required();
  reg->add_option("UUID", o->uuid, "checkpoint UUID")->required();
  reg->add_option("--name", o->version_name, "name of the version");
  reg->add_option("--comment", o->comment, "comment");
  reg->add_option("--notes", o->notes, "notes");
  reg->add_flag("--json", ctx.json, kJsonHelp);

  CLI::App* versions =
      Add(*group, ctx, o, "list-versions", "list the versions of a model", ListVersions);
  versions->add_option("NAME", o->name, "model name")->required();
  versions->add_flag("--json", ctx.json, kJsonHelp);

  CLI::App* del = Add(*group, ctx, o, "delete", "delete a model with its versions", Delete);
  del->add_option("NAME", o->name, "model name")->required();
  del->add_flag("-y,--yes", o->yes, "do not ask for confirmation");

  CLI::App* edit = Add(*group, ctx, o, "edit-version",
                       "change a version's name, comment, notes, metadata or labels", EditVersion);
  edit->add_option("NAME", o->name, "model name")->required();
  edit->add_option("VERSION", o->version, "version number")->required()->check(CLI::PositiveNumber);
  edit->add_option_function<std::string>(
      "--name", [o](const std::string& v) {
        o->version_name = v;
        o->set_name = true;
      },
      "new name of the version");
  edit->add_option_function<std::string>(
      "--comment", [o](const std::string& v) {
        o->comment = v;
        o->set_comment = true;
      },
      "new comment");
  edit->add_option_function<std::string>(
      "--notes", [o](const std::string& v) {
        o->notes = v;
        o->set_notes = true;
      }, "new notes");
  edit->add_option_function<std::string>(
      "--metadata", [o](const std::string& v) {
        o->metadata = v;
        o->set_metadata = true;
      },
      "new metadata, a JSON object (\"\" clears it)");
  edit->add_option("--add-label", o->labels, "a label to add (repeatable)");
  edit->add_option("--remove-label", o->remove_labels, "a label to remove (repeatable)");
  edit->add_flag("--json", ctx.json, kJsonHelp);

  CLI::App* del_version =
      Add(*group, ctx, o, "delete-version", "delete a version of a model", DeleteVersion);
  del_version->add_option("NAME", o->name, "model name")->required();
  del_version->add_option("VERSION", o->version, "version number")->required();
  del_version->add_flag("-y,--yes", o->yes, "do not ask for confirmation");
}

}  // namespace det::cli
