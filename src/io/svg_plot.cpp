// svg_plot.cpp — heatmap SVG: a red→yellow→green scale over the finite values, text in every cell.
#include "io/svg_plot.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "io/npy.h"

namespace lowbit {

namespace {
std::string escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '&') o += "&amp;";
        else if (c == '<') o += "&lt;";
        else if (c == '>') o += "&gt;";
        else o += c;
    }
    return o;
}

// t in [0, 1]: 0 = worst (red), 0.5 = yellow, 1 = best (green)
std::string colour(double t) {
    t = std::clamp(t, 0.0, 1.0);
    const int r = t < 0.5 ? 230 : int(230 - (t - 0.5) * 2 * 140);
    const int g = t < 0.5 ? int(80 + t * 2 * 150) : 230;
    return fmt::format("rgb({},{},90)", r, g);
}
}  // namespace

std::string heatmap_svg(const Heatmap& h) {
    const size_t nr = h.row_labels.size(), nc = h.col_labels.size();
    if (h.values.size() != nr) fail(ErrorKind::runtime, "heatmap: {} value rows for {} labels", h.values.size(), nr);
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& row : h.values) {
        if (row.size() != nc) fail(ErrorKind::runtime, "heatmap: a row has {} values for {} columns", row.size(), nc);
        for (double v : row)
            if (std::isfinite(v)) {
                lo = std::min(lo, v);
                hi = std::max(hi, v);
            }
    }
    // Sizes from the text they must hold (≈ 7.5 px per character at 13 px, 9 px at 16 px bold).
    size_t longest = 0;
    for (const auto& l : h.row_labels) longest = std::max(longest, l.size());
    const int cw = 120, ch = 34, top = 70, left = std::max(60, int(longest) * 8 + 20);
    const int width = std::max({left + int(nc) * cw + 20, int(h.title.size()) * 9 + 40, int(h.value_label.size()) * 8 + left}),
              height = top + int(nr) * ch + 40;
    std::string s = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"13\">\n"
        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        "<text x=\"{}\" y=\"24\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
        width, height, 20, escape(h.title));
    for (size_t c = 0; c < nc; ++c)
        s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>\n",
                         left + int(c) * cw + cw / 2, top - 10, escape(h.col_labels[c]));
    for (size_t r = 0; r < nr; ++r) {
        const int y = top + int(r) * ch;
        s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-weight=\"bold\">{}</text>\n", left - 8,
                         y + ch / 2 + 5, escape(h.row_labels[r]));
        for (size_t c = 0; c < nc; ++c) {
            const double v = h.values[r][c];
            const bool ok = std::isfinite(v);
            double t = ok && hi > lo ? (v - lo) / (hi - lo) : 0.5;
            if (!h.higher_is_better) t = 1.0 - t;
            s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"white\"/>\n",
                             left + int(c) * cw, y, cw, ch, ok ? colour(t) : "rgb(200,200,200)");
            s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", left + int(c) * cw + cw / 2,
                             y + ch / 2 + 5, ok ? fmt::format("{:.{}f}", v, h.decimals) : "–");
        }
    }
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"#444\">colour: {} ({} is better)</text>\n</svg>\n",
                     left, height - 12, escape(h.value_label), h.higher_is_better ? "higher" : "lower");
    return s;
}

void write_heatmap_svg(const std::string& path, const Heatmap& h) {
    const std::string s = heatmap_svg(h);
    write_file_atomic(path, s.data(), s.size());
}

}  // namespace lowbit
