#ifndef TRAINCTL_COMMON_PROTO_UTF8_H_
#define TRAINCTL_COMMON_PROTO_UTF8_H_

// proto3 strings must be UTF-8: a client's protobuf will not send a request
// holding another byte string, and the server sees only a transport error
// (the CLI printed "UNIMPLEMENTED" with no message for `submit --name
// $'\xff'`). These find the field to name instead, with protobuf's own check
// (IsStructurallyValidUTF8, what its parser applies).

#include <string>

#include "google/protobuf/message.h"

namespace trainctl {

// Whether `s` is valid UTF-8 (protobuf's rule).
bool IsValidUtf8(const std::string& s);

// The first string field of `msg`, recursively (`bytes` fields excluded),
// that is not valid UTF-8, as a path below `prefix` ("name", "command[2]",
// "spec.env[LANG]" for a map entry, its key C-escaped); empty when all are
// valid. With `include_maps` false map fields are skipped: through
// reflection a map is copied into a repeated field of entries first, which
// costs a large request (a 500-task array) most of its CPU; such callers
// check their maps themselves.
std::string FirstInvalidUtf8Field(const google::protobuf::Message& msg,
                                  const std::string& prefix, bool include_maps);

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_PROTO_UTF8_H_
