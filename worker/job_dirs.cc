#include "worker/job_dirs.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainctl::worker {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Closes a descriptor at scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

absl::Status MakeCheckpointDir(const std::string& dir, int64_t job_id,
                               const std::optional<RunAs>& owner) {
  const std::vector<absl::string_view> parts = absl::StrSplit(dir, '/');
  bool normal = dir.size() > 1 && dir[0] == '/' && parts.size() >= 3;
  for (size_t i = 1; normal && i < parts.size(); ++i) {
    normal = !parts[i].empty() && parts[i] != "." && parts[i] != "..";
  }
  if (!normal || parts.back() != absl::StrCat(job_id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint directory \"", dir, "\" of job ", job_id,
        ": want an absolute, normal path <root>/", job_id));
  }
  const std::string parent = dir.substr(0, dir.rfind('/'));
  const std::string name(parts.back());
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create checkpoint root ", parent, ": ", ec.message()));
  }
  Fd p{open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (p.fd < 0) return Errno("open", parent);
  const bool made = mkdirat(p.fd, name.c_str(), 0700) == 0;
  if (!made && errno != EEXIST) return Errno("mkdir", dir);
  Fd d{openat(p.fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  if (d.fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint directory ", dir, " exists and is not a directory (or is a link): "
          "left as it is"));
    }
    return Errno("open", dir);
  }
  const uid_t uid = owner.has_value() ? static_cast<uid_t>(owner->uid) : geteuid();
  const gid_t gid = owner.has_value() ? static_cast<gid_t>(owner->gid) : getegid();
  if (!made) {
    struct stat st;
    if (fstat(d.fd, &st) != 0) return Errno("stat", dir);
    if (st.st_uid != uid) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint directory ", dir, " exists and belongs to uid ", st.st_uid,
          ", not to ", owner.has_value() ? owner->user : "the agent's account", " (uid ",
          uid, "): not handed over"));
    }
    return absl::OkStatus();
  }
  if (owner.has_value() && fchown(d.fd, uid, gid) != 0) return Errno("chown", dir);
  if (fchmod(d.fd, 0700) != 0) return Errno("chmod", dir);
  return absl::OkStatus();
}

}  // namespace trainctl::worker
