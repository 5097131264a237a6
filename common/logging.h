#ifndef TRAINCTL_COMMON_LOGGING_H_
#define TRAINCTL_COMMON_LOGGING_H_

// The one logging library of trainctl (spdlog 1.10 from Debian), behind these
// macros so it can be swapped in one place. Logs go to stderr.
//   TC_LOG_INFO("node {} registered with {} GPUs", name, n);

#include <string>

#include "spdlog/spdlog.h"

#define TC_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define TC_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define TC_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define TC_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

namespace trainctl {

// Sets up stderr logging for a binary: `program` prefixes each line; `level` is
// one of debug, info, warn, error (unknown values mean info).
void InitLogging(const std::string& program, const std::string& level);

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_LOGGING_H_
