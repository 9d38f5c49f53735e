// The demo's PNG writer and bar chart (see demo_png.h).

#include "cli/demo_png.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>

namespace hyperpool::cli::demo {
namespace {

// 5x7 glyphs: 7 rows, the low 5 bits of each are the pixels, MSB leftmost.
struct Glyph {
  char c;
  std::array<uint8_t, 7> rows;
};

constexpr Glyph kFont[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}}, {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}}, {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}}, {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}}, {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}}, {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}}, {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}}, {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}}, {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}}, {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}}, {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {' ', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}}, {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}}, {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}}, {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}}, {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}},
    {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}}, {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}}, {'*', {0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x00}},
    {'<', {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02}}, {'>', {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08}},
    {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}}, {'~', {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00}},
};
constexpr std::array<uint8_t, 7> kBox = {0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F};

const std::array<uint8_t, 7>& GlyphFor(char c) {
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  for (const Glyph& g : kFont) {
    if (g.c == c) return g.rows;
  }
  return kBox;
}

void AppendBe32(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

// A PNG chunk: length, type, data, CRC over type + data.
void AppendChunk(std::string& out, std::string_view type, std::string_view data) {
  AppendBe32(out, static_cast<uint32_t>(data.size()));
  std::string body(type);
  body.append(data);
  out.append(body);
  AppendBe32(out, Crc32(body));
}

// A zlib stream of stored deflate blocks (no compression: at most 65535 bytes each).
std::string ZlibStored(std::string_view data) {
  std::string out = {0x78, 0x01};  // CM=8 (deflate), 32K window; FCHECK makes 0x7801 % 31 == 0
  size_t pos = 0;
  do {
    size_t n = std::min<size_t>(65535, data.size() - pos);
    bool final_block = pos + n == data.size();
    out.push_back(final_block ? 1 : 0);  // BFINAL, BTYPE=00
    out.push_back(static_cast<char>(n & 0xff));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(~n & 0xff));
    out.push_back(static_cast<char>((~n >> 8) & 0xff));
    out.append(data.substr(pos, n));
    pos += n;
  } while (pos < data.size());
  AppendBe32(out, Adler32(data));
  return out;
}

}  // namespace

uint32_t Crc32(std::string_view data, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (unsigned char b : data) crc = table[(crc ^ b) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t Adler32(std::string_view data) {
  uint32_t a = 1, b = 0;
  for (unsigned char c : data) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

Canvas::Canvas(int width, int height, Rgb background)
    : width_(width), height_(height), pixels_(static_cast<size_t>(width) * height * 3) {
  FillRect(0, 0, width, height, background);
}

void Canvas::FillRect(int x, int y, int w, int h, Rgb color) {
  int x0 = std::max(0, x), y0 = std::max(0, y);
  int x1 = std::min(width_, x + w), y1 = std::min(height_, y + h);
  for (int yy = y0; yy < y1; ++yy) {
    for (int xx = x0; xx < x1; ++xx) {
      uint8_t* p = &pixels_[(static_cast<size_t>(yy) * width_ + xx) * 3];
      p[0] = color.r;
      p[1] = color.g;
      p[2] = color.b;
    }
  }
}

int Canvas::TextWidth(std::string_view text, int scale) {
  return text.empty() ? 0 : static_cast<int>(text.size()) * 6 * scale - scale;
}

void Canvas::DrawText(int x, int y, std::string_view text, Rgb color, int scale) {
  for (char c : text) {
    const std::array<uint8_t, 7>& rows = GlyphFor(c);
    for (int row = 0; row < 7; ++row) {
      for (int col = 0; col < 5; ++col) {
        if (rows[row] & (0x10 >> col)) FillRect(x + col * scale, y + row * scale, scale, scale, color);
      }
    }
    x += 6 * scale;
  }
}

std::string Canvas::EncodePng() const {
  // Palette of the colours in use (a chart has a handful).
  std::vector<uint32_t> palette;
  std::vector<uint8_t> indices;
  indices.reserve(static_cast<size_t>(width_) * height_);
  bool paletted = true;
  for (size_t i = 0; i < pixels_.size() && paletted; i += 3) {
    uint32_t rgb = (uint32_t{pixels_[i]} << 16) | (uint32_t{pixels_[i + 1]} << 8) | pixels_[i + 2];
    auto it = std::find(palette.begin(), palette.end(), rgb);
    if (it == palette.end()) {
      if (palette.size() == 256) {
        paletted = false;
        break;
      }
      palette.push_back(rgb);
      it = palette.end() - 1;
    }
    indices.push_back(static_cast<uint8_t>(it - palette.begin()));
  }
  const int channels = paletted ? 1 : 3;
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  AppendBe32(ihdr, static_cast<uint32_t>(width_));
  AppendBe32(ihdr, static_cast<uint32_t>(height_));
  // 8-bit depth, colour type 3 (palette) or 2 (RGB), deflate, filter 0, no interlace.
  ihdr += std::string{8, static_cast<char>(paletted ? 3 : 2), 0, 0, 0};
  AppendChunk(png, "IHDR", ihdr);
  if (paletted) {
    std::string plte;
    for (uint32_t rgb : palette) {
      plte.push_back(static_cast<char>(rgb >> 16));
      plte.push_back(static_cast<char>(rgb >> 8));
      plte.push_back(static_cast<char>(rgb));
    }
    AppendChunk(png, "PLTE", plte);
  }
  const uint8_t* data = paletted ? indices.data() : pixels_.data();
  const size_t row_bytes = static_cast<size_t>(width_) * channels;
  std::string raw;
  raw.reserve(static_cast<size_t>(height_) * (row_bytes + 1));
  for (int y = 0; y < height_; ++y) {
    raw.push_back(0);  // filter type None
    raw.append(reinterpret_cast<const char*>(data + static_cast<size_t>(y) * row_bytes), row_bytes);
  }
  AppendChunk(png, "IDAT", ZlibStored(raw));
  AppendChunk(png, "IEND", "");
  return png;
}

absl::Status WriteBarChartPng(const std::string& path, const std::string& title, const std::string& subtitle,
                              const std::vector<ChartGroup>& groups) {
  constexpr Rgb kWhite{255, 255, 255}, kInk{33, 37, 41}, kGrid{222, 226, 230}, kAxis{108, 117, 125},
      kLimit{173, 181, 189};
  const int width = 1040, height = 600;
  const int left = 80, right = 30, top = 110, bottom = 130;
  Canvas canvas(width, height, kWhite);
  canvas.DrawText(left, 20, title, kInk, 3);
  canvas.DrawText(left, 52, subtitle, kAxis, 2);

  double max_value = 1;
  for (const ChartGroup& g : groups) max_value = std::max({max_value, g.measured, g.limit});
  // A "nice" axis step: 1, 2 or 5 times a power of ten, about five gridlines.
  double raw_step = max_value / 5;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw_step)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw_step) {
      step = m * magnitude;
      break;
    }
  }
  double axis_max = std::ceil(max_value * 1.08 / step) * step;
  const int plot_h = height - top - bottom, plot_w = width - left - right;
  auto y_of = [&](double v) { return top + plot_h - static_cast<int>(std::lround(v / axis_max * plot_h)); };

  for (double v = 0; v <= axis_max + step / 2; v += step) {
    int y = y_of(v);
    canvas.FillRect(left, y, plot_w, 1, kGrid);
    std::string label = fmt::format("{:.0f}", v);
    canvas.DrawText(left - 10 - Canvas::TextWidth(label), y - 7, label, kAxis);
  }
  canvas.DrawText(left - 10 - Canvas::TextWidth("MS"), top - 34, "MS", kAxis);
  canvas.FillRect(left, top, 1, plot_h + 1, kAxis);
  canvas.FillRect(left, top + plot_h, plot_w, 1, kAxis);

  const int n = static_cast<int>(groups.size());
  const int group_w = n > 0 ? plot_w / n : plot_w;
  const int bar_w = std::min(90, group_w / 3);
  for (int i = 0; i < n; ++i) {
    const ChartGroup& g = groups[i];
    int gx = left + i * group_w + (group_w - 2 * bar_w - 10) / 2;
    struct Bar {
      double value;
      Rgb color;
      int x;
    };
    for (const Bar& bar : {Bar{g.measured, g.color, gx}, Bar{g.limit, kLimit, gx + bar_w + 10}}) {
      int y = y_of(bar.value);
      canvas.FillRect(bar.x, y, bar_w, top + plot_h - y, bar.color);
      std::string value = fmt::format("{:.0f}", bar.value);
      canvas.DrawText(bar.x + (bar_w - Canvas::TextWidth(value)) / 2, y - 20, value, kInk);
    }
    int label_x = left + i * group_w + (group_w - Canvas::TextWidth(g.label, 3)) / 2;
    canvas.DrawText(label_x, top + plot_h + 14, g.label, kInk, 3);
    int note_y = top + plot_h + 44;
    for (std::string_view rest = g.note; !rest.empty(); note_y += 20) {
      size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      canvas.DrawText(left + i * group_w + (group_w - Canvas::TextWidth(line)) / 2, note_y, line, kAxis);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }

  // Legend.
  int lx = left, ly = height - 30;
  canvas.FillRect(lx, ly, 16, 14, kInk);
  constexpr std::string_view kMeasured = "MEASURED MEAN (COLOURED BARS)";
  constexpr std::string_view kLimitText = "PHYSICAL LIMIT (ROUND TRIPS * RTT)";
  canvas.DrawText(lx + 24, ly, kMeasured, kInk);
  lx += 24 + Canvas::TextWidth(kMeasured) + 40;
  canvas.FillRect(lx, ly, 16, 14, kLimit);
  canvas.DrawText(lx + 24, ly, kLimitText, kInk);

  std::string png = canvas.EncodePng();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(png.data(), static_cast<std::streamsize>(png.size()));
  out.close();
  if (!out) return absl::InternalError(fmt::format("cannot write {}", path));
  return absl::OkStatus();
}

}  // namespace hyperpool::cli::demo
