// plot.cpp — figure layout into a list of shapes (filled rectangles, polylines, text), then two renderers:
// SVG text, and an RGB raster encoded as PNG. Text metrics come from our 5×9 bitmap font; the SVG asks
// for a monospace font of the same advance (0.6 em = 6 px per font pixel), so both layouts agree.
#include "io/plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "io/npy.h"

namespace lowbit {

namespace {

// ---- bitmap font: 5 columns × 9 rows (rows 0–6 stand on the baseline, 7–8 are descenders) -----------------

constexpr int kGlyphW = 5, kGlyphH = 9, kAdvance = 6, kAscent = 7;

struct GlyphDef {
    char32_t code;
    const char* rows;  // 7 or 9 groups of 5 of '#' / '.', separated by spaces
};

// Designed for this file. Lowercase letters have a 5-row x-height (rows 2–6).
constexpr GlyphDef kGlyphs[] = {
    {' ', "..... ..... ..... ..... ..... ..... ....."},
    {'!', "..#.. ..#.. ..#.. ..#.. ..#.. ..... ..#.."},
    {'"', ".#.#. .#.#. ..... ..... ..... ..... ....."},
    {'#', ".#.#. .#.#. ##### .#.#. ##### .#.#. .#.#."},
    {'$', "..#.. .#### #.#.. .###. ..#.# ####. ..#.."},
    {'%', "##... ##..# ...#. ..#.. .#... #..## ...##"},
    {'&', ".##.. #..#. #.#.. .#... #.#.# #..#. .##.#"},
    {'\'', "..#.. ..#.. ..... ..... ..... ..... ....."},
    {'(', "...#. ..#.. .#... .#... .#... ..#.. ...#."},
    {')', ".#... ..#.. ...#. ...#. ...#. ..#.. .#..."},
    {'*', "..... ..#.. #.#.# .###. #.#.# ..#.. ....."},
    {'+', "..... ..#.. ..#.. ##### ..#.. ..#.. ....."},
    {',', "..... ..... ..... ..... ..... ..#.. ..#.. .#... ....."},
    {'-', "..... ..... ..... ##### ..... ..... ....."},
    {'.', "..... ..... ..... ..... ..... ..... ..#.."},
    {'/', "....# ....# ...#. ..#.. .#... #.... #...."},
    {'0', ".###. #...# #..## #.#.# ##..# #...# .###."},
    {'1', "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###."},
    {'2', ".###. #...# ....# ...#. ..#.. .#... #####"},
    {'3', "####. ....# ....# .###. ....# ....# ####."},
    {'4', "...#. ..##. .#.#. #..#. ##### ...#. ...#."},
    {'5', "##### #.... ####. ....# ....# #...# .###."},
    {'6', ".###. #.... #.... ####. #...# #...# .###."},
    {'7', "##### ....# ...#. ..#.. .#... .#... .#..."},
    {'8', ".###. #...# #...# .###. #...# #...# .###."},
    {'9', ".###. #...# #...# .#### ....# ....# .###."},
    {':', "..... ..... ..#.. ..... ..... ..#.. ....."},
    {';', "..... ..... ..#.. ..... ..... ..#.. ..#.. .#... ....."},
    {'<', "...#. ..#.. .#... #.... .#... ..#.. ...#."},
    {'=', "..... ..... ##### ..... ##### ..... ....."},
    {'>', ".#... ..#.. ...#. ....# ...#. ..#.. .#..."},
    {'?', ".###. #...# ....# ...#. ..#.. ..... ..#.."},
    {'@', ".###. #...# #.### #.#.# #.### #.... .####"},
    {'A', ".###. #...# #...# ##### #...# #...# #...#"},
    {'B', "####. #...# #...# ####. #...# #...# ####."},
    {'C', ".###. #...# #.... #.... #.... #...# .###."},
    {'D', "####. #...# #...# #...# #...# #...# ####."},
    {'E', "##### #.... #.... ####. #.... #.... #####"},
    {'F', "##### #.... #.... ####. #.... #.... #...."},
    {'G', ".###. #...# #.... #.### #...# #...# .####"},
    {'H', "#...# #...# #...# ##### #...# #...# #...#"},
    {'I', ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###."},
    {'J', "..### ...#. ...#. ...#. ...#. #..#. .##.."},
    {'K', "#...# #..#. #.#.. ##... #.#.. #..#. #...#"},
    {'L', "#.... #.... #.... #.... #.... #.... #####"},
    {'M', "#...# ##.## #.#.# #.#.# #...# #...# #...#"},
    {'N', "#...# #...# ##..# #.#.# #..## #...# #...#"},
    {'O', ".###. #...# #...# #...# #...# #...# .###."},
    {'P', "####. #...# #...# ####. #.... #.... #...."},
    {'Q', ".###. #...# #...# #...# #.#.# #..#. .##.#"},
    {'R', "####. #...# #...# ####. #.#.. #..#. #...#"},
    {'S', ".#### #.... #.... .###. ....# ....# ####."},
    {'T', "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#.."},
    {'U', "#...# #...# #...# #...# #...# #...# .###."},
    {'V', "#...# #...# #...# #...# #...# .#.#. ..#.."},
    {'W', "#...# #...# #...# #.#.# #.#.# #.#.# .#.#."},
    {'X', "#...# #...# .#.#. ..#.. .#.#. #...# #...#"},
    {'Y', "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#.."},
    {'Z', "##### ....# ...#. ..#.. .#... #.... #####"},
    {'[', ".###. .#... .#... .#... .#... .#... .###."},
    {'\\', "#.... #.... .#... ..#.. ...#. ....# ....#"},
    {']', ".###. ...#. ...#. ...#. ...#. ...#. .###."},
    {'^', "..#.. .#.#. #...# ..... ..... ..... ....."},
    {'_', "..... ..... ..... ..... ..... ..... ..... ##### ....."},
    {'`', ".#... ..#.. ..... ..... ..... ..... ....."},
    {'a', "..... ..... .###. ....# .#### #...# .####"},
    {'b', "#.... #.... ####. #...# #...# #...# ####."},
    {'c', "..... ..... .###. #.... #.... #...# .###."},
    {'d', "....# ....# .#### #...# #...# #...# .####"},
    {'e', "..... ..... .###. #...# ##### #.... .###."},
    {'f', "..##. .#..# .#... ###.. .#... .#... .#..."},
    {'g', "..... ..... .#### #...# #...# .#### ....# #...# .###."},
    {'h', "#.... #.... #.##. ##..# #...# #...# #...#"},
    {'i', "..#.. ..... .##.. ..#.. ..#.. ..#.. .###."},
    {'j', "...#. ..... ..##. ...#. ...#. ...#. ...#. #..#. .##.."},
    {'k', "#.... #.... #..#. #.#.. ##... #.#.. #..#."},
    {'l', ".##.. ..#.. ..#.. ..#.. ..#.. ..#.. .###."},
    {'m', "..... ..... ##.#. #.#.# #.#.# #.#.# #.#.#"},
    {'n', "..... ..... #.##. ##..# #...# #...# #...#"},
    {'o', "..... ..... .###. #...# #...# #...# .###."},
    {'p', "..... ..... ####. #...# #...# #...# ####. #.... #...."},
    {'q', "..... ..... .#### #...# #...# #...# .#### ....# ....#"},
    {'r', "..... ..... #.##. ##..# #.... #.... #...."},
    {'s', "..... ..... .#### #.... .###. ....# ####."},
    {'t', ".#... .#... ###.. .#... .#... .#..# ..##."},
    {'u', "..... ..... #...# #...# #...# #..## .##.#"},
    {'v', "..... ..... #...# #...# #...# .#.#. ..#.."},
    {'w', "..... ..... #...# #...# #.#.# #.#.# .#.#."},
    {'x', "..... ..... #...# .#.#. ..#.. .#.#. #...#"},
    {'y', "..... ..... #...# #...# #...# #...# .#### ....# .###."},
    {'z', "..... ..... ##### ...#. ..#.. .#... #####"},
    {'{', "...## ..#.. ..#.. ##... ..#.. ..#.. ...##"},
    {'|', "..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#.."},
    {'}', "##... ..#.. ..#.. ...## ..#.. ..#.. ##..."},
    {'~', "..... ..... .#... #.#.# ...#. ..... ....."},
    {U'\u2212', "..... ..... ..... ##### ..... ..... ....."},  // minus sign
    {U'\u2013', "..... ..... ..... ##### ..... ..... ....."},  // en dash
    {U'\u00B7', "..... ..... ..... ..#.. ..... ..... ....."},  // middle dot
    {U'\u00D7', "..... #...# .#.#. ..#.. .#.#. #...# ....."},  // multiplication sign
    {U'\u00B5', "..... ..... #...# #...# #...# ##..# #.##. #.... #...."},  // micro
    {U'\u03A3', "##### #.... .#... ..#.. .#... #.... #####"},  // capital sigma
    {U'\u00B2', ".##.. ...#. ..#.. .###. ..... ..... ....."},  // superscript two
    {U'\u2016', ".#.#. .#.#. .#.#. .#.#. .#.#. .#.#. .#.#."},  // double vertical line
};
// Any other code point: an outlined box, so a missing glyph is visible rather than silently dropped.
constexpr const char* kMissingGlyph = "##### #...# #...# #...# #...# #...# #####";

using GlyphBits = std::array<uint8_t, kGlyphH>;  // bit c of row r: column c set

GlyphBits parse_glyph(const char* rows) {
    GlyphBits bits{};
    int r = 0, c = 0;
    for (const char* p = rows; *p; ++p) {
        if (*p == ' ') {
            ++r;
            c = 0;
            continue;
        }
        if (*p == '#') bits[size_t(r)] |= uint8_t(1u << c);
        ++c;
    }
    return bits;
}

const GlyphBits& glyph(char32_t code) {
    static const std::map<char32_t, GlyphBits> table = [] {
        std::map<char32_t, GlyphBits> t;
        for (const auto& g : kGlyphs) t[g.code] = parse_glyph(g.rows);
        return t;
    }();
    static const GlyphBits missing = parse_glyph(kMissingGlyph);
    auto it = table.find(code);
    return it == table.end() ? missing : it->second;
}

std::u32string decode_utf8(const std::string& s) {
    std::u32string out;
    for (size_t i = 0; i < s.size();) {
        const auto b = uint8_t(s[i]);
        const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
        char32_t cp = n == 1 ? b : char32_t(b & (0x7F >> n));
        for (int k = 1; k < n && i + size_t(k) < s.size(); ++k) cp = (cp << 6) | (uint8_t(s[i + size_t(k)]) & 0x3F);
        out.push_back(cp);
        i += size_t(n);
    }
    return out;
}

// ---- the shapes a layout produces ------------------------------------------------------------------------

enum class Anchor { start, middle, end };

struct Point {
    double x, y;
};

struct Shape {
    enum class Kind { rect, polyline, text } kind = Kind::rect;
    Rgb colour;
    double x = 0, y = 0, w = 0, h = 0;  // rect: corner and size; text: anchor point on the baseline
    std::vector<Point> points;          // polyline
    double stroke_width = 1;            // polyline
    std::string text;                   // text (UTF-8)
    int scale = 2;                      // text: font pixels per glyph pixel
    bool bold = false, vertical = false;  // vertical: rotated by −90°, reading upwards
    Anchor anchor = Anchor::start;
};

struct Scene {
    int width = 0, height = 0;
    std::vector<Shape> shapes;

    void rect(double x, double y, double w, double h, Rgb c) {
        Shape s = make(Shape::Kind::rect, c);
        s.x = x, s.y = y, s.w = w, s.h = h;
        shapes.push_back(std::move(s));
    }
    void polyline(std::vector<Point> pts, Rgb c, double width) {
        Shape s = make(Shape::Kind::polyline, c);
        s.points = std::move(pts);
        s.stroke_width = width;
        shapes.push_back(std::move(s));
    }
    void text(double x, double y, std::string t, Anchor a = Anchor::start, bool bold = false, bool vertical = false,
              Rgb c = {0, 0, 0}) {
        Shape s = make(Shape::Kind::text, c);
        s.x = x, s.y = y;
        s.text = std::move(t);
        s.anchor = a;
        s.bold = bold;
        s.vertical = vertical;
        shapes.push_back(std::move(s));
    }

private:
    static Shape make(Shape::Kind kind, Rgb colour) {
        Shape s;
        s.kind = kind;
        s.colour = colour;
        return s;
    }
};

constexpr int kTextScale = 2;  // every label: 12 px advance, 14 px cap height
constexpr double kCharW = kAdvance * kTextScale, kCapH = kAscent * kTextScale;
constexpr Rgb kBlack{0, 0, 0}, kWhite{255, 255, 255}, kGrid{225, 225, 225}, kFrameGrey{120, 120, 120},
    kMissingCell{200, 200, 200}, kCaption{68, 68, 68};

double text_width(const std::string& s) { return double(decode_utf8(s).size()) * kCharW; }

std::string format_value(double v, int decimals) { return fmt::format("{:.{}f}", v, std::max(decimals, 0)); }

// ---- axes ------------------------------------------------------------------------------------------------

struct Ticks {
    double lo, hi;
    std::vector<double> at;
    int decimals;  // for linear ticks; log ticks print with {:g}
};

// 1, 2 or 5 × 10^k steps, about `target` of them over [lo, hi], the range widened to whole steps.
Ticks linear_ticks(double lo, double hi, int target = 6) {
    if (!(hi > lo)) {
        const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
        lo -= pad;
        hi += pad;
    }
    const double raw = (hi - lo) / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double step = raw / mag < 1.5 ? mag : raw / mag < 3.5 ? 2 * mag : raw / mag < 7.5 ? 5 * mag : 10 * mag;
    Ticks t{std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step, {}, 0};
    for (double v = t.lo; v <= t.hi + step * 1e-6; v += step) t.at.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    t.decimals = std::max(0, int(-std::floor(std::log10(step) + 1e-9)));
    return t;
}

// 1, 2 and 5 × 10^k over at most three decades (whole decades beyond), the range widened to ticks.
Ticks log_ticks(double lo, double hi) {
    const double d_lo = std::floor(std::log10(lo) + 1e-9), d_hi = std::ceil(std::log10(hi) - 1e-9);
    const bool fine = d_hi - d_lo <= 3;
    std::vector<double> candidates;
    for (double d = d_lo; d <= d_hi; ++d)
        for (double m : fine ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) candidates.push_back(m * std::pow(10.0, d));
    Ticks t{candidates.front(), candidates.back(), {}, 0};
    for (double c : candidates) {
        if (c <= lo * (1 + 1e-9)) t.lo = c;
        if (c >= hi * (1 - 1e-9)) {
            t.hi = c;
            break;
        }
    }
    if (t.hi <= t.lo) t.hi = t.lo * 10;
    for (double c : candidates)
        if (c >= t.lo * (1 - 1e-9) && c <= t.hi * (1 + 1e-9)) t.at.push_back(c);
    return t;
}

std::string tick_label(double v, const Ticks& t, bool log) { return log ? fmt::format("{:g}", v) : format_value(v, t.decimals); }

bool drawable(double x, double y, bool log_y) { return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0); }

struct LineAxes {
    PlotFrame frame;
    Ticks x, y;
};

LineAxes line_axes(const LinePlot& p) {
    if (p.series.empty()) fail(ErrorKind::input, "line plot '{}': no series to draw", p.title);
    double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
    for (const auto& s : p.series) {
        if (s.x.size() != s.y.size())
            fail(ErrorKind::input, "line plot '{}': series '{}' has {} x and {} y values", p.title, s.label, s.x.size(), s.y.size());
        for (size_t i = 0; i < s.x.size(); ++i)
            if (drawable(s.x[i], s.y[i], p.log_y)) {
                x_lo = std::min(x_lo, s.x[i]), x_hi = std::max(x_hi, s.x[i]);
                y_lo = std::min(y_lo, s.y[i]), y_hi = std::max(y_hi, s.y[i]);
            }
    }
    if (!(x_lo <= x_hi))
        fail(ErrorKind::input, "line plot '{}': no finite{} points to draw", p.title, p.log_y ? ", positive" : "");
    LineAxes a{{}, linear_ticks(x_lo, x_hi), p.log_y ? log_ticks(y_lo, y_hi) : linear_ticks(y_lo, y_hi)};
    double widest_y_tick = 0;
    for (double v : a.y.at) widest_y_tick = std::max(widest_y_tick, text_width(tick_label(v, a.y, p.log_y)));
    a.frame.left = 24 + kCapH + 14 + widest_y_tick + 10;  // y label, gap, tick labels, tick marks
    a.frame.top = p.title.empty() ? 24 : 64;
    a.frame.right = p.width - 30 - kCharW * 2;  // room for half of the last x tick label
    a.frame.bottom = p.height - (p.x_label.empty() ? 44 : 74);
    a.frame.x_lo = a.x.lo, a.frame.x_hi = a.x.hi, a.frame.y_lo = a.y.lo, a.frame.y_hi = a.y.hi;
    a.frame.log_y = p.log_y;
    if (a.frame.right - a.frame.left < 100 || a.frame.bottom - a.frame.top < 100)
        fail(ErrorKind::input, "line plot '{}': a {}×{} canvas leaves no room for the plot area", p.title, p.width, p.height);
    return a;
}

Scene layout_line_plot(const LinePlot& p) {
    const LineAxes a = line_axes(p);
    const PlotFrame& f = a.frame;
    Scene s;
    s.width = p.width;
    s.height = p.height;
    s.rect(0, 0, p.width, p.height, kWhite);
    if (!p.title.empty()) s.text(p.width / 2.0, 36, p.title, Anchor::middle, true);
    // Grid and ticks; lines sit on pixel centres (+0.5) so that 1-px strokes stay sharp in both renderers.
    for (double v : a.x.at) {
        const double x = std::round(f.to_px(v)) + 0.5;
        s.polyline({{x, f.top}, {x, f.bottom}}, kGrid, 1);
        s.polyline({{x, f.bottom}, {x, f.bottom + 6}}, kBlack, 1);
        s.text(x, f.bottom + 8 + kCapH, tick_label(v, a.x, false), Anchor::middle);
    }
    for (double v : a.y.at) {
        const double y = std::round(f.to_py(v)) + 0.5;
        s.polyline({{f.left, y}, {f.right, y}}, kGrid, 1);
        s.polyline({{f.left - 6, y}, {f.left, y}}, kBlack, 1);
        s.text(f.left - 10, y + kCapH / 2, tick_label(v, a.y, p.log_y), Anchor::end);
    }
    const double l = std::round(f.left) + 0.5, r = std::round(f.right) + 0.5, t = std::round(f.top) + 0.5,
                 b = std::round(f.bottom) + 0.5;
    s.polyline({{l, t}, {r, t}, {r, b}, {l, b}, {l, t}}, kBlack, 1);
    if (!p.x_label.empty()) s.text((f.left + f.right) / 2, p.height - 24, p.x_label, Anchor::middle);
    if (!p.y_label.empty()) s.text(24 + kCapH, (f.top + f.bottom) / 2, p.y_label, Anchor::middle, false, true);
    // Series: one polyline per unbroken run of drawable points.
    for (size_t i = 0; i < p.series.size(); ++i) {
        const auto& ser = p.series[i];
        std::vector<Point> run;
        auto flush = [&] {
            if (run.size() >= 2) s.polyline(run, series_colour(i), 2);
            if (run.size() == 1) s.rect(run[0].x - 2, run[0].y - 2, 4, 4, series_colour(i));
            run.clear();
        };
        for (size_t k = 0; k < ser.x.size(); ++k) {
            if (drawable(ser.x[k], ser.y[k], p.log_y)) run.push_back({f.to_px(ser.x[k]), f.to_py(ser.y[k])});
            else flush();
        }
        flush();
    }
    // Legend in the top-right corner of the plot area.
    double widest = 0;
    for (const auto& ser : p.series) widest = std::max(widest, text_width(ser.label));
    const double row_h = kCapH + 10, box_w = widest + 56, box_h = double(p.series.size()) * row_h + 10;
    const double bx = f.right - box_w - 10, by = f.top + 10;
    s.rect(bx, by, box_w, box_h, kWhite);
    const double bl = std::round(bx) + 0.5, br = std::round(bx + box_w) + 0.5, bt = std::round(by) + 0.5,
                 bb = std::round(by + box_h) + 0.5;
    s.polyline({{bl, bt}, {br, bt}, {br, bb}, {bl, bb}, {bl, bt}}, kFrameGrey, 1);
    for (size_t i = 0; i < p.series.size(); ++i) {
        const double y = by + 5 + double(i) * row_h + row_h / 2;
        s.polyline({{bx + 10, y}, {bx + 38, y}}, series_colour(i), 3);
        s.text(bx + 46, y + kCapH / 2, p.series[i].label);
    }
    return s;
}

// ---- heatmap ---------------------------------------------------------------------------------------------

constexpr double kCellH = 34, kBarW = 22;

struct HeatmapRange {
    double lo, hi;
};

HeatmapRange heatmap_range(const Heatmap& h) {
    const size_t nr = h.row_labels.size(), nc = h.col_labels.size();
    if (h.values.size() != nr) fail(ErrorKind::input, "heatmap '{}': {} value rows for {} row labels", h.title, h.values.size(), nr);
    HeatmapRange r{INFINITY, -INFINITY};
    for (const auto& row : h.values) {
        if (row.size() != nc) fail(ErrorKind::input, "heatmap '{}': a row has {} values for {} columns", h.title, row.size(), nc);
        for (double v : row)
            if (std::isfinite(v)) r.lo = std::min(r.lo, v), r.hi = std::max(r.hi, v);
    }
    return r;
}

// Position of v on the colour scale (1 = best); a flat or empty table is all yellow.
double heatmap_t(const Heatmap& h, const HeatmapRange& r, double v) {
    const double t = r.hi > r.lo ? (v - r.lo) / (r.hi - r.lo) : 0.5;
    return h.higher_is_better ? t : 1.0 - t;
}

Scene layout_heatmap(const Heatmap& h) {
    const HeatmapRange range = heatmap_range(h);
    const HeatmapGrid g = heatmap_grid(h);
    const size_t nr = h.row_labels.size(), nc = h.col_labels.size();
    const bool any = range.lo <= range.hi;
    const double table_bottom = g.top + double(nr) * g.cell_height;
    const double bar_x = g.left + double(nc) * g.cell_width + 30, bar_h = std::max(table_bottom - g.top, 120.0);
    std::vector<double> bar_ticks;
    if (any) bar_ticks = range.hi > range.lo ? std::vector<double>{range.hi, (range.lo + range.hi) / 2, range.lo}
                                             : std::vector<double>{range.lo};
    double widest_tick = 0;
    for (double v : bar_ticks) widest_tick = std::max(widest_tick, text_width(format_value(v, h.decimals)));
    const std::string caption = fmt::format("colour: {} ({} is better)", h.value_label, h.higher_is_better ? "higher" : "lower");
    Scene s;
    s.width = int(std::ceil(std::max({bar_x + kBarW + 12 + widest_tick + 20, text_width(h.title) + 40, g.left + text_width(caption) + 20})));
    s.height = int(std::ceil(g.top + bar_h + 56));
    s.rect(0, 0, s.width, s.height, kWhite);
    s.text(20, 36, h.title, Anchor::start, true);
    for (size_t c = 0; c < nc; ++c)
        s.text(g.left + (double(c) + 0.5) * g.cell_width, g.top - 12, h.col_labels[c], Anchor::middle, true);
    for (size_t r = 0; r < nr; ++r) {
        const double y = g.top + double(r) * g.cell_height;
        s.text(g.left - 10, y + g.cell_height / 2 + kCapH / 2, h.row_labels[r], Anchor::end, true);
        for (size_t c = 0; c < nc; ++c) {
            const double v = h.values[r][c], x = g.left + double(c) * g.cell_width;
            const bool ok = std::isfinite(v);
            // 1 px of white around each cell separates neighbours of similar colour.
            s.rect(x + 1, y + 1, g.cell_width - 2, g.cell_height - 2, ok ? heatmap_colour(heatmap_t(h, range, v)) : kMissingCell);
            s.text(x + g.cell_width / 2, y + g.cell_height / 2 + kCapH / 2, ok ? format_value(v, h.decimals) : "\u2013",
                   Anchor::middle);
        }
    }
    // Colour bar: the top is the largest value; bands of 2 px.
    for (double y = 0; y < bar_h; y += 2) {
        const double v = range.hi - (y + 1) / bar_h * (range.hi - range.lo);
        s.rect(bar_x, g.top + y, kBarW, std::min(2.0, bar_h - y), any ? heatmap_colour(heatmap_t(h, range, v)) : kMissingCell);
    }
    for (size_t i = 0; i < bar_ticks.size(); ++i) {
        const double y = bar_ticks.size() == 1 ? g.top + bar_h / 2 : g.top + bar_h * double(i) / double(bar_ticks.size() - 1);
        const double yl = std::round(std::clamp(y, g.top, g.top + bar_h - 1)) + 0.5;
        s.polyline({{bar_x + kBarW, yl}, {bar_x + kBarW + 6, yl}}, kBlack, 1);
        s.text(bar_x + kBarW + 10, std::clamp(y + kCapH / 2, g.top + kCapH, g.top + bar_h), format_value(bar_ticks[i], h.decimals));
    }
    s.text(g.left, s.height - 18, caption, Anchor::start, false, false, kCaption);
    return s;
}

Scene layout(const Figure& f) {
    return std::visit([](const auto& fig) {
        if constexpr (std::is_same_v<std::decay_t<decltype(fig)>, LinePlot>) return layout_line_plot(fig);
        else return layout_heatmap(fig);
    }, f);
}

// ---- SVG -------------------------------------------------------------------------------------------------

std::string xml_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '&') o += "&amp;";
        else if (c == '<') o += "&lt;";
        else if (c == '>') o += "&gt;";
        else if (c == '"') o += "&quot;";
        else o += c;
    }
    return o;
}

std::string svg_colour(Rgb c) { return fmt::format("#{:02x}{:02x}{:02x}", c.r, c.g, c.b); }

std::string to_svg(const Scene& scene) {
    // Monospace at 10 px per font pixel: 0.6 em advance = the bitmap font's 6-pixel advance.
    std::string o = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
        "font-family=\"DejaVu Sans Mono, Liberation Mono, monospace\" font-size=\"{}\">\n",
        scene.width, scene.height, scene.width, scene.height, 10 * kTextScale);
    for (const auto& s : scene.shapes) {
        switch (s.kind) {
        case Shape::Kind::rect:
            o += fmt::format("<rect x=\"{:g}\" y=\"{:g}\" width=\"{:g}\" height=\"{:g}\" fill=\"{}\"/>\n", s.x, s.y, s.w, s.h,
                             svg_colour(s.colour));
            break;
        case Shape::Kind::polyline: {
            std::string pts;
            for (const auto& p : s.points) pts += fmt::format("{}{:.2f},{:.2f}", pts.empty() ? "" : " ", p.x, p.y);
            o += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{:g}\" stroke-linejoin=\"round\"/>\n",
                             pts, svg_colour(s.colour), s.stroke_width);
            break;
        }
        case Shape::Kind::text: {
            const char* anchor = s.anchor == Anchor::start ? "start" : s.anchor == Anchor::middle ? "middle" : "end";
            o += fmt::format("<text x=\"{:g}\" y=\"{:g}\" text-anchor=\"{}\"{}{}{}>{}</text>\n", s.x, s.y, anchor,
                             s.bold ? " font-weight=\"bold\"" : "",
                             s.colour == kBlack ? "" : fmt::format(" fill=\"{}\"", svg_colour(s.colour)),
                             s.vertical ? fmt::format(" transform=\"rotate(-90 {:g} {:g})\"", s.x, s.y) : "", xml_escape(s.text));
            break;
        }
        }
    }
    return o + "</svg>\n";
}

// ---- raster ----------------------------------------------------------------------------------------------

struct Raster {
    Image img;

    void set(int x, int y, Rgb c) {
        if (x < 0 || y < 0 || x >= img.width || y >= img.height) return;
        uint8_t* p = &img.rgb[(size_t(y) * size_t(img.width) + size_t(x)) * 3];
        p[0] = c.r, p[1] = c.g, p[2] = c.b;
    }
    // Pixels whose centres lie inside [x0, x1) × [y0, y1).
    void fill(double x0, double y0, double x1, double y1, Rgb c) {
        const int ix1 = int(std::lround(x1)), iy1 = int(std::lround(y1));
        for (int y = int(std::lround(y0)); y < iy1; ++y)
            for (int x = int(std::lround(x0)); x < ix1; ++x) set(x, y, c);
    }
    // A square pen of `width` pixels stepped along the segment every quarter pixel.
    void line(Point a, Point b, double width, Rgb c) {
        const double half = (width - 1) / 2, len = std::hypot(b.x - a.x, b.y - a.y);
        const int steps = std::max(1, int(std::ceil(len * 4)));
        for (int i = 0; i <= steps; ++i) {
            const double t = double(i) / steps, x = a.x + t * (b.x - a.x), y = a.y + t * (b.y - a.y);
            for (int py = int(std::floor(y - half)); py <= int(std::floor(y + half)); ++py)
                for (int px = int(std::floor(x - half)); px <= int(std::floor(x + half)); ++px) set(px, py, c);
        }
    }
    void text(const Shape& s) {
        const std::u32string cps = decode_utf8(s.text);
        const int k = s.scale;
        const double len = double(cps.size()) * kAdvance * k - k;  // the last glyph's spacing column is not ink
        const double start = s.anchor == Anchor::start ? 0 : s.anchor == Anchor::middle ? -len / 2 : -len;
        // (dx along the text, dy down from the baseline) → canvas; vertical text is rotated by −90°.
        auto put = [&](double dx, double dy) {
            if (s.vertical) fill(s.x + dy, s.y - dx - k, s.x + dy + k, s.y - dx, s.colour);
            else fill(s.x + dx, s.y + dy, s.x + dx + k, s.y + dy + k, s.colour);
        };
        for (size_t i = 0; i < cps.size(); ++i) {
            const GlyphBits& g = glyph(cps[i]);
            const double gx = std::round(start) + double(i) * kAdvance * k;
            for (int r = 0; r < kGlyphH; ++r)
                for (int c = 0; c < kGlyphW; ++c)
                    if (g[size_t(r)] >> c & 1) {
                        put(gx + c * k, double(r - kAscent) * k);
                        if (s.bold) put(gx + c * k + 1, double(r - kAscent) * k);
                    }
        }
    }
};

Image rasterise(const Scene& scene) {
    Raster r{{scene.width, scene.height, std::vector<uint8_t>(size_t(scene.width) * size_t(scene.height) * 3, 255)}};
    for (const auto& s : scene.shapes) {
        switch (s.kind) {
        case Shape::Kind::rect: r.fill(s.x, s.y, s.x + s.w, s.y + s.h, s.colour); break;
        case Shape::Kind::polyline:
            // 1-px strokes are placed on pixel centres; the pen's pixel is the one containing the point.
            for (size_t i = 1; i < s.points.size(); ++i) r.line(s.points[i - 1], s.points[i], s.stroke_width, s.colour);
            break;
        case Shape::Kind::text: r.text(s); break;
        }
    }
    return std::move(r.img);
}

// ---- PNG: zlib stream of one fixed-Huffman deflate block ---------------------------------------------------
// Each row is filtered with "Sub" (difference to the pixel on the left), so the flat areas of a plot become
// runs of zero bytes; runs of a repeated byte are coded as length/distance-1 matches, everything else as
// literals. A 960×600 figure (1.7 MB of pixels) comes out at a few tens of KB, with no table to transmit.

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0) {
    static const std::array<uint32_t, 256> table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    crc = ~crc;
    for (size_t i = 0; i < n; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

uint32_t adler32(const std::vector<uint8_t>& data) {
    uint32_t a = 1, b = 0;
    for (uint8_t v : data) {
        a = (a + v) % 65521;
        b = (b + a) % 65521;
    }
    return (b << 16) | a;
}

struct BitWriter {
    std::vector<uint8_t> out;
    uint32_t acc = 0;
    int n = 0;
    void bits(uint32_t v, int count) {  // value, least significant bit first
        for (int i = 0; i < count; ++i) {
            acc |= ((v >> i) & 1u) << n;
            if (++n == 8) out.push_back(uint8_t(acc)), acc = 0, n = 0;
        }
    }
    void huffman(uint32_t code, int len) {  // Huffman codes go most significant bit first
        for (int i = len - 1; i >= 0; --i) bits((code >> i) & 1u, 1);
    }
    void flush() {
        if (n) out.push_back(uint8_t(acc)), acc = 0, n = 0;
    }
};

// RFC 1951 §3.2.6: the fixed literal/length code.
void put_litlen(BitWriter& w, int v) {
    if (v < 144) w.huffman(uint32_t(0x30 + v), 8);
    else if (v < 256) w.huffman(uint32_t(0x190 + v - 144), 9);
    else if (v < 280) w.huffman(uint32_t(v - 256), 7);
    else w.huffman(uint32_t(0xC0 + v - 280), 8);
}

// A match of `len` (3–258) bytes at distance 1: its length code, extra bits, and distance code 0 (5 bits).
void put_run(BitWriter& w, int len) {
    static constexpr int base[] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31,
                                   35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
    int i = 28;
    while (base[i] > len) --i;
    const int extra = i < 8 || i == 28 ? 0 : (i - 4) / 4;
    put_litlen(w, 257 + i);
    w.bits(uint32_t(len - base[i]), extra);
    w.huffman(0, 5);
}

std::vector<uint8_t> zlib_compress(const std::vector<uint8_t>& data) {
    BitWriter w;
    w.out = {0x78, 0x01};  // deflate, 32 KB window; (0x78·256 + 0x01) % 31 == 0
    w.bits(1, 1);          // final block
    w.bits(1, 2);          // fixed Huffman codes
    for (size_t i = 0; i < data.size();) {
        size_t run = 0;
        if (i > 0)
            while (run < 258 && i + run < data.size() && data[i + run] == data[i - 1]) ++run;
        if (run >= 3) {
            put_run(w, int(run));
            i += run;
        } else {
            put_litlen(w, data[i++]);
        }
    }
    put_litlen(w, 256);  // end of block
    w.flush();
    const uint32_t a = adler32(data);
    for (int s = 24; s >= 0; s -= 8) w.out.push_back(uint8_t(a >> s));
    return std::move(w.out);
}

void put_be32(std::vector<uint8_t>& o, uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) o.push_back(uint8_t(v >> s));
}

void put_chunk(std::vector<uint8_t>& png, const char type[5], const std::vector<uint8_t>& data) {
    put_be32(png, uint32_t(data.size()));
    const size_t start = png.size();
    png.insert(png.end(), type, type + 4);
    png.insert(png.end(), data.begin(), data.end());
    put_be32(png, crc32(&png[start], png.size() - start));
}

bool ends_with_ci(const std::string& s, const std::string& suffix) {
    if (s.size() < suffix.size()) return false;
    for (size_t i = 0; i < suffix.size(); ++i)
        if (std::tolower(uint8_t(s[s.size() - suffix.size() + i])) != suffix[i]) return false;
    return true;
}

}  // namespace

Rgb Image::pixel(int x, int y) const {
    const uint8_t* p = &rgb[(size_t(y) * size_t(width) + size_t(x)) * 3];
    return {p[0], p[1], p[2]};
}

double PlotFrame::to_px(double x) const { return left + (x - x_lo) / (x_hi - x_lo) * (right - left); }

double PlotFrame::to_py(double y) const {
    const double t = log_y ? (std::log10(y) - std::log10(y_lo)) / (std::log10(y_hi) - std::log10(y_lo)) : (y - y_lo) / (y_hi - y_lo);
    return bottom - t * (bottom - top);
}

PlotFrame line_plot_frame(const LinePlot& plot) { return line_axes(plot).frame; }

HeatmapGrid heatmap_grid(const Heatmap& h) {
    double longest_row = 0, longest_col = 0;
    for (const auto& l : h.row_labels) longest_row = std::max(longest_row, text_width(l));
    for (const auto& l : h.col_labels) longest_col = std::max(longest_col, text_width(l));
    return {std::max(60.0, longest_row + 30), 80, std::max(110.0, longest_col + 20), kCellH};
}

Rgb series_colour(size_t index) {
    static constexpr Rgb palette[] = {{31, 119, 180}, {214, 39, 40}, {44, 160, 44}, {148, 103, 189},
                                      {255, 127, 14}, {23, 190, 207}, {140, 86, 75}, {227, 119, 194}};
    return palette[index % std::size(palette)];
}

Rgb heatmap_colour(double t) {
    t = std::clamp(t, 0.0, 1.0);
    const int r = t < 0.5 ? 230 : int(230 - (t - 0.5) * 2 * 140);
    const int g = t < 0.5 ? int(80 + t * 2 * 150) : 230;
    return {uint8_t(r), uint8_t(g), 90};
}

std::string render_svg(const Figure& figure) { return to_svg(layout(figure)); }

Image render_image(const Figure& figure) { return rasterise(layout(figure)); }

std::vector<uint8_t> encode_png(const Image& image) {
    const size_t stride = size_t(image.width) * 3;
    std::vector<uint8_t> filtered;
    filtered.reserve((stride + 1) * size_t(image.height));
    for (int y = 0; y < image.height; ++y) {
        const uint8_t* row = &image.rgb[size_t(y) * stride];
        filtered.push_back(1);  // filter type Sub
        for (size_t i = 0; i < stride; ++i) filtered.push_back(uint8_t(row[i] - (i >= 3 ? row[i - 3] : 0)));
    }
    std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    std::vector<uint8_t> ihdr;
    put_be32(ihdr, uint32_t(image.width));
    put_be32(ihdr, uint32_t(image.height));
    ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8 bits per sample, RGB, deflate, adaptive filters, no interlace
    put_chunk(png, "IHDR", ihdr);
    put_chunk(png, "IDAT", zlib_compress(filtered));
    put_chunk(png, "IEND", {});
    return png;
}

void write_figure(const std::string& path, const Figure& figure) {
    if (ends_with_ci(path, ".svg")) {
        const std::string s = render_svg(figure);
        write_file_atomic(path, s.data(), s.size());
    } else if (ends_with_ci(path, ".png")) {
        const std::vector<uint8_t> png = encode_png(render_image(figure));
        write_file_atomic(path, png.data(), png.size());
    } else {
        fail(ErrorKind::usage, "{}: cannot tell the figure format; name the file .svg or .png", path);
    }
}

}  // namespace lowbit
