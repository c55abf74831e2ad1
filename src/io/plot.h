// plot.h — lowbit's own figures, no plotting dependency (the GPU hosts and CI need nothing extra): line
// plots (loss curves; optional log y) and labelled heatmaps with a colour bar (pattern maps), laid out once
// and rendered to SVG or to PNG (our rasteriser, a bitmap font of our own, deflate + CRC32 + Adler-32 by us).
// write_figure picks the format from the file extension. Files are written atomically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace lowbit {

struct LineSeries {
    std::string label;         // legend entry
    std::vector<double> x, y;  // same length; non-finite points (and y <= 0 on a log axis) break the line
};

struct LinePlot {
    std::string title, x_label, y_label;
    std::vector<LineSeries> series;
    bool log_y = false;
    int width = 960, height = 600;  // canvas, pixels
};

struct Heatmap {
    std::string title;
    std::string value_label;                  // colour-bar caption, e.g. "SQNR (dB)"
    std::vector<std::string> row_labels, col_labels;
    std::vector<std::vector<double>> values;  // [row][col]; NaN cells are left grey
    bool higher_is_better = true;             // colour scale direction (green = better)
    int decimals = 1;                         // of the value printed in each cell
};

using Figure = std::variant<LinePlot, Heatmap>;

struct Rgb {
    uint8_t r = 0, g = 0, b = 0;
    bool operator==(const Rgb&) const = default;
};

struct Image {
    int width = 0, height = 0;
    std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel
    Rgb pixel(int x, int y) const;
};

std::string render_svg(const Figure& figure);
Image render_image(const Figure& figure);
std::vector<uint8_t> encode_png(const Image& image);
// `path` ending in .svg or .png (case-insensitive); anything else is a usage error.
void write_figure(const std::string& path, const Figure& figure);

// Where the data lands on the canvas (pixels, y down). The layout and the tests share these.
struct PlotFrame {
    double left = 0, top = 0, right = 0, bottom = 0;  // the plot area
    double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;    // the axes' ranges (y in data units, also on log axes)
    bool log_y = false;
    double to_px(double x) const;
    double to_py(double y) const;
};
PlotFrame line_plot_frame(const LinePlot& plot);

struct HeatmapGrid {
    double left = 0, top = 0, cell_width = 0, cell_height = 0;  // cell (r, c) starts at left + c·w, top + r·h
};
HeatmapGrid heatmap_grid(const Heatmap& heatmap);

Rgb series_colour(size_t index);
Rgb heatmap_colour(double t);  // t in [0, 1]: 0 = worst (red), 0.5 = yellow, 1 = best (green)

}  // namespace lowbit
