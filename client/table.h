#ifndef TRAINCTL_CLIENT_TABLE_H_
#define TRAINCTL_CLIENT_TABLE_H_

#include <ostream>
#include <string>
#include <vector>

namespace trainctl::cli {

// Width of the last column when the terminal width is unknown (output piped
// and $COLUMNS unset), in columns.
inline constexpr int kDefaultTruncateWidth = 60;

// Shortens `s` to at most `width` columns, ending it with "..." when cut; a
// multi-byte UTF-8 character is never split. Columns are counted as bytes
// but for UTF-8 continuation bytes, which add none. width <= 0: unchanged.
std::string Truncate(const std::string& s, int width);

// Display width of `s` in columns: its UTF-8 characters (each counted as one
// column; East Asian wide characters are not special-cased).
int DisplayWidth(const std::string& s);

// Rows of left-aligned cells, each column as wide as its widest cell,
// separated by two spaces; the first row is the header. Like kubectl's
// tables, but fitted to the terminal: when the rows are wider than the
// terminal, the widest columns are narrowed first (cells cut with "...")
// until the lines fit or every column is down to its floor (the header's
// width, or 8 columns if that is more); columns marked KeepWhole are never
// cut. If the lines still do not fit, the columns marked Optional are
// hidden, in the order they were marked, until they do. Single-threaded; a
// value type.
class Table {
 public:
  explicit Table(std::vector<std::string> header);

  // Adds a row; a row shorter than the header is padded with "", a longer
  // one is cut to the header's length.
  void AddRow(std::vector<std::string> row);

  // Never cut column `column` (0-based), e.g. a log path users copy.
  void KeepWhole(int column);

  // Column `column` (0-based) may be hidden on a terminal too narrow for
  // every column at its floor (e.g. RUNTIME, POWER); columns marked first
  // are hidden first. Never hidden when the width is unknown.
  void Optional(int column);

  // Prints the table. `terminal_width` in columns: > 0 fits the lines to it
  // as the class comment says; 0 (unknown, e.g. piped) cuts only the last
  // column, at kDefaultTruncateWidth. Trailing spaces are removed.
  void Print(std::ostream& out, int terminal_width) const;

  // The widths (columns) Print gives each column at `terminal_width`; -1
  // for a hidden column.
  std::vector<int> ColumnWidths(int terminal_width) const;

 private:
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> keep_whole_;
  // Optional columns, in hiding order.
  std::vector<int> optional_;
};

}  // namespace trainctl::cli

#endif  // TRAINCTL_CLIENT_TABLE_H_
