// A self-contained PNG writer and bar chart for `hyperpool demo`, so the
// binary alone can draw its result: RGB pixels, zlib "stored" (uncompressed)
// deflate blocks with Adler-32, CRC-32 per chunk (PNG spec 1.2 / RFC 1950,
// RFC 1951 section 3.2.4), and a 5x7 bitmap font for the labels.
#ifndef HYPERPOOL_CLI_DEMO_PNG_H_
#define HYPERPOOL_CLI_DEMO_PNG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace hyperpool::cli::demo {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

// An RGB canvas with the few drawing operations the chart needs.
class Canvas {
 public:
  Canvas(int width, int height, Rgb background);
  int width() const { return width_; }
  int height() const { return height_; }
  // Clipped to the canvas.
  void FillRect(int x, int y, int w, int h, Rgb color);
  // Text in the 5x7 font, each font pixel `scale` x `scale` pixels, with its
  // top-left corner at (x, y). Lowercase is drawn as uppercase; characters
  // without a glyph are drawn as a box.
  void DrawText(int x, int y, std::string_view text, Rgb color, int scale = 2);
  // Width in pixels DrawText would use.
  static int TextWidth(std::string_view text, int scale = 2);
  // The complete PNG file: 8-bit palette (colour type 3) when the canvas has
  // at most 256 colours, which a chart has, else 8-bit RGB.
  std::string EncodePng() const;

 private:
  int width_, height_;
  std::vector<uint8_t> pixels_;  // RGB, row-major
};

// CRC-32 (ISO 3309, as PNG uses it) and Adler-32 (RFC 1950); exposed for tests.
uint32_t Crc32(std::string_view data, uint32_t crc = 0);
uint32_t Adler32(std::string_view data);

// One group of bars in the chart.
struct ChartGroup {
  std::string label;     // under the group ("DIRECT")
  std::string note;      // smaller lines under it, separated by '\n' ("-44% VS DIRECT")
  double measured = 0;   // ms, solid bar
  double limit = 0;      // ms, grey bar beside it
  Rgb color;
};

// Draws the demo's chart (measured mean vs physical limit per mode) and writes
// it to `path`.
absl::Status WriteBarChartPng(const std::string& path, const std::string& title, const std::string& subtitle,
                              const std::vector<ChartGroup>& groups);

}  // namespace hyperpool::cli::demo

#endif  // HYPERPOOL_CLI_DEMO_PNG_H_
