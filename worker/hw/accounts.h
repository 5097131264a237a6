#ifndef TRAINCTL_WORKER_HW_ACCOUNTS_H_
#define TRAINCTL_WORKER_HW_ACCOUNTS_H_

// The node's local accounts: which uid, gid, groups and home a user name
// maps to (the name service: /etc/passwd, LDAP or SSSD through nsswitch).

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/hw/process_launcher.h"

namespace trainctl::worker {

// A local account, as the task of a job of that user runs under it.
struct Account {
  RunAs run_as;  // user, uid, primary gid, supplementary groups
  std::string home;
  std::string shell;
};

// Looks `user` up with getpwnam_r and getgrouplist (the Slurm rule: a job
// runs as the local account named like its authenticated user).
// Errors: INVALID_ARGUMENT for an empty name; NOT_FOUND "user U has no local
// account on this node" when the name service knows no such user; INTERNAL
// when the lookup itself fails (errno text).
absl::StatusOr<Account> LookupAccount(absl::string_view user);

// The account of this process's effective uid (getpwuid_r); an account named
// "uid-N" with no home when the name service has no entry for it.
Account CurrentAccount();

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_ACCOUNTS_H_
