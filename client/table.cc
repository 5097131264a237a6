#include "client/table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace trainctl::cli {
namespace {

// Gap between columns, in columns.
constexpr int kGap = 2;
// Below this a cut cell says too little; a column is never narrowed below
// max(its header, kMinCutWidth) (nor below its widest cell if that is less).
constexpr int kMinCutWidth = 8;

bool IsContinuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Byte offset where the first `columns` characters of `s` end.
size_t PrefixBytes(const std::string& s, int columns) {
  size_t i = 0;
  for (int n = 0; i < s.size(); ++i) {
    if (IsContinuation(s[i])) continue;
    if (n == columns) break;
    ++n;
  }
  return i;
}

}  // namespace

int DisplayWidth(const std::string& s) {
  return static_cast<int>(
      std::count_if(s.begin(), s.end(), [](char c) { return !IsContinuation(c); }));
}

std::string Truncate(const std::string& s, int width) {
  if (width <= 0 || DisplayWidth(s) <= width) return s;
  if (width <= 3) return s.substr(0, PrefixBytes(s, width));
  return absl::StrCat(s.substr(0, PrefixBytes(s, width - 3)), "...");
}

Table::Table(std::vector<std::string> header)
    : keep_whole_(header.size(), false) {
  rows_.push_back(std::move(header));
}

void Table::AddRow(std::vector<std::string> row) {
  row.resize(rows_[0].size());
  rows_.push_back(std::move(row));
}

void Table::KeepWhole(int column) {
  if (column >= 0 && column < static_cast<int>(keep_whole_.size())) {
    keep_whole_[column] = true;
  }
}

void Table::Optional(int column) {
  if (column >= 0 && column < static_cast<int>(keep_whole_.size()) &&
      std::find(optional_.begin(), optional_.end(), column) == optional_.end()) {
    optional_.push_back(column);
  }
}

std::vector<int> Table::ColumnWidths(int terminal_width) const {
  const size_t n = rows_[0].size();
  std::vector<int> widths(n, 0);
  for (const auto& row : rows_) {
    for (size_t i = 0; i < n; ++i) {
      widths[i] = std::max(widths[i], DisplayWidth(row[i]));
    }
  }
  if (n == 0) return widths;
  if (terminal_width <= 0) {
    if (!keep_whole_[n - 1]) {
      widths[n - 1] = std::min(widths[n - 1], kDefaultTruncateWidth);
    }
    return widths;
  }
  std::vector<int> floor(n);
  for (size_t i = 0; i < n; ++i) {
    floor[i] = keep_whole_[i] ? widths[i]
                              : std::min(widths[i], std::max(DisplayWidth(rows_[0][i]),
                                                             kMinCutWidth));
  }
  // Width of the visible columns and the gaps between them.
  auto line_width = [&widths]() {
    int total = -kGap;
    for (int w : widths) {
      if (w >= 0) total += w + kGap;
    }
    return total;
  };
  // Too narrow even with every column at its floor: hide optional columns.
  int floor_total = -kGap;
  for (size_t i = 0; i < n; ++i) floor_total += floor[i] + kGap;
  for (int column : optional_) {
    if (floor_total <= terminal_width) break;
    floor_total -= floor[column] + kGap;
    widths[column] = -1;
  }
  int total = line_width();
  // Narrow the widest column that can still give, one column at a time: the
  // long free-text cells (names, reasons, paths) give first and short ones
  // (ids, states) keep their width.
  while (total > terminal_width) {
    int widest = -1;
    for (size_t i = 0; i < n; ++i) {
      if (widths[i] >= 0 && widths[i] > floor[i] &&
          (widest < 0 || widths[i] > widths[widest])) {
        widest = static_cast<int>(i);
      }
    }
    if (widest < 0) break;  // Every column at its floor: the lines wrap.
    --widths[widest];
    --total;
  }
  return widths;
}

void Table::Print(std::ostream& out, int terminal_width) const {
  const std::vector<int> widths = ColumnWidths(terminal_width);
  const size_t n = widths.size();
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < n; ++i) {
      if (widths[i] < 0) continue;  // Hidden.
      std::string cell = Truncate(row[i], widths[i]);
      absl::StrAppend(&line, cell);
      line.append(widths[i] - DisplayWidth(cell) + kGap, ' ');
    }
    out << absl::StripTrailingAsciiWhitespace(line) << "\n";
  }
}

}  // namespace trainctl::cli
