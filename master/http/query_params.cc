#include "master/http/query_params.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status/status_macros.h"

namespace det::master {
namespace {

namespace pb = google::protobuf;

// Sets one scalar `field` of `message` (element of a repeated field when it is one) from
// the text of a parameter.
absl::Status SetField(pb::Message* message, const pb::FieldDescriptor* field,
                      const std::string& name, const std::string& text) {
  const pb::Reflection* r = message->GetReflection();
  const bool repeated = field->is_repeated();
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", name, "': expected ", what, ", got \"", text, "\""));
  };
  switch (field->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("an integer");
      repeated ? r->AddInt32(message, field, v) : r->SetInt32(message, field, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_INT64: {
      int64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("an integer");
      repeated ? r->AddInt64(message, field, v) : r->SetInt64(message, field, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("a non-negative integer");
      repeated ? r->AddUInt32(message, field, v) : r->SetUInt32(message, field, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("a non-negative integer");
      repeated ? r->AddUInt64(message, field, v) : r->SetUInt64(message, field, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: {
      double v;
      if (!absl::SimpleAtod(text, &v)) return bad("a number");
      repeated ? r->AddDouble(message, field, v) : r->SetDouble(message, field, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      float v;
      if (!absl::SimpleAtof(text, &v)) return bad("a number");
      repeated ? r->AddFloat(message, field, v) : r->SetFloat(message, field, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL: {
      bool v;
      if (!absl::SimpleAtob(text, &v)) return bad("true or false");
      repeated ? r->AddBool(message, field, v) : r->SetBool(message, field, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_STRING:
      repeated ? r->AddString(message, field, text) : r->SetString(message, field, text);
      break;
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      // "STATE_COMPLETED", "COMPLETED" (without the enum's prefix) or the number.
      const pb::EnumDescriptor* e = field->enum_type();
      std::string upper = absl::AsciiStrToUpper(text);
      const pb::EnumValueDescriptor* v = e->FindValueByName(upper);
      for (int i = 0; v == nullptr && i < e->value_count(); ++i) {
        if (absl::EndsWith(e->value(i)->name(), absl::StrCat("_", upper))) v = e->value(i);
      }
      int number;
      if (v == nullptr && absl::SimpleAtoi(text, &number)) v = e->FindValueByNumber(number);
      if (v == nullptr) return bad(absl::StrCat("a value of ", e->name()));
      repeated ? r->AddEnum(message, field, v) : r->SetEnum(message, field, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' cannot be given in the URL; send it in the body"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyParams(const Params& params, pb::Message* message) {
  const pb::Descriptor* d = message->GetDescriptor();
  for (const auto& [name, values] : params) {
    const pb::FieldDescriptor* field = d->FindFieldByName(name);
    for (int i = 0; field == nullptr && i < d->field_count(); ++i) {
      if (d->field(i)->json_name() == name) field = d->field(i);
    }
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown parameter '", name, "'"));
    }
    if (field->is_repeated()) {
      message->GetReflection()->ClearField(message, field);
      for (const auto& v : values) {
        for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipEmpty())) {
          RETURN_IF_ERROR(SetField(message, field, name, std::string(part)));
        }
      }
    } else {
      if (values.size() > 1) {
        return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' given ",
                                                       values.size(), " times"));
      }
      RETURN_IF_ERROR(SetField(message, field, name, values.front()));
    }
  }
  return absl::OkStatus();
}

std::optional<std::string> TakeParam(Params& params, const std::string& name) {
  auto it = params.find(name);
  if (it == params.end()) return std::nullopt;
  std::string v = it->second.back();
  params.erase(it);
  return v;
}

}  // namespace det::master
