#ifndef TRAINCTL_WORKER_HW_CGROUP_SELF_H_
#define TRAINCTL_WORKER_HW_CGROUP_SELF_H_

// Moving the calling process into a cgroup v2, from a process that is about
// to exec: plain C++ with no dependencies (no Abseil, no allocation), so that
// the static trainctl-task-shim can link it and call it between fork and exec.
// The full cgroup API (creating task cgroups, limits, usage, kill) is
// CgroupTree in cgroup.h.

namespace trainctl::worker {

// Moves the calling process into the cgroup v2 directory `dir` (absolute
// path, e.g. "/sys/fs/cgroup/system.slice/trainctl-agent.service/tasks/j1-r0")
// by writing "0" to `dir`/cgroup.procs; its threads move with it, and every
// process it starts afterwards is born in that cgroup. Async-signal-safe: only
// open(2), write(2) and close(2) on a path built in a stack buffer, so it may
// be called in the child of a fork() of a multi-threaded process.
//
// Returns 0, or the errno of the failing call: ENAMETOOLONG when the path does
// not fit PATH_MAX; ENOENT when `dir` does not exist; EACCES / EROFS when the
// cgroup tree is not writable (not delegated to this user, or mounted
// read-only, e.g. systemd's ProtectControlGroups=); EBUSY when `dir` has
// controllers enabled in its cgroup.subtree_control (cgroup v2 allows
// processes only in leaves); EOPNOTSUPP when `dir` is a threaded cgroup;
// ENODEV and others as cgroup-v2(7) documents for writes to cgroup.procs.
int MoveSelfIntoCgroup(const char* dir);

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_CGROUP_SELF_H_
