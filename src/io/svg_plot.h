// svg_plot.h — lowbit's own SVG writer for report figures (no plotting dependency): heatmaps with
// labelled rows/columns and the value printed in each cell. Written atomically.
#pragma once

#include <string>
#include <vector>

namespace lowbit {

struct Heatmap {
    std::string title;
    std::string value_label;                  // legend text, e.g. "SQNR (dB)"
    std::vector<std::string> row_labels, col_labels;
    std::vector<std::vector<double>> values;  // [row][col]; NaN cells are left grey
    bool higher_is_better = true;             // colour scale direction (green = better)
    int decimals = 1;
};

std::string heatmap_svg(const Heatmap& h);
void write_heatmap_svg(const std::string& path, const Heatmap& h);

}  // namespace lowbit
