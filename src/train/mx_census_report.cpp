// mx_census_report.cpp — the MX tensor-core census of a training run as JSON and tables (mx_census_report.h).
#include "train/mx_census_report.h"

#include <array>
#include <string>

namespace lowbit {

namespace {

constexpr const char* kProjectionLabels[kProjectionCount] = {"q", "k", "v", "o", "gate", "up", "down"};
constexpr size_t kSlots = 3;
constexpr const char* kSlotLabels[kSlots] = {"fwd", "dgrad", "wgrad"};

nlohmann::json tally_json(const MxCensusTally& t) {
    const auto fraction = [](int64_t part, int64_t all) {
        return all > 0 ? nlohmann::json(double(part) / double(all)) : nlohmann::json();  // null: nothing counted
    };
    return {{"calls", t.calls},
            {"units", t.units},
            {"off_window", t.off_window},
            {"off_window_fraction", fraction(t.off_window, t.units)},
            {"tile_chunks", t.tile_chunks},
            {"slow_tile_chunks", t.slow_tile_chunks},
            {"slow_fraction", fraction(t.slow_tile_chunks, t.tile_chunks)},
            {"two_plane_tile_chunks", t.two_plane_tile_chunks},
            {"two_plane_fraction", fraction(t.two_plane_tile_chunks, t.tile_chunks)}};
}

void add(MxCensusTally& into, const MxCensusTally& t) {
    into.calls += t.calls;
    into.units += t.units;
    into.off_window += t.off_window;
    into.tile_chunks += t.tile_chunks;
    into.slow_tile_chunks += t.slow_tile_chunks;
    into.two_plane_tile_chunks += t.two_plane_tile_chunks;
}

}  // namespace

nlohmann::json mx_census_report(const std::vector<MxCensusEntry>& entries, int64_t steps) {
    // [projection][slot], with one more row and column for the sums over projections and over slots
    std::array<std::array<MxCensusTally, kSlots + 1>, kProjectionCount + 1> sums{};
    nlohmann::json by_layer = nlohmann::json::array();
    for (const MxCensusEntry& e : entries) {
        const size_t p = size_t(e.projection), s = size_t(e.slot);
        for (size_t row : {p, size_t(kProjectionCount)})
            for (size_t col : {s, kSlots}) add(sums[row][col], e.tally);
        nlohmann::json j = tally_json(e.tally);
        j["layer"] = e.layer;
        j["projection"] = kProjectionLabels[p];
        j["slot"] = kSlotLabels[s];
        by_layer.push_back(j);
    }
    nlohmann::json table = nlohmann::json::array();
    for (size_t p = 0; p <= size_t(kProjectionCount); ++p)
        for (size_t s = 0; s <= kSlots; ++s) {
            nlohmann::json j = tally_json(sums[p][s]);
            j["projection"] = p < size_t(kProjectionCount) ? kProjectionLabels[p] : "all";
            j["slot"] = s < kSlots ? kSlotLabels[s] : "all";
            table.push_back(j);
        }
    return {{"steps", steps},
            {"window_unit", "(operand, 128-line tile, 256-deep chunk) triple of the INT8-stage GEMM"},
            {"by_projection_and_slot", table},
            {"total", tally_json(sums[kProjectionCount][kSlots])},
            {"by_layer", by_layer}};
}

void print_mx_census(const nlohmann::json& report, std::FILE* out) {
    const nlohmann::json& table = report.at("by_projection_and_slot");  // rows of (projection, slot), slot-minor
    const auto print_table = [&](const char* title, const char* part, const char* all) {
        std::fprintf(out, "  %s\n  %-6s %26s %26s %26s %26s\n", title, "proj", "fwd", "dgrad", "wgrad", "all slots");
        for (size_t row = 0; row < table.size(); row += kSlots + 1) {
            std::fprintf(out, "  %-6s", table[row].at("projection").get<std::string>().c_str());
            for (size_t s = 0; s <= kSlots; ++s) {
                const nlohmann::json& t = table[row + s];
                const int64_t p = t.at(part).get<int64_t>(), a = t.at(all).get<int64_t>();
                char cell[64] = "-";
                if (a > 0)
                    std::snprintf(cell, sizeof cell, "%lld/%lld (%.1f%%)", (long long)p, (long long)a,
                                  100.0 * double(p) / double(a));
                std::fprintf(out, " %26s", cell);
            }
            std::fprintf(out, "\n");
        }
        std::fprintf(out, "\n");
    };
    std::fprintf(out, "  MX tensor-core census over %lld steps, summed over layers\n",
                 (long long)report.at("steps").get<int64_t>());
    print_table("(operand, 128-line tile, 256-deep chunk) triples outside the INT8 window / all", "off_window", "units");
    print_table("(128 x 128 output tile, 256-deep chunk) pairs on the per-block path / all", "slow_tile_chunks",
                "tile_chunks");
    print_table("(128 x 128 output tile, 256-deep chunk) pairs chained with two INT8 planes / all", "two_plane_tile_chunks",
                "tile_chunks");
}

}  // namespace lowbit
