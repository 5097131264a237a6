#include "bench/sim/trace_io.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainctl::sim {
namespace {

struct Csv {
  std::vector<std::string> header;
  // Data rows with their 1-based line numbers.
  std::vector<std::pair<int, std::vector<std::string>>> rows;
};

absl::StatusOr<Csv> ReadCsv(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  Csv csv;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    absl::string_view view = absl::StripTrailingAsciiWhitespace(line);
    if (view.empty()) continue;
    std::vector<std::string> cells = absl::StrSplit(view, ',');
    for (std::string& c : cells) {
      c = std::string(absl::StripAsciiWhitespace(c));
    }
    if (csv.header.empty()) {
      csv.header = std::move(cells);
    } else {
      csv.rows.emplace_back(line_no, std::move(cells));
    }
  }
  if (csv.header.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  }
  return csv;
}

absl::StatusOr<int> Column(const Csv& csv, const std::string& path,
                           const std::string& name) {
  auto it = std::find(csv.header.begin(), csv.header.end(), name);
  if (it == csv.header.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no column '", name, "' in the header"));
  }
  return static_cast<int>(it - csv.header.begin());
}

absl::Status CellError(const std::string& path, int line,
                       const std::string& column, const std::string& value) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ":", line, ": bad value '", value, "' in column ", column));
}

}  // namespace

absl::StatusOr<std::vector<TraceJob>> ReadTraceCsv(const std::string& path) {
  absl::StatusOr<Csv> csv = ReadCsv(path);
  if (!csv.ok()) return csv.status();
  const std::vector<std::string> names = {"job_id",     "num_gpu",
                                          "submit_time", "iterations",
                                          "model_name", "iteration_time"};
  std::vector<int> col;
  for (const std::string& n : names) {
    absl::StatusOr<int> c = Column(*csv, path, n);
    if (!c.ok()) return c.status();
    col.push_back(*c);
  }
  // resource_time_0, resource_time_1, ... while the header has them.
  std::vector<int> resource_col;
  for (int r = 0;; ++r) {
    auto it = std::find(csv->header.begin(), csv->header.end(),
                        absl::StrCat("resource_time_", r));
    if (it == csv->header.end()) break;
    resource_col.push_back(static_cast<int>(it - csv->header.begin()));
  }
  std::vector<TraceJob> jobs;
  jobs.reserve(csv->rows.size());
  for (const auto& [line, cells] : csv->rows) {
    auto cell = [&](int i) -> const std::string& {
      static const std::string kEmpty;
      return col[i] < static_cast<int>(cells.size()) ? cells[col[i]] : kEmpty;
    };
    TraceJob job;
    if (!absl::SimpleAtoi(cell(0), &job.job_id)) {
      return CellError(path, line, names[0], cell(0));
    }
    if (!absl::SimpleAtoi(cell(1), &job.num_gpu) || job.num_gpu <= 0) {
      return CellError(path, line, names[1], cell(1));
    }
    if (!absl::SimpleAtod(cell(2), &job.submit_time_ms) ||
        job.submit_time_ms < 0) {
      return CellError(path, line, names[2], cell(2));
    }
    if (!absl::SimpleAtod(cell(3), &job.iterations) || job.iterations <= 0) {
      return CellError(path, line, names[3], cell(3));
    }
    job.model_name = cell(4);
    if (!absl::SimpleAtod(cell(5), &job.iteration_time_ms) ||
        job.iteration_time_ms <= 0) {
      return CellError(path, line, names[5], cell(5));
    }
    for (size_t r = 0; r < resource_col.size(); ++r) {
      const std::string v = resource_col[r] < static_cast<int>(cells.size())
                                ? cells[resource_col[r]]
                                : "";
      double ms = 0;
      if (!absl::SimpleAtod(v, &ms) || !(ms >= 0)) {
        return CellError(path, line, absl::StrCat("resource_time_", r), v);
      }
      job.resource_time_ms.push_back(ms);
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::StatusOr<sched::muri::GpuCluster> ReadClusterCsv(
    const std::string& path) {
  absl::StatusOr<Csv> csv = ReadCsv(path);
  if (!csv.ok()) return csv.status();
  if (csv->rows.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected one data row, got ", csv->rows.size()));
  }
  const auto& [line, cells] = csv->rows[0];
  int values[3] = {0, 0, 0};
  const char* names[3] = {"num_switch", "num_node_p_switch", "num_gpu_p_node"};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<int> c = Column(*csv, path, names[i]);
    if (!c.ok()) return c.status();
    const std::string v = *c < static_cast<int>(cells.size()) ? cells[*c] : "";
    if (!absl::SimpleAtoi(v, &values[i]) || values[i] <= 0) {
      return CellError(path, line, names[i], v);
    }
  }
  if (values[0] != 1) {
    return absl::UnimplementedError(absl::StrCat(
        path, ": ", values[0],
        " switches; the simulator models one switch (yarn placement keeps a "
        "job inside one switch)"));
  }
  sched::muri::GpuCluster cluster;
  cluster.num_nodes = values[1];
  cluster.gpus_per_node = values[2];
  return cluster;
}

absl::Status WriteJobsCsv(const std::string& path,
                          std::vector<JobRecord> records) {
  std::sort(records.begin(), records.end(),
            [](const JobRecord& a, const JobRecord& b) {
              return a.job_id < b.job_id;
            });
  std::ofstream out(path);
  if (!out) {
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  }
  out << "job_id,num_gpu,submit_time_s,start_time_s,end_time_s,jct_s,"
         "pending_time_s,preempt\n";
  for (const JobRecord& r : records) {
    out << absl::StrFormat("%d,%d,%.17g,%.17g,%.17g,%.17g,%.17g,%d\n",
                           r.job_id, r.num_gpu, r.submit_time_s,
                           r.start_time_s, r.end_time_s, r.jct_s,
                           r.pending_time_s, r.preempt);
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("short write to ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobRecord>> ReadJobsCsv(const std::string& path) {
  absl::StatusOr<Csv> csv = ReadCsv(path);
  if (!csv.ok()) return csv.status();
  const std::vector<std::string> names = {
      "job_id", "num_gpu", "submit_time_s",  "start_time_s",
      "end_time_s", "jct_s", "pending_time_s", "preempt"};
  std::vector<int> col;
  for (const std::string& n : names) {
    absl::StatusOr<int> c = Column(*csv, path, n);
    if (!c.ok()) return c.status();
    col.push_back(*c);
  }
  std::vector<JobRecord> out;
  for (const auto& [line, cells] : csv->rows) {
    if (cells.size() < csv->header.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line, ": too few cells"));
    }
    JobRecord r;
    bool ok = absl::SimpleAtoi(cells[col[0]], &r.job_id) &&
              absl::SimpleAtoi(cells[col[1]], &r.num_gpu) &&
              absl::SimpleAtod(cells[col[2]], &r.submit_time_s) &&
              absl::SimpleAtod(cells[col[3]], &r.start_time_s) &&
              absl::SimpleAtod(cells[col[4]], &r.end_time_s) &&
              absl::SimpleAtod(cells[col[5]], &r.jct_s) &&
              absl::SimpleAtod(cells[col[6]], &r.pending_time_s) &&
              absl::SimpleAtoi(cells[col[7]], &r.preempt);
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line, ": unparsable row"));
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace trainctl::sim
