#include "worker/hw/cgroup_self.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

namespace trainctl::worker {

int MoveSelfIntoCgroup(const char* dir) {
  static constexpr char kProcs[] = "/cgroup.procs";
  char path[PATH_MAX];
  size_t n = 0;
  for (const char* p = dir; *p != '\0'; ++p) {
    if (n + 1 >= sizeof(path)) return ENAMETOOLONG;
    path[n++] = *p;
  }
  for (const char* p = kProcs; *p != '\0'; ++p) {
    if (n + 1 >= sizeof(path)) return ENAMETOOLONG;
    path[n++] = *p;
  }
  path[n] = '\0';
  // O_APPEND: on cgroupfs the offset does not matter; on a plain file (the
  // fake tree of the tests) the write lands after what is there.
  const int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return errno;
  // "0" means the writing process (cgroup-v2(7)), so no pid formatting.
  ssize_t w;
  do {
    w = write(fd, "0\n", 2);
  } while (w < 0 && errno == EINTR);
  const int err = w < 0 ? errno : (w != 2 ? EIO : 0);
  close(fd);
  return err;
}

}  // namespace trainctl::worker
