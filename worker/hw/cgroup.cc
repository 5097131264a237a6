#include "worker/hw/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace trainctl::worker {
namespace {

constexpr const char* kWanted[] = {"cpu", "memory", "pids"};
constexpr int64_t kCpuPeriodUs = 100000;
constexpr int64_t kMinCpuQuotaUs = 1000;
// Rounds of "move the cgroup's processes into the leaf, then enable the
// controllers": a process forked meanwhile makes the enabling fail (EBUSY).
constexpr int kMoveRounds = 5;

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

bool IsDir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string ErrnoText(int err) { return std::strerror(err); }

absl::StatusOr<std::string> ReadText(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return absl::InternalError(absl::StrCat("cannot read ", path, ": ", ErrnoText(err)));
  }
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      // ENODEV: the cgroup was removed while open.
      return absl::InternalError(absl::StrCat("cannot read ", path, ": ", ErrnoText(err)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

// One write(2) of `text` (cgroupfs takes one value per write). Returns 0 or
// errno. O_CREAT only matters for the fake trees of the tests (plain
// directories): on cgroupfs every file written here exists (controllers are
// checked first), and opening an existing file with O_CREAT does not create.
int WriteRaw(const std::string& path, absl::string_view text) {
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  ssize_t w;
  do {
    w = write(fd, text.data(), text.size());
  } while (w < 0 && errno == EINTR);
  const int err = w < 0 ? errno : (static_cast<size_t>(w) != text.size() ? EIO : 0);
  close(fd);
  return err;
}

absl::Status WriteText(const std::string& path, absl::string_view text) {
  const int err = WriteRaw(path, text);
  if (err == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("cannot write \"", absl::StripAsciiWhitespace(text), "\" to ", path,
                   ": ", ErrnoText(err)));
}

std::vector<int> ParsePids(absl::string_view text) {
  std::vector<int> pids;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    int pid = 0;
    if (absl::SimpleAtoi(line, &pid) && pid > 0) pids.push_back(pid);
  }
  return pids;
}

std::vector<std::string> ChildDirs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code ec2;
    if (e.is_directory(ec2)) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Pids of `dir` and every cgroup below it.
void CollectPids(const std::string& dir, std::vector<int>* pids) {
  if (auto text = ReadText(dir + "/cgroup.procs"); text.ok()) {
    for (int p : ParsePids(*text)) pids->push_back(p);
  }
  for (const std::string& child : ChildDirs(dir)) CollectPids(child, pids);
}

std::vector<int> SubtreePids(const std::string& dir) {
  std::vector<int> pids;
  CollectPids(dir, &pids);
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

std::string FirstPids(const std::vector<int>& pids) {
  constexpr size_t kShown = 3;
  std::vector<int> shown(pids.begin(), pids.begin() + std::min(kShown, pids.size()));
  std::string s = absl::StrJoin(shown, ", ");
  if (pids.size() > kShown) absl::StrAppend(&s, " and ", pids.size() - kShown, " more");
  return s;
}

// `path` without trailing slashes ("/" stays "/").
std::string TrimSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

absl::Status NotWritable(const std::string& what, int err) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, " is not writable (", ErrnoText(err),
      "): the agent's cgroup must be delegated to it (systemd: Delegate=yes and no "
      "ProtectControlGroups= in the agent's unit; the unit runs as User=, which then "
      "owns it)"));
}

}  // namespace

bool IsValidCgroupName(absl::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

absl::StatusOr<CgroupTree> CgroupTree::Open(std::string cgroupfs_root,
                                           std::string self_cgroup_file) {
  CgroupTree t;
  cgroupfs_root = TrimSlashes(std::move(cgroupfs_root));
  // 1. The v2 mount.
  if (Exists(cgroupfs_root + "/cgroup.controllers")) {
    t.mount_ = cgroupfs_root;
  } else if (Exists(cgroupfs_root + "/unified/cgroup.controllers")) {
    t.mount_ = cgroupfs_root + "/unified";
    t.hybrid_ = true;
  } else {
    return absl::FailedPreconditionError(absl::StrCat(
        "no cgroup v2 under ", cgroupfs_root, " (neither ", cgroupfs_root,
        "/cgroup.controllers nor ", cgroupfs_root,
        "/unified/cgroup.controllers exists: cgroup v1 only; boot with "
        "systemd.unified_cgroup_hierarchy=1 for per-task cgroups)"));
  }

  // 2. The agent's cgroup.
  auto self = ReadText(self_cgroup_file);
  if (!self.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the agent's cgroup: ", self.status().message()));
  }
  std::string rel;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(*self, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "0::")) {
      rel = std::string(absl::StripAsciiWhitespace(line));
      found = true;
      break;
    }
  }
  if (!found || rel.empty() || rel[0] != '/') {
    return absl::FailedPreconditionError(absl::StrCat(
        "no cgroup v2 line (\"0::/path\") in ", self_cgroup_file,
        ": the agent's process is not in a cgroup v2 hierarchy"));
  }
  rel = TrimSlashes(rel);
  if (rel == "/") {
    return absl::FailedPreconditionError(absl::StrCat(
        "the agent runs in the root cgroup of ", t.mount_,
        " (\"0::/\" in ", self_cgroup_file,
        "); it will not split the machine's root cgroup: start it in a cgroup of "
        "its own (systemd: Delegate=yes in its unit; by hand: mkdir ", t.mount_,
        "/trainctl && echo $$ > ", t.mount_,
        "/trainctl/cgroup.procs in the shell that starts it)"));
  }
  std::string base = t.mount_ + rel;
  if (!IsDir(base)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the agent's cgroup ", rel, " (from ", self_cgroup_file, ") is not under ",
        t.mount_, " (", base,
        " does not exist: another cgroup namespace or mount namespace?)"));
  }
  // Open() again in a process it already moved: use the prepared tree.
  const std::string parent = base.substr(0, base.rfind('/'));
  if (absl::EndsWith(base, "/agent") && parent.size() > t.mount_.size() &&
      IsDir(parent + "/tasks")) {
    base = parent;
  }
  t.base_ = base;
  t.leaf_ = base + "/agent";
  t.tasks_ = base + "/tasks";
  // The true root has no cgroup.type; a namespace root (inside a container,
  // "0::/") does, and takes the same rules as any other cgroup.
  if (auto type = ReadText(base + "/cgroup.type"); type.ok()) {
    const absl::string_view ty = absl::StripAsciiWhitespace(*type);
    if (ty != "domain") {
      return absl::FailedPreconditionError(absl::StrCat(
          "the agent's cgroup ", base, " is of type \"", ty,
          "\" (cgroup.type), not \"domain\": threaded cgroups cannot hold task "
          "cgroups"));
    }
  }

  // 3. Writable?
  if (access(base.c_str(), W_OK) != 0) return NotWritable(base, errno);
  if (access((base + "/cgroup.procs").c_str(), W_OK) != 0) {
    return NotWritable(base + "/cgroup.procs", errno);
  }
  if (mkdir(t.leaf_.c_str(), 0755) != 0 && errno != EEXIST) {
    const int err = errno;
    if (err == EACCES || err == EPERM || err == EROFS) return NotWritable(base, err);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", t.leaf_, ": ", ErrnoText(err)));
  }

  // Which controllers the parent offers.
  std::vector<std::string> offered;
  if (auto text = ReadText(base + "/cgroup.controllers"); text.ok()) {
    offered = absl::StrSplit(*text, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  }
  std::vector<std::string> to_enable;
  for (const char* c : kWanted) {
    if (std::find(offered.begin(), offered.end(), c) != offered.end()) {
      to_enable.push_back(c);
    } else {
      t.missing_.push_back(absl::StrCat(
          c, " (not offered by the parent: bound to cgroup v1 or not delegated)"));
    }
  }

  // Move the cgroup's processes into the leaf, then enable the controllers
  // below the agent's cgroup. A process forked between the two makes the
  // enabling fail with EBUSY: move again.
  std::vector<std::string> enabled;
  std::vector<std::string> failed;
  std::set<int> moved;
  for (int round = 0; round < kMoveRounds; ++round) {
    std::vector<int> pids;
    if (auto text = ReadText(base + "/cgroup.procs"); text.ok()) pids = ParsePids(*text);
    if (round == 0 && std::find(pids.begin(), pids.end(), getpid()) == pids.end()) {
      pids.push_back(getpid());  // Not listed: a fake tree, or already moved.
    }
    for (int pid : pids) {
      const int err = WriteRaw(t.leaf_ + "/cgroup.procs", absl::StrCat(pid, "\n"));
      if (err == ESRCH) continue;  // Exited meanwhile.
      if (err != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot move ", pid == getpid() ? "the agent (pid " : "pid ", pid,
            pid == getpid() ? ")" : "", " into ", t.leaf_, ": ", ErrnoText(err),
            err == EACCES || err == EPERM
                ? " (moving needs write access to the cgroup.procs of both cgroups' "
                  "common ancestor: delegate the agent's cgroup to it)"
                : ""));
      }
      moved.insert(pid);
    }
    enabled.clear();
    failed.clear();
    bool busy = false;
    for (const std::string& c : to_enable) {
      const int err = WriteRaw(base + "/cgroup.subtree_control", absl::StrCat("+", c, "\n"));
      if (err == 0) {
        enabled.push_back(c);
      } else if (err == EBUSY) {
        busy = true;
      } else {
        failed.push_back(absl::StrCat(c, " (enabling it in ", base,
                                      "/cgroup.subtree_control failed: ", ErrnoText(err),
                                      ")"));
      }
    }
    if (!busy) break;
    if (round + 1 == kMoveRounds) {
      for (const std::string& c : to_enable) {
        if (std::find(enabled.begin(), enabled.end(), c) == enabled.end() &&
            std::none_of(failed.begin(), failed.end(),
                         [&](const std::string& f) { return absl::StartsWith(f, c + " "); })) {
          failed.push_back(absl::StrCat(c, " (", base,
                                        " keeps getting new processes: EBUSY)"));
        }
      }
    }
  }

  if (mkdir(t.tasks_.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", t.tasks_, ": ", ErrnoText(errno)));
  }
  for (const std::string& c : enabled) {
    const int err = WriteRaw(t.tasks_ + "/cgroup.subtree_control", absl::StrCat("+", c, "\n"));
    if (err == 0) {
      t.controllers_.push_back(c);
    } else {
      failed.push_back(absl::StrCat(c, " (enabling it in ", t.tasks_,
                                    "/cgroup.subtree_control failed: ", ErrnoText(err),
                                    ")"));
    }
  }
  for (std::string& f : failed) t.missing_.push_back(std::move(f));
  t.moved_ = static_cast<int>(moved.size());
  return t;
}

std::string CgroupTree::Describe() const {
  std::string s = absl::StrCat("cgroup v2 at ", mount_,
                               hybrid_ ? " (hybrid: the v1 controllers are elsewhere)"
                                       : " (unified)",
                               "; agent cgroup ", RelativePath(base_), " (", moved_,
                               moved_ == 1 ? " process" : " processes",
                               " moved to agent/); task cgroups under ",
                               RelativePath(tasks_), "; controllers: ",
                               controllers_.empty() ? "none" : absl::StrJoin(controllers_, " "));
  if (!missing_.empty()) {
    absl::StrAppend(&s, "; missing: ", absl::StrJoin(missing_, ", "),
                    " - tasks get no ", controllers_.empty() ? "limits" : "such limits");
  }
  return s;
}

std::string CgroupTree::RelativePath(const std::string& dir) const {
  if (dir.size() >= mount_.size() && dir.compare(0, mount_.size(), mount_) == 0) {
    std::string rel = dir.substr(mount_.size());
    return rel.empty() ? "/" : rel;
  }
  return dir;
}

absl::Status CgroupTree::CheckTaskDir(const std::string& dir) const {
  const std::string prefix = tasks_ + "/";
  if (dir.size() <= prefix.size() || dir.compare(0, prefix.size(), prefix) != 0 ||
      !IsValidCgroupName(absl::string_view(dir).substr(prefix.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, " is not a task cgroup of this agent (a directory right under ",
                     tasks_, ")"));
  }
  if (!IsDir(dir)) return absl::NotFoundError(absl::StrCat(dir, " does not exist"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> CgroupTree::CreateTaskCgroup(absl::string_view name,
                                                         const CgroupLimits& limits) const {
  if (!IsValidCgroupName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad task cgroup name \"", name,
        "\": use 1 to 255 of [A-Za-z0-9._-], not \".\" or \"..\""));
  }
  if (!(limits.cpus >= 0) || !std::isfinite(limits.cpus)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad CPU limit ", limits.cpus, " for ", name, ": want cores >= 0"));
  }
  if (limits.memory_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad memory limit ", limits.memory_bytes, " for ", name, ": want bytes >= 0"));
  }
  auto need = [&](const char* c, const char* what) -> absl::Status {
    if (std::find(controllers_.begin(), controllers_.end(), c) != controllers_.end()) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "task ", name, " asks for a ", what, " limit but the ", c,
        " controller is not enabled in ", tasks_,
        " (on a hybrid cgroup v1/v2 host it is bound to v1; on systemd hosts the "
        "agent's unit needs Delegate=yes)"));
  };
  if (limits.cpus > 0) {
    if (absl::Status s = need("cpu", "CPU"); !s.ok()) return s;
  }
  if (limits.memory_bytes > 0) {
    if (absl::Status s = need("memory", "memory"); !s.ok()) return s;
  }
  const std::string dir = absl::StrCat(tasks_, "/", name);
  if (mkdir(dir.c_str(), 0755) != 0) {
    const int err = errno;
    if (err == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat(
          "task cgroup ", dir,
          " exists (a running task of that name, or one left by an agent that died: "
          "Kill() and Remove() it)"));
    }
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ErrnoText(err)));
  }
  std::vector<std::pair<std::string, std::string>> writes;
  if (limits.cpus > 0) {
    const int64_t quota = std::max<int64_t>(
        kMinCpuQuotaUs, std::llround(limits.cpus * static_cast<double>(kCpuPeriodUs)));
    writes.emplace_back("cpu.max", absl::StrCat(quota, " ", kCpuPeriodUs, "\n"));
  }
  if (limits.memory_bytes > 0) {
    writes.emplace_back("memory.max", absl::StrCat(limits.memory_bytes, "\n"));
    writes.emplace_back("memory.oom.group", "1\n");
  }
  for (const auto& [file, value] : writes) {
    if (absl::Status s = WriteText(dir + "/" + file, value); !s.ok()) {
      rmdir(dir.c_str());  // Best effort; on a fake tree the files stay.
      return s;
    }
  }
  return dir;
}

absl::StatusOr<CgroupUsage> CgroupTree::ReadUsage(const std::string& dir) const {
  if (absl::Status s = CheckTaskDir(dir); !s.ok()) return s;
  CgroupUsage u;
  auto stat = ReadText(dir + "/cpu.stat");
  if (!stat.ok()) {
    if (!IsDir(dir)) return absl::NotFoundError(absl::StrCat(dir, " does not exist"));
    return absl::InternalError(stat.status().message());
  }
  bool have_usage = false;
  for (absl::string_view line : absl::StrSplit(*stat, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "usage_usec ")) {
      have_usage = absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &u.cpu_usec);
      break;
    }
  }
  if (!have_usage) {
    return absl::InternalError(
        absl::StrCat(dir, "/cpu.stat has no usage_usec line: \"", *stat, "\""));
  }
  auto read_bytes = [&](const char* file, int64_t* out) {
    if (auto text = ReadText(dir + "/" + file); text.ok()) {
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), out)) *out = 0;
    }
  };
  read_bytes("memory.current", &u.memory_bytes);
  read_bytes("memory.peak", &u.memory_peak_bytes);
  u.pids = SubtreePids(dir);
  return u;
}

absl::StatusOr<std::vector<int>> CgroupTree::Pids(const std::string& dir) const {
  if (absl::Status s = CheckTaskDir(dir); !s.ok()) return s;
  return SubtreePids(dir);
}

absl::StatusOr<bool> CgroupTree::Populated(const std::string& dir) const {
  if (absl::Status s = CheckTaskDir(dir); !s.ok()) return s;
  auto events = ReadText(dir + "/cgroup.events");
  if (!events.ok()) {
    if (!IsDir(dir)) return absl::NotFoundError(absl::StrCat(dir, " does not exist"));
    return absl::InternalError(events.status().message());
  }
  for (absl::string_view line : absl::StrSplit(*events, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "populated ")) {
      line = absl::StripAsciiWhitespace(line);
      if (line == "0") return false;
      if (line == "1") return true;
      break;
    }
  }
  return absl::InternalError(
      absl::StrCat(dir, "/cgroup.events has no populated 0|1 line: \"", *events, "\""));
}

absl::Status CgroupTree::Kill(const std::string& dir, absl::Duration wait) const {
  if (absl::Status s = CheckTaskDir(dir); !s.ok()) return s;
  const bool have_kill = Exists(dir + "/cgroup.kill");
  if (have_kill) {
    if (absl::Status s = WriteText(dir + "/cgroup.kill", "1\n"); !s.ok()) return s;
  }
  const absl::Time deadline = absl::Now() + wait;
  while (true) {
    std::vector<int> pids = SubtreePids(dir);
    if (pids.empty()) return absl::OkStatus();
    // Without cgroup.kill (Linux < 5.14), signal what is listed now: a
    // process forked meanwhile shows up in the next round.
    if (!have_kill) {
      for (int pid : pids) kill(pid, SIGKILL);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          pids.size(), pids.size() == 1 ? " process" : " processes", " still in ", dir,
          " ", absl::FormatDuration(wait), " after SIGKILL (pids ", FirstPids(pids),
          "): in uninterruptible sleep, e.g. the GPU driver releasing their memory; "
          "call Kill() again or poll ReadUsage() before Remove()"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::Status CgroupTree::Remove(const std::string& dir) const {
  if (absl::Status s = CheckTaskDir(dir); !s.ok()) return s;
  // Deepest first: a cgroup with child cgroups cannot be removed.
  std::vector<std::string> order;
  std::vector<std::string> stack = {dir};
  while (!stack.empty()) {
    std::string d = std::move(stack.back());
    stack.pop_back();
    for (std::string& c : ChildDirs(d)) stack.push_back(std::move(c));
    order.push_back(std::move(d));
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (rmdir(it->c_str()) == 0) continue;
    const int err = errno;
    if (err == EBUSY) {
      const std::vector<int> pids = SubtreePids(dir);
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot remove ", *it, ": still has processes",
          pids.empty() ? "" : absl::StrCat(" (pids ", FirstPids(pids), ")"),
          "; Kill() it first"));
    }
    if (err == ENOENT && *it != dir) continue;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(dir, " does not exist"));
    return absl::InternalError(absl::StrCat("cannot remove ", *it, ": ", ErrnoText(err)));
  }
  return absl::OkStatus();
}

}  // namespace trainctl::worker
