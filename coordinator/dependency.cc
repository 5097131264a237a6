#include "coordinator/dependency.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainctl::coord {
namespace {

struct TypeName {
  absl::string_view name;
  DepType type;
};
constexpr TypeName kTypes[] = {
    {"after", DepType::kAfter},           {"afterany", DepType::kAfterAny},
    {"afterok", DepType::kAfterOk},       {"afternotok", DepType::kAfterNotOk},
    {"aftercorr", DepType::kAfterCorr},   {"singleton", DepType::kSingleton},
};

std::optional<DepType> TypeOf(absl::string_view name) {
  for (const TypeName& t : kTypes) {
    if (t.name == name) return t.type;
  }
  return std::nullopt;
}

bool IsFinalState(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

std::string StateWord(v1::JobState s) {
  return absl::AsciiStrToLower(absl::StripPrefix(v1::JobState_Name(s), "JOB_STATE_"));
}

std::string ConditionText(const DepCondition& c) {
  if (c.type == DepType::kSingleton) return "singleton";
  return absl::StrCat(DepTypeName(c.type), ":", c.job_id);
}

// One job against a condition's type: kSatisfied, kWaiting or kNever.
DepOutcome JudgeOne(DepType type, const DepJobFacts& f) {
  const bool final = IsFinalState(f.state);
  switch (type) {
    case DepType::kAfter:
      return f.started || final ? DepOutcome::kSatisfied : DepOutcome::kWaiting;
    case DepType::kAfterAny:
      return final ? DepOutcome::kSatisfied : DepOutcome::kWaiting;
    case DepType::kAfterOk:
    case DepType::kAfterCorr:
      if (f.state == v1::JOB_STATE_SUCCEEDED) return DepOutcome::kSatisfied;
      return final ? DepOutcome::kNever : DepOutcome::kWaiting;
    case DepType::kAfterNotOk:
      if (f.state == v1::JOB_STATE_SUCCEEDED) return DepOutcome::kNever;
      return final ? DepOutcome::kSatisfied : DepOutcome::kWaiting;
    case DepType::kSingleton:
      break;
  }
  return DepOutcome::kSatisfied;
}

// "job 12 running", or "job 14 of array 12 failed".
std::string JobWords(int64_t id, int64_t array, const DepJobFacts& f) {
  return absl::StrCat("job ", id, id != array && array != 0 ? absl::StrCat(" of array ", array) : "",
                      " ", StateWord(f.state));
}

struct Judged {
  DepOutcome outcome = DepOutcome::kSatisfied;
  // The job that decides it, in words ("job 12 running").
  std::string why;
};

// The jobs condition `c` is about: one job, every task of an array, or the
// corresponding task (aftercorr). Empty `why` and kNever when one is unknown.
Judged JudgeCondition(const DepCondition& c, const DepSelf& self, DepFactsFn facts,
                      absl::Span<const SingletonPeer> peers) {
  if (c.type == DepType::kSingleton) {
    for (const SingletonPeer& p : peers) {
      if (p.id == self.id) continue;
      const bool blocks = p.state == v1::JOB_STATE_SCHEDULED ||
                          p.state == v1::JOB_STATE_RUNNING ||
                          (p.state == v1::JOB_STATE_PENDING && p.singleton && p.id < self.id);
      if (blocks) {
        return {DepOutcome::kWaiting, absl::StrCat("job ", p.id, " ", StateWord(p.state))};
      }
    }
    return {};
  }
  std::optional<DepJobFacts> head = facts(c.job_id);
  if (!head.has_value()) {
    return {DepOutcome::kNever, absl::StrCat("job ", c.job_id, " does not exist")};
  }
  const bool is_array = head->array_job_id == c.job_id && head->task_count > 0;
  if (c.type == DepType::kAfterCorr) {
    if (!is_array) {
      return {DepOutcome::kNever, absl::StrCat("job ", c.job_id, " is not a job array")};
    }
    if (!self.is_array_task) {
      return {DepOutcome::kNever, "this job is not a task of an array"};
    }
  }
  if (!is_array) return {JudgeOne(c.type, *head), JobWords(c.job_id, 0, *head)};
  // Every task of the array (or the corresponding one): never if one is
  // never, waiting if one waits.
  Judged out;
  bool found_corr = false;
  for (int32_t k = 0; k < head->task_count; ++k) {
    const int64_t id = c.job_id + k;
    std::optional<DepJobFacts> f = k == 0 ? head : facts(id);
    if (!f.has_value()) {
      return {DepOutcome::kNever, absl::StrCat("job ", id, " of array ", c.job_id,
                                               " does not exist")};
    }
    if (c.type == DepType::kAfterCorr) {
      if (f->task_id != self.task_id) continue;
      found_corr = true;
    }
    const DepOutcome o = JudgeOne(c.type, *f);
    if (o == DepOutcome::kNever) return {o, JobWords(id, c.job_id, *f)};
    if (o == DepOutcome::kWaiting && out.outcome == DepOutcome::kSatisfied) {
      out = {o, JobWords(id, c.job_id, *f)};
    }
  }
  if (c.type == DepType::kAfterCorr && !found_corr) {
    return {DepOutcome::kNever,
            absl::StrCat("array ", c.job_id, " has no task ", self.task_id)};
  }
  return out;
}

}  // namespace

absl::string_view DepTypeName(DepType type) {
  for (const TypeName& t : kTypes) {
    if (t.type == type) return t.name;
  }
  return "?";
}

bool Dependency::HasSingleton() const {
  return std::any_of(conditions.begin(), conditions.end(),
                     [](const DepCondition& c) { return c.type == DepType::kSingleton; });
}

std::vector<int64_t> Dependency::JobIds() const {
  std::vector<int64_t> out;
  absl::flat_hash_set<int64_t> seen;
  for (const DepCondition& c : conditions) {
    if (c.type != DepType::kSingleton && seen.insert(c.job_id).second) out.push_back(c.job_id);
  }
  return out;
}

absl::StatusOr<Dependency> ParseDependency(absl::string_view text) {
  Dependency dep;
  if (text.size() > static_cast<size_t>(kMaxDependencyBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "longer than ", kMaxDependencyBytes, " bytes (", text.size(), ")"));
  }
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return dep;
  const bool has_all = absl::StrContains(text, ',');
  const bool has_any = absl::StrContains(text, '?');
  if (has_all && has_any) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text, "\" mixes ',' (all of) and '?' (any of); use one of them (as Slurm)"));
  }
  dep.any_of = has_any;
  for (absl::string_view part : absl::StrSplit(text, has_any ? '?' : ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", text, "\" has an empty condition"));
    }
    std::vector<absl::string_view> fields = absl::StrSplit(part, ':');
    std::optional<DepType> type = TypeOf(fields[0]);
    if (!type.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown dependency type \"", fields[0],
          "\" in \"", part,
          "\"; one of after, afterany, afterok, afternotok, aftercorr, singleton"));
    }
    if (*type == DepType::kSingleton) {
      if (fields.size() > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", part, "\": singleton takes no job id"));
      }
      dep.conditions.push_back({DepType::kSingleton, 0});
      continue;
    }
    if (fields.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", part, "\": ", fields[0], " needs a job id (", fields[0], ":ID[:ID...])"));
    }
    for (size_t i = 1; i < fields.size(); ++i) {
      int64_t id = 0;
      if (!absl::SimpleAtoi(fields[i], &id) || id <= 0 ||
          !absl::ascii_isdigit(fields[i].empty() ? 'x' : fields[i][0])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "\"", part, "\": \"", fields[i],
            "\" is not a job id (a positive integer; Slurm's +time and _task "
            "suffixes are not supported)"));
      }
      dep.conditions.push_back({*type, id});
      if (dep.conditions.size() > static_cast<size_t>(kMaxDependencyJobs)) {
        return absl::InvalidArgumentError(
            absl::StrCat("more than ", kMaxDependencyJobs, " job ids"));
      }
    }
  }
  return dep;
}

std::string FormatDependency(const Dependency& dep) {
  std::vector<std::string> parts;
  for (const DepCondition& c : dep.conditions) parts.push_back(ConditionText(c));
  return absl::StrJoin(parts, dep.any_of ? "?" : ",");
}

DepVerdict EvaluateDependency(const Dependency& dep, const DepSelf& self, DepFactsFn facts,
                              absl::Span<const SingletonPeer> peers) {
  if (dep.conditions.empty()) return {};
  std::string first_wait;
  std::vector<std::string> nevers;
  bool any_satisfied = false;
  for (const DepCondition& c : dep.conditions) {
    const Judged j = JudgeCondition(c, self, facts, peers);
    const std::string words = absl::StrCat(ConditionText(c), " (", j.why, ")");
    switch (j.outcome) {
      case DepOutcome::kSatisfied:
        any_satisfied = true;
        break;
      case DepOutcome::kWaiting:
        if (first_wait.empty()) first_wait = words;
        break;
      case DepOutcome::kNever:
        if (!dep.any_of) {
          return {DepOutcome::kNever, absl::StrCat("dependency can never be met: ", words)};
        }
        nevers.push_back(words);
        break;
    }
    if (dep.any_of && any_satisfied) return {};
  }
  if (!first_wait.empty()) {
    return {DepOutcome::kWaiting, absl::StrCat("waiting for dependency ", first_wait)};
  }
  if (dep.any_of) {
    return {DepOutcome::kNever,
            absl::StrCat("dependency can never be met: ", absl::StrJoin(nevers, "; "))};
  }
  return {};
}

absl::Status CheckDependencyAtSubmit(const Dependency& dep, const DepSelf& self,
                                     DepFactsFn facts, const std::string& caller_user,
                                     bool admin) {
  for (const DepCondition& c : dep.conditions) {
    if (c.type == DepType::kSingleton) continue;
    const std::string where = absl::StrCat("spec.dependency: ", ConditionText(c), ": ");
    if (c.job_id == self.id) {
      return absl::InvalidArgumentError(absl::StrCat(where, "a job may not depend on itself"));
    }
    if (c.job_id > self.id) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "job ", c.job_id,
          " does not exist yet (within one submit call, a job may only depend on an "
          "earlier one)"));
    }
    std::optional<DepJobFacts> f = facts(c.job_id);
    if (!f.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "job ", c.job_id, " does not exist"));
    }
    if (!admin && f->user != caller_user) {
      return absl::PermissionDeniedError(absl::StrCat(
          where, "job ", c.job_id, " belongs to ",
          f->user.empty() ? "nobody (submitted without authentication)"
                          : absl::StrCat("user ", f->user),
          "; only an admin may depend on another user's job"));
    }
    if (c.type == DepType::kAfterCorr) {
      if (!self.is_array_task) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "aftercorr needs the dependent job to be an array (--array)"));
      }
      if (f->array_job_id != c.job_id) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "job ", c.job_id, " is not a job array (give the id of its first task)"));
      }
    }
  }
  const DepVerdict v = EvaluateDependency(dep, self, facts, {});
  if (v.outcome == DepOutcome::kNever) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.dependency: ", v.reason, "; refused at submit, as Slurm refuses it"));
  }
  return absl::OkStatus();
}

}  // namespace trainctl::coord
