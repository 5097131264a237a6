#include "common/proto_utf8.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/common.h"

namespace trainctl {

bool IsValidUtf8(const std::string& s) {
  return google::protobuf::internal::IsStructurallyValidUTF8(s.data(),
                                                             static_cast<int>(s.size()));
}

std::string FirstInvalidUtf8Field(const google::protobuf::Message& msg,
                                  const std::string& prefix, bool include_maps) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  std::string scratch;
  for (const FieldDescriptor* f : fields) {
    auto name = [&] { return absl::StrCat(prefix, prefix.empty() ? "" : ".", f->name()); };
    if (f->is_map()) {
      if (!include_maps) continue;
      const FieldDescriptor* key = f->message_type()->map_key();
      for (int i = 0; i < r->FieldSize(msg, f); ++i) {
        const google::protobuf::Message& entry = r->GetRepeatedMessage(msg, f, i);
        const google::protobuf::Reflection* er = entry.GetReflection();
        const std::string k = key->type() == FieldDescriptor::TYPE_STRING
                                  ? er->GetString(entry, key)
                                  : std::string();
        const std::string at =
            absl::StrCat(name(), "[", absl::CHexEscape(k.substr(0, 64)), "]");
        if (!IsValidUtf8(k)) return at;
        std::string sub = FirstInvalidUtf8Field(entry, "", true);
        if (!sub.empty()) return at;
      }
      continue;
    }
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      if (!f->is_repeated()) {
        if (!IsValidUtf8(r->GetStringReference(msg, f, &scratch))) return name();
        continue;
      }
      for (int i = 0; i < r->FieldSize(msg, f); ++i) {
        if (!IsValidUtf8(r->GetRepeatedStringReference(msg, f, i, &scratch))) {
          return absl::StrCat(name(), "[", i, "]");
        }
      }
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (!f->is_repeated()) {
        std::string sub = FirstInvalidUtf8Field(r->GetMessage(msg, f), name(), include_maps);
        if (!sub.empty()) return sub;
        continue;
      }
      for (int i = 0; i < r->FieldSize(msg, f); ++i) {
        std::string sub = FirstInvalidUtf8Field(r->GetRepeatedMessage(msg, f, i),
                                                absl::StrCat(name(), "[", i, "]"), include_maps);
        if (!sub.empty()) return sub;
      }
    }
  }
  return "";
}

}  // namespace trainctl
