#include "tests/fuzz/request_fuzzer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <deque>
#include <dirent.h>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/dependency.h"
#include "coordinator/job_spec.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/state_store.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "google/protobuf/text_format.h"
#include "spdlog/spdlog.h"

namespace trainctl::fuzz {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr size_t kMaxSamples = 20;

// Known bugs, each fixed and now a FixedIssue_* regression test in
// request_fuzz_test.cc; the fuzzer still recognises them, and one that comes
// back is a violation named after it (tests/fuzz/README.md).
//
// Known bug, shrunk inventory: a node that re-registers with less memory on
// a GPU keeps the reservations of the tasks it reports running there, which
// can then exceed the GPU's memory.
constexpr char kKnownShrunkInventory[] = "reregister_shrinks_gpu_memory_below_reservations";
// Known bug, failed register applied: RegisterAgent that fails with
// UNAVAILABLE (the store write failed) has already applied the new inventory
// in memory, marked the node READY and closed the old connection; its running
// tasks are not reconciled.
constexpr char kKnownFailedRegisterApplied[] = "failed_register_still_applies_inventory";
// Known bug, zero reservation: a valid gpu_fraction small enough that
// fraction x GPU memory is under 1e-3 bytes (1e-15 of 80 GiB) reserves 0
// bytes (scheduler.h says ceil(fraction x T) >= 1); placements still do not
// overlap (task_count).
// Fixed (request_fuzz_test.cc, FixedIssue_RestartAfterFailedWrites_...): after
// store writes failed (logged, kept in memory), a restart loaded the older
// job records, whose tasks could count as live on GPUs given out since, so
// reservations doubled until the node re-registered. The load now keeps the
// later placement (Job.placement_seq); overbooking after a restart is a
// violation like any other.
// Known bug, INT32_MIN priority: ValidateJobSpec checks
// std::abs(spec.priority()) > kMaxPriority; for INT32_MIN std::abs overflows
// (undefined behaviour, UBSan aborts) and in practice returns INT32_MIN, so
// priority -2147483648 passes.
constexpr char kKnownPriorityMin[] = "priority_int32_min_passes_validation";
constexpr char kKnownZeroReservation[] = "tiny_gpu_fraction_reserves_zero_bytes";

// ------------------------------------------------------------ randomness

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  uint64_t U64() { return gen_(); }
  // Uniform in [lo, hi].
  int64_t Range(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    if (span == std::numeric_limits<uint64_t>::max()) return static_cast<int64_t>(U64());
    return static_cast<int64_t>(static_cast<uint64_t>(lo) + U64() % (span + 1));
  }
  bool P(double p) { return Unit() < p; }
  double Unit() { return static_cast<double>(U64() >> 11) * 0x1.0p-53; }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Range(0, static_cast<int64_t>(v.size()) - 1))];
  }

 private:
  std::mt19937_64 gen_;
};

const std::vector<int64_t>& InterestingInts() {
  static const auto* v = new std::vector<int64_t>{
      0, 1, -1, 2, 3, 4, 7, 8, 9, 16, 100, 101, 127, 128, 129, 255, 256, 1000,
      1001, 1023, 1024, 1025, 4095, 4096, 4097, 8192, 29500, 65535, 65536,
      std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(),
      std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
      kGiB, 16 * kGiB, 80 * kGiB, 141 * kGiB, 128 * 1024};
  return *v;
}

const std::vector<double>& InterestingDoubles() {
  static const auto* v = new std::vector<double>{
      0.0, 1.0, 0.5, 0.25, 0.125, 1e-9, 1e-300, -0.5, -0.0, 1.0000001, 0.9999999,
      2.0, std::numeric_limits<double>::quiet_NaN(),
      std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max()};
  return *v;
}

const std::vector<std::string>& InterestingStrings() {
  static const auto* v = new std::vector<std::string>{
      "", "a", "python", "train.py", "/bin/true", "/tmp", "relative/dir", "n0", "n1",
      "CUDA_VISIBLE_DEVICES", "RANK", "TRAINCTL_TOKEN", "MASTER_PORT", "LD_PRELOAD",
      "A=B", "=", std::string("x\0y", 3), "\n", "\x01", "\x7f", "\xc3\xa9t\xc3\xa9",
      "GPU-n0-0", "--", "-", " ", "..", "/", std::string(127, 'n'),
      std::string(128, 'n'), std::string(129, 'r'), std::string(253, 'h'),
      std::string(254, 'h'), std::string(4096, 'w'), std::string(4097, 'w'),
      std::string(8193, 'v')};
  return *v;
}

int64_t RandInt(Rng& r) {
  if (r.P(0.5)) return r.Pick(InterestingInts());
  if (r.P(0.5)) return r.Range(-10, 20);
  return static_cast<int64_t>(r.U64());
}

double RandDouble(Rng& r) {
  if (r.P(0.6)) return r.Pick(InterestingDoubles());
  return r.Unit() * (r.P(0.8) ? 1.0 : 4.0) - (r.P(0.1) ? 1.0 : 0.0);
}

// Valid UTF-8 only: gRPC refuses a proto3 string that is not, so the core
// never sees one.
std::string RandString(Rng& r) {
  if (r.P(0.6)) return r.Pick(InterestingStrings());
  static const char kChars[] = "abcdefgXYZ0189_-./=:@ \t";
  std::string s(static_cast<size_t>(r.Range(0, 24)), 'a');
  for (char& c : s) c = kChars[r.Range(0, sizeof(kChars) - 2)];
  return s;
}

std::string RandBytes(Rng& r) {
  size_t n;
  if (r.P(0.5)) {
    n = 128;
  } else {
    n = static_cast<size_t>(r.Pick(std::vector<int64_t>{0, 1, 127, 129, 256, 4096}));
  }
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(r.U64());
  return s;
}

// ------------------------------------------------------------ reflection mutator

void RandomizeMessage(Message* m, Rng& r, int depth);

void SetRandomSingular(Message* m, const FieldDescriptor* f, Rng& r, int depth) {
  const Reflection* ref = m->GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      ref->SetInt32(m, f, static_cast<int32_t>(RandInt(r)));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      ref->SetInt64(m, f, RandInt(r));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      ref->SetUInt32(m, f, static_cast<uint32_t>(RandInt(r)));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      ref->SetUInt64(m, f, static_cast<uint64_t>(RandInt(r)));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      ref->SetDouble(m, f, RandDouble(r));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      ref->SetFloat(m, f, static_cast<float>(RandDouble(r)));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      ref->SetBool(m, f, r.P(0.5));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      // Open enums: unknown numbers too.
      ref->SetEnumValue(m, f, r.P(0.8) ? static_cast<int>(r.Range(0, 7))
                                       : static_cast<int32_t>(RandInt(r)));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      ref->SetString(m, f, f->type() == FieldDescriptor::TYPE_BYTES ? RandBytes(r)
                                                                     : RandString(r));
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (depth < 4) RandomizeMessage(ref->MutableMessage(m, f), r, depth + 1);
      break;
  }
}

void AddRandomRepeated(Message* m, const FieldDescriptor* f, Rng& r, int depth) {
  const Reflection* ref = m->GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      ref->AddInt32(m, f, static_cast<int32_t>(RandInt(r)));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      ref->AddInt64(m, f, RandInt(r));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      ref->AddUInt32(m, f, static_cast<uint32_t>(RandInt(r)));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      ref->AddUInt64(m, f, static_cast<uint64_t>(RandInt(r)));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      ref->AddDouble(m, f, RandDouble(r));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      ref->AddFloat(m, f, static_cast<float>(RandDouble(r)));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      ref->AddBool(m, f, r.P(0.5));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      ref->AddEnumValue(m, f, static_cast<int>(r.Range(0, 7)));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      ref->AddString(m, f, f->type() == FieldDescriptor::TYPE_BYTES ? RandBytes(r)
                                                                     : RandString(r));
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (depth < 4) RandomizeMessage(ref->AddMessage(m, f), r, depth + 1);
      break;
  }
}

// Changes one field of `m`: sets, clears, adds to, removes from or recurses.
void MutateMessage(Message* m, Rng& r, int depth = 0) {
  const Descriptor* d = m->GetDescriptor();
  if (d->field_count() == 0) return;
  const FieldDescriptor* f = d->field(static_cast<int>(r.Range(0, d->field_count() - 1)));
  const Reflection* ref = m->GetReflection();
  if (f->is_repeated()) {
    const int n = ref->FieldSize(*m, f);
    const int64_t what = r.Range(0, 9);
    if (what < 4 || n == 0) {
      const int add = r.P(0.9) ? 1 : static_cast<int>(r.Range(2, 12));
      for (int i = 0; i < add; ++i) AddRandomRepeated(m, f, r, depth);
    } else if (what < 6) {
      ref->RemoveLast(m, f);
    } else if (what < 7) {
      ref->ClearField(m, f);
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f->is_map() &&
               depth < 4) {
      MutateMessage(ref->MutableRepeatedMessage(m, f, static_cast<int>(r.Range(0, n - 1))),
                    r, depth + 1);
    } else if (n >= 2) {
      ref->SwapElements(m, f, 0, n - 1);
    } else {
      AddRandomRepeated(m, f, r, depth);  // a duplicate-ish second element
    }
    return;
  }
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && ref->HasField(*m, f) &&
      depth < 4 && r.P(0.7)) {
    MutateMessage(ref->MutableMessage(m, f), r, depth + 1);
    return;
  }
  if (r.P(0.15)) {
    ref->ClearField(m, f);
  } else {
    SetRandomSingular(m, f, r, depth);
  }
}

void RandomizeMessage(Message* m, Rng& r, int depth) {
  const Descriptor* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (!r.P(0.5)) continue;
    if (f->is_repeated()) {
      const int n = static_cast<int>(r.P(0.9) ? r.Range(0, 3) : r.Range(4, 16));
      for (int k = 0; k < n; ++k) AddRandomRepeated(m, f, r, depth);
    } else {
      SetRandomSingular(m, f, r, depth);
    }
  }
}

template <typename T>
void MaybeMutate(T& m, Rng& r, double p) {
  if (!r.P(p)) return;
  const int n = static_cast<int>(r.Range(1, 3));
  for (int i = 0; i < n; ++i) MutateMessage(&m, r);
}

// ------------------------------------------------------------ plausible requests

const std::vector<std::string>& NodeNames() {
  static const auto* v = new std::vector<std::string>{"n0", "n1", "n2", "n3"};
  return *v;
}

v1::JobSpec PlausibleSpec(Rng& r) {
  v1::JobSpec spec;
  spec.set_name(r.P(0.5) ? "job" : RandString(r));
  spec.add_command(r.P(0.8) ? "python" : "/bin/true");
  if (r.P(0.7)) spec.add_command("train.py");
  if (r.P(0.2)) (*spec.mutable_env())["LR"] = "3e-4";
  if (r.P(0.1)) spec.set_workdir("/tmp");
  spec.set_priority(static_cast<int32_t>(r.Range(-3, 3)));
  spec.set_max_restarts(static_cast<int32_t>(r.P(0.6) ? 0 : r.Range(1, 3)));
  switch (r.Range(0, 5)) {
    case 0:  // whole-GPU experiment
      if (r.P(0.5)) spec.set_gpus(1);
      break;
    case 1:
      spec.set_gpu_fraction(r.Pick(std::vector<double>{0.1, 0.25, 0.5, 0.75, 1.0}));
      break;
    case 2:
      spec.set_gpu_memory_bytes(r.Pick(std::vector<int64_t>{1, kGiB, 10 * kGiB,
                                                            40 * kGiB, 80 * kGiB,
                                                            141 * kGiB}));
      break;
    case 3:
      spec.set_gpus(static_cast<int32_t>(r.Range(2, 16)));
      if (r.P(0.3)) spec.set_tasks_per_node(1);
      break;
    default:
      spec.set_nodes(static_cast<int32_t>(r.Range(1, 4)));
      spec.set_gpus_per_node(static_cast<int32_t>(r.Range(1, 8)));
      if (r.P(0.3)) spec.set_tasks_per_node(1);
      break;
  }
  return spec;
}

v1::RegisterNode PlausibleNode(Rng& r, const std::string& name) {
  v1::RegisterNode reg;
  v1::Node* n = reg.mutable_node();
  n->set_name(name);
  n->set_address(absl::StrCat(name, ".example"));
  n->set_cpu_count(static_cast<int32_t>(r.Range(1, 64)));
  n->set_port_min(29500);
  n->set_port_max(static_cast<int32_t>(29500 + r.Range(0, 9)));
  const int gpus = static_cast<int>(r.Range(0, 8));
  const int64_t mem = r.Pick(std::vector<int64_t>{16 * kGiB, 40 * kGiB, 80 * kGiB,
                                                 141 * kGiB});
  const int island = static_cast<int>(r.Pick(std::vector<int64_t>{1, 2, 4, 8}));
  for (int i = 0; i < gpus; ++i) {
    v1::Gpu* g = n->add_gpus();
    g->set_index(i);
    g->set_uuid(absl::StrCat("GPU-", name, "-", i));
    g->set_name("Fake H200");
    g->set_memory_total_bytes(r.P(0.9) ? mem : r.Range(1, 200) * kGiB);
    for (int p = (i / island) * island; p < (i / island + 1) * island; ++p) {
      if (p != i) g->add_nvlink_peers(p);
    }
  }
  n->set_fake_gpus(true);
  return reg;
}

// ------------------------------------------------------------ the fake agent end

class FakeConnection : public coord::AgentConnection {
 public:
  explicit FakeConnection(std::string node) : node(std::move(node)) {}
  void Send(v1::CoordinatorMessage msg) override {
    if (closed_count > 0) ++sends_after_close;
    sent.push_back(std::move(msg));
  }
  void Close(const absl::Status&) override { ++closed_count; }

  std::string node;
  std::vector<v1::CoordinatorMessage> sent;
  size_t harvested = 0;
  int closed_count = 0;
  int sends_after_close = 0;
};

// What callbacks record; shared so a late callback never touches a dead frame.
struct CallbackLog {
  std::map<int64_t, int> calls;
  std::vector<std::string> violations;
};

bool IsFinalState(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

// ------------------------------------------------------------ scheduler

struct SchedCase {
  sched::ClusterSnapshot cluster;
  std::vector<sched::JobRequest> queue;
  sched::SchedulerConfig config;
  bool checkable = true;
};

SchedCase RandomSchedCase(Rng& r) {
  SchedCase c;
  if (r.P(0.2)) {
    c.config.max_tasks_per_gpu = static_cast<int>(r.Pick(std::vector<int64_t>{0, -1, 1, 2, 1000}));
    if (c.config.max_tasks_per_gpu <= 0) c.checkable = false;
  }
  const int nodes = static_cast<int>(r.P(0.9) ? r.Range(0, 5) : r.Range(6, 40));
  std::set<std::string> names;
  for (int i = 0; i < nodes; ++i) {
    sched::NodeState n;
    n.name = r.P(0.9) ? absl::StrCat("n", i) : r.Pick(NodeNames());
    if (!names.insert(n.name).second) c.checkable = false;
    n.schedulable = r.P(0.85);
    const int gpus = static_cast<int>(r.P(0.9) ? r.Range(0, 8) : r.Range(9, 64));
    const int64_t mem = r.Pick(std::vector<int64_t>{16 * kGiB, 80 * kGiB, 141 * kGiB});
    std::set<int> indices;
    for (int g = 0; g < gpus; ++g) {
      sched::GpuState s;
      s.index = r.P(0.95) ? g : static_cast<int>(RandInt(r));
      if (!indices.insert(s.index).second) c.checkable = false;
      s.uuid = absl::StrCat("GPU-", n.name, "-", g);
      s.memory_total_bytes = r.P(0.95) ? mem : RandInt(r);
      if (s.memory_total_bytes <= 0) c.checkable = false;
      const int64_t used = r.Range(0, 3);
      if (used == 1) {
        s.reserved_bytes = s.memory_total_bytes > 0 ? s.memory_total_bytes : 0;
        s.task_count = 1;
      } else if (used == 2 && s.memory_total_bytes > 0) {
        s.reserved_bytes = r.Range(1, s.memory_total_bytes);
        s.task_count = static_cast<int>(r.Range(1, 8));
      }
      if (r.P(0.03)) {
        s.reserved_bytes = RandInt(r);
        s.task_count = static_cast<int>(RandInt(r));
        if (s.reserved_bytes < 0 || s.task_count < 0 ||
            s.reserved_bytes > s.memory_total_bytes ||
            (s.reserved_bytes == 0) != (s.task_count == 0)) {
          c.checkable = false;
        }
      }
      // Odd NVLink peers: out of range, self, negative, repeated: allowed.
      const int peers = static_cast<int>(r.Range(0, 4));
      for (int p = 0; p < peers; ++p) {
        s.nvlink_peers.push_back(r.P(0.7) ? static_cast<int>(r.Range(0, gpus))
                                          : static_cast<int>(RandInt(r)));
      }
      n.gpus.push_back(std::move(s));
    }
    c.cluster.nodes.push_back(std::move(n));
  }
  const int jobs = static_cast<int>(r.Range(0, 12));
  for (int j = 0; j < jobs; ++j) {
    if (r.P(0.85)) {
      v1::Job job;
      *job.mutable_spec() = PlausibleSpec(r);
      if (!coord::ValidateJobSpec(job.spec()).ok()) continue;
      job.set_id(j + 1);
      job.set_kind(coord::KindOf(job.spec()));
      c.queue.push_back(coord::ToJobRequest(job));
    } else {
      sched::JobRequest q;
      q.job_id = r.P(0.8) ? j + 1 : RandInt(r);
      q.kind = r.P(0.5) ? sched::JobKind::kExperiment : sched::JobKind::kGang;
      q.priority = static_cast<int>(RandInt(r));
      q.submit_seq = RandInt(r);
      q.gpu_fraction = RandDouble(r);
      q.gpu_memory_bytes = r.P(0.5) ? 0 : RandInt(r);
      q.total_gpus = static_cast<int>(RandInt(r));
      q.nodes = static_cast<int>(r.P(0.5) ? 0 : RandInt(r));
      q.gpus_per_node = static_cast<int>(RandInt(r));
      c.queue.push_back(q);
      c.checkable = false;  // outside the validated domain: only "no crash"
    }
  }
  return c;
}

// Checks the decisions of a checkable case; returns the first problem.
std::string CheckSchedule(const SchedCase& c, const std::vector<sched::Decision>& ds) {
  if (ds.size() != c.queue.size()) {
    return absl::StrCat("schedule: ", ds.size(), " decisions for ", c.queue.size(), " jobs");
  }
  std::map<int64_t, const sched::JobRequest*> jobs;
  for (const auto& q : c.queue) jobs[q.job_id] = &q;
  std::map<std::string, sched::NodeState> nodes;
  for (const auto& n : c.cluster.nodes) nodes[n.name] = n;
  std::set<int64_t> decided;
  for (const sched::Decision& d : ds) {
    auto jt = jobs.find(d.job_id);
    if (jt == jobs.end() || !decided.insert(d.job_id).second) {
      return absl::StrCat("schedule: decision for unknown or repeated job ", d.job_id);
    }
    if (d.outcome != sched::Outcome::kPlaced) continue;
    const sched::JobRequest& q = *jt->second;
    const sched::Placement& p = d.placement;
    if (p.nodes.empty()) return absl::StrCat("schedule: job ", q.job_id, " placed on no node");
    std::set<std::string> used_nodes;
    int total = 0;
    for (const sched::NodeAssignment& a : p.nodes) {
      auto nt = nodes.find(a.node);
      if (nt == nodes.end()) return absl::StrCat("schedule: unknown node ", a.node);
      if (!nt->second.schedulable) {
        return absl::StrCat("schedule: job ", q.job_id, " placed on lost node ", a.node);
      }
      if (!used_nodes.insert(a.node).second) {
        return absl::StrCat("schedule: job ", q.job_id, " has node ", a.node, " twice");
      }
      if (a.gpu_indices.empty()) return absl::StrCat("schedule: empty assignment on ", a.node);
      if (q.kind == sched::JobKind::kGang && q.nodes > 0 &&
          static_cast<int>(a.gpu_indices.size()) != q.gpus_per_node) {
        return absl::StrCat("schedule: job ", q.job_id, " got ", a.gpu_indices.size(),
                            " GPUs on ", a.node, ", asked ", q.gpus_per_node);
      }
      std::set<int> seen;
      for (int idx : a.gpu_indices) {
        if (!seen.insert(idx).second) {
          return absl::StrCat("schedule: job ", q.job_id, " has GPU ", idx, " twice");
        }
        sched::GpuState* g = nullptr;
        for (auto& s : nt->second.gpus) {
          if (s.index == idx) g = &s;
        }
        if (g == nullptr) return absl::StrCat("schedule: no GPU ", idx, " on ", a.node);
        ++total;
        if (q.kind == sched::JobKind::kExperiment) {
          const int64_t want = sched::ReservationBytes(q, g->memory_total_bytes);
          if (want == 0 && q.gpu_memory_bytes == 0 &&
              q.gpu_fraction * g->memory_total_bytes < 1e-3) {
            return kKnownZeroReservation;
          }
          if (want <= 0 || g->reserved_bytes + want > g->memory_total_bytes ||
              g->task_count + 1 > c.config.max_tasks_per_gpu ||
              (g->reserved_bytes > 0 && want == g->memory_total_bytes)) {
            return absl::StrCat("schedule: experiment ", q.job_id, " (", want,
                                " bytes) does not fit ", a.node, "/GPU ", idx,
                                " (reserved ", g->reserved_bytes, " of ",
                                g->memory_total_bytes, ", ", g->task_count, " tasks)");
          }
          if (p.reserved_bytes_per_gpu != want) {
            return absl::StrCat("schedule: experiment ", q.job_id, " reserves ",
                                p.reserved_bytes_per_gpu, ", expected ", want);
          }
          g->reserved_bytes += want;
          g->task_count += 1;
        } else {
          if (g->reserved_bytes != 0 || g->task_count != 0) {
            return absl::StrCat("schedule: gang ", q.job_id, " on busy GPU ", a.node,
                                "/", idx, " (reserved ", g->reserved_bytes, ")");
          }
          g->reserved_bytes = g->memory_total_bytes;
          g->task_count = 1;
        }
      }
    }
    if (q.kind == sched::JobKind::kExperiment && total != 1) {
      return absl::StrCat("schedule: experiment ", q.job_id, " got ", total, " GPUs");
    }
    if (q.kind == sched::JobKind::kGang && total != q.total_gpus) {
      return absl::StrCat("schedule: gang ", q.job_id, " got ", total, " GPUs of ",
                          q.total_gpus);
    }
  }
  return "";
}

// ------------------------------------------------------------ one episode

struct SeenStart {
  std::string node;
  v1::StartTask start;
};
struct SeenStop {
  std::string node;
  v1::StopTask stop;
};
struct SeenRead {
  std::string node;
  v1::ReadLog read;
};

class Episode {
 public:
  Episode(uint64_t seed, const Seeds& seeds, FuzzStats& stats)
      : seed_(seed), r_(seed), seeds_(seeds), stats_(stats),
        log_(std::make_shared<CallbackLog>()) {}

  void Run(int64_t max_requests) {
    if (!Restart()) return;
    const int64_t steps = std::min<int64_t>(max_requests, r_.Range(1, 400));
    for (step_ = 0; step_ < steps; ++step_) {
      Step();
      ++stats_.requests;
      Harvest();
      CheckInvariants();
      if (broken_) {
        ++step_;
        break;
      }
    }
    core_.reset();
    for (const std::string& v : log_->violations) Violation(v);
    log_->violations.clear();
    for (const auto& [id, state] : seen_) ++stats_.job_end_states[v1::JobState_Name(state)];
  }

 private:
  // A violation ends the episode (its state is no longer trusted), so each
  // counts once.
  void Violation(const std::string& what) {
    Trace(absl::StrCat("VIOLATION ", what));
    broken_ = true;
    ++stats_.violations;
    if (stats_.violation_samples.size() < kMaxSamples) {
      stats_.violation_samples.push_back(
          absl::StrCat("episode seed ", seed_, " step ", step_, " (", op_, "): ", what));
    }
  }

  // A fixed core bug seen again (tests/fuzz/README.md): a violation like
  // any other, named after the bug; also counted by name.
  void KnownIssue(const char* name) {
    ++stats_.known_issues[name];
    stats_.known_issue_first.emplace(
        name, absl::StrCat("episode seed ", seed_, " step ", step_, " (", op_, ")"));
    Violation(absl::StrCat("fixed bug is back: ", name));
  }

  bool Restart() {
    core_.reset();
    current_.clear();
    coord::CoordinatorConfig config;
    config.advertise_address = "coord.example:50051";
    if (r_.P(0.2)) config.scheduler.max_tasks_per_gpu = static_cast<int>(r_.Range(1, 3));
    auto core = coord::Coordinator::Create(config, &store_, &clock_);
    if (!core.ok()) {
      Violation(absl::StrCat("Create/Load failed: ", core.status().ToString()));
      return false;
    }
    core_ = std::move(*core);
    if (store_ever_failed_) {
      seen_.clear();  // unwritten changes are legitimately lost
      restarted_after_failure_ = true;
    }
    return true;
  }

  std::string NodeName() {
    if (r_.P(0.95)) return r_.Pick(NodeNames());
    return RandString(r_);
  }

  FakeConnection* NewConn(const std::string& node) {
    conns_.push_back(std::make_unique<FakeConnection>(node));
    return conns_.back().get();
  }

  // The connection a message for `node` comes on: mostly the current one.
  FakeConnection* ConnFor(const std::string& node) {
    auto it = current_.find(node);
    if (it != current_.end() && r_.P(0.9)) return it->second;
    if (!conns_.empty() && r_.P(0.5)) {
      return conns_[static_cast<size_t>(r_.Range(0, conns_.size() - 1))].get();
    }
    return NewConn(node);
  }

  v1::JobSpec RandomSpec() {
    v1::JobSpec spec;
    const int64_t how = r_.Range(0, 9);
    if (how < 5) {
      spec = PlausibleSpec(r_);
      MaybeMutate(spec, r_, 0.3);
    } else if (how < 8 && !seeds_.specs.empty()) {
      spec = r_.Pick(seeds_.specs);
      MaybeMutate(spec, r_, 0.7);
    } else {
      RandomizeMessage(&spec, r_, 0);
    }
    return spec;
  }

  int64_t JobId() {
    if (max_job_id_ > 0 && r_.P(0.85)) return r_.Range(1, max_job_id_);
    return RandInt(r_);
  }

  std::string RequestId() {
    if (!request_ids_.empty() && r_.P(0.3)) return r_.Pick(request_ids_);
    if (r_.P(0.5)) return "";
    std::string id = r_.P(0.9) ? absl::StrCat("req-", r_.Range(0, 1000)) : RandString(r_);
    request_ids_.push_back(id);
    return id;
  }

  void CheckSpecError(const absl::Status& s, bool allow_request_id) {
    if (s.code() != absl::StatusCode::kInvalidArgument) {
      Violation(absl::StrCat("rejection is not INVALID_ARGUMENT: ", s.ToString()));
    } else if (!absl::StartsWith(s.message(), "spec.") &&
               !(allow_request_id && absl::StartsWith(s.message(), "request_id"))) {
      Violation(absl::StrCat("rejection does not name its field: ", s.message()));
    }
  }

  void Step() {
    const int64_t x = r_.Range(0, 999);
    if (x < 170) return Submit();
    if (x < 250) return Register();
    if (x < 270) return Disconnect();
    if (x < 440) return AgentReply();
    if (x < 520) return AgentRandom();
    if (x < 570) return Cancel();
    if (x < 590) return Get();
    if (x < 600) return List();
    if (x < 640) return Wait();
    if (x < 670) return Logs();
    if (x < 720) return Publish();
    if (x < 770) return Fetch();
    if (x < 880) return Tick();
    if (x < 890) return StatsOp();
    if (x < 940) return Validate();
    if (x < 990) return Schedule();
    if (x < 995) return ToggleStore();
    return RestartOp();
  }

  void Count(const char* op) {
    op_ = op;
    ++stats_.ops[op];
  }
  // With TRAINCTL_FUZZ_TRACE set, each request is printed (for replays).
  void Trace(const google::protobuf::Message& m) {
    if (!tracing_) return;
    std::string text;
    google::protobuf::TextFormat::Printer p;
    p.SetSingleLineMode(true);
    p.SetTruncateStringFieldLongerThan(40);
    p.PrintToString(m, &text);
    std::fprintf(stderr, "step %lld %s: %s\n", static_cast<long long>(step_), op_,
                 text.c_str());
  }
  void Trace(const std::string& s) {
    if (tracing_) {
      std::fprintf(stderr, "step %lld %s: %s\n", static_cast<long long>(step_), op_, s.c_str());
    }
  }

  void Submit() {
    Count("SubmitJob");
    const v1::JobSpec spec = RandomSpec();
    const std::string rid = RequestId();
    // A dependency that parses may still be refused (it names jobs that do
    // not exist, or that already ended so it can never be met): the model
    // cannot predict that; one that does not parse must be refused.
    const bool dep_parses =
        spec.dependency().empty() || coord::ParseDependency(spec.dependency()).ok();
    const bool valid = coord::ValidateJobSpec(spec).ok() && dep_parses;
    const bool predictable = spec.dependency().empty();
    auto prior = rid.empty() ? request_map_.end() : request_map_.find(rid);
    Trace(spec);
    absl::StatusOr<int64_t> id = core_->SubmitJob(spec, rid);
    Trace(absl::StrCat("request_id \"", rid, "\" -> ", id.ok() ? absl::StrCat(*id) : id.status().ToString()));
    if (!id.ok()) {
      if (id.status().code() == absl::StatusCode::kUnavailable && store_failing_) return;
      // A job no registered node could ever hold is refused, not accepted
      // (spec.hold accepts it).
      if (id.status().code() == absl::StatusCode::kFailedPrecondition &&
          absl::StrContains(id.status().message(), "cannot run on this cluster") &&
          !spec.hold()) {
        return;
      }
      CheckSpecError(id.status(), /*allow_request_id=*/true);
      if (valid && predictable && rid.size() <= 128) {
        Violation(absl::StrCat("valid spec refused: ", id.status().ToString()));
      }
      return;
    }
    if (!valid) {
      Violation("SubmitJob accepted a spec ValidateJobSpec (or ParseDependency) rejects");
    }
    if (spec.priority() < -coord::kMaxPriority || spec.priority() > coord::kMaxPriority) {
      if (spec.priority() == std::numeric_limits<int32_t>::min()) {
        KnownIssue(kKnownPriorityMin);
      } else {
        Violation(absl::StrCat("SubmitJob accepted priority ", spec.priority()));
      }
      return;
    }
    if (prior != request_map_.end()) {
      if (*id != prior->second) {
        Violation(absl::StrCat("request_id ", rid, " gave job ", *id, ", first ",
                               prior->second));
      }
      return;
    }
    max_job_id_ = std::max(max_job_id_, *id);
    if (!rid.empty()) request_map_[rid] = *id;
    auto job = core_->GetJob(*id);
    if (!job.ok()) {
      Violation(absl::StrCat("submitted job ", *id, " not found"));
    } else if (job->kind() != coord::KindOf(spec)) {
      Violation(absl::StrCat("job ", *id, " kind ", job->kind()));
    }
  }

  void Register() {
    Count("RegisterAgent");
    v1::RegisterNode reg;
    const int64_t how = r_.Range(0, 9);
    const std::string name = NodeName();
    if (how < 6) {
      reg = PlausibleNode(r_, name);
      MaybeMutate(reg, r_, 0.25);
    } else if (how < 8 && !seeds_.nodes.empty()) {
      reg = r_.Pick(seeds_.nodes);
      if (r_.P(0.5)) reg.mutable_node()->set_name(name);
      MaybeMutate(reg, r_, 0.7);
    } else {
      RandomizeMessage(&reg, r_, 0);
      if (r_.P(0.5)) reg.mutable_node()->set_name(name);
    }
    // Running tasks the agent claims: some it was really sent.
    if (!starts_.empty() && r_.P(0.4)) {
      const int n = static_cast<int>(r_.Range(1, 4));
      for (int i = 0; i < n; ++i) {
        *reg.add_running_tasks() = r_.Pick(starts_).start.task();
      }
    }
    // The agent's instance id: mostly the holder's (the same agent
    // reconnecting), sometimes a new one (a second agent under the name).
    const std::string node_name = reg.node().name();
    auto holder = instance_.find(node_name);
    if (r_.P(0.9)) {
      reg.set_agent_instance_id(holder != instance_.end() && r_.P(0.7)
                                    ? holder->second
                                    : absl::StrCat("agent-", r_.Range(0, 1 << 30)));
    }
    const bool held_by_other =
        current_.count(node_name) > 0 &&
        (holder == instance_.end() || holder->second != reg.agent_instance_id() ||
         reg.agent_instance_id().empty());
    // A GPU UUID another node offered at its last accepted registration.
    bool gpu_of_other = false;
    for (const v1::Gpu& g : reg.node().gpus()) {
      for (const auto& [other, uuids] : node_uuids_) {
        if (other != node_name && uuids.count(g.uuid()) > 0) gpu_of_other = true;
      }
    }
    FakeConnection* conn = NewConn(node_name);
    Trace(reg);
    absl::Status s = core_->RegisterAgent(reg, conn);
    Trace(s.ToString());
    if (!s.ok()) {
      // ALREADY_EXISTS only for a name another connected agent holds, or
      // (also UNAVAILABLE) a GPU another node offers.
      if (s.code() != absl::StatusCode::kInvalidArgument &&
          !(s.code() == absl::StatusCode::kUnavailable && store_failing_) &&
          !(s.code() == absl::StatusCode::kAlreadyExists && held_by_other) &&
          !((s.code() == absl::StatusCode::kAlreadyExists ||
             s.code() == absl::StatusCode::kUnavailable) &&
            gpu_of_other)) {
        Violation(absl::StrCat("RegisterAgent: ", s.ToString()));
      }
      if (!conn->sent.empty()) Violation("RegisterAgent failed but sent on the stream");
      if (s.code() == absl::StatusCode::kUnavailable) {
        TrackInventory(reg, kKnownFailedRegisterApplied);
      }
      return;
    }
    if (conn->sent.empty() || !conn->sent[0].has_register_ack()) {
      Violation("RegisterAgent: first message is not a RegisterAck");
    }
    current_[reg.node().name()] = conn;
    instance_[reg.node().name()] = reg.agent_instance_id();
    std::set<std::string>& uuids = node_uuids_[reg.node().name()];
    uuids.clear();
    for (const v1::Gpu& g : reg.node().gpus()) {
      if (!g.uuid().empty()) uuids.insert(g.uuid());
    }
    TrackInventory(reg, kKnownShrunkInventory);
  }

  // Notes the GPUs whose memory `reg` shrank, and by which known issue.
  void TrackInventory(const v1::RegisterNode& reg, const char* issue) {
    auto& mem = gpu_memory_[reg.node().name()];
    for (const v1::Gpu& g : reg.node().gpus()) {
      auto it = mem.find(g.index());
      if (it != mem.end() && g.memory_total_bytes() < it->second) {
        shrunk_.emplace(std::make_pair(reg.node().name(), g.index()), issue);
      }
      mem[g.index()] = g.memory_total_bytes();
    }
  }

  void Disconnect() {
    Count("AgentDisconnected");
    const std::string node = NodeName();
    FakeConnection* conn = ConnFor(node);
    Trace(node);
    core_->AgentDisconnected(node, conn);
    auto it = current_.find(node);
    if (it != current_.end() && it->second == conn) current_.erase(it);
  }

  void Send(const std::string& node, FakeConnection* conn, const v1::AgentMessage& msg) {
    Trace(msg);
    absl::Status s = core_->HandleAgentMessage(node, conn, msg);
    Trace(absl::StrCat("from ", node, " current conn ",
                       current_.count(node) && current_[node] == conn, " -> ", s.ToString()));
    // PERMISSION_DENIED: a node answering what was asked of another (a log
    // read sent to n2 answered by n1) is refused, and rightly so.
    if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition &&
        s.code() != absl::StatusCode::kInvalidArgument &&
        s.code() != absl::StatusCode::kPermissionDenied) {
      Violation(absl::StrCat("HandleAgentMessage: ", s.ToString()));
    }
  }

  // An answer a well-behaved (or slightly off) agent would give.
  void AgentReply() {
    Count("HandleAgentMessage/reply");
    v1::AgentMessage msg;
    std::string node;
    const int64_t what = r_.Range(0, 9);
    if (what < 6 && !starts_.empty()) {
      const SeenStart& s = r_.Pick(starts_);
      node = s.node;
      v1::TaskStatus* st = msg.mutable_task_status();
      *st->mutable_task() = s.start.task();
      st->mutable_task()->set_pid(static_cast<int32_t>(r_.Range(100, 200)));
      const int64_t k = r_.Range(0, 9);
      if (k < 4) {
        st->set_state(v1::TASK_STATE_RUNNING);
      } else if (k < 8) {
        st->set_state(v1::TASK_STATE_EXITED);
        st->set_exit_code(r_.P(0.7) ? 0 : static_cast<int32_t>(r_.Range(1, 255)));
        if (r_.P(0.1)) st->set_signal(9);
      } else {
        st->set_state(v1::TASK_STATE_START_FAILED);
        st->set_message("exec failed");
      }
    } else if (what < 7 && !stops_.empty()) {
      const SeenStop& s = r_.Pick(stops_);
      node = s.node;
      v1::TaskStatus* st = msg.mutable_task_status();
      *st->mutable_task() = s.stop.task();
      st->set_state(v1::TASK_STATE_EXITED);
      st->set_signal(15);
    } else if (what < 8 && !reads_.empty()) {
      const SeenRead& s = r_.Pick(reads_);
      node = s.node;
      v1::LogChunk* c = msg.mutable_log_chunk();
      c->set_request_id(s.read.request_id());
      c->set_data(RandBytes(r_));
      c->set_next_offset(s.read.offset() + static_cast<int64_t>(c->data().size()));
      if (r_.P(0.2)) c->set_error("no such file");
    } else {
      node = r_.Pick(NodeNames());
      v1::Heartbeat* hb = msg.mutable_heartbeat();
      const int n = static_cast<int>(r_.Range(0, 8));
      for (int i = 0; i < n; ++i) {
        v1::GpuSample* g = hb->add_gpus();
        g->set_index(r_.P(0.9) ? i : static_cast<int32_t>(RandInt(r_)));
        g->set_memory_used_bytes(r_.Range(0, 80 * kGiB));
        g->set_utilization_pct(static_cast<int32_t>(r_.Range(0, 100)));
        g->set_temperature_c(static_cast<int32_t>(r_.Range(20, 90)));
        g->set_power_w(r_.Unit() * 700);
      }
    }
    MaybeMutate(msg, r_, 0.1);
    Send(node, ConnFor(node), msg);
  }

  void AgentRandom() {
    Count("HandleAgentMessage/random");
    v1::AgentMessage msg;
    if (!seeds_.agent_messages.empty() && r_.P(0.5)) {
      msg = r_.Pick(seeds_.agent_messages);
      MaybeMutate(msg, r_, 0.8);
    } else {
      RandomizeMessage(&msg, r_, 0);
    }
    const std::string node = NodeName();
    Send(node, ConnFor(node), msg);
  }

  void Cancel() {
    Count("CancelJob");
    const int64_t id = JobId();
    auto before = core_->GetJob(id);
    auto job = core_->CancelJob(id);
    Trace(absl::StrCat("job ", id, " -> ", job.ok() ? v1::JobState_Name(job->state()) : job.status().ToString()));
    if (!job.ok()) {
      // NOT_FOUND for an unknown job; FAILED_PRECONDITION exactly for one
      // that had already ended.
      const bool ended = before.ok() && IsFinalState(before->state());
      if (job.status().code() == absl::StatusCode::kFailedPrecondition && !ended) {
        Violation(absl::StrCat("CancelJob(", id, ") refused a job that had not ended: ",
                               job.status().ToString()));
      } else if (job.status().code() != absl::StatusCode::kNotFound &&
                 job.status().code() != absl::StatusCode::kFailedPrecondition) {
        Violation(absl::StrCat("CancelJob: ", job.status().ToString()));
      }
      return;
    }
    if (before.ok() && IsFinalState(before->state())) {
      Violation(absl::StrCat("CancelJob(", id, ") of an ended job returned OK"));
    }
    if (!IsFinalState(job->state())) {
      Violation(absl::StrCat("CancelJob(", id, ") left state ", job->state()));
    }
    if (!job->attempt_token().empty()) Violation("CancelJob returned the attempt token");
  }

  void Get() {
    Count("GetJob");
    auto job = core_->GetJob(JobId());
    if (!job.ok()) {
      if (job.status().code() != absl::StatusCode::kNotFound) {
        Violation(absl::StrCat("GetJob: ", job.status().ToString()));
      }
      return;
    }
    if (!job->attempt_token().empty()) Violation("GetJob returned the attempt token");
  }

  void List() {
    Count("ListJobs");
    std::vector<v1::JobState> states;
    const int n = static_cast<int>(r_.Range(0, 3));
    for (int i = 0; i < n; ++i) states.push_back(static_cast<v1::JobState>(r_.Range(0, 7)));
    const int limit = static_cast<int>(r_.P(0.8) ? r_.Range(0, 20) : RandInt(r_));
    auto jobs = core_->ListJobs(states, limit);
    if (limit > 0 && static_cast<int64_t>(jobs.size()) > limit) {
      Violation(absl::StrCat("ListJobs returned ", jobs.size(), " > limit ", limit));
    }
  }

  absl::Duration RandTimeout() {
    switch (r_.Range(0, 6)) {
      case 0: return absl::ZeroDuration();
      case 1: return absl::Milliseconds(r_.Range(1, 2000));
      case 2: return absl::Seconds(r_.Range(1, 120));
      case 3: return -absl::Milliseconds(r_.Range(1, 1000));
      case 4: return absl::InfiniteDuration();
      case 5: return absl::Milliseconds(RandInt(r_));
      default: return absl::Hours(1);
    }
  }

  void Wait() {
    Count("WaitJobAsync");
    const int64_t cb = next_cb_++;
    std::shared_ptr<CallbackLog> log = log_;
    core_->WaitJobAsync(JobId(), RandTimeout(), [log, cb](absl::StatusOr<v1::Job> job) {
      if (++log->calls[cb] > 1) log->violations.push_back("WaitJobAsync: done called twice");
      if (job.ok()) {
        if (!v1::JobState_IsValid(job->state()) ||
            job->state() == v1::JOB_STATE_UNSPECIFIED) {
          log->violations.push_back(absl::StrCat("WaitJob: state ", job->state()));
        }
        if (!job->attempt_token().empty()) {
          log->violations.push_back("WaitJob returned the attempt token");
        }
      } else if (job.status().code() != absl::StatusCode::kNotFound) {
        log->violations.push_back(absl::StrCat("WaitJob: ", job.status().ToString()));
      }
    });
  }

  void Logs() {
    Count("GetLogsAsync");
    const int64_t cb = next_cb_++;
    std::shared_ptr<CallbackLog> log = log_;
    const int rank = static_cast<int>(r_.P(0.8) ? r_.Range(-1, 4) : RandInt(r_));
    const int64_t offset = r_.P(0.8) ? r_.Range(0, 100) : RandInt(r_);
    const int max_bytes = static_cast<int>(r_.P(0.7) ? r_.Range(0, 4096) : RandInt(r_));
    core_->GetLogsAsync(JobId(), rank, offset, max_bytes,
                        [log, cb](absl::StatusOr<v1::GetLogsResponse>) {
                          if (++log->calls[cb] > 1) {
                            log->violations.push_back("GetLogsAsync: done called twice");
                          }
                        });
  }

  // A rendezvous request: mostly from a task the coordinator started.
  template <typename Req>
  Req RendezvousRequest() {
    Req req;
    if (!starts_.empty() && r_.P(0.8)) {
      const v1::StartTask& s = r_.Pick(starts_).start;
      req.set_job_id(s.task().job_id());
      req.set_attempt(s.task().attempt());
      req.set_rank(r_.P(0.7) ? 0 : s.task().rank());
      auto it = s.env().find("TRAINCTL_TOKEN");
      req.set_token(it != s.env().end() && r_.P(0.9) ? it->second : RandString(r_));
    } else {
      req.set_job_id(JobId());
      req.set_attempt(static_cast<int32_t>(r_.P(0.8) ? r_.Range(0, 3) : RandInt(r_)));
      req.set_rank(static_cast<int32_t>(r_.P(0.8) ? r_.Range(0, 3) : RandInt(r_)));
      req.set_token(RandString(r_));
    }
    return req;
  }

  void Publish() {
    Count("PublishUniqueId");
    auto req = RendezvousRequest<v1::PublishUniqueIdRequest>();
    req.set_unique_id(r_.P(0.5) && !unique_ids_.empty() ? r_.Pick(unique_ids_)
                                                         : RandBytes(r_));
    if (unique_ids_.size() < 8) unique_ids_.push_back(req.unique_id());
    MaybeMutate(req, r_, 0.1);
    absl::Status s = core_->PublishUniqueId(req);
    switch (s.code()) {
      case absl::StatusCode::kOk:
        if (req.unique_id().size() != 128 || req.rank() != 0) {
          Violation(absl::StrCat("PublishUniqueId accepted rank ", req.rank(), ", ",
                                 req.unique_id().size(), " bytes"));
        }
        break;
      case absl::StatusCode::kNotFound:
      case absl::StatusCode::kPermissionDenied:
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kAlreadyExists:
        break;
      default:
        Violation(absl::StrCat("PublishUniqueId: ", s.ToString()));
    }
  }

  void Fetch() {
    Count("FetchUniqueIdAsync");
    auto req = RendezvousRequest<v1::FetchUniqueIdRequest>();
    const int64_t t = r_.Range(0, 5);
    req.set_timeout_ms(t == 0 ? 0 : t == 1 ? r_.Range(1, 5000) : t == 2 ? -1 : RandInt(r_));
    MaybeMutate(req, r_, 0.1);
    const int64_t cb = next_cb_++;
    std::shared_ptr<CallbackLog> log = log_;
    if (r_.Range(0, 1) == 1) {
      // As a node relay asks: ranks it speaks for, several ids, arrival
      // reports; any of them out of range.
      Count("FetchUniqueIdsAsync");
      for (int64_t i = r_.Range(0, 3); i > 0; --i) {
        req.add_relayed_ranks(static_cast<int32_t>(r_.Range(0, 1) ? r_.Range(0, 8) : RandInt(r_)));
      }
      req.set_id_count(static_cast<int32_t>(r_.Range(0, 2) ? r_.Range(0, 3) : RandInt(r_)));
      req.set_arrivals_only(r_.Range(0, 3) == 0);
      core_->FetchUniqueIdsAsync(req, [log, cb](absl::StatusOr<std::vector<std::string>> ids) {
        if (++log->calls[cb] > 1) log->violations.push_back("FetchUniqueIds: done called twice");
        if (!ids.ok()) return;
        for (const std::string& id : *ids) {
          if (id.size() != 128) {
            log->violations.push_back(absl::StrCat("FetchUniqueIds: ", id.size(), " bytes"));
          }
        }
      });
      return;
    }
    core_->FetchUniqueIdAsync(req, [log, cb](absl::StatusOr<std::string> id) {
      if (++log->calls[cb] > 1) log->violations.push_back("FetchUniqueId: done called twice");
      if (id.ok() && id->size() != 128) {
        log->violations.push_back(absl::StrCat("FetchUniqueId: ", id->size(), " bytes"));
      }
    });
  }

  void Tick() {
    Count("Tick");
    static const int64_t kMs[] = {0, 1, 100, 1000, 5000, 10001, 60000, 3600000};
    const int64_t ms = kMs[r_.Range(0, 7)];
    Trace(absl::StrCat("+", ms, " ms"));
    clock_.Advance(absl::Milliseconds(ms));
    core_->Tick();
  }

  void StatsOp() {
    Count("Stats");
    coord::CoordinatorStats st = core_->Stats();
    if (st.illegal_transitions != 0) {
      Violation(absl::StrCat(st.illegal_transitions,
                             " illegal state transitions (see the error log)"));
    }
    const auto jobs = core_->ListJobs({}, std::numeric_limits<int>::max());
    std::array<int64_t, v1::JobState_ARRAYSIZE> want{};
    for (const auto& j : jobs) {
      if (j.state() >= 0 && j.state() < v1::JobState_ARRAYSIZE) ++want[j.state()];
    }
    if (want != st.jobs_by_state) Violation("Stats().jobs_by_state != ListJobs counts");
  }

  void Validate() {
    Count("ValidateJobSpec");
    const v1::JobSpec spec = RandomSpec();
    absl::Status s = coord::ValidateJobSpec(spec);
    if (!s.ok()) {
      CheckSpecError(s, /*allow_request_id=*/false);
      return;
    }
    if (spec.priority() < -coord::kMaxPriority || spec.priority() > coord::kMaxPriority) {
      if (spec.priority() == std::numeric_limits<int32_t>::min()) {
        KnownIssue(kKnownPriorityMin);
      } else {
        Violation(absl::StrCat("ValidateJobSpec accepted priority ", spec.priority()));
      }
      return;
    }
    const v1::JobKind kind = coord::KindOf(spec);
    if (kind != v1::JOB_KIND_EXPERIMENT && kind != v1::JOB_KIND_GANG) {
      Violation(absl::StrCat("KindOf: ", kind));
      return;
    }
    v1::Job job;
    job.set_id(r_.Range(1, 1000));
    *job.mutable_spec() = spec;
    job.set_kind(kind);
    const sched::JobRequest q = coord::ToJobRequest(job);
    if (kind == v1::JOB_KIND_EXPERIMENT) {
      if (!(q.gpu_fraction > 0 && q.gpu_fraction <= 1) || q.gpu_memory_bytes < 0 ||
          q.kind != sched::JobKind::kExperiment) {
        Violation(absl::StrCat("ToJobRequest: experiment fraction ", q.gpu_fraction,
                               " memory ", q.gpu_memory_bytes));
      }
      for (int64_t total : {int64_t{1}, kGiB, 80 * kGiB}) {
        const int64_t b = sched::ReservationBytes(q, total);
        if (b == 0 && q.gpu_fraction > 0 && q.gpu_fraction * total < 1e-3) {
          KnownIssue(kKnownZeroReservation);
          return;
        }
        if (b <= 0 || (q.gpu_memory_bytes == 0 && b > total)) {
          Violation(absl::StrCat("ReservationBytes(", q.gpu_fraction, ", ", total, ") = ", b));
        }
      }
    } else {
      if (q.kind != sched::JobKind::kGang || q.total_gpus < 1 ||
          q.total_gpus > coord::kMaxGpus ||
          (q.nodes > 0 && q.total_gpus != q.nodes * q.gpus_per_node)) {
        Violation(absl::StrCat("ToJobRequest: gang ", q.total_gpus, " = ", q.nodes, " x ",
                               q.gpus_per_node));
      }
    }
    for (int g = 1; g <= 8; ++g) {
      if (coord::TasksPerNode(spec, g) < 1) Violation("TasksPerNode < 1");
    }
  }

  void Schedule() {
    Count("Schedule");
    SchedCase c = RandomSchedCase(r_);
    const sched::Scheduler scheduler(c.config);
    const std::vector<sched::Decision> ds = scheduler.Schedule(c.cluster, c.queue);
    if (!c.checkable) return;
    const std::string problem = CheckSchedule(c, ds);
    if (problem == kKnownZeroReservation) {
      KnownIssue(kKnownZeroReservation);
    } else if (!problem.empty()) {
      Violation(problem);
    }
  }

  void ToggleStore() {
    Count("StateStore/failing");
    store_failing_ = !store_failing_;
    if (store_failing_) store_ever_failed_ = true;
    store_.SetFailing(store_failing_);
  }

  void RestartOp() {
    Count("Restart");
    Trace("restart");
    store_.SetFailing(false);
    store_failing_ = false;
    Restart();
  }

  // Records what the coordinator sent, for the agent's answers.
  void Harvest() {
    for (auto& c : conns_) {
      for (; c->harvested < c->sent.size(); ++c->harvested) {
        const v1::CoordinatorMessage& m = c->sent[c->harvested];
        if (m.has_start_task()) {
          if (starts_.size() > 256) starts_.erase(starts_.begin());
          starts_.push_back({c->node, m.start_task()});
        } else if (m.has_stop_task()) {
          if (stops_.size() > 256) stops_.erase(stops_.begin());
          stops_.push_back({c->node, m.stop_task()});
        } else if (m.has_read_log()) {
          if (reads_.size() > 64) reads_.erase(reads_.begin());
          reads_.push_back({c->node, m.read_log()});
        }
      }
    }
  }

  void CheckInvariants() {
    if (core_ == nullptr) return;
    // No GPU holds more reservations than its memory.
    for (const v1::NodeView& v : core_->ListNodes()) {
      if (v.gpu_tasks_size() != v.node().gpus_size()) {
        Violation(absl::StrCat("ListNodes: node ", v.node().name(), " has ",
                               v.node().gpus_size(), " GPUs, ", v.gpu_tasks_size(),
                               " task lists"));
        continue;
      }
      for (int i = 0; i < v.gpu_tasks_size(); ++i) {
        __int128 sum = 0;
        for (const v1::GpuTaskRef& t : v.gpu_tasks(i).tasks()) sum += t.reserved_bytes();
        if (sum > v.node().gpus(i).memory_total_bytes()) {
          auto sh = shrunk_.find({v.node().name(), v.node().gpus(i).index()});
          if (sh != shrunk_.end()) {
            KnownIssue(sh->second);
            return;
          }
          std::string tasks;
          for (const v1::GpuTaskRef& t : v.gpu_tasks(i).tasks()) {
            absl::StrAppend(&tasks, " job ", t.job_id(), "/rank ", t.rank(), "=",
                            t.reserved_bytes());
          }
          Violation(absl::StrCat("GPU ", v.node().name(), "/", v.node().gpus(i).index(),
                                 " reserves ", static_cast<int64_t>(sum), " > ",
                                 v.node().gpus(i).memory_total_bytes(), ":", tasks));
        }
      }
    }
    // Job states are valid; a final job never changes again.
    for (const v1::Job& j : core_->ListJobs({}, std::numeric_limits<int>::max())) {
      if (!v1::JobState_IsValid(j.state()) || j.state() == v1::JOB_STATE_UNSPECIFIED) {
        Violation(absl::StrCat("job ", j.id(), " has state ", j.state()));
      }
      if (!j.attempt_token().empty()) Violation("ListJobs returned the attempt token");
      auto it = seen_.find(j.id());
      if (it != seen_.end() && IsFinalState(it->second) && it->second != j.state()) {
        Violation(absl::StrCat("job ", j.id(), " went from final ",
                               v1::JobState_Name(it->second), " to ",
                               v1::JobState_Name(j.state())));
      }
      seen_[j.id()] = j.state();
    }
    for (const auto& c : conns_) {
      if (c->sends_after_close > 0) {
        Violation(absl::StrCat("sent on a closed connection of ", c->node));
        c->sends_after_close = 0;
      }
    }
    for (const std::string& v : log_->violations) Violation(v);
    log_->violations.clear();
  }

  const uint64_t seed_;
  Rng r_;
  const Seeds& seeds_;
  FuzzStats& stats_;
  std::shared_ptr<CallbackLog> log_;
  int64_t step_ = 0;
  bool broken_ = false;
  const char* op_ = "start";

  FakeClock clock_;
  coord::MemoryStateStore store_;
  bool store_failing_ = false;
  bool store_ever_failed_ = false;
  bool restarted_after_failure_ = false;
  std::deque<std::unique_ptr<FakeConnection>> conns_;
  std::unique_ptr<coord::Coordinator> core_;
  std::map<std::string, FakeConnection*> current_;
  // Node name -> RegisterNode.agent_instance_id of its last accepted
  // registration.
  std::map<std::string, std::string> instance_;
  std::vector<SeenStart> starts_;
  std::vector<SeenStop> stops_;
  std::vector<SeenRead> reads_;
  std::vector<std::string> request_ids_;
  std::map<std::string, int64_t> request_map_;
  std::vector<std::string> unique_ids_;
  std::map<int64_t, v1::JobState> seen_;
  int64_t max_job_id_ = 0;
  int64_t next_cb_ = 1;
  // GPU memory each node last registered with, and the GPUs whose memory a
  // later registration shrank.
  std::map<std::string, std::map<int, int64_t>> gpu_memory_;
  // Node name -> the GPU UUIDs of its last accepted registration.
  std::map<std::string, std::set<std::string>> node_uuids_;
  std::map<std::pair<std::string, int>, const char*> shrunk_;
  const bool tracing_ = std::getenv("TRAINCTL_FUZZ_TRACE") != nullptr;
};

template <typename T>
bool ParseFile(const std::string& path, T* out, std::string* error) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in || !google::protobuf::TextFormat::ParseFromString(ss.str(), out)) {
    absl::StrAppend(error, "cannot parse ", path, "; ");
    return false;
  }
  return true;
}

}  // namespace

void FuzzStats::Merge(const FuzzStats& o) {
  requests += o.requests;
  episodes += o.episodes;
  violations += o.violations;
  for (const auto& [k, v] : o.ops) ops[k] += v;
  for (const auto& [k, v] : o.known_issues) known_issues[k] += v;
  for (const auto& [k, v] : o.job_end_states) job_end_states[k] += v;
  for (const auto& [k, v] : o.known_issue_first) known_issue_first.emplace(k, v);
  for (const auto& s : o.violation_samples) {
    if (violation_samples.size() < kMaxSamples) violation_samples.push_back(s);
  }
}

Seeds LoadSeeds(const std::string& dir, std::string* error) {
  Seeds seeds;
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) files.push_back(e->d_name);
    closedir(d);
  } else {
    absl::StrAppend(error, "cannot open ", dir, "; ");
    return seeds;
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    if (!absl::EndsWith(f, ".textproto")) continue;
    const std::string path = absl::StrCat(dir, "/", f);
    if (absl::StartsWith(f, "spec_")) {
      v1::JobSpec m;
      if (ParseFile(path, &m, error)) seeds.specs.push_back(m);
    } else if (absl::StartsWith(f, "node_")) {
      v1::RegisterNode m;
      if (ParseFile(path, &m, error)) seeds.nodes.push_back(m);
    } else if (absl::StartsWith(f, "agent_")) {
      v1::AgentMessage m;
      if (ParseFile(path, &m, error)) seeds.agent_messages.push_back(m);
    }
  }
  return seeds;
}

uint64_t EpisodeSeed(uint64_t run_seed, int64_t index) {
  // splitmix64 of (seed, index).
  uint64_t z = run_seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void RunEpisode(uint64_t episode_seed, const Seeds& seeds, int64_t max_requests,
                FuzzStats& stats) {
  spdlog::set_level(spdlog::level::off);
  Episode(episode_seed, seeds, stats).Run(max_requests);
  ++stats.episodes;
}

FuzzStats Run(uint64_t run_seed, const Seeds& seeds, int64_t requests,
              int64_t first_episode,
              void (*on_episode)(int64_t index, const FuzzStats& so_far)) {
  FuzzStats stats;
  for (int64_t e = first_episode; stats.requests < requests; ++e) {
    if (on_episode != nullptr) on_episode(e, stats);
    RunEpisode(EpisodeSeed(run_seed, e), seeds, requests - stats.requests, stats);
  }
  return stats;
}

}  // namespace trainctl::fuzz
