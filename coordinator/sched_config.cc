#include "coordinator/sched_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace trainctl::coord {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// Collects text-format parse errors with their line numbers.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!text_.empty()) text_ += "; ";
    absl::StrAppend(&text_, "line ", line + 1, " column ", column + 1, ": ",
                    message);
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

absl::StatusOr<std::map<std::string, double>> Quotas(
    const google::protobuf::RepeatedPtrField<v1::GpuQuota>& quotas,
    absl::string_view field) {
  std::map<std::string, double> out;
  for (int i = 0; i < quotas.size(); ++i) {
    const v1::GpuQuota& q = quotas.Get(i);
    const std::string at = absl::StrCat(field, "[", i, "]");
    if (q.name().empty()) return Invalid(at, "name is empty");
    if (!(q.gpus() >= 0)) {
      return Invalid(at, absl::StrCat("gpus must be >= 0, got ", q.gpus()));
    }
    if (!out.emplace(q.name(), q.gpus()).second) {
      return Invalid(at, absl::StrCat("\"", q.name(), "\" appears twice"));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<sched::PolicyConfig> PolicyFromProto(
    const v1::SchedulerConfigFile& file) {
  sched::PolicyConfig policy;
  if (file.order().empty() || file.order() == "las") {
    policy.order = sched::QueueOrder::kLas;
  } else if (file.order() == "fifo") {
    policy.order = sched::QueueOrder::kFifo;
  } else {
    return Invalid("order", absl::StrCat("must be \"las\" or \"fifo\", got \"",
                                         file.order(), "\""));
  }
  if (file.las_thresholds_gpu_s_size() > 0) {
    policy.las_thresholds_gpu_s.clear();
    double last = 0;
    for (double t : file.las_thresholds_gpu_s()) {
      if (!(t > last)) {
        return Invalid("las_thresholds_gpu_s",
                       "must be positive and strictly ascending");
      }
      policy.las_thresholds_gpu_s.push_back(t);
      last = t;
    }
  }
  policy.backfill = !file.disable_backfill();
  policy.preemption = !file.disable_preemption();
  policy.overtake_preemption = file.overtake_preemption();
  if (!(file.reservation_min_wait_s() >= 0)) {
    return Invalid("reservation_min_wait_s",
                   absl::StrCat("must be >= 0 seconds, got ",
                                file.reservation_min_wait_s()));
  }
  policy.reservation_min_wait_s = file.reservation_min_wait_s();
  policy.interleave.enabled = !file.disable_interleave_packing();
  if (file.interleave_max_jobs() != 0) {
    if (file.interleave_max_jobs() < 2) {
      return Invalid("interleave_max_jobs",
                     absl::StrCat("must be 0 (default 3) or >= 2, got ",
                                  file.interleave_max_jobs()));
    }
    policy.interleave.max_jobs = file.interleave_max_jobs();
  }
  if (!(file.interleave_min_gain() >= 0)) {
    return Invalid("interleave_min_gain",
                   absl::StrCat("must be >= 0, got ", file.interleave_min_gain()));
  }
  policy.interleave.min_gain = file.interleave_min_gain();
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < file.queues_size(); ++i) {
    const v1::QueueSpec& q = file.queues(i);
    const std::string at = absl::StrCat("queues[", i, "]");
    if (q.name().empty()) return Invalid(at, "name is empty");
    if (!names.insert(q.name()).second) {
      return Invalid(at, absl::StrCat("\"", q.name(), "\" appears twice"));
    }
    if (!(q.weight() >= 0)) {
      return Invalid(at, absl::StrCat("weight must be > 0, got ", q.weight()));
    }
    if (!(q.interactive_idle_timeout_s() >= 0) ||
        q.interactive_idle_timeout_s() > 365.0 * 24 * 3600) {
      return Invalid(at, absl::StrCat("interactive_idle_timeout_s must be in [0, 1 year], got ",
                                      q.interactive_idle_timeout_s()));
    }
    policy.queues.push_back(
        {q.name(), q.weight() == 0 ? 1.0 : q.weight(),
         static_cast<int64_t>(std::llround(q.interactive_idle_timeout_s() * 1000))});
  }
  auto users = Quotas(file.user_quotas(), "user_quotas");
  if (!users.ok()) return users.status();
  policy.user_gpu_quota = *std::move(users);
  auto projects = Quotas(file.project_quotas(), "project_quotas");
  if (!projects.ok()) return projects.status();
  policy.project_gpu_quota = *std::move(projects);
  return policy;
}

absl::StatusOr<sched::PolicyConfig> LoadSchedulerConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the scheduler config ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  v1::SchedulerConfigFile file;
  if (absl::EndsWith(path, ".json")) {
    auto parsed = google::protobuf::util::JsonStringToMessage(text.str(), &file);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", std::string(parsed.message())));
    }
  } else {
    google::protobuf::TextFormat::Parser parser;
    ErrorCollector errors;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(text.str(), &file)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", errors.text()));
    }
  }
  auto policy = PolicyFromProto(file);
  if (!policy.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", policy.status().message()));
  }
  return policy;
}

}  // namespace trainctl::coord
