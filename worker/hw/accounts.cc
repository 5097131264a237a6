#include "worker/hw/accounts.h"

#include <grp.h>
#include <pwd.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainctl::worker {
namespace {

Account FromPasswd(const passwd& pw) {
  Account a;
  a.run_as.user = pw.pw_name;
  a.run_as.uid = static_cast<int>(pw.pw_uid);
  a.run_as.gid = static_cast<int>(pw.pw_gid);
  a.home = pw.pw_dir != nullptr ? pw.pw_dir : "";
  a.shell = pw.pw_shell != nullptr ? pw.pw_shell : "";
  // getgrouplist: the primary group plus every group listing the user.
  int count = 16;
  std::vector<gid_t> groups(count);
  while (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &count) < 0) {
    groups.resize(count);  // count now holds the number needed
  }
  groups.resize(count);
  for (gid_t g : groups) a.run_as.groups.push_back(static_cast<int>(g));
  return a;
}

}  // namespace

absl::StatusOr<Account> LookupAccount(absl::string_view user) {
  if (user.empty()) return absl::InvalidArgumentError("user: empty name");
  const std::string name(user);
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? size : 16384);
  passwd pw;
  passwd* found = nullptr;
  int err;
  while ((err = getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found)) ==
         ERANGE) {
    buf.resize(buf.size() * 2);
  }
  if (found == nullptr) {
    // getpwnam_r reports "no such user" as 0 (or ENOENT/ESRCH/EBADF/EPERM on
    // some name services): all mean no account.
    if (err == 0 || err == ENOENT || err == ESRCH || err == EBADF || err == EPERM) {
      return absl::NotFoundError(
          absl::StrFormat("user %s has no local account on this node", name));
    }
    return absl::InternalError(
        absl::StrCat("looking up user ", name, ": ", std::strerror(err)));
  }
  return FromPasswd(pw);
}

Account CurrentAccount() {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? size : 16384);
  passwd pw;
  passwd* found = nullptr;
  while (getpwuid_r(geteuid(), &pw, buf.data(), buf.size(), &found) == ERANGE) {
    buf.resize(buf.size() * 2);
  }
  if (found != nullptr) return FromPasswd(pw);
  Account a;
  a.run_as.uid = static_cast<int>(geteuid());
  a.run_as.gid = static_cast<int>(getegid());
  a.run_as.user = absl::StrCat("uid-", a.run_as.uid);
  return a;
}

}  // namespace trainctl::worker
