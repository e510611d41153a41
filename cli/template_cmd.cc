// det template|tpl set|create|update-config|list|ls|describe|remove|rm
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "cli/experiment_files.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

constexpr char kJsonHelp[] = "print machine-readable JSON";

struct TemplateOptions {
  std::string name;
  std::string file;
  bool details = false;
};

// Which command sets the template: set (create or replace), create, update-config.
enum class SetMode { kCreateOrReplace, kCreate, kReplace };

absl::Status Set(CliContext& ctx, const TemplateOptions& options, SetMode mode) {
  ASSIGN_OR_RETURN(std::string yaml, ReadConfigFile(options.file));
  v1::SetTemplateRequest request;
  request.set_name(options.name);
  request.set_config_yaml(std::move(yaml));
  request.set_config_path(options.file);
  request.set_create_only(mode == SetMode::kCreate);
  request.set_replace_only(mode == SetMode::kReplace);
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::SetTemplateResponse response, api->SetTemplate(request));
  if (ctx.json) return WriteJson(response, ctx.out);
  ctx.out << (response.created() ? "Created template " : "Replaced template ")
          << response.template_().name() << '\n';
  return absl::OkStatus();
}

// The template's YAML, each line indented by `indent`, ending in a newline.
void WriteYaml(const std::string& yaml, const std::string& indent, std::ostream& out) {
  for (absl::string_view line : absl::StrSplit(yaml, '\n')) {
    if (!line.empty()) out << indent << line;
    out << '\n';
  }
}

absl::Status List(CliContext& ctx, bool details) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::ListTemplatesResponse response, api->ListTemplates());
  if (ctx.json) return WriteJson(response, ctx.out);
  if (!details) {
    Table table({"Name", "Created", "Updated"});
    for (const v1::Template& t : response.templates()) {
      table.AddRow({t.name(), FormatTimeMs(t.create_time_ms()), FormatTimeMs(t.update_time_ms())});
    }
    table.Render(ctx.out, ctx.width);
    return absl::OkStatus();
  }
  bool first = true;
  for (const v1::Template& t : response.templates()) {
    if (!first) ctx.out << '\n';
    first = false;
    RenderKeyValues({{"Name", t.name()},
                     {"Created", FormatTimeMs(t.create_time_ms())},
                     {"Updated", FormatTimeMs(t.update_time_ms())},
                     {"Config", ""}},
                    ctx.out);
    std::string yaml = t.config_yaml();
    while (!yaml.empty() && yaml.back() == '\n') yaml.pop_back();
    WriteYaml(yaml, "  ", ctx.out);
  }
  return absl::OkStatus();
}

absl::Status Describe(CliContext& ctx, const std::string& name) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetTemplateResponse response, api->GetTemplate(name));
  if (ctx.json) return WriteJson(response.template_(), ctx.out);
  const std::string& yaml = response.template_().config_yaml();
  ctx.out << yaml;
  if (!yaml.empty() && yaml.back() != '\n') ctx.out << '\n';
  return absl::OkStatus();
}

absl::Status Remove(CliContext& ctx, const std::string& name) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  RETURN_IF_ERROR(api->RemoveTemplate(name));
  ctx.out << "Removed template " << name << '\n';
  return absl::OkStatus();
}

}  // namespace

void RegisterTemplateCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* group =
      app.add_subcommand("template", "manage config templates (merged under experiment configs)")
          ->alias("tpl");
  group->require_subcommand(1);
  auto options = std::make_shared<TemplateOptions>();

  struct SetCommand {
    const char* name;
    const char* help;
    SetMode mode;
  };
  for (const SetCommand& c :
       {SetCommand{"set", "create or replace a template (says which)", SetMode::kCreateOrReplace},
        SetCommand{"create", "create a template (an error when it exists)", SetMode::kCreate},
        SetCommand{"update-config", "replace an existing template's config",
                   SetMode::kReplace}}) {
    CLI::App* set = group->add_subcommand(c.name, c.help);
    set->add_option("NAME", options->name, "template name")->required();
    set->add_option("FILE", options->file, "template file (YAML: part of an experiment config)")
        ->required();
    set->add_flag("--json", ctx.json, kJsonHelp);
    const SetMode mode = c.mode;
    set->callback([&ctx, options, mode] {
      ctx.action = [&ctx, options, mode] { return Set(ctx, *options, mode); };
    });
  }

  CLI::App* list = group->add_subcommand("list", "list templates")->alias("ls");
  list->add_flag("-d,--details", options->details, "print each template's config too");
  list->add_flag("--json", ctx.json, kJsonHelp);
  list->callback([&ctx, options] {
    ctx.action = [&ctx, options] { return List(ctx, options->details); };
  });

  CLI::App* describe = group->add_subcommand("describe", "print a template's config");
  describe->add_option("NAME", options->name, "template name")->required();
  describe->add_flag("--json", ctx.json, kJsonHelp);
  describe->callback([&ctx, options] {
    ctx.action = [&ctx, options] { return Describe(ctx, options->name); };
  });

  CLI::App* remove = group->add_subcommand("remove", "remove a template")->alias("rm");
  remove->add_option("NAME", options->name, "template name")->required();
  remove->callback([&ctx, options] {
    ctx.action = [&ctx, options] { return Remove(ctx, options->name); };
  });
}

}  // namespace det::cli
